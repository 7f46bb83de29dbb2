/**
 * @improv/extfn-wasm — WebAssembly functions for @improv/extfn: `wat:` or
 * `wasm:` bodies, run in process on worker threads, stoppable at a deadline.
 * Importing this module loads nothing heavy: worker threads are started,
 * and wabt is loaded (in a compile worker), on first use.
 */

export { BODY_PREFIXES } from './body.js';
export { ENTRY_POINT } from './compile.js';
export {
  type ColumnsOutcome,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_MAX_MEMORY_BYTES,
  DEFAULT_MAX_TABLE_ELEMENTS,
  DEFAULT_MODULE_BUDGET_BYTES,
  PACKAGE_NAME,
  type WasmRunner,
  type WasmRunnerOptions,
  type WasmRunnerStats,
  wasm,
} from './wasm-runner.js';
