/**
 * Starts one warm worker for a function: the sandboxed interpreter, its
 * `ready` frame, then `load`. A worker that fails before it is ready is
 * reported as a start failure, so a batch fails once instead of row by row.
 */
import { basename } from 'node:path';
import {
  DEFAULT_LIMITS,
  launchSandboxedAsync,
  type SandboxedTree,
  type SandboxOptions,
  type Zygote,
} from '@improv/extfn-sandbox';
import { LoadFailure, WorkerFailure } from './failures.js';
import { type DriverError, type FrameHeader, preview } from './frames.js';
import { controlLimits } from './response-limits.js';
import { SharedFile, sharedDirectory } from './shared-file.js';
import { WarmWorker } from './warm-worker.js';
import type { ZygoteStarts } from './zygote-starts.js';

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
  /**
   * Fork the worker from this zygote (its driver is loaded already); should
   * it fail before its ready frame, the worker starts as a tree after all.
   */
  zygote?: { zygote: Zygote; starts: ZygoteStarts } | undefined;
  /** A spare (spare-workers.ts): warmed up before its ready frame. */
  spare?: boolean;
}

/**
 * A spare's shared file, sized and filled ahead: a chunk of 32 768 rows of
 * two number columns and the one queued behind it fit (payload and result
 * room each), so its first requests grow the file no more.
 */
const SPARE_SHARED_BYTES = 2 << 20;

export async function startWorker(options: StartWorkerOptions): Promise<WarmWorker> {
  const { zygote } = options;
  if (!zygote) return startOn(options, undefined);
  const end = zygote.starts.beginStart();
  try {
    const fit = spareFit(options);
    const spare = zygote.starts.takeSpare(fit);
    if (spare) {
      spare.key = options.key;
      try {
        const worker = await loadOn(spare, options);
        options.onSpawned();
        zygote.starts.succeeded(zygote.zygote, true);
        return worker;
      } catch (error) {
        if (endsTheStart(error, options)) {
          options.onSpawned(); // it was a start, as a fork that met the same would be
          throw error;
        }
        // a spare that died while it waited: a fork instead, as if there had been none
      }
    }
    try {
      const worker = await startOn(options, zygote.zygote);
      zygote.starts.succeeded(zygote.zygote);
      zygote.starts.learnSpare({ fit, make: () => spareOn(options, zygote.zygote) });
      return worker;
    } catch (error) {
      if (endsTheStart(error, options)) throw error;
      zygote.starts.failed(zygote.zygote, error);
    }
  } finally {
    end();
  }
  return startOn(options, undefined);
}

/**
 * Whether a start from the zygote that failed with `error` fails for good:
 * what a tree would meet too (a body that does not load, an abort, the
 * runner closing). Anything else: a tree (or a fork, for a spare) instead.
 */
function endsTheStart(error: unknown, options: StartWorkerOptions): boolean {
  if (error instanceof LoadFailure || options.signal?.aborted) return true;
  return error instanceof WorkerFailure && error.reason === 'closed';
}

/** What a spare worker must share with a start to serve it: its limits and its shared file's room. */
function spareFit(options: StartWorkerOptions): string {
  return JSON.stringify([options.sandbox.limits ?? null, sharedDirectory() !== undefined]);
}

/** A spare worker of `zygote` like the one `options` started: ready, with no body loaded. */
async function spareOn(options: StartWorkerOptions, zygote: Zygote): Promise<WarmWorker> {
  const spare: StartWorkerOptions = {
    ...options,
    key: '',
    sandbox: { ...options.sandbox, functionName: 'a spare worker' },
    signal: undefined,
    onSpawned: () => {},
    spare: true,
  };
  return bootOn(spare, zygote);
}

/** Starts the process: a fork of `zygote`, else a tree. */
async function spawn(
  options: StartWorkerOptions,
  zygote: Zygote | undefined,
  shared: SharedFile | undefined,
): Promise<SandboxedTree> {
  const { sandbox } = options;
  if (!zygote) {
    // the driver boots; a body comes only in frames the host writes once the tree is in its cgroup
    const launch = launchSandboxedAsync({
      ...sandbox,
      trustedBoot: true,
      ...(shared ? { sharedFile: shared.fd } : {}),
    });
    return launchedWithin(launch, options.startupMs, options.signal);
  }
  return zygote.fork({
    functionName: sandbox.functionName ?? 'worker',
    limits: sandbox.limits,
    // the worker opens it by name in the zygote's directory (unlinked once it is ready)
    ...(shared?.path ? { shared: basename(shared.path) } : {}),
    startupMs: options.startupMs,
    ...(options.spare ? { warm: true } : {}),
  });
}

