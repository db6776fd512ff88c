// Type test (ES module: a .mts file importing the package by name, so `import` resolution picks index.d.mts): the
// named exports and the default export narrow as in CommonJS (narrowing.cts holds the full set).
import sema, { acquire, withLock, type DflockdLock, type FileLock, type SemaphoreError } from 'sema-native'
import { exact } from './exact.js'

export async function esm(addr: string, e: SemaphoreError): Promise<number> {
  if (e.type === sema.ErrorCode.TIMEOUT) exact<typeof e.holderTag, string | undefined>(true)
  if (e.type === 'IO_ERROR') exact<typeof e.holderTag, undefined>(true)
  const r = await acquire(`dflockd://${addr}/k`)
  if (r.ok) exact<typeof r.value, DflockdLock>(true)
  const viaDefault = await sema.tryAcquire('/tmp/x.lock')
  if (viaDefault.ok) exact<typeof viaDefault.value, FileLock>(true)
  // @ts-expect-error a file lock has no lease clock
  if (viaDefault.ok) viaDefault.value.remaining()
  return withLock(`dflockd://${addr}/k`, (lock) => lock.remaining())
}
