// Type test: uses every export of index.d.ts the way a user would. `tsc --noEmit -p __test__/types` must pass;
// the @ts-expect-error lines must keep failing, so the typings stay strict where they should be.
import {
  acquire,
  tryAcquire,
  release,
  status,
  withLock,
  wait,
  query,
  Semaphore,
  createLockInfo,
  serializeLockInfo,
  parseLockInfo,
  isLockStale,
  isProcessRunning,
  LockError,
  ErrorCode,
  AcquireTimeoutError,
  AuthError,
  DistributedLock,
  DistributedSemaphore,
  Connection,
  stats,
  stableHashShard,
  createLockManager,
  locks,
} from '../..'
import type {
  WebLock,
  WebLockInfo,
  WebLockManager,
  WebLockManagerSnapshot,
  WebLockMode,
  WebLockOptions,
  AcquireOptions,
  AcquireTraceContext,
  LostMessage,
  QueriedLock,
  ReleaseMessage,
  Backend,
  DflockdTlsOptions,
  DistributedLockOptions,
  DistributedSemaphoreOptions,
  Grant,
  Lock,
  LockInfo,
  LockStatus,
  ReleaseOptions,
  SemaphoreConfig,
  SemaphoreError,
  SemaphoreErrorType,
  SemaphoreResult,
  SemaphoreStatus,
  ShardingStrategy,
  WaitOptions,
  Stats,
  StatsIdleLock,
  StatsIdleSemaphore,
  StatsLock,
  StatsSemaphore,
  StatusOptions,
  ConnectionOptions,
} from '../..'

async function fileTargets(): Promise<void> {
  const controller = new AbortController()
  const options: AcquireOptions = {
    timeout: 5_000,
    signal: controller.signal,
    tag: 'build',
    staleTimeout: 60_000,
    retryInterval: 50,
    fsync: false,
    heartbeat: 1_000,
    maxTagLength: 100,
    pid: process.pid,
    onLost: (lock: Lock, error: LockError) => console.error(lock.target, error.code),
  }
  const r: SemaphoreResult<Lock> = await acquire('/tmp/x.lock', options)
  if (r.ok) {
    const lock: Lock = r.value
    const backend: Backend = lock.backend
    const fields: [string, number, number, string | undefined, string | undefined, boolean] = [
      lock.target,
      lock.pid,
      lock.timestamp,
      lock.tag,
      lock.token,
      lock.released,
    ]
    const validity: [number | undefined, number | undefined] = [lock.validUntil, lock.remaining?.()]
    lock.signal.addEventListener('abort', () => console.error(backend, fields, validity))
    const released: boolean = await lock.release()
    await lock[Symbol.asyncDispose]()
    console.log(released)
  } else {
    const e: SemaphoreError = r.error
    const t: SemaphoreErrorType = e.type
    console.log(t, e.message, e.holderPid, e.lockedSince, e.reply, e.cause)
  }
  const t = await tryAcquire('file:///tmp/x.lock')
  if (t.ok) await release(t.value)
  const releaseOptions: ReleaseOptions = { force: true }
  const rel: SemaphoreResult<void> = await release('/tmp/x.lock', releaseOptions)
  const statusOptions: StatusOptions = { staleTimeout: null }
  const s: LockStatus = await status('/tmp/x.lock', statusOptions)
  const base: SemaphoreStatus = s
  console.log(rel.ok, base.locked, s.holders, s.waiters, s.limit, s.leaseExpiresInS, s.info?.pid)
  const n: number = await withLock('/tmp/x.lock', async (lock) => lock.pid, { timeout: 100 })
  const str: string = await withLock('dflockd://token@127.0.0.1:6388/jobs?leaseTtl=30', () => 'sync ok')
  console.log(n, str)
  const waitOptions: WaitOptions = { timeout: 1000, signal: AbortSignal.timeout(2000), staleTimeout: null }
  const w = await wait('/tmp/x.lock', waitOptions)
  if (w.ok) console.log(w.value.waitedMs.toFixed(0))
  else console.log(w.error.type)
  const traced = (c: AcquireTraceContext, r: ReleaseMessage, l: LostMessage): string =>
    `${c.target} ${c.waitedMs ?? 0} ${c.lock?.pid ?? c.holderPid} ${r.byPath} ${l.error.code}`
  console.log(traced)
  const snapshot: { held: QueriedLock[]; pending: QueriedLock[] } = await query()
  console.log(snapshot.held[0]?.name, snapshot.pending[0]?.since)
  // @ts-expect-error targets are strings
  await acquire(42)
}

