// Type test: a program written against semats (its README's and its one known consumer's uses, and the ways code
// handles its SemaphoreError and SemaphoreResult) type-checks with only the import changed to sema-native.
import { Semaphore, parseLockInfo, type LockInfo, type SemaphoreError, type SemaphoreErrorType, type SemaphoreResult } from '../..'

function describe(e: SemaphoreError): string {
  // semats' fields, read without checking `type` first.
  const holder = e.holderPid !== undefined ? ` (held by ${e.holderPid} since ${e.lockedSince ?? '?'})` : ''
  const cause = e.cause ? `: ${e.cause.message}` : ''
  switch (e.type) {
    case 'ALREADY_LOCKED':
    case 'TIMEOUT':
      return `busy${holder}`
    case 'NOT_LOCKED':
    case 'PERMISSION_DENIED':
    case 'INVALID_PATH':
    case 'PATH_TRAVERSAL':
    case 'PARSE_ERROR':
    case 'IO_ERROR':
      return `${e.type}: ${e.message}${cause}`
    default:
      return e.message
  }
}

// Results and errors a program makes itself, in semats' shapes.
function failure(type: SemaphoreErrorType, message: string): SemaphoreError {
  return { type, message }
}
const busy: SemaphoreResult<LockInfo> = { ok: false, error: { type: 'ALREADY_LOCKED', message: 'Lock already held', holderPid: 1, lockedSince: 2 } }
const failed: SemaphoreResult<void> = { ok: false, error: { type: 'IO_ERROR', message: 'disk', cause: new Error('EIO') } }
const done: SemaphoreResult<void> = { ok: true, value: undefined }

export async function portResolver(path: string): Promise<void> {
  const semaphore = new Semaphore(path)
  const result = await semaphore.acquire({ timeout: 5000, tag: 'portres' })
  if (!result.ok) throw new Error(`Failed to acquire lock: ${result.error.message}`)
  try {
    const r: SemaphoreResult<LockInfo> = semaphore.tryAcquire('again')
    if (!r.ok) console.log(describe(r.error), r.error.holderPid)
    const parsed: SemaphoreResult<LockInfo> = parseLockInfo('pid=1\ntimestamp=2\n')
    const results: Array<SemaphoreResult<unknown>> = [r, parsed, busy, failed, done]
    console.log(results.map((x) => (x.ok ? 'ok' : describe(x.error))), failure('TIMEOUT', 'late'))
  } finally {
    const released: SemaphoreResult<void> = semaphore.release()
    if (!released.ok && released.error.type === 'PERMISSION_DENIED') console.log(released.error.holderPid)
  }
}
