// sema-native: the public contract. Hand-written; the generated binding.d.ts is internal.
// Time units: milliseconds everywhere in the semats-compatible and target APIs (as semats), seconds in the
// dflockd classes (as the dflockd TypeScript client), and seconds inside lock files (as the format).

// Needs the Node types (`@types/node`, an optional peer dependency) for AbortSignal and Buffer, and nothing from
// TypeScript's newer libs: `Symbol.asyncDispose` is declared below (as @types/node does), so these typings work with
// TypeScript >= 5.0; `await using` itself needs TypeScript >= 5.2 with `lib` "esnext.disposable" (or "esnext").
declare global {
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol
  }
}

// ───────────────────────────── errors ─────────────────────────────

/** Every failure's stable type. The first eight are semats' own; the rest are sema-native additions. */
export type SemaphoreErrorType =
  | 'ALREADY_LOCKED'
  | 'INVALID_PATH'
  | 'IO_ERROR'
  | 'NOT_LOCKED'
  | 'TIMEOUT'
  | 'PARSE_ERROR'
  | 'PERMISSION_DENIED'
  | 'PATH_TRAVERSAL'
  | 'ABORTED'
  | 'LOCK_LOST'
  | 'CONNECTION_ERROR'
  /** dflockd: TLS on one side only (`tls`/`?tls=1` against a plain server, or plain against a TLS one). */
  | 'TLS_MISMATCH'
  | 'AUTH_FAILED'
  | 'PROTOCOL_ERROR'
  | 'SERVER_ERROR'
  | 'INVALID_ARGUMENT'
  /** No binary is published for this platform (thrown by `require('sema-native')` itself). */
  | 'UNSUPPORTED_PLATFORM'
  /** A binary is published for this platform, but its package is missing or would not load (thrown by `require('sema-native')`). */
  | 'NATIVE_LOAD_FAILED'
  /**
   * A counting semaphore (`limit`) asked for with another limit than its live holders took it with: a lock file's
   * slot files name their limit (`<path>.slot-<i>-of-<N>`); dflockd answers `error_limit_mismatch` (kept in `reply`).
   */
  | 'LIMIT_MISMATCH'
  /**
   * The lock file's directory is on a file system where exclusion cannot be kept: a network or FUSE file system
   * without hard links (`link()` refused), where exclusive creation is only as atomic as its server makes it. The
   * message names the file system (see docs/many-machines.md).
   */
  | 'UNSUPPORTED_FILE_SYSTEM'

/**
 * Every {@link SemaphoreErrorType} as a constant, so that code compares against a name the compiler checks rather
 * than a string: `if (r.error.type === ErrorCode.TIMEOUT)`. Each value is its own name; the object is frozen.
 */
export declare const ErrorCode: { readonly [K in SemaphoreErrorType]: K }

/**
 * Every field a failure can carry besides `type` and `message`, with what it means. Each {@link SemaphoreErrorType}
 * carries only some of them ({@link SemaphoreErrorFieldsOf}): on a {@link SemaphoreError} the others are typed
 * `undefined`, so checking `type` first gives each field its real type (`if (e.type === 'TIMEOUT') e.holderPid`).
 */
export interface SemaphoreErrorFields {
  /**
   * pid recorded in the lock that blocked us, when it could be read. Lock files, `ALREADY_LOCKED` and `TIMEOUT`:
   * read by the engine when it refused, from the file it judged held; `PERMISSION_DENIED` (semats' release of
   * another process's lock): the holder's pid. dflockd: only when the holder is this process
   * (`isOwnedByCurrentProcess`).
   */
  holderPid: number | undefined
  /**
   * `timestamp=` of the lock file that blocked us (unix seconds), when it could be read. A live holder of this
   * package refreshes it every second, so it is "last seen alive" rather than "acquired at".
   */
  lockedSince: number | undefined
  /** Lock files, `ALREADY_LOCKED` / `TIMEOUT`: the `tag=` of the lock file that blocked us, if it has one. */
  holderTag: string | undefined
  /**
   * `ALREADY_LOCKED` / `TIMEOUT`: the lock that blocked us is this process's own (another `Lock`, thread or waiter
   * of this process holds it: a forgotten release, or a nested acquire), by the package's one ownership rule (token
   * and host identity; the pid alone for files of other tools). dflockd: always set (a `Lock` of this process from
   * `acquire`/`withLock` on the same server and key; `DistributedLock` instances are not counted), and when it is
   * true `holderPid`/`lockedSince` are this process's: the protocol does not tell another holder's pid or tag.
   */
  isOwnedByCurrentProcess: boolean | undefined
  /**
   * dflockd `ALREADY_LOCKED` (a try), from one `stats` request (Go server, bounded by 1 s): the seconds left of the
   * holder's lease. A `TIMEOUT` sends nothing more (its deadline is kept to the ms).
   */
  leaseExpiresInS: number | undefined
  /** dflockd `ALREADY_LOCKED`: waiters queued on the key (from `stats`, as `leaseExpiresInS`). */
  waiters: number | undefined
  /**
   * dflockd: the server's raw reply that caused it: its status word for `SERVER_ERROR` (e.g. `error_max_locks`),
   * `LIMIT_MISMATCH` (`error_limit_mismatch`), `AUTH_FAILED` (`error_auth`, or `error` from a server with no token
   * set) and a `LOCK_LOST` whose renewal was refused; the line it could not parse for `PROTOCOL_ERROR`.
   */
  reply: string | undefined
  /**
   * A failure the OS reported (lock files: `IO_ERROR`, or `PERMISSION_DENIED` when the OS refused us): the OS's own
   * error number, as the OS gives it (on Linux 13 for a permission refused, 2 for a file or directory not found; on
   * Windows the system error code). Positive, unlike the negated `errno` of Node's fs errors; compare it with
   * `os.constants.errno`. The message says the same in words.
   */
  errno: number | undefined
  /**
   * The name of {@link SemaphoreErrorFields.errno} (`'EACCES'`, `'ENOENT'`), as Node's fs errors give it in `code`.
   * Set on platforms where Node knows the numbers the OS reports (not on Windows, whose system error codes have no
   * such names).
   */
  errnoName: string | undefined
}

/**
 * Which of the {@link SemaphoreErrorFields} an error type may carry (each only when known): the holder facts on
 * `ALREADY_LOCKED` and `TIMEOUT`, the OS's number on `IO_ERROR` and `PERMISSION_DENIED`, the server's reply on the
 * dflockd failures that come from one. A type not listed here carries only `type`, `message` and perhaps `cause`.
 */
export interface SemaphoreErrorFieldsByType {
  ALREADY_LOCKED: 'holderPid' | 'lockedSince' | 'holderTag' | 'isOwnedByCurrentProcess' | 'leaseExpiresInS' | 'waiters'
  IO_ERROR: 'errno' | 'errnoName'
  TIMEOUT: 'holderPid' | 'lockedSince' | 'holderTag' | 'isOwnedByCurrentProcess'
  PERMISSION_DENIED: 'holderPid' | 'errno' | 'errnoName'
  LOCK_LOST: 'reply'
  AUTH_FAILED: 'reply'
  PROTOCOL_ERROR: 'reply'
  SERVER_ERROR: 'reply'
  LIMIT_MISMATCH: 'reply'
}

/**
 * The fields a failure of type `T` carries: those {@link SemaphoreErrorFieldsByType} lists for it, each optional
 * (present when known); every other field of {@link SemaphoreErrorFields} typed `undefined` (never set), so that
 * code reading one without checking `type` (as semats code reads `holderPid`) still type-checks.
 */
