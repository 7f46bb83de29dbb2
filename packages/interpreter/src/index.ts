/**
 * @improv/extfn-interpreter: the machinery every subprocess runner shares —
 * the driver protocol (docs/protocol.md), sandboxed warm workers, the
 * bounded pool, one-shot calls and batches with hang isolation.
 *
 * A language package supplies an `InterpreterSpec` (how to find and start
 * its interpreter, and its driver program) and gets a full `LanguageRunner`:
 *
 * ```ts
 * export function r(options: ROptions = {}): InterpreterRunner {
 *   return createInterpreterRunner({
 *     language: 'r', packageName: '@improv/extfn-r',
 *     resolveInterpreter: () => resolveExecutable({ explicit: options.interpreter, envVar: 'IMPROV_EXTFN_R', names: ['Rscript'] }),
 *     args: ['--vanilla', '-e', BOOTSTRAP], driverSource: DRIVER,
 *   }, options);
 * }
 * ```
 */

export {
  type DriverError,
  encodeFrame,
  type Frame,
  type FrameHeader,
  FrameReader,
  PROTOCOL_VERSION,
  RawJson,
} from './frames.js';
export { functionKey } from './key.js';
export {
  type AllowedLibraries,
  assertSandboxCanRead,
  type Library,
  type LibraryOption,
  librariesDigest,
  libraryOptionError,
  readableDirectories,
} from './libraries.js';
export { type ResolveExecutableOptions, resolveExecutable } from './resolve.js';
export { createInterpreterRunner } from './runner.js';
export { forgetTimings } from './timings.js';
export type {
  InterpreterDefaults,
  InterpreterRunner,
  InterpreterRunnerOptions,
  InterpreterSpec,
  InterpreterStats,
  ResolvedInterpreter,
} from './types.js';
export { type LibraryChoice, withAllowedLibraries } from './with-libraries.js';
export { closeIdleZygotes } from './zygote-starts.js';
