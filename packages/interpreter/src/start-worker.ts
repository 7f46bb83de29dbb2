/**
 * Starts one warm worker for a function: the sandboxed interpreter, its
 * `ready` frame, then `load`. A worker that fails before it is ready is
 * reported as a start failure, so a batch fails once instead of row by row.
 */
import { DEFAULT_LIMITS, launchSandboxedAsync, type SandboxOptions } from '@improv/extfn-sandbox';
import { LoadFailure, WorkerFailure } from './failures.js';
import type { DriverError, FrameHeader } from './frames.js';
import { controlLimits } from './response-limits.js';
import { SharedFile, sharedDirectory } from './shared-file.js';
import { WarmWorker } from './warm-worker.js';

export interface StartWorkerOptions {
  key: string;
  sandbox: Omit<SandboxOptions, 'timeoutMs'>;
  driverSource: string;
  /** The `load` request for the function. */
  load: FrameHeader;
  startupMs: number;
  maxOutputBytes: number;
  signal: AbortSignal | undefined;
  /** Called once the process is spawned (the runner counts starts). */
  onSpawned(): void;
}

export async function startWorker(options: StartWorkerOptions): Promise<WarmWorker> {
  const { key, startupMs, signal } = options;
  // A file for binary payloads, whose result room stays within the worker's
  // RLIMIT_FSIZE; the driver's `ready` frame says whether it uses it (see shared-file.ts).
  const shared = SharedFile.create(
    sharedDirectory(),
    options.sandbox.limits?.fileSizeBytes ?? DEFAULT_LIMITS.fileSizeBytes,
  );
  let process: Awaited<ReturnType<typeof launchSandboxedAsync>>;
  try {
    process = await launchSandboxedAsync(
      shared ? { ...options.sandbox, sharedFile: shared.fd } : options.sandbox,
    );
  } catch (error) {
    shared?.close();
    throw error;
  }
  options.onSpawned();
  const worker = new WarmWorker(key, process, options.driverSource, shared);
  try {
    await worker.ready(startupMs, signal);
    const frame = await worker.request(options.load, undefined, {
      deadlineMs: startupMs,
      signal,
      limits: controlLimits(options.maxOutputBytes),
      outputBytes: options.maxOutputBytes,
    });
    if (frame.header.error !== undefined) throw new LoadFailure(frame.header.error as DriverError);
    if (frame.header.ok !== true) {
      throw new WorkerFailure(
        'malformed',
        `unexpected load response ${JSON.stringify(frame.header).slice(0, 200)}`,
      );
    }
    worker.requests = 0; // `load` does not count as history for the retry rule
    return worker;
  } catch (error) {
    await worker.kill();
    // A worker that dies before it is ready says nothing about any row: report it as a
    // start failure, so a batch fails once instead of retrying row by row.
    if (
      error instanceof WorkerFailure &&
      error.reason !== 'aborted' &&
      error.reason !== 'closed' &&
      error.reason !== 'startup'
    ) {
      const failure = new WorkerFailure(
        'startup',
        `${error.message} while starting`,
        error.stderr,
        error.limit,
      );
      failure.cause = error;
      throw failure;
    }
    throw error;
  }
}