export type SemaphoreErrorFieldsOf<T extends SemaphoreErrorType> = Partial<
  Pick<SemaphoreErrorFields, T extends keyof SemaphoreErrorFieldsByType ? SemaphoreErrorFieldsByType[T] : never>
> & {
  readonly [K in Exclude<keyof SemaphoreErrorFields, T extends keyof SemaphoreErrorFieldsByType ? SemaphoreErrorFieldsByType[T] : never>]?: undefined
}

/** A failure of one type `T` (one member of the {@link SemaphoreError} union): `Extract<SemaphoreError, { type: T }>`. */
export type SemaphoreErrorOf<T extends SemaphoreErrorType> = {
  type: T
  message: string
  /** The underlying error, where there is one (an OS or binding error the failure was made from). */
  cause?: Error | undefined
} & SemaphoreErrorFieldsOf<T>

/**
 * A failure as a value (semats' shape: `type`, `message`, `holderPid?`, `lockedSince?`, `cause?`, plus this
 * package's fields): a union discriminated by `type`, each member with the fields that type really carries
 * ({@link SemaphoreErrorFieldsByType}). `if (r.error.type === 'TIMEOUT')` narrows it: `r.error.holderTag` is then
 * `string | undefined`, `r.error.errno` is `undefined`.
 */
export type SemaphoreError = { [T in SemaphoreErrorType]: SemaphoreErrorOf<T> }[SemaphoreErrorType]

/**
 * A result as a value (semats' shape): `{ ok: true, value }` on success, `{ ok: false, error }` on failure; never
 * thrown.
 */
export type SemaphoreResult<T> = { ok: true; value: T } | { ok: false; error: SemaphoreError }

/** The details `new LockError(message, code, details)` takes: any of {@link SemaphoreErrorFields}, and `cause`. */
export type LockErrorDetails = Partial<SemaphoreErrorFields> & { cause?: unknown }

/**
 * Thrown by `withLock`, `status`, the dflockd classes and constructors. Functions that return a
 * `SemaphoreResult` (`acquire`, `tryAcquire`, `release`, semats' methods) never reject: a bad target or option
 * comes back as a failed result with type `INVALID_ARGUMENT`, `INVALID_PATH` or `PATH_TRAVERSAL`.
 * Every option is checked the same way for every entry point and backend: a wrong type or value (`tag: 123`,
 * `timeout: '5s'`, `pid: 1.5`, `options: null`…) gives `INVALID_ARGUMENT` with a message naming the option and the
 * value; nothing is coerced. `null` or `undefined` for an option means its default.
 */
export declare class LockError extends Error {
  /** `code` defaults to `IO_ERROR` (semats' type for a failure with no more specific one). */
  constructor(message: string, code?: SemaphoreErrorType, details?: LockErrorDetails)
  /** Stable error code, one of {@link SemaphoreErrorType}. */
  readonly code: SemaphoreErrorType
  /** Same as `code` (semats naming). */
  readonly type: SemaphoreErrorType
  readonly holderPid?: number | undefined
  readonly lockedSince?: number | undefined
  /** See {@link SemaphoreErrorFields.holderTag}. */
  readonly holderTag?: string | undefined
  /** See {@link SemaphoreErrorFields.isOwnedByCurrentProcess}. */
  readonly isOwnedByCurrentProcess?: boolean | undefined
  readonly reply?: string | undefined
  /** See {@link SemaphoreErrorFields.errno}. */
  readonly errno?: number | undefined
  /** See {@link SemaphoreErrorFields.errnoName}. */
  readonly errnoName?: string | undefined
}
/** The lock could not be had within the timeout. `code === 'TIMEOUT'`. */
export declare class AcquireTimeoutError extends LockError {
  /** Message defaults to `timeout acquiring '<key>'` (the dflockd client's). */
  constructor(key: string, message?: string, details?: LockErrorDetails)
}
/** The dflockd server refused the auth token. `code === 'AUTH_FAILED'`. */
export declare class AuthError extends LockError {
  /** Message defaults to the dflockd client's `authentication failed`. */
  constructor(message?: string)
}

// ─────────────────── lock-file format helpers (semats drop-in) ───────────────────

/** What a lock file says. Extra fields sema-native writes (host, start, token) are not part of this shape. */
export interface LockInfo {
  pid: number
  /** Unix seconds. */
  timestamp: number
  tag?: string | undefined
}

/** `{pid: process.pid, timestamp: now (s), tag}`; the `tag` key is present even when undefined (as semats). */
export declare function createLockInfo(tag?: string): LockInfo
/** `pid=…\ntimestamp=…\n[tag=…\n]`, the tag sanitised (C0 controls and DEL → space) and cut to `maxTagLength` (10000). */
export declare function serializeLockInfo(info: LockInfo, maxTagLength?: number): string
/** semats' parser: CRLF, BOM, unknown keys and blank lines accepted; `parseInt` rules for numbers. PARSE_ERROR when pid or timestamp is missing. */
export declare function parseLockInfo(content: string): SemaphoreResult<LockInfo>
/** Age rule only: `floor(now/1000) - timestamp > timeoutMs/1000`. */
export declare function isLockStale(info: LockInfo, timeoutMs: number): boolean
/** Whether a process with this pid exists on this host (EPERM counts as running, unlike semats). */
export declare function isProcessRunning(pid: number): boolean

// ─────────────────────── semats-compatible class ───────────────────────

/**
 * Options of `new Semaphore(path, config)`, semats' names and defaults (all times in ms), plus `fsync` and
 * `heartbeat`.
 */
export interface SemaphoreConfig {
  /** ms after which a lock whose holder is not running may be broken; `null` never breaks. Default 3_600_000. */
  staleTimeout?: number | null | undefined
  /** ms between polls while waiting (file-system events wake waiters sooner). Default 100. */
  retryInterval?: number | undefined
  /** ms `acquire()` waits by default; `null` waits forever. Default null. */
  acquireTimeout?: number | null | undefined
  /** Tags are cut to this many UTF-16 code units. Default 10000. */
  maxTagLength?: number | undefined
  /** fsync the lock file and its directory on acquire (the format's spec asks for it). Default true. Skipped on a memory file system (tmpfs), whose sync does nothing. */
  fsync?: boolean | undefined
  /**
   * ms between refreshes of a held lock's timestamp; `null`, `false` or 0 turns it off. Default min(1 s,
   * staleTimeout/4), run just after each wall-clock second, so that `sema --stale 1` and semats' `staleTimeout:
   * 1000` never take a live holder's lock. Other tools sharing the lock must use a stale timeout above this period.
   */
  heartbeat?: number | null | false | undefined
}

/**
 * What `Semaphore#status()` reports (semats' shape); `status()` of the target API extends it as {@link LockStatus}.
 */
export interface SemaphoreStatus {
  /** The lock file exists (also when it cannot be parsed: then `info` is null). */
  locked: boolean
  info: LockInfo | null
  isStale: boolean
  /**
   * The lock is this process's: it carries the token of a lock this process holds, or this host identity (hostname,
   * boot id, pid namespace) with this process's pid. Only a file without that identity (written by sema or semats)
   * is judged by its pid alone. The same pid in another container sharing the directory does not own it.
   */
  isOwnedByCurrentProcess: boolean
}

