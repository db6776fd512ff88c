// sema-native typings for ES module importers: the same declarations as index.d.ts, plus the default export
// (the CommonJS module object) that `import sema from 'sema-native'` gives at run time.
export * from './index.js'
import * as sema from './index.js'
export default sema
