'use strict'
// A Rust program on the core crate (crates/sema-core/examples/lock_worker.rs, built here with cargo) and Node
// processes share one lock file: the core's mutex (`LockFile`), the `sema` crate's names over it
// (`compat::sema::Semaphore`) and the package's `acquire` hammer one path together. The overlap detector is the
// one of file-contention: an O_EXCL marker created inside the critical section (EEXIST = two holders inside), and a
// shared counter that must come out exact.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')

const ROOT = path.resolve(__dirname, '..')
const ITER = Number(process.env.SEMA_TEST_MUTEX_ITER) || 150
const tmp = u.testDir('rust-core-')

/** Builds the example (dev profile; incremental after the first build). `{ bin }` or `{ reason }` to skip. */
function buildExample() {
  const r = spawnSync('cargo', ['build', '-q', '-p', 'sema-core', '--example', 'lock_worker', '--message-format=json'], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  })
  if (r.error) return { reason: `cargo not available: ${r.error.message}` }
  assert.equal(r.status, 0, `cargo build of the example failed:\n${r.stderr}`)
  const artifact = r.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .find((m) => m.reason === 'compiler-artifact' && m.target?.name === 'lock_worker' && m.executable)
  assert.ok(artifact, 'cargo named the example binary')
  return { bin: artifact.executable }
}

/** Runs `workers` ({spawn, label}) behind one barrier; returns the summed result lines. */
async function contend(work, workers) {
  const ready = workers.map((w) => u.lines(w.child).next(/^ready$/, 60000))
  await Promise.all(ready)
  for (const w of workers) w.child.stdin.end('go\n')
  const total = { acquired: 0, overlaps: 0, failedReleases: 0, wrongOwner: 0, errors: [] }
  for (const w of workers) {
    const e = await u.waitExit(w.child, 180000, w.label)
    assert.equal(e.code, 0, `${w.label} exit ${e.code}/${e.signal}: ${e.stdout} ${e.stderr}`)
    const line = e.stdout.split('\n').find((l) => l.startsWith('result '))
    assert.ok(line, `${w.label} printed a result: ${e.stdout} ${e.stderr}`)
    const r = JSON.parse(line.slice(7))
    for (const k of ['acquired', 'overlaps', 'failedReleases', 'wrongOwner']) total[k] += r[k]
    total.errors.push(...r.errors.map((m) => `${w.label}: ${typeof m === 'string' ? m : JSON.stringify(m)}`))
  }
  return total
}

test('a Rust program on the core crate and Node processes share one mutex with no overlap', { timeout: 600000 }, async (t) => {
  const built = buildExample()
  if (built.reason) return t.skip(built.reason)
  const work = fs.mkdtempSync(path.join(tmp.dir, 'mutex-'))
  const file = path.join(work, 'm.lock')
  const marker = path.join(work, 'inside.marker')
  const counter = path.join(work, 'counter')
  fs.writeFileSync(counter, '0')
  const rust = (kind) => ({
    label: `rust ${kind}`,
    child: u.spawnTracked(built.bin, [kind, file, marker, counter, ITER]),
  })
  const node = () => ({ label: 'node', child: u.spawnNode('file-mutex-worker.js', [file, marker, counter, ITER, 'async']) })
  const workers = [rust('mutex'), rust('mutex'), rust('sema-compat'), node(), node(), node()]
  const t0 = Date.now()
  const total = await contend(work, workers)
  t.diagnostic(
    `${total.acquired} acquisitions by ${workers.length} processes (3 Rust, 3 Node) in ${Date.now() - t0} ms; ` +
      `overlaps ${total.overlaps}, failed releases ${total.failedReleases}, wrong owner ${total.wrongOwner}`,
  )
  assert.deepEqual(total.errors, [], 'no acquire/release errors')
  assert.equal(total.overlaps, 0, 'no two holders inside the critical section at once')
  assert.equal(total.wrongOwner, 0, "the lock file was the holder's own while inside")
  assert.equal(total.failedReleases, 0)
  assert.equal(total.acquired, workers.length * ITER)
  assert.equal(Number(fs.readFileSync(counter, 'utf8')), workers.length * ITER, 'counter exact')
  assert.deepEqual(u.ls(work), ['counter'], 'no lock, marker or temp file left behind')
})

test('self-check: the same harness without the lock sees overlaps or lost increments', { timeout: 600000 }, async (t) => {
  const built = buildExample()
  if (built.reason) return t.skip(built.reason)
  const work = fs.mkdtempSync(path.join(tmp.dir, 'nolock-'))
  const file = path.join(work, 'm.lock')
  const marker = path.join(work, 'inside.marker')
  const counter = path.join(work, 'counter')
  fs.writeFileSync(counter, '0')
  const n = 300
  const workers = [
    ...[0, 1].map(() => ({ label: 'rust none', child: u.spawnTracked(built.bin, ['none', file, marker, counter, n]) })),
    ...[0, 1].map(() => ({ label: 'node nolock', child: u.spawnNode('file-mutex-worker.js', [file, marker, counter, n, 'nolock']) })),
  ]
  const total = await contend(work, workers)
  const count = Number(fs.readFileSync(counter, 'utf8'))
  t.diagnostic(`unlocked: overlaps ${total.overlaps}, counter ${count} of ${workers.length * n}`)
  assert.ok(total.overlaps > 0 || count < workers.length * n, 'the detector sees what no lock lets happen')
  const r = spawnSync(built.bin, ['nolock', file, marker, counter, '1'], { encoding: 'utf8' })
  assert.equal(r.status, 2, 'an unknown kind is refused')
  assert.match(r.stderr, /unknown kind "nolock"/)
})