/**
 * The tree `launch` hands over within `ms`, else a start failure (or an
 * abort): a launch through a spawner stopped from outside, which the sandbox
 * gives up on after 3 s (then starting the tree itself), must not hold a
 * start with a shorter deadline, nor the batch waiting for it. A tree
 * handed over after that is killed.
 */
async function launchedWithin(
  launch: Promise<SandboxedTree>,
  ms: number,
  signal: AbortSignal | undefined,
): Promise<SandboxedTree> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const givenUp = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(
        new WorkerFailure(
          'startup',
          `the interpreter did not start within ${ms} ms (its sandbox was not launched)`,
          undefined,
          'wall-clock',
        ),
      );
    }, ms);
    onAbort = () =>
      reject(new WorkerFailure('aborted', 'aborted', undefined, undefined, signal?.reason));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([launch, givenUp]);
  } catch (error) {
    launch.then(
      (tree) => tree.kill(),
      () => {},
    ); // late: nobody takes it
    throw error;
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}

async function startOn(options: StartWorkerOptions, zygote: Zygote | undefined) {
  return loadOn(await bootOn(options, zygote), options);
}

/** The process started and its ready frame read: a worker with no body loaded yet. */
async function bootOn(
  options: StartWorkerOptions,
  zygote: Zygote | undefined,
): Promise<WarmWorker> {
  const { key, startupMs, signal } = options;
  // A file for binary payloads, whose result room stays within the worker's
  // RLIMIT_FSIZE; the driver's `ready` frame says whether it uses it (see shared-file.ts).
  // A zygote's worker opens it in the zygote's directory, so it keeps its name until then.
  // (IMPROV_EXTFN_SHM_DIR='' turns shared files off for both)
  const directory = sharedDirectory();
  const shared = SharedFile.create(
    zygote && directory !== undefined ? zygote.dir : directory,
    options.sandbox.limits?.fileSizeBytes ?? DEFAULT_LIMITS.fileSizeBytes,
    undefined,
    zygote ? { keepName: true, owner: zygote.uid } : undefined,
  );
  // a spare maps and touches its shared file while the host is idle (drivers/zygote.py, _warm_up)
  if (options.spare) shared?.prefill(SPARE_SHARED_BYTES);
  let process: SandboxedTree;
  try {
    process = await spawn(options, zygote, shared);
  } catch (error) {
    shared?.close();
    throw error;
  }
  options.onSpawned();
  // a zygote's worker has the driver loaded: nothing to send before the requests
  const worker = new WarmWorker(key, process, zygote ? undefined : options.driverSource, shared);
  try {
    try {
      await worker.ready(startupMs, signal);
    } finally {
      shared?.unlink();
    }
  } catch (error) {
    throw await startFailure(worker, error);
  }
  return worker;
}

/** The function's body loaded into a ready worker. */
async function loadOn(worker: WarmWorker, options: StartWorkerOptions): Promise<WarmWorker> {
  const { startupMs, signal } = options;
  try {
    const frame = await worker.request(options.load, undefined, {
      deadlineMs: startupMs,
      signal,
      limits: controlLimits(options.maxOutputBytes),
      outputBytes: options.maxOutputBytes,
    });
    if (frame.header.error !== undefined) throw new LoadFailure(frame.header.error as DriverError);
    if (frame.header.ok !== true) {
      throw new WorkerFailure('malformed', `unexpected load response ${preview(frame.header)}`);
    }
    worker.requests = 0; // `load` does not count as history for the retry rule
    return worker;
  } catch (error) {
    throw await startFailure(worker, error);
  }
}

/**
 * `worker` killed, and what its start throws: a worker that dies before it is
 * ready says nothing about any row, so it is reported as a start failure and a
 * batch fails once instead of retrying row by row.
 */
async function startFailure(worker: WarmWorker, error: unknown): Promise<unknown> {
  await worker.kill();
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
    return failure;
  }
  return error;
}