/** Drop-in replacement for semats' `Semaphore`: same methods, shapes, defaults (ms), error types and messages. */
export declare class Semaphore {
  /**
   * Throws a plain Error with semats' messages for a bad path ("Path cannot be empty", "Parent directory does not
   * exist: …"), a LockError `INVALID_ARGUMENT` for a bad config value (e.g. `staleTimeout: '1h'`).
   */
  constructor(lockPath: string, config?: SemaphoreConfig)
  /** `new Semaphore(lockPath)` with every default (semats' factory). */
  static withDefaults(lockPath: string): Semaphore
  /** Absolute path with symlinks resolved. */
  getPath(): string
  /** Whether the lock file exists (whoever holds it, stale or not). */
  isLocked(): boolean
  /** The lock file's `pid`, `timestamp` and `tag`, or null when there is no file or it cannot be parsed. */
  getLockInfo(): LockInfo | null
  /**
   * One attempt, synchronous: breaks a stale lock first; `ALREADY_LOCKED` (with the holder's pid and tag) when
   * held.
   */
  tryAcquire(tag?: string): SemaphoreResult<LockInfo>
  /** Records `info.pid` as the owner and `info.tag`; the timestamp written is the time of acquisition. */
  tryAcquireWithInfo(info: LockInfo): SemaphoreResult<LockInfo>
  /**
   * Waits for the lock up to `timeout` ms (default: the config's `acquireTimeout`, forever when null); `TIMEOUT` or
   * `ABORTED` as a failed result.
   */
  acquire(options?: { timeout?: number | undefined; tag?: string | undefined; signal?: AbortSignal | undefined }): Promise<SemaphoreResult<LockInfo>>
  /** semats' form of `acquire({ timeout: timeoutMs, tag })`. */
  acquireTimeout(timeoutMs: number, tag?: string): Promise<SemaphoreResult<LockInfo>>
  /**
   * Releases a lock held by this process ("this process" as in `status().isOwnedByCurrentProcess`: token and host
   * identity, the pid alone only for files written by sema or semats); `force` removes anyone's.
   */
  release(force?: boolean): SemaphoreResult<void>
  /** `release(true)`: removes the lock whoever holds it. */
  forceRelease(): SemaphoreResult<void>
  /**
   * Whether the lock is held, by whom (the file's `LockInfo`), whether it is stale and whether it is this
   * process's.
   */
  status(): SemaphoreStatus
  /** Removes the lock if it is stale (holder provably dead, or semats' rule for other tools' files). */
  cleanStale(): boolean
}

// ─────────────────────── one API over any target ───────────────────────

/** Which backend a target names: a lock file (`'file'`) or a dflockd server (`'dflockd'`). */
export type Backend = 'file' | 'dflockd'

/**
 * TLS for dflockd, the `tls.ConnectionOptions` fields that apply: `{}` (or `true`) uses the system roots; `ca`
 * trusts these PEM CAs instead (a self-signed server certificate given as its own CA is accepted when it is
 * byte-for-byte one of them). Other keys are refused with `INVALID_ARGUMENT`.
 */
export interface DflockdTlsOptions {
  /** PEM CA(s) to trust instead of the system roots (and instead of `NODE_EXTRA_CA_CERTS`, which is otherwise added to them, as in Node's `tls`). */
  ca?: string | Buffer | Array<string | Buffer> | undefined
  /** Server name to verify (default: the host). */
  servername?: string | undefined
  /** `false` accepts any server certificate (the handshake signature is still checked). Default `true`. */
  rejectUnauthorized?: boolean | undefined
  /** PEM client certificate chain, for a server that asks for one (with `key`). */
  cert?: string | Buffer | Array<string | Buffer> | undefined
  /** PEM private key of `cert` (never echoed in errors). */
  key?: string | Buffer | undefined
}

/**
 * Options of `acquire`, `tryAcquire` and `withLock`. Times in ms except `leaseTtl` (seconds); file-only and
 * dflockd-only options on the other backend are refused with `INVALID_ARGUMENT`.
 */
export interface AcquireOptions {
  /**
   * ms to wait (>= 0; `Infinity` waits forever); `null`/undefined waits forever (file) or 10 s (dflockd, as its client).
   * 0 = one attempt. dflockd honours it to the ms: the server is asked for the whole seconds above it and the client
   * stops at the ms.
   */
  timeout?: number | null | undefined
  /**
   * Aborting it cancels the wait; the promise resolves `{ok:false, error:{type:'ABORTED'}}` (withLock rejects).
   * An object that is not an AbortSignal (or lacks `aborted`, `addEventListener` or `removeEventListener`) is refused
   * with INVALID_ARGUMENT before anything is taken. Every option is read once, when the call starts.
   */
  signal?: AbortSignal | undefined
  /** Tag written into the lock file (file targets). */
  tag?: string | undefined
  /** Called once if the held lock is lost (file changed or gone, renewal refused, server gone). Never throws into your code. */
  onLost?: ((lock: Lock, error: LockError) => void) | undefined
  /** File: see {@link SemaphoreConfig.staleTimeout}. */
  staleTimeout?: number | null | undefined
  /** File: see {@link SemaphoreConfig.retryInterval}. */
  retryInterval?: number | undefined
  /** File: see {@link SemaphoreConfig.fsync}. */
  fsync?: boolean | undefined
  /** File: see {@link SemaphoreConfig.heartbeat}. */
  heartbeat?: number | null | false | undefined
  /** File: see {@link SemaphoreConfig.maxTagLength}. */
  maxTagLength?: number | undefined
  /** File: record this pid (an integer 1…2147483647) as the owner instead of `process.pid` (e.g. a calling shell's `$$`). */
  pid?: number | undefined
  /**
   * dflockd: lease in whole seconds, the protocol's unit and `?leaseTtl=`'s (overrides it), 1 to 3600; errors name
   * `leaseTtl`. A larger value is taken for milliseconds typed by habit and refused with the unit named (the lease is
   * renewed while the lock is held: its length only bounds how long a crashed holder keeps the key). Default: the
   * server's.
   */
  leaseTtl?: number | undefined
  /**
   * A counting semaphore: at most `limit` holders at once (an integer from 1 to 10^9; default 1: a mutex). dflockd: the key's
   * slots (overrides `?limit=`). File: slot 0 is the path itself, slots 1…N-1 sibling lock files
   * `<path>.slot-<i>-of-<N>`, each with the mutex's guarantees; a tool that knows only the lock-file format (`sema`,
   * `semats`, a shell) and takes the path takes one slot. A live slot taken with another limit fails the call with
   * `LIMIT_MISMATCH`, checked at every grant: no grant makes more holders than the smallest limit of the live slots.
   * Waiters are served in the order they started waiting, also across processes (the engine's line per path); a freed
   * slot is seen by a file event, a crashed holder's within `retryInterval`, and a stopped or busy waiting process
   * keeps a free slot from others for at most two `retryInterval`s. See docs/lock-kinds.md.
   */
  limit?: number | undefined
  /**
   * `'shared'`: one of many shared holders, or one `'exclusive'` holder. Absent: the plain mutex; it waits for
   * shared holders all the same (on dflockd it is then taken as a writer).
   * File: FIFO between the kinds (a waiter of either kind is served once the requests that arrived before it have
   * held and released: neither kind starves). While any shared holder holds, the path exists in the lock-file format
   * (a `mode=shared` line), names a live shared holder and is kept young by their heartbeat, so `sema`/`semats` and
   * the plain mutex wait and `sema try` is refused; each shared holder also holds a sibling `<path>.reader-<hex>`;
   * when all of them were killed, every acquirer of ours (shared, exclusive, the plain mutex) takes the path at once
   * (other tools after their stale timeout). Without `timeout` an acquire never resolves `TIMEOUT`. Not with
   * `pid`, nor `'shared'` with `limit` (`INVALID_ARGUMENT`). dflockd (overrides `?mode=`): reader slots on the key
   * (a semaphore of 16) and a gate mutex `<key>/gate`, at most 16 readers at once; does not combine with `limit`. See
   * docs/lock-kinds.md.
   */
  mode?: 'shared' | 'exclusive' | undefined
  /** dflockd: TLS options (implies TLS). */
  tls?: DflockdTlsOptions | true | undefined
  /** dflockd: auth token (overrides the URL's `token@`). */
  auth?: string | undefined
  /** dflockd: TCP+TLS connect timeout in ms. Default 10000. */
  connectTimeoutMs?: number | undefined
  /**
   * dflockd: timeout in ms for replies to non-blocking commands, and for the margin after a blocking one's own
   * timeout: a try (`tryAcquire`) against a server that never answers gives `TIMEOUT` after it. Default 30000.
   */
  socketTimeoutMs?: number | undefined
  /** dflockd: renew when this fraction of the lease has passed (0 < r < 1). Default 0.5. */
  renewRatio?: number | undefined
  /** dflockd: longest gap between renewals in ms (default 15000: below the server's 23 s idle timeout). Lower it for a server started with a shorter `--read-timeout`. */
  renewMaxIntervalMs?: number | undefined
}