function semats(): void {
  const config: SemaphoreConfig = { staleTimeout: null, retryInterval: 10, acquireTimeout: 1_000, maxTagLength: 50, fsync: true, heartbeat: false }
  const sem = new Semaphore('/tmp/y.lock', config)
  const d: Semaphore = Semaphore.withDefaults('/tmp/y.lock')
  const path: string = sem.getPath()
  const locked: boolean = sem.isLocked()
  const info: LockInfo | null = sem.getLockInfo()
  const a: SemaphoreResult<LockInfo> = sem.tryAcquire('tag')
  const b: SemaphoreResult<LockInfo> = sem.tryAcquireWithInfo(createLockInfo('x'))
  void sem.acquire({ timeout: 100, tag: 't', signal: AbortSignal.timeout(50) })
  void sem.acquireTimeout(100, 'tag')
  const rel: SemaphoreResult<void> = sem.release()
  const forced: SemaphoreResult<void> = sem.forceRelease()
  const st: SemaphoreStatus = sem.status()
  const cleaned: boolean = sem.cleanStale()
  const text: string = serializeLockInfo({ pid: 1, timestamp: 2, tag: 'x' }, 10)
  const parsed: SemaphoreResult<LockInfo> = parseLockInfo(text)
  const stale: boolean = isLockStale({ pid: 1, timestamp: 0 }, 1000)
  const running: boolean = isProcessRunning(process.pid)
  console.log(d, path, locked, info, a, b, rel, forced, st, cleaned, parsed, stale, running)
  // @ts-expect-error release takes an optional boolean
  sem.release('yes')
}

async function distributed(): Promise<void> {
  const tls: DflockdTlsOptions = { ca: '-----BEGIN CERTIFICATE-----', servername: 'localhost' }
  const strategy: ShardingStrategy = (key, n) => stableHashShard(key, n)
  const lockOptions: DistributedLockOptions = {
    key: 'jobs',
    acquireTimeoutS: 10,
    leaseTtlS: 30,
    servers: [['127.0.0.1', 6388]],
    shardingStrategy: strategy,
    renewRatio: 0.5,
    tls,
    auth: 'secret',
    onLockLost: (key: string, token: string) => console.error(key, token),
    connectTimeoutMs: 1_000,
    socketTimeoutMs: 5_000,
    renewMaxIntervalMs: 10_000,
  }
  const lock = new DistributedLock(lockOptions)
  const got: boolean = await lock.acquire({ force: true, signal: AbortSignal.timeout(1_000) })
  const token: string | null = lock.token
  const lease: number = lock.lease
  const provenUntil: number = lock.validUntil
  const provenFor: number = lock.remaining()
  lock.signal.addEventListener('abort', () => undefined)
  await lock.release()
  const phase: 'acquired' | 'queued' = await lock.enqueue()
  const waited: boolean = await lock.wait(5)
  const v: number = await lock.withLock(async () => 1)
  lock.close()
  await lock[Symbol.asyncDispose]()
  const semOptions: DistributedSemaphoreOptions = { ...lockOptions, limit: 3 }
  const sem = new DistributedSemaphore(semOptions)
  const limit: number = sem.limit
  console.log(got, token, lease, provenUntil, provenFor, phase, waited, v, limit, lock.key, lock.acquireTimeoutS, lock.leaseTtlS, lock.servers, lock.renewRatio)
  console.log(lock.shardingStrategy, lock.tls, lock.auth, lock.onLockLost, lock.connectTimeoutMs, lock.socketTimeoutMs)
  await lock.enqueue({ signal: AbortSignal.timeout(100) })
  const viaTarget = await acquire('dflockd://127.0.0.1/k', { tls: true, renewMaxIntervalMs: 5_000, leaseTtl: 10, limit: 1 })
  console.log(viaTarget.ok)
  const reader = new DistributedLock({ key: 'k', mode: 'shared' })
  const shared = await withLock('dflockd://127.0.0.1/k', async () => 1, { mode: 'shared' })
  const writer = await tryAcquire('dflockd://127.0.0.1/k', { mode: 'exclusive' })
  // @ts-expect-error mode is 'shared' or 'exclusive'
  await acquire('dflockd://127.0.0.1/k', { mode: 'read' })
  console.log(reader.key, shared, writer.ok)

  const connOptions: ConnectionOptions = { host: '127.0.0.1', port: 6388, tls, auth: 'secret', connectTimeoutMs: 100, socketTimeoutMs: 100 }
  const conn = await Connection.connect(connOptions)
  const g: Grant = await conn.acquire('k', 10, 30)
  const renewed: number = await conn.renew('k', g.token, 30)
  await conn.release('k', g.token)
  const e = await conn.enqueue('k', 30)
  const w: Grant = await conn.waitForLock('k', 10)
  const sg: Grant = await conn.semAcquire('s', 10, 3, 30)
  const sr: number = await conn.semRenew('s', sg.token)
  await conn.semRelease('s', sg.token)
  const se = await conn.semEnqueue('s', 3)
  const sw: Grant = await conn.semWaitForLock('s', 10)
  const raw: string = await conn.request('stats', '_', '')
  const st: Stats = await conn.stats()
  const same: Connection = conn.unref().ref()
  console.log(same === conn)
  conn.close()
  await conn[Symbol.asyncDispose]()
  const s2: Stats = await stats({ host: '127.0.0.1', port: 6388 })
  const l: StatsLock | undefined = s2.locks[0]
  const sm: StatsSemaphore | undefined = s2.semaphores[0]
  const il: StatsIdleLock | undefined = s2.idle_locks[0]
  const is: StatsIdleSemaphore | undefined = s2.idle_semaphores[0]
  console.log(renewed, e.status, e.token, e.lease, w, sr, se, sw, raw, st.connections, l?.owner_conn_id, sm?.holders, il?.idle_s, is?.key)
  // @ts-expect-error a semaphore needs a limit
  new DistributedSemaphore({ key: 'k' })
}

