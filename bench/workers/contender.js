'use strict'
// One contending process (forked by bench/contended.js). Waits at the barrier (IPC 'go'), then does `rounds`
// times: acquire the lock (waiting) → critical section with an O_EXCL marker-file overlap detector → release.
// Sends back, per round, four CLOCK_MONOTONIC times in ns relative to the parent's base: acquire called,
// acquired, release called, released; the number of overlaps its detector saw; and its CPU time over the rounds.
// process.hrtime is CLOCK_MONOTONIC on Linux (libuv uv_hrtime), one clock for every process on the host.

const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..', '..')
const cfg = JSON.parse(process.argv[2])

function makeLocker(lockPath = cfg.lockPath) {
  switch (cfg.kind) {
    case 'addon': {
      const { acquire } = require(root)
      const options = { tag: `bench ${process.pid}`, fsync: cfg.fsync, heartbeat: cfg.heartbeat, retryInterval: cfg.retryInterval }
      for (const k of Object.keys(options)) if (options[k] === undefined) delete options[k]
      return async () => {
        const r = await acquire(lockPath, options)
        if (!r.ok) throw new Error(`acquire failed: ${r.error.type} ${r.error.message}`)
        const lock = r.value
        return async () => {
          if (!(await lock.release())) throw new Error('release returned false (lock lost?)')
        }
      }
    }
    case 'semaphore': {
      // The semats-compatible class: one Semaphore per process, `await sem.acquire()` (waiting) + `sem.release()`.
      const { Semaphore } = require(root)
      const options = { fsync: cfg.fsync, heartbeat: cfg.heartbeat }
      for (const k of Object.keys(options)) if (options[k] === undefined) delete options[k]
      const sem = new Semaphore(lockPath, options)
      return async () => {
        const r = await sem.acquire({ tag: `bench ${process.pid}` })
        if (!r.ok) throw new Error(`Semaphore.acquire failed: ${r.error.type} ${r.error.message}`)
        return async () => {
          const rel = sem.release()
          if (!rel.ok) throw new Error(`Semaphore.release failed: ${rel.error.message}`)
        }
      }
    }
    case 'node-floor':
    case 'node-floor-agent': {
      // The contended floor's contender (bench/floor/src/contended.rs, `fifo` order) behind Node: its acquisition on
      // libuv's pool (napi async work), a promise per acquisition, its release on this thread
      // (bench/floor/src/node_addon.rs). What any Node caller pays around the floor's protocol, none of the addon.
      // node-floor-agent: the same with the line stood in by an agent thread and waits a cancel could end, as the
      // addon's (contended.rs `Agent`): what a wait that can be timed out or aborted costs on top.
      const m = { exports: {} }
      process.dlopen(m, path.join(root, 'bench', 'floor', 'target', 'release', 'libsema_bench_floor.so'))
      const floor = m.exports
      floor.open(path.dirname(lockPath), path.basename(lockPath), cfg.kind === 'node-floor-agent' ? 1 : 0)
      return async () => {
        const fd = await floor.acquire()
        return async () => floor.release(fd)
      }
    }
    case 'js-watch': {
      // Reference rows, not a product: the cheapest wake-up a Node process can have. The wake (fs.watch: libuv's
      // inotify on the JS thread's own event loop) and the attempt (the addon's synchronous Semaphore#tryAcquire)
      // both run on the JS thread: no thread hop at all. Every waiter is woken by every release (no queue), and a
      // process that releases may take the lock straight back (no fairness).
      const { Semaphore } = require(root)
      const sem = new Semaphore(cfg.lockPath)
      const base = path.basename(cfg.lockPath)
      let wake = null
      const watcher = fs.watch(path.dirname(cfg.lockPath), (_event, name) => {
        if (name === base && wake) wake()
      })
      watcher.unref()
      const nextEvent = (ms) =>
        new Promise((resolve) => {
          const timer = setTimeout(() => ((wake = null), resolve()), ms)
          wake = () => ((wake = null), clearTimeout(timer), resolve())
        })
      return async () => {
        for (;;) {
          const r = sem.tryAcquire(`bench ${process.pid}`)
          if (r.ok) break
          await nextEvent(100)
        }
        return async () => {
          if (!sem.release().ok) throw new Error('release failed')
        }
      }
    }
    case 'proper-lockfile': {
      const lockfile = require('proper-lockfile')
      // retries 1000 (1, 2, 4, 8, then 10 ms: ~10 s per call) rather than 1e6: the `retry` module builds the whole
      // timeout array on every lock() call, and for 1e6 that alone costs ~180 ms of CPU per call. A call that
      // still runs out (ELOCKED) simply calls again, so the process keeps waiting.
      const options = { retries: { retries: 1000, minTimeout: 1, maxTimeout: 10 } }
      return async () => {
        for (;;) {
          try {
            return await lockfile.lock(cfg.lockPath, options)
          } catch (e) {
            if (e.code !== 'ELOCKED') throw e
          }
        }
      }
    }
    default:
      throw new Error(`unknown kind ${cfg.kind}`)
  }
}

/** The `counter` critical section (as the floor program's): read the number in the counter file, write it + 1, on
 * a descriptor opened once (pread + pwrite). A lost update shows in the file's final value. */
