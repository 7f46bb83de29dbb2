/**
 * @improv/extfn-core: values, descriptors, wire JSON, ExtFnError, the
 * LanguageRunner spec and the Registry that validates, caches and dispatches
 * calls to runners. The conformance kit is `@improv/extfn-core/testing`.
 */
export { batchByCalls } from './batch-by-calls.js';
export * from './cache.js';
export * from './descriptor.js';
export { errorValue } from './error-value.js';
export * from './errors.js';
export * from './json.js';
export * from './language-runner.js';
export {
  listedNames,
  MAX_ARGUMENTS,
  MAX_BODY_LENGTH,
  MAX_LANGUAGE_LENGTH,
  MAX_NAME_LENGTH,
  shownName,
} from './limits.js';
export {
  checkArguments,
  checkColumnArguments,
  DEFAULT_TIMEOUT_MS,
  type EvalBatchOptions,
  type EvalColumnsOptions,
  type EvalOptions,
  evaluate,
  evaluate as eval,
  isAllNumbers,
  MAX_TIMEOUT_MS,
  Registry,
  type RegistryOptions,
  type RegistryWarmUpOptions,
  type StandaloneEvalOptions,
  type WarmUpResult,
} from './registry.js';
export {
  type Column,
  type ColumnOf,
  cellsHold,
  checkTypedColumns,
  newColumn,
  readCell,
  unrepresentable,
  writeCell,
} from './typed-columns.js';
export * from './value.js';