/** What every held lock has, whichever backend holds it: see {@link Lock}. */
export interface LockBase extends LockInfo {
  /** `await using lock = …` calls it: release(). */
  [Symbol.asyncDispose](): Promise<void>
  /** The target as given (a dflockd URL with its token shown as `***`). */
  readonly target: string
  /** Which backend holds it: `'file'` ({@link FileLock}) or `'dflockd'` ({@link DflockdLock}). */
  readonly backend: Backend
  /** File: the ownership token in the lock file. dflockd: the server's token. */
  readonly token?: string | undefined
  /** Aborted (with a LockError, code LOCK_LOST) when the lock is lost. */
  readonly signal: AbortSignal
  /** True once released or lost. */
  readonly released: boolean
  /** Releases it. Resolves true if this call released it, false if it was already released or lost. Idempotent. */
  release(): Promise<boolean>
}

/**
 * A held lock file (a path or `file://` target). It has no lease: it is held until released or its holder dies;
 * the dflockd members are typed `undefined` here, so that code reading them on any {@link Lock} type-checks.
 */
export interface FileLock extends LockBase {
  readonly backend: 'file'
  /** Absent on file locks (no lease). */
  readonly lease?: undefined
  /** Absent on file locks (no lease). */
  readonly validUntil?: undefined
  /** Absent on file locks (no lease). */
  readonly remaining?: undefined
}

/** A held dflockd lock (a `dflockd://` target): a lease, renewed in the background while held. */
export interface DflockdLock extends LockBase {
  readonly backend: 'dflockd'
  /** The lease in seconds last granted or renewed. */
  readonly lease: number
  /**
   * Until when (ms since the epoch) the lease is proven valid by the client's own lease clock, which starts when
   * the acquire or renew is SENT (the server counts from receipt, later) and ends a guard (a tenth of the lease,
   * 250 ms to 1 s) before the lease; 0 once released or lost. With no renewal confirmed by then, the lock is lost at
   * that instant (`signal` aborts, `onLost` runs), before the server could grant it to anyone else. Bound: see
   * docs/many-machines.md (clock drift, pauses).
   */
  readonly validUntil: number
  /**
   * Milliseconds the lease is still proven valid (`validUntil − now` on the monotonic clock; 0 once released, lost
   * or past it). Check it before a write that must be exclusive.
   */
  remaining(): number
}

/**
 * A held lock, discriminated by `backend`: `if (lock.backend === 'dflockd') lock.remaining()`. `acquire`,
 * `tryAcquire` and `withLock` give the narrower type themselves when the target's type says which backend it names
 * ({@link LockOf}). `await using lock = …` releases it at the end of the scope.
 */
export type Lock = FileLock | DflockdLock

/**
 * The lock type a target string gives: {@link DflockdLock} for a `dflockd://…` string (a literal or a template
 * such as `` `dflockd://${addr}/jobs` ``), {@link FileLock} for any other literal (a path or `file://` URL), and
 * {@link Lock} (either) for a plain `string`.
 */
export type LockOf<Target extends string> = Lowercase<Target> extends `dflockd://${string}` ? DflockdLock : string extends Target ? Lock : FileLock

/** What `status(target)` reports on either backend: semats' status shape, plus the target and the backend. See {@link LockStatus}. */
export interface LockStatusBase extends SemaphoreStatus {
  /** The target as given (a dflockd URL with its token shown as `***`). */
  target: string
  /** `'file'` ({@link FileLockStatus}) or `'dflockd'` ({@link DflockdLockStatus}). */
  backend: Backend
}

/**
 * `status()` of a lock file: when it becomes reclaimable and by which rule; with `limit` in the options or while
 * shared holders hold it, how many hold it. The dflockd fields are typed `undefined` here.
 */
export interface FileLockStatus extends LockStatusBase {
  backend: 'file'
  /** With `limit` in the options: slot files present (taken); a shared lock: live shared holders. */
  holders?: number | undefined
  /** Absent on files (the engine counts waiters only for `sema-native ls`). */
  waiters?: undefined
  /** The `limit` asked for in the options. */
  limit?: number | undefined
  /** `'shared'` when shared holders hold the path (then `holders` counts them). */
  mode?: 'shared' | 'exclusive' | undefined
  /** Absent on files (no lease). */
  leaseExpiresInS?: undefined
  /**
   * Unix seconds from which the lock is reclaimable by {@link FileLockStatus.reclaimRule}'s condition (for
   * `'age-and-pid-not-running'` its pid must also not be running then), or now when `isStale`. `null` when no time
   * decides it (`'holder-dead'` with the holder running: whenever it ends; `'never'`) or there is no file.
   */
  reclaimableAt: number | null
  /**
   * How this lock becomes reclaimable (`null` without a file):
   * - `'holder-dead'`: a lock of this package on this host, reclaimed at once when its holder process dies;
   * - `'age-and-pid-not-running'`: a file without this package's host identity (sema, semats, a shell, the
   *   `sema-native sema|semats` front ends): semats' rule, older than `staleTimeout` and its pid not running
   *   (a crashed sema holder waits out `staleTimeout`, 1 h by default);
   * - `'heartbeat-unchanged'`: a lock of this package from another host (another machine, or another pid namespace):
   *   its file unchanged, as this process saw it on its own monotonic clock, for 6 of its holder's heartbeat periods
   *   (at least 1 s each: 6 s by default), or `staleTimeout` (at least 6 s) when it records no heartbeat; never by
   *   comparing clocks across machines. `reclaimableAt` is when that runs out if nothing changes (this host's clock);
   *   a holder whose heartbeat cannot write for 3 periods (1 s periods until its first beat) learns it lost the
   *   lock first (`LOCK_LOST`);
   * - `'unparseable-age'`: a file that cannot be parsed: its modification time older than `staleTimeout`;
   * - `'never'`: `staleTimeout: null`, or a symbolic link at the path.
   */
  reclaimRule: 'holder-dead' | 'age-and-pid-not-running' | 'heartbeat-unchanged' | 'unparseable-age' | 'never' | null
  /**
   * The file system of the lock's directory, from its `statfs` magic: `'ext4'`, `'xfs'`, `'btrfs'`, `'tmpfs'`,
   * `'overlay'`, `'nfs'`, `'cifs'`, `'smb2'`, `'fuse'`, `'9p'`, `'ceph'`, ..., or `'0x…'` for a magic the engine
   * does not name. `null` where the system has no such magics (macOS, the BSDs, Windows).
   */
  fileSystem: string | null
  /**
   * What the engine does instead of what this file system lacks (empty on a local disk):
   * - `'no-tmpfile'`: no `O_TMPFILE`: a lock file is written under a temp name, then hard-linked into place;
   * - `'poll'`: a network, FUSE or cluster file system, where events of other machines never arrive: a waiter
   *   finds a freed lock by its `retryInterval` poll.
   */
  fallbacks: FileSystemFallback[]
}

