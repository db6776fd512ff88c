'use strict'
// A Rust program on the core crate (crates/sema-core/examples/lock_worker.rs, built here with cargo) and Node
// processes share one lock file: the core's mutex (`LockFile`), the `sema` crate's names over it
// (`compat::sema::Semaphore`) and the package's `acquire` hammer one path together. The overlap detector is the
// one of file-contention: an O_EXCL marker created inside the critical section (EEXIST = two holders inside), and a
// shared counter that must come out exact. The counting semaphore (`limit`) and the shared lock (`mode`) are shared
// the same way by the core's `Semaphore` / `SharedLock` and Node's `acquire(path, { limit | mode })`
// (helpers/file-kinds-worker.js): each holder marks itself in a directory and counts the marks it sees.

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
  const total = { acquired: 0, overlaps: 0, failedReleases: 0, wrongOwner: 0, exclusive: 0, together: 0, errors: [] }
  for (const w of workers) {
    const e = await u.waitExit(w.child, 180000, w.label)
    assert.equal(e.code, 0, `${w.label} exit ${e.code}/${e.signal}: ${e.stdout} ${e.stderr}`)
    const line = e.stdout.split('\n').find((l) => l.startsWith('result '))
    assert.ok(line, `${w.label} printed a result: ${e.stdout} ${e.stderr}`)
    const r = JSON.parse(line.slice(7))
    for (const k of ['acquired', 'overlaps', 'failedReleases', 'wrongOwner', 'exclusive', 'together']) total[k] += r[k] ?? 0
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

const KIND_ITER = Number(process.env.SEMA_TEST_KINDS_ITER) || 60

/** A work directory with an empty marks directory and a zero counter, and a worker maker for each language. */
function kindsSetup(built, name) {
  const work = fs.mkdtempSync(path.join(tmp.dir, `${name}-`))
  const file = path.join(work, 'k.lock')
  const marks = path.join(work, 'marks')
  const counter = path.join(work, 'counter')
  fs.mkdirSync(marks)
  fs.writeFileSync(counter, '0')
  const args = (kind, n) => [kind, file, marks, counter, n]
  return {
    work,
    counter,
    rust: (kind, n = KIND_ITER) => ({ label: `rust ${kind}`, child: u.spawnTracked(built.bin, args(kind, n)) }),
    node: (kind, n = KIND_ITER) => ({ label: `node ${kind}`, child: u.spawnNode('file-kinds-worker.js', args(kind, n)) }),
  }
}

/** The checks every kinds run passes: no error, no overlap, every round held, the counter exact, nothing left. */
function assertClean(t, s, total, workers, what) {
  t.diagnostic(
    `${what}: ${total.acquired} acquisitions by ${workers.length} processes; overlaps ${total.overlaps}, ` +
      `holders together ${total.together}, exclusive rounds ${total.exclusive}, failed releases ${total.failedReleases}`,
  )
  assert.deepEqual(total.errors, [], 'no acquire/release errors')
  assert.equal(total.overlaps, 0, 'no holder beside one it excludes')
  assert.equal(total.failedReleases, 0)
  assert.equal(total.acquired, workers.length * KIND_ITER)
  assert.equal(Number(fs.readFileSync(s.counter, 'utf8')), total.exclusive, 'counter exact (one increment per exclusive round)')
  assert.deepEqual(u.ls(s.work), ['counter', 'marks'], 'no lock, slot, reader, ticket or guard file left behind')
  assert.deepEqual(u.ls(path.join(s.work, 'marks')), [])
}

test('a Rust program on the core crate and Node processes share a semaphore (limit: 2): never 3 holders', { timeout: 600000 }, async (t) => {
  const built = buildExample()
  if (built.reason) return t.skip(built.reason)
  const s = kindsSetup(built, 'limit')
  const workers = [s.rust('limit:2'), s.rust('limit:2'), s.node('limit:2'), s.node('limit:2')]
  const total = await contend(s.work, workers)
  assertClean(t, s, total, workers, 'limit: 2')
  assert.ok(total.together > 0, 'two holders were inside at once at least once')
})

test('a Rust program on the core crate and Node processes share a shared lock (mode): a writer is always alone', { timeout: 600000 }, async (t) => {
  const built = buildExample()
  if (built.reason) return t.skip(built.reason)
  const s = kindsSetup(built, 'mode')
  const workers = [s.rust('mixed'), s.rust('shared'), s.rust('exclusive'), s.node('mixed'), s.node('shared'), s.node('exclusive')]
  const total = await contend(s.work, workers)
  assertClean(t, s, total, workers, 'mode')
  assert.ok(total.together > 0, 'readers held together at least once')
  assert.ok(total.exclusive >= 2 * KIND_ITER, 'the exclusive rounds ran')
})

test('self-check: the marks see an exclusive holder beside another when nothing locks', { timeout: 600000 }, async (t) => {
  const built = buildExample()
  if (built.reason) return t.skip(built.reason)
  const s = kindsSetup(built, 'unlocked')
  const workers = [s.rust('unlocked-exclusive', 300), s.node('unlocked-exclusive', 300)]
  const total = await contend(s.work, workers)
  t.diagnostic(`unlocked: overlaps ${total.overlaps} of ${total.acquired}`)
  assert.ok(total.overlaps > 0, 'the marks see what no lock lets happen')
})
