export * from './value.js';
export * from './errors.js';
export * from './json.js';
export * from './descriptor.js';
export * from './runner.js';
export * from './cache.js';
export {
  Registry,
  evaluate,
  evaluate as eval,
  checkArguments,
  checkResult,
  DEFAULT_TIMEOUT_MS,
  type RegistryOptions,
  type EvalOptions,
  type EvalBatchOptions,
  type StandaloneEvalOptions,
} from './registry.js';
export { errorValue } from './error-value.js';
