/**
 * The conformance kit: the suite every runner must pass, first-party or
 * third-party. It takes the caller's `test` function (vitest, node:test,
 * jest…) and asserts with node:assert, so it is tied to no test framework.
 *
 *   runnerConformanceSuite(test, () => python(), { bodies: { … }, verbatim: [ … ] });
 *
 * The topics can also run alone: valuesSuite, errorsSuite, batchesSuite,
 * columnsSuite, isolationSuite, lifecycleSuite, vectorizedSuite. And
 * `everyPath` / `pathProblems` (paths.ts) compare one body's rows across
 * every path, for a runner's own corpus of hostile bodies.
 */
import { type BatchesOptions, batchesSuite } from './batches.js';
import { type ColumnsOptions, columnsSuite } from './columns.js';
import { type ErrorsOptions, errorsSuite } from './errors.js';
import type { ConformanceBodies, CreateRunner, TestFunction } from './harness.js';
import { type IsolationOptions, isolationSuite } from './isolation.js';
import { type LifecycleOptions, lifecycleSuite } from './lifecycle.js';
import { type ValuesOptions, valuesSuite } from './values.js';
import { type VectorizedOptions, vectorizedSuite } from './vectorized.js';

export { type BatchesOptions, batchesSuite } from './batches.js';
export { type ColumnsOptions, columnsSuite } from './columns.js';
export { engineSerdeFixture } from './engine-fixture.js';
export { type ErrorsOptions, errorsSuite } from './errors.js';
export {
  type ConformanceBodies,
  type CreateRunner,
  rejection,
  type SuiteOptions,
  type TestFunction,
  type Unsupported,
  type VerbatimCase,
} from './harness.js';
export { type IsolationOptions, isolationSuite } from './isolation.js';
export { type LifecycleOptions, lifecycleSuite } from './lifecycle.js';
export {
  everyPath,
  PATH_ROWS,
  type PathCase,
  type PathExpectation,
  type PathOutcomes,
  pathProblems,
  rowOutcome,
} from './paths.js';
export {
  alive,
  closeAfterEach,
  type FnExtras,
  type FnTable,
  registryOf,
  waitFor,
} from './registries.js';
export { LONE_SURROGATES } from './samples.js';
export { type ValuesOptions, valuesSuite } from './values.js';
export { type VectorizedOptions, vectorizedSuite } from './vectorized.js';

/** Every topic's options together. */
export interface ConformanceOptions
  extends ValuesOptions,
    ErrorsOptions,
    BatchesOptions,
    ColumnsOptions,
    IsolationOptions,
    LifecycleOptions,
    VectorizedOptions {
  bodies: ConformanceBodies;
}

/**
 * Registers the whole kit for a runner. `createRunner` is called once per
 * test; each test closes what it made.
 */
export function runnerConformanceSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: ConformanceOptions,
): void {
  lifecycleSuite(test, createRunner, options);
  valuesSuite(test, createRunner, options);
  errorsSuite(test, createRunner, options);
  batchesSuite(test, createRunner, options);
  columnsSuite(test, createRunner, options);
  isolationSuite(test, createRunner, options);
  vectorizedSuite(test, createRunner, options);
}