/** What the engine falls back to on a file system that lacks something ({@link FileLockStatus.fallbacks}). */
export type FileSystemFallback = 'no-tmpfile' | 'poll'


/**
 * `status()` of a dflockd key, from the server's `stats`: holders, waiters and the key's limit. `info` is known only
 * for a lock this process holds (the protocol names no other holder). The file fields are typed `undefined` here.
 */
export interface DflockdLockStatus extends LockStatusBase {
  backend: 'dflockd'
  /** Slots held (a key held in `mode: 'shared'`: its readers; by a writer: 1). */
  holders: number
  /** Clients queued. */
  waiters: number
  /** The key's limit (1 for a lock; while readers hold a shared lock, the most readers at once, 16). */
  limit: number
  /** `'shared'` when readers hold the key, `'exclusive'` when a writer of a shared lock does; absent for a plain
   * mutex or semaphore. */
  mode?: 'shared' | 'exclusive' | undefined
  /** Seconds until the holder's lease expires, when a lock (not a semaphore) is held. */
  leaseExpiresInS?: number | undefined
  /** Absent on dflockd (a lease, not a stale rule, ends a crashed holder's lock: see `leaseExpiresInS`). */
  reclaimableAt?: undefined
  /** Absent on dflockd. */
  reclaimRule?: undefined
  /** Absent on dflockd (no file system). */
  fileSystem?: undefined
  /** Absent on dflockd. */
  fallbacks?: undefined
}

/**
 * What `status(target)` reports, discriminated by `backend`: {@link FileLockStatus} or {@link DflockdLockStatus}.
 * `status` gives the narrower type itself when the target's type says which backend it names ({@link LockStatusOf}).
 */
export type LockStatus = FileLockStatus | DflockdLockStatus

/** The status type a target string gives, as {@link LockOf} does for locks. */
export type LockStatusOf<Target extends string> = Lowercase<Target> extends `dflockd://${string}`
  ? DflockdLockStatus
  : string extends Target
    ? LockStatus
    : FileLockStatus

/** Options of `status(target)`. */
export interface StatusOptions {
  /** File: stale rule used for `isStale`. */
  staleTimeout?: number | null | undefined
  /**
   * File: the counting semaphore's limit, to report `holders` over its `limit` slots (`locked` when any is taken,
   * `info` the path's holder or else the first taken slot's).
   */
  limit?: number | undefined
  /**
   * Accepted with the names of {@link AcquireOptions} (checked, not used): a file's status reports `mode: 'shared'`
   * and the shared `holders` whenever shared holders hold it.
   */
  mode?: 'shared' | 'exclusive' | undefined
  tls?: DflockdTlsOptions | true | undefined
  auth?: string | undefined
  connectTimeoutMs?: number | undefined
  socketTimeoutMs?: number | undefined
}

/** Options of `release(target)`. */
export interface ReleaseOptions {
  /** File: remove the lock whoever holds it. */
  force?: boolean | undefined
  /**
   * File: release on behalf of this owner pid (the `pid` given to `acquire`, e.g. a shell's `$$`) instead of
   * `process.pid`. A lock written by this package must also name this host identity (same pid namespace): the
   * same pid in another container is another process.
   */
  pid?: number | undefined
  /**
   * File: the counting semaphore's limit: release the first of its slots held by this process (or `pid`). A shared
   * lock needs nothing: `release(path)` releases this thread's shared holds on it.
   */
  limit?: number | undefined
}

/**
 * Waits for the lock. `target` is a path (`/var/lock/x.lock`, `file:///var/lock/x.lock`) or
 * `dflockd://[token@]host[:port][,host2[:port]…]/key[?limit=N&leaseTtl=S&tls=1&ca=PATH]` (with several servers, the
 * key goes to the one `stableHashShard(key, n)` picks, as `DistributedLock({ servers })`; `ca=` a PEM file to trust,
 * implying TLS; `tls=1`/`tls: true` trust the system roots plus `NODE_EXTRA_CA_CERTS`, as Node's `tls`). The lock
 * is a {@link DflockdLock} when `target`'s type says `dflockd://…`, a {@link FileLock} for another literal, else a
 * {@link Lock} ({@link LockOf}).
 */
export declare function acquire<Target extends string>(target: Target, options?: AcquireOptions): Promise<SemaphoreResult<LockOf<Target>>>
/** One attempt, no waiting. The lock's type as {@link acquire}'s. */
export declare function tryAcquire<Target extends string>(target: Target, options?: AcquireOptions): Promise<SemaphoreResult<LockOf<Target>>>
/** Releases a `Lock`, or the lock this process holds on `target` (`force`: whoever holds it, file targets). */
export declare function release(target: string | Lock, options?: ReleaseOptions): Promise<SemaphoreResult<void>>
/**
 * What the target looks like now ({@link LockStatusOf}). Returns the status itself, not a `SemaphoreResult`, so every
 * failure rejects with LockError: a bad target or option (`INVALID_ARGUMENT`, `INVALID_PATH`…, the code and message
 * `tryAcquire` gives as `{ ok: false }` for the same input), an unreachable server. The rule for every function: one
 * that returns a `SemaphoreResult` (`acquire`, `tryAcquire`, `release`, `wait`) resolves failures; one that returns a
 * value (`status`, `withLock`) rejects.
 */
export declare function status<Target extends string>(target: Target, options?: StatusOptions): Promise<LockStatusOf<Target>>
/**
 * Acquires, runs `fn`, always releases. Rejects with AcquireTimeoutError, or LockError with a stable `code`; `fn`'s own
 * error wins over a release error; `fn` may release the lock itself. Nested in an async call chain that already holds
 * `target` through withLock, rejects at once with `ALREADY_LOCKED` (it would wait for itself forever). `fn` gets
 * the lock typed as {@link acquire}'s ({@link LockOf}).
 */
export declare function withLock<T, Target extends string = string>(target: Target, fn: (lock: LockOf<Target>) => T | Promise<T>, options?: AcquireOptions): Promise<T>

// ─────────────────────── observing locks without taking them ───────────────────────

/** Options of `wait(target)`: how long to wait for the lock to be free, and how to ask. */
export interface WaitOptions extends StatusOptions {
  /** ms to wait (>= 0; `Infinity`, `null` or undefined: forever). 0 = one look. Fails with `TIMEOUT`. */
  timeout?: number | null | undefined
  /** Aborting it ends the wait with `ABORTED`. */
  signal?: AbortSignal | undefined
  /** File: the fallback poll interval in ms when no file event comes (default 100). */
  retryInterval?: number | undefined
}

