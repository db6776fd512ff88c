'use strict'
// What the benchmarks ran on: CPU, cores, kernel, Node, and the file system type of each directory.

const os = require('node:os')
const fs = require('node:fs')
const path = require('node:path')

/** File system type of the mount holding `dir` (longest matching mount point in /proc/mounts). */
function fsType(dir) {
  try {
    const real = fs.realpathSync(dir)
    let best = { mnt: '', type: 'unknown' }
    for (const line of fs.readFileSync('/proc/mounts', 'utf8').split('\n')) {
      const [, mnt, type] = line.split(' ')
      if (!mnt) continue
      const m = mnt.replace(/\\040/g, ' ')
      if ((real === m || real.startsWith(m.endsWith('/') ? m : m + '/')) && m.length >= best.mnt.length) best = { mnt: m, type }
    }
    return best.type
  } catch {
    return 'unknown'
  }
}

function machine(dirs) {
  const cpus = os.cpus()
  return {
    cpu: cpus[0] ? cpus[0].model.trim() : 'unknown',
    cores: cpus.length,
    kernel: `${os.type()} ${os.release()}`,
    arch: os.arch(),
    node: process.version,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    loadAtStart: os.loadavg().map((v) => Math.round(v * 10) / 10),
    dirs: Object.fromEntries(Object.entries(dirs).map(([name, dir]) => [name, { dir, fs: fsType(dir) }])),
  }
}

/** Directories the file benchmarks use: tmpfs (/dev/shm when it is a tmpfs) and the work disk (under bench/). */
function benchDirs(root) {
  const dirs = {}
  if (fs.existsSync('/dev/shm') && fsType('/dev/shm') === 'tmpfs') dirs.tmpfs = fs.mkdtempSync('/dev/shm/sema-bench-')
  const disk = path.join(root, 'bench', 'results', 'tmp')
  fs.mkdirSync(disk, { recursive: true })
  dirs.disk = fs.mkdtempSync(path.join(disk, 'run-'))
  return dirs
}

module.exports = { machine, fsType, benchDirs }