function counterWork() {
  const fd = fs.openSync(cfg.counterPath, 'r+')
  const buf = Buffer.alloc(32)
  return () => {
    const n = fs.readSync(fd, buf, 0, buf.length, 0)
    fs.writeSync(fd, `${Number(buf.toString('latin1', 0, n).trim()) + 1}\n`, 0)
  }
}

/** Voluntary context switches (a thread blocked and was woken) and involuntary ones, summed over this process's
 * threads now alive (the status file of each /proc/self/task entry): counts, unlike times, do not depend on the other load of the
 * machine (issue 24's table of where a hand-off's CPU goes). Null where /proc is absent. */
function ctxtSwitches() {
  try {
    let voluntary = 0
    let involuntary = 0
    const byThread = {} // thread name → voluntary switches: which hop of a wake-up they are
    const cpuNsByThread = {} // thread name → ns on a CPU (schedstat): where the CPU goes
    const threads = fs.readdirSync('/proc/self/task')
    for (const t of threads) {
      let status
      try {
        status = fs.readFileSync(`/proc/self/task/${t}/status`, 'latin1')
      } catch {
        continue // the thread ended meanwhile
      }
      const v = Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(status)?.[1] ?? 0)
      voluntary += v
      involuntary += Number(/^nonvoluntary_ctxt_switches:\s*(\d+)/m.exec(status)?.[1] ?? 0)
      const name = /^Name:\s*(.*)$/m.exec(status)?.[1] ?? '?'
      byThread[name] = (byThread[name] ?? 0) + v
      try {
        const ns = Number(fs.readFileSync(`/proc/self/task/${t}/schedstat`, 'latin1').split(' ')[0])
        cpuNsByThread[name] = (cpuNsByThread[name] ?? 0) + ns
      } catch {}
    }
    return { voluntary, involuntary, threads: threads.length, byThread, cpuNsByThread }
  } catch {
    return null
  }
}

async function run(base) {
  const lock = makeLocker()
  const work = cfg.work === 'counter' ? counterWork() : null
  const times = new Float64Array(cfg.rounds * 4)
  let overlaps = 0
  const now = () => Number(process.hrtime.bigint() - base)
  const cpu0 = process.cpuUsage() // this process's CPU (every thread: JS, tokio, inotify...) over the rounds
  const cs0 = ctxtSwitches()
  for (let i = 0; i < cfg.rounds; i++) {
    times[i * 4] = now()
    const release = await lock()
    times[i * 4 + 1] = now()
    if (work) {
      work()
      times[i * 4 + 2] = now()
      await release()
      times[i * 4 + 3] = now()
      continue
    }
    // critical section: nobody else may hold the marker now
    let fd = -1
    try {
      fd = fs.openSync(cfg.markerPath, 'wx')
    } catch (e) {
      if (e.code !== 'EEXIST') throw e
      overlaps++
    }
    if (fd >= 0) {
      fs.closeSync(fd)
      fs.unlinkSync(cfg.markerPath)
    }
    times[i * 4 + 2] = now()
    await release()
    times[i * 4 + 3] = now()
  }
  const cpu = process.cpuUsage(cpu0)
  const cs1 = ctxtSwitches()
  let switches = null
  if (cs0 && cs1) {
    const byThread = {}
    for (const [name, v] of Object.entries(cs1.byThread)) byThread[name] = v - (cs0.byThread[name] ?? 0)
    const cpuNsByThread = {}
    for (const [name, v] of Object.entries(cs1.cpuNsByThread)) cpuNsByThread[name] = v - (cs0.cpuNsByThread[name] ?? 0)
    switches = { voluntary: cs1.voluntary - cs0.voluntary, involuntary: cs1.involuntary - cs0.involuntary, threads: cs1.threads, byThread, cpuNsByThread }
  }
  return { times: Array.from(times), overlaps, cpuUs: cpu.user + cpu.system, switches }
}

let base = null
process.on('message', (msg) => {
  if (msg.type !== 'go') return
  base = BigInt(msg.base)
  run(base).then(
    (r) => process.send({ type: 'done', pid: process.pid, ...r }, () => process.exit(0)),
    (e) => process.send({ type: 'error', pid: process.pid, error: String(e && e.stack ? e.stack : e) }, () => process.exit(1)),
  )
})
/**
 * Before the barrier: the module loaded, and for the addon's rows `cfg.warmup` cycles on a lock file of this
 * process's own (uncontended), so that the rounds measure compiled code, as the floor's native rounds do: at one
 * process on tmpfs 600 rounds took ~30 ms, mostly before V8 had optimised the loop (CPU per hand-off 84-90 µs there,
 * V8's compiler threads included, against 45-50 µs over 20 000 cycles of bench/file-hops.js --cycles; 54 µs on the
 * JS thread and 73 µs in all over its first 2 000).
 */
async function warmUp() {
  makeLocker()
  if (!(cfg.warmup > 0) || (cfg.kind !== 'addon' && cfg.kind !== 'semaphore')) return
  const warmPath = `${cfg.lockPath}.warm-${process.pid}`
  const lock = makeLocker(warmPath)
  for (let i = 0; i < cfg.warmup; i++) await (await lock())()
}

warmUp().then(
  () => process.send({ type: 'ready', pid: process.pid }),
  (e) => process.send({ type: 'error', pid: process.pid, error: String(e && e.stack ? e.stack : e) }, () => process.exit(1)),
)