/**
 * Resolves when `target` is free, without taking it (async-mutex's `waitForUnlock`): `value.waitedMs` is how long
 * it waited. A lock file is free when it is gone or stale (its holder died: the next `acquire` breaks it); the wait
 * is woken by the file events of its directory and creates no file. With `limit: N` it waits for a free slot (a
 * sibling slot taken with another limit fails with `LIMIT_MISMATCH`, as `acquire`); with `mode: 'shared'` until no
 * exclusive holder holds it or waits (readers do not keep a reader out); with `mode: 'exclusive'` until no holder of
 * either kind is left. dflockd has no command that waits without
 * queueing for the lock, so a dflockd target is free when the server's `stats` show a free slot, asked every 200 ms.
 * The lock may be taken again by someone else by the time you act: `wait` is for "tell me when", not exclusion.
 * Fails (never throws) like `acquire`: `INVALID_ARGUMENT`/`INVALID_PATH`, `TIMEOUT`, `ABORTED`, `IO_ERROR`.
 */
export declare function wait(target: string, options?: WaitOptions): Promise<SemaphoreResult<{ waitedMs: number }>>

/** A lock in {@link query}'s answer (the Web Locks `LockManagerSnapshot` entry's `name` and `mode`, plus facts). */
export interface QueriedLock {
  /** File: the absolute lock path (held) or the target as given (pending). dflockd: the URL, token shown as `***`. */
  name: string
  backend: Backend
  /** `'exclusive'`. */
  mode: string
  /** Held: the owner recorded in the lock (this process, or `pid` given to acquire). */
  pid?: number
  /** Held: when it was acquired (Unix seconds). */
  timestamp?: number
  /** Held (file): the tag written. */
  tag?: string
  /** Pending: when the acquisition began (ms since the epoch). */
  since?: number
}

/**
 * The locks this process holds and waits for (as Web Locks' `navigator.locks.query()`): `held` lists every lock file
 * held by any thread through any API (`acquire`, `withLock`, `Semaphore`) and the dflockd locks of the one-string
 * API; `pending` lists this thread's `acquire`/`withLock` calls still waiting. (`DistributedLock` and `Connection`
 * objects keep their own state: not listed.)
 */
export declare function query(): Promise<{ held: QueriedLock[]; pending: QueriedLock[] }>

// ─── W3C Web Locks across processes and machines ───

/** A Web Lock's mode: any number of `shared` holders, or one `exclusive`. */
export type WebLockMode = 'exclusive' | 'shared'

/** The lock a {@link WebLockManager.request} callback gets (the spec's `Lock`). */
export interface WebLock {
  readonly name: string
  readonly mode: WebLockMode
}

/**
 * The options of {@link WebLockManager.request} (the spec's `LockOptions`). A name it does not have is refused with a
 * `TypeError` naming the nearest one (`ifavailable`: did you mean `ifAvailable`?); there is no `timeout`: pass
 * `signal: AbortSignal.timeout(ms)`.
 */
export interface WebLockOptions {
  /** Default `'exclusive'`. `'shared'` needs a backend with shared locks (else the request rejects with `INVALID_ARGUMENT`). */
  mode?: WebLockMode
  /** Grant only if free now (no holder in any process, no request queued here): else the callback gets `null` at once. */
  ifAvailable?: boolean
  /**
   * Take the lock from whoever holds it, in any process: the holder's request rejects with an `AbortError`
   * `DOMException` (another process's within its loss detection: its lock file's heartbeat, 1 s by default). Not with
   * `ifAvailable`, `mode: 'shared'` or `signal` (`NotSupportedError`). On dflockd, a hand-over among LockManager
   * clients (the old holder's connection keeps the lock for the stealer, so the server's queue keeps its order; the
   * stealer's request rejects with an `AbortError` if that holder dies or loses it): a holder that does not answer
   * within 2 s (not a LockManager), holds in shared mode or holds the lock by a steal from another process (not
   * handed over again), or a base `leaseTtl` under 9 s, makes it reject with `NotSupportedError`, nothing taken.
   * Cooperative: for clients that trust each other. See docs/lock-kinds.md#steal.
   */
  steal?: boolean
  /** Aborting it before the grant rejects the request with `signal.reason` (an `AbortError` by default); after, it does nothing. */
  signal?: AbortSignal
}

/** One held or pending request in {@link WebLockManager.query}'s answer (the spec's `LockInfo`, plus facts). */
export interface WebLockInfo {
  /**
   * The name. Another process's request on a name longer than 200 encoded characters (hashed in the file name or
   * key) is listed only on a lock directory, from its holder's tag, and only up to 8000 encoded characters.
   */
  name: string
  /**
   * Known for this thread's requests and for other processes' holders (a lock directory: their lock's tag; dflockd:
   * the key's mutex and reader slots); absent for other processes' pending requests.
   */
  mode?: WebLockMode
  /** One per thread (the spec's client). Absent for other processes' pending requests and every dflockd request of another client. */
  clientId?: string
  /** The holder's (or requester's) pid, where known: this thread's requests, and holders of a lock directory. */
  pid?: number
  /** Its host name, where known (as `pid`). */
  host?: string
}

/** {@link WebLockManager.query}'s answer: held and pending requests of every process using the base. */
export interface WebLockManagerSnapshot {
  held: WebLockInfo[]
  pending: WebLockInfo[]
}

/**
 * The W3C Web Locks `LockManager` (`navigator.locks`), across processes and machines. In each thread the spec's
 * algorithm runs as written (FIFO per name, shared requests granted together); a request it grants then takes the
 * backend lock of its name (one lock file, or one dflockd key, per granted request) and only then is its callback called.
 */
export interface WebLockManager {
  /**
   * Requests the lock `name` (any string; names starting with `-` are refused with `NotSupportedError`), calls
   * `callback` with it once granted (or `null` with `ifAvailable` when it is not free), and releases it when the
   * callback's promise settles. Resolves with the callback's result, rejects with its error, with an `AbortError` when
   * the lock is stolen or lost (a dflockd lease that could not be renewed; `cause` is the LockError), with the
   * signal's reason when aborted before the grant, with a `TypeError` for bad arguments, and with a {@link LockError}
   * when the backend fails.
   */
  request<T>(name: string, callback: (lock: WebLock | null) => T | PromiseLike<T>): Promise<Awaited<T>>
  /** As the form without options; `options` sets `mode`, `ifAvailable`, `steal` and `signal` as in the spec. */
  request<T>(name: string, options: WebLockOptions, callback: (lock: WebLock | null) => T | PromiseLike<T>): Promise<Awaited<T>>
  /**
   * Held and pending requests: this thread's in full, then every other process's as its backend tells them. A lock
   * directory: holders by name, mode, clientId, pid and host (from the lock files, as `sema-native ls`); waiting
   * processes by name only (the engine counts them). dflockd: from the server's `stats`, holders by name and mode
   * (from the key's mutex and, with shared mode, its reader slots), waiters by name; never who (the server does not say).
   */
  query(): Promise<WebLockManagerSnapshot>
}