function errors(e: unknown): void {
  if (e instanceof AcquireTimeoutError || e instanceof AuthError) console.log(e.code)
  if (e instanceof LockError) {
    const code: SemaphoreErrorType = e.code
    console.log(code, e.type, e.holderPid, e.lockedSince, e.reply)
    if (e.code === ErrorCode.LOCK_LOST) console.log(e.message)
    const errno: number | undefined = e.errno
    const errnoName: string | undefined = e.errnoName
    console.log(errno, errnoName)
    const t: 'TIMEOUT' = ErrorCode.TIMEOUT
    console.log(t)
    // @ts-expect-error ErrorCode lists only the stable codes
    console.log(ErrorCode.EACCES)
    // @ts-expect-error ErrorCode is read-only
    ErrorCode.TIMEOUT = 'TIMEOUT'
  }
  throw new LockError('bad', 'INVALID_ARGUMENT', { holderPid: 1 })
}

void fileTargets
void semats
void distributed
void errors
void webLocks

async function webLocks(): Promise<void> {
  const m: WebLockManager = createLockManager('/tmp/locks')
  const n: number = await m.request('deploy', async (lock: WebLock | null) => (lock ? lock.name.length : 0))
  const s: string = await locks.request('x', { mode: 'shared', ifAvailable: true }, (lock) => lock?.mode ?? 'none')
  const mode: WebLockMode | undefined = (await m.query()).held[0]?.mode
  const snap: WebLockManagerSnapshot = await locks.query()
  const info: WebLockInfo | undefined = snap.pending[0]
  const o: WebLockOptions = { steal: true }
  console.log(n, s, mode, info?.clientId, info?.pid, info?.host, o)
  createLockManager('dflockd://127.0.0.1:6388/app')
  // @ts-expect-error mode is 'exclusive' or 'shared'
  await m.request('x', { mode: 'read' }, () => 1)
  // @ts-expect-error a callback is needed
  await m.request('x', {})
  // @ts-expect-error no options are defined yet
  createLockManager('/tmp/locks', { dir: 1 })
}
new AcquireTimeoutError('k')
new AuthError()
