'use strict'
// `node web-locks-user-dir.js <root>`: the per-user Web Locks directory under <root> (lib/locks/user-dir.js), made or
// checked as this process's user, then one Web Lock taken in it. Prints one JSON line: {ok, dir, mode, granted} or
// {ok: false, code, message}. Run as another user (setpriv) by web-locks-manager.test.js.
const fs = require('node:fs')
const { userLocksDir } = require('../../lib/locks/user-dir')
const { createLockManager } = require('../..')

;(async () => {
  try {
    const dir = userLocksDir(process.argv[2])
    const granted = await createLockManager(dir).request('deploy', (lock) => lock.name)
    console.log(JSON.stringify({ ok: true, dir, mode: (fs.statSync(dir).mode & 0o777).toString(8), granted }))
  } catch (e) {
    console.log(JSON.stringify({ ok: false, code: e.code, message: e.message }))
  }
})()