/**
 * A {@link WebLockManager} on `base`: an existing directory (name → lock file `wl-<encoded name>.lock` in it; the
 * encoding is injective and safe for any name: `/`, `..`, `''`, NUL, unpaired surrogates) or
 * `dflockd://[token@]host[:port][/prefix][?tls=1&ca=…]` (name → key `[prefix/]wl-<encoded name>`). Managers on the
 * same base in one thread share one queue. Throws {@link LockError} `INVALID_ARGUMENT` for a bad base or any option
 * (none are defined yet).
 */
export declare function createLockManager(base: string, options?: Record<string, never>): WebLockManager

/**
 * A ready {@link WebLockManager} on this user's directory of this machine (`/tmp/sema-native-locks-<uid>`, created
 * 0700 on first use; `%LOCALAPPDATA%\sema-native\locks` on Windows): `locks.request('deploy', fn)` coordinates
 * every process of the user, with no set-up. A directory that is a symlink, not owned by this user, or open to
 * others is refused: every call rejects with {@link LockError} `INVALID_PATH`.
 */
export declare const locks: WebLockManager

/**
 * node:diagnostics_channel (what APM agents and OpenTelemetry instrumentations subscribe to; nothing is published and
 * nothing allocated while nobody subscribes):
 * - `diagnostics_channel.tracingChannel('sema-native:acquire')`: `start` and `end` around the call of every
 *   `acquire`/`tryAcquire`/`withLock` acquisition (both backends), then `asyncStart`/`asyncEnd` when it settles, with
 *   `error` before them when it failed (a failed `SemaphoreResult` too). One {@link AcquireTraceContext} per call.
 * - `sema-native:release`: {@link ReleaseMessage}, when a held lock is released by its handle or by `release(target)`.
 * - `sema-native:lost`: {@link LostMessage}, when a held lock is lost.
 * Targets are shown with a dflockd URL's token replaced by `***`; a lock's own token is never published.
 */
export interface AcquireTraceContext {
  target: string
  backend: Backend
  /** `'exclusive'`. */
  mode: string
  /** `true` for acquire, `false` for one attempt (tryAcquire). */
  wait: boolean
  /** Once settled: ms from start. */
  waitedMs?: number
  /** Once acquired: the lock's facts. */
  lock?: LockFacts
  /** Once failed: the failure (`code` TIMEOUT, ALREADY_LOCKED, ABORTED, …). */
  error?: LockError | Error
  /** Once failed: the holder, when known. */
  holderPid?: number
  lockedSince?: number
}

/** A held lock's facts as published on `diagnostics_channel` (never its token). */
export interface LockFacts {
  target: string
  backend: Backend
  pid: number
  timestamp: number
  tag?: string
}

/** Published on the `sema-native:release` channel for every release. */
export interface ReleaseMessage {
  target: string
  backend: Backend
  /** `true`: `release(target)` (the lock's facts are then unknown here). */
  byPath: boolean
  pid?: number
  timestamp?: number
  tag?: string
}

/** Published on the `sema-native:lost` channel when a held lock is lost. */
export interface LostMessage extends LockFacts {
  /** The LockError (code `LOCK_LOST`) the lock's `signal` was aborted with. */
  error: LockError
}

// ─────────────────────── dflockd client (dflockd-client names) ───────────────────────

/** Picks the server index for a key: an integer in [0, numServers). */
export type ShardingStrategy = (key: string, numServers: number) => number

/** CRC-32/IEEE of the key's UTF-8 bytes, modulo `numServers` (same as the Go, Python and TS clients). */
export declare function stableHashShard(key: string, numServers: number): number

/**
 * Options of `new DistributedLock(options)`: the dflockd TypeScript client's names and defaults (times in seconds,
 * except the `…Ms` ones).
 */
export interface DistributedLockOptions {
  key: string
  /**
   * Whole seconds to wait in `acquire()` (0: try once), at most 3600: a larger value (`10000`, milliseconds typed by
   * habit) is refused with the unit named. Default 10.
   */
  acquireTimeoutS?: number | undefined
  /** Lease in whole seconds (1 to 3600, as `leaseTtl`), sent on acquire, enqueue and every renew. Default: the server's (33). */
  leaseTtlS?: number | undefined
  /** Default `[["127.0.0.1", 6388]]`. */
  servers?: Array<[string, number]> | undefined
  /** Deprecated single-server form (used when `servers` is absent). */
  host?: string | undefined
  port?: number | undefined
  shardingStrategy?: ShardingStrategy | undefined
  /** Renew when this fraction of the lease has passed. Default 0.5. */
  renewRatio?: number | undefined
  tls?: DflockdTlsOptions | true | undefined
  /** Sent as the first request on every connection. */
  auth?: string | undefined
  /** Called (once) when the held lock is lost: renewal refused, connection dropped, server gone. Errors it throws are reported as warnings. */
  onLockLost?: ((key: string, token: string) => void) | undefined
  /**
   * A shared (reader/writer) lock on `key`: `'shared'` = one of up to 16 readers, `'exclusive'` = the only holder,
   * after the readers in place leave; a waiting writer is not starved by later readers. Absent: the plain mutex on
   * `key` (one request); beside readers the server refuses it and `acquire()` takes it as a writer (it waits for
   * them), `enqueue()` rejects with LIMIT_MISMATCH. `token` is then a reader's slot or a writer's gate token;
   * `enqueue()`/`wait()` are not available (INVALID_ARGUMENT). See docs/lock-kinds.md.
   */
  mode?: 'shared' | 'exclusive' | undefined
  /** TCP + TLS connect timeout in ms. Default 10000. */
  connectTimeoutMs?: number | undefined
  /**
   * Timeout in ms for replies to non-blocking commands (release, enqueue, stats), and for the margin after a blocking
   * command's own timeout (an `acquireTimeoutS: 0` try against a silent server throws `TIMEOUT` after it). Renewals are
   * bounded by the lease instead (see `validUntil`). Default 30000.
   */
  socketTimeoutMs?: number | undefined
  /** Longest gap between renewals in ms. Default 15000 (below the server's 23 s idle timeout). */
  renewMaxIntervalMs?: number | undefined
}

/** Options of `new DistributedSemaphore(options)`: those of a lock, plus `limit`, the number of holders at once. */
export interface DistributedSemaphoreOptions extends DistributedLockOptions {
  limit: number
}

/**
 * An exclusive lock on a dflockd server key, with the dflockd TypeScript client's API. Renewal runs in the
 * background while held; a loss aborts `signal` and calls `onLockLost`. Neither a held lock nor an idle instance
 * keeps Node alive.
 */
