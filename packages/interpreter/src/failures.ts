/**
 * Why a worker could not answer, as values the pool, the dispatcher and the
 * scheduler can tell apart without string matching; `dispatch.ts` turns them
 * into the function's ExtFnError.
 */
import type { ResourceLimit } from '@improv/extfn-core';
import type { DriverError } from './frames.js';

/**
 * `closed`: the runner was closed (or the worker stopped) while the request ran;
 * `startup`: the interpreter or the sandbox could not start;
 * `behind`: the request was queued behind one that failed, and never ran
 * (not its rows' fault: a batch sends them again).
 */
export type FailureReason =
  | 'timeout'
  | 'exited'
  | 'malformed'
  | 'output'
  | 'aborted'
  | 'startup'
  | 'closed'
  | 'behind';

/** Why a worker could not answer. */
export class WorkerFailure extends Error {
  constructor(
    readonly reason: FailureReason,
    message: string,
    readonly stderr?: string,
    readonly limit?: ResourceLimit,
    readonly abortReason?: unknown,
  ) {
    super(message);
    this.name = 'WorkerFailure';
  }
}

/** `load` failed in the driver (a syntax error): deterministic, so the runner remembers it. */
export class LoadFailure extends Error {
  constructor(readonly error: DriverError) {
    super(`${error.type}: ${error.message}`);
    this.name = 'LoadFailure';
  }
}
