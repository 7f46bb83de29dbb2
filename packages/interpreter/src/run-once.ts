/**
 * Runs the driver once in a fresh sandboxed process: bootstrap, the given
 * requests, `exit`, and reads every answer. The probe (no body) and
 * one-shot calls (load + call) both go through here, with the same checks a
 * warm worker makes: exactly `ready`, then one answer per request in order,
 * up to a `load` answered with an error (after which a warm worker is killed).
 */
import type { ResourceLimit } from '@improv/extfn-core';
import { runSandboxed, type SandboxOptions } from '@improv/extfn-sandbox';
import {
  encodeFrame,
  type Frame,
  type FrameHeader,
  FrameReader,
  isReadyFrame,
  preview,
} from './frames.js';
import { driverPreamble } from './warm-worker.js';

export interface DriverRun {
  /** The driver's `ready` frame (its `version`, for the probe). */
  ready: FrameHeader;
  /** The answers to the requests, in order; fewer when the interpreter ended first. */
  responses: Frame[];
  /** The bounded tail of stderr. */
  stderr: string;
  /** How the process ended, for messages: "exited with code 0", "was killed by SIGKILL". */
  exit: string;
  /** The resource limit that explains the exit, if one does. */
  limit?: ResourceLimit;
}

/** The driver did not speak the protocol: no `ready`, a malformed frame, or an answer out of order. */
export class DriverRunError extends Error {
  constructor(
    message: string,
    readonly stderr: string,
  ) {
    super(message);
    this.name = 'DriverRunError';
  }
}

/**
 * Starts the driver under the sandbox, sends `requests` (ids 1…n) and
 * `exit`, and waits for the tree to end. Rejects with the sandbox's
 * ExtFnError (timeout, abort, output, sandbox) or a DriverRunError.
 */
export async function runDriverOnce(
  options: SandboxOptions,
  driverSource: string,
  requests: readonly FrameHeader[],
): Promise<DriverRun> {
  const result = await runSandboxed({
    ...options,
    trustedBoot: true, // the body comes on stdin, written once the tree is in its cgroup
    stdin: Buffer.concat([
      driverPreamble(driverSource),
      ...requests.map((header, k) => encodeFrame({ ...header, id: k + 1 })),
      encodeFrame({ op: 'exit' }),
    ]),
  });
  const exit = result.signal
    ? `was killed by ${result.signal}`
    : `exited with code ${result.exitCode}`;
  const frames: Frame[] = [];
  const reader = new FrameReader(Number.MAX_SAFE_INTEGER); // stdout is already capped by the sandbox
  reader.add(result.stdout);
  try {
    for (let frame = reader.next(); frame; frame = reader.next()) {
      frames.push(frame);
      // A failed load ends the run where it ends a warm worker (killed, never
      // sent the call): the driver had the requests behind it in its stdin
      // already, and what it answered them ("call before load", maybe without
      // an id) is not read, so the caller reports the load's own error.
      if (loadFailed(requests, frames.length - 2, frame)) break;
    }
  } catch (error) {
    throw new DriverRunError((error as Error).message, result.stderr);
  }
  const [ready, ...responses] = frames;
  if (!ready) {
    const last = result.stderr.trim().split('\n').pop();
    throw new DriverRunError(`the driver did not start: ${last || exit}`, result.stderr);
  }
  if (!isReadyFrame(ready.header)) {
    throw new DriverRunError(`the driver did not start: ${preview(ready.header)}`, result.stderr);
  }
  // A body writing to the protocol channel fails the call as it fails a warm worker.
  const unexpected = responses.find((f, k) => f.header.id !== k + 1 || k >= requests.length);
  if (unexpected) {
    throw new DriverRunError(
      `unexpected frame from the driver: ${preview(unexpected.header)}`,
      result.stderr,
    );
  }
  return {
    ready: ready.header,
    responses,
    stderr: result.stderr,
    exit,
    ...(result.limit ? { limit: result.limit } : {}),
  };
}

/** Whether `frame` is the error answer to request `k`, a `load` (frames[0] is `ready`: k = -1). */
function loadFailed(requests: readonly FrameHeader[], k: number, frame: Frame): boolean {
  return (
    requests[k]?.op === 'load' && frame.header.id === k + 1 && frame.header.error !== undefined
  );
}