export declare class DistributedLock {
  /** Checks every option (`INVALID_ARGUMENT` naming it); connects only on `acquire` or `enqueue`. */
  constructor(options: DistributedLockOptions)
  readonly key: string
  readonly acquireTimeoutS: number
  readonly leaseTtlS: number | undefined
  readonly servers: ReadonlyArray<readonly [string, number]>
  readonly shardingStrategy: ShardingStrategy
  readonly renewRatio: number
  readonly tls: DflockdTlsOptions | undefined
  readonly auth: string | undefined
  /** Called once when a held lock is lost (renewal refused, connection dropped, lease clock ran out). */
  readonly onLockLost: ((key: string, token: string) => void) | undefined
  readonly connectTimeoutMs: number | undefined
  readonly socketTimeoutMs: number | undefined
  /** Token of the held lock, or null. */
  readonly token: string | null
  /** Lease in seconds of the held lock, 0 when none. */
  readonly lease: number
  /**
   * Until when (ms since the epoch) the held lock's lease is proven valid, 0 when none: the client's own lease clock,
   * started when the acquire or renew was SENT and ending a guard (a tenth of the lease, 250 ms to 1 s) before the
   * lease. With no renewal confirmed by then the lock is lost at that instant (`signal` aborts, `onLockLost` runs,
   * `withLock` rejects with `LOCK_LOST`), before the server could grant it to anyone else.
   */
  readonly validUntil: number
  /** Milliseconds the held lock is still proven valid (monotonic clock; 0 when none, lost or past `validUntil`). */
  remaining(): number
  /** Aborted when the currently held lock is lost (one lost before `acquire()` resolved is told once, right after it
   * resolved `true`); a fresh signal per acquisition. */
  readonly signal: AbortSignal
  /**
   * true = acquired; false = timed out. `force` closes a live connection first. Acquisitions of one process on the
   * same server and key are granted in call order (each enqueues once the one called before it was answered).
   */
  acquire(options?: { force?: boolean | undefined; signal?: AbortSignal | undefined }): Promise<boolean>
  /**
   * Releases the held lock; the connection goes to the idle pool (2 s). Rejects `NOT_LOCKED` when nothing is held.
   */
  release(): Promise<void>
  /**
   * Two-phase acquisition, first step: joins the key's queue; `'acquired'` when granted at once, else `'queued'`
   * (then call `wait`).
   */
  enqueue(options?: { force?: boolean | undefined; signal?: AbortSignal | undefined }): Promise<'acquired' | 'queued'>
  /** true once granted; false when `timeoutS` (fractions allowed: the server gets the ceiling in whole seconds, the
   * client stops waiting at the exact deadline and drops the connection) passes first. Rejects `NOT_LOCKED` when
   * nothing is queued: call `enqueue()` again after a timeout, a loss or `close()`; also while an `enqueue()` or
   * another `wait()` of this instance is in progress (one wins, the other is refused). */
  wait(timeoutS?: number, options?: { signal?: AbortSignal | undefined }): Promise<boolean>
  /**
   * Acquires (rejecting `AcquireTimeoutError` on timeout), runs `fn`, always releases; rejects `LOCK_LOST` if the
   * lock was lost while `fn` ran.
   */
  withLock<T>(fn: () => T | Promise<T>): Promise<T>
  /** Drops the connection without releasing (the server releases on disconnect). Idempotent. */
  close(): void
  /** Releases a held lock and closes the connection (`await using lock = new DistributedLock(…)`). */
  [Symbol.asyncDispose](): Promise<void>
}

/**
 * Up to `limit` holders at once of a dflockd server key (its `sl`/`sr`/`sn`/`se`/`sw` commands), with the same
 * methods as {@link DistributedLock}.
 */
export declare class DistributedSemaphore extends DistributedLock {
  /** As `DistributedLock`'s, plus `limit`. */
  constructor(options: DistributedSemaphoreOptions)
  readonly limit: number
}

/** A held lock in the server's `stats` (the server's own field names). */
export interface StatsLock {
  key: string
  owner_conn_id: number
  lease_expires_in_s: number
  waiters: number
}
/** A semaphore with holders in the server's `stats`. */
export interface StatsSemaphore {
  key: string
  limit: number
  holders: number
  waiters: number
}
/** A lock key kept by the server with no holder, and for how many seconds. */
export interface StatsIdleLock {
  key: string
  idle_s: number
}
/** A semaphore key kept by the server with no holder, and for how many seconds. */
export interface StatsIdleSemaphore {
  key: string
  idle_s: number
}
/** The dflockd server's `stats` reply: connections, held and idle locks and semaphores. */
export interface Stats {
  connections: number
  locks: StatsLock[]
  semaphores: StatsSemaphore[]
  idle_locks: StatsIdleLock[]
  idle_semaphores: StatsIdleSemaphore[]
}

/** Where and how to connect to a dflockd server (`127.0.0.1:6388` by default); times in ms. */
export interface ConnectionOptions {
  host?: string | undefined
  port?: number | undefined
  tls?: DflockdTlsOptions | true | undefined
  auth?: string | undefined
  connectTimeoutMs?: number | undefined
  socketTimeoutMs?: number | undefined
}

/** Server statistics (needs a server with the `stats` command). */
export declare function stats(options?: ConnectionOptions): Promise<Stats>

/** A granted lock or semaphore slot: its token and lease. */
export interface Grant {
  token: string
  /** Seconds. */
  lease: number
}

/**
 * One dflockd connection, one method per protocol command. Replies other than the expected ones reject with LockError.
 * A `leaseTtlS` argument follows the `leaseTtl` rule: whole seconds, 1 to 3600 (`INVALID_ARGUMENT` naming the unit).
 */
export declare class Connection {
  /**
   * Opens a connection (and sends `auth` first when given); rejects `CONNECTION_ERROR`, `AUTH_FAILED` or
   * `TLS_MISMATCH`.
   */
  static connect(options?: ConnectionOptions): Promise<Connection>
  /** Rejects with AcquireTimeoutError on `timeout`. */
  acquire(key: string, acquireTimeoutS: number, leaseTtlS?: number): Promise<Grant>
  /** Releases a lock by its token (`r`). */
  release(key: string, token: string): Promise<void>
  /** Resolves the lease just applied, in seconds. */
  renew(key: string, token: string, leaseTtlS?: number): Promise<number>
  /** Joins a lock's queue (`e`): granted at once, or queued for `waitForLock`. */
  enqueue(key: string, leaseTtlS?: number): Promise<{ status: 'acquired' | 'queued'; token: string | null; lease: number | null }>
  /** Waits for a queued lock (`w`); rejects `AcquireTimeoutError` after `waitTimeoutS`. */
  waitForLock(key: string, waitTimeoutS: number): Promise<Grant>
  /** Takes a semaphore slot (`sl`), waiting up to `acquireTimeoutS`; rejects `AcquireTimeoutError` on timeout. */
  semAcquire(key: string, acquireTimeoutS: number, limit: number, leaseTtlS?: number): Promise<Grant>
  /** Releases a semaphore slot by its token (`sr`). */
  semRelease(key: string, token: string): Promise<void>
  /** Renews a semaphore slot's lease (`sn`); resolves the lease applied, in seconds. */
  semRenew(key: string, token: string, leaseTtlS?: number): Promise<number>
  /** Joins a semaphore's queue (`se`): granted at once, or queued for `semWaitForLock`. */
  semEnqueue(key: string, limit: number, leaseTtlS?: number): Promise<{ status: 'acquired' | 'queued'; token: string | null; lease: number | null }>
  /** Waits for a queued semaphore slot (`sw`); rejects `AcquireTimeoutError` after `waitTimeoutS`. */
  semWaitForLock(key: string, waitTimeoutS: number): Promise<Grant>
  /** The server's statistics on this connection. */
  stats(): Promise<Stats>
  /** Sends a raw request (validated framing) and resolves the reply line. */
  request(cmd: string, key: string, arg: string): Promise<string>
  /**
   * As a Node socket's `unref()`: a pending request (e.g. a blocking `acquire`) no longer keeps the process alive;
   * the process may exit with it pending. An idle connection never keeps the process alive. Returns `this`.
   */
  unref(): this
  /** Undoes `unref()`: a pending request keeps the process alive until it settles (the default). Returns `this`. */
  ref(): this
  /** Closes the connection; the server releases what it held. Idempotent. */
  close(): void
  /** Closes the connection (`await using conn = await Connection.connect(…)`). */
  [Symbol.asyncDispose](): Promise<void>
}
