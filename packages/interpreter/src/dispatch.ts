/**
 * One request on a warm worker, for single calls and the batch scheduler
 * alike: take a worker (or keep a lane's), send, decode while it is held,
 * check the tree is clean, give it back or retire it; and the mapping of
 * every worker failure to the function's ExtFnError. A batch lane may send
 * its next chunk behind the one running on its worker (`behind`,
 * `mayQueue`): the worker then never waits for the host between chunks.
 */
import { type ExternalFn, ExtFnError } from '@improv/extfn-core';
import { LoadFailure, WorkerFailure } from './failures.js';
import { type Frame, type Payload, requestMs } from './frames.js';
import { loadErrorToExtFnError, OUTPUT_FIX, ResponseShapeError } from './from-driver.js';
import type { Pool, PooledWorker } from './pool.js';
import { responseForm, responseLimits } from './response-limits.js';
import { CHECK_WINDOW_MS, type RequestOptions } from './warm-worker.js';

/** What dispatch needs of a worker (a WarmWorker; tests use fakes). */
export interface DispatchWorker extends PooledWorker {
  /** Requests served so far (`load` excluded). */
  readonly requests: number;
  /** Wall time spent in requests. */
  readonly busyMs: number;
  request(
    header: Record<string, unknown>,
    payload: Payload | undefined,
    options: RequestOptions,
  ): Promise<Frame>;
  /** What the last request left running in the tree, if anything. */
  leftWork(): string | undefined;
  /**
   * Milliseconds since its tree was last checked (`leftWork`); without it,
   * every request is checked.
   */
  sinceTreeCheckMs?(): number;
  /** Kills it at once, tree and all. */
  retire(why: string): Promise<void>;
  /** Whether it worked while idle (see WarmWorker.idleWork). */
  idleWork?(): string | undefined;
  /**
   * Whether it takes a second request queued behind the one it runs now
   * (see WarmWorker.takesQueued); a worker without it never gets one.
   */
  takesQueued?(): boolean;
}

/** One request for `dispatch`. */
export interface WorkerRequest {
  header: Record<string, unknown>;
  payload?: Payload | undefined;
  /** Rows in the request: sizes the response and output limits. */
  rows: number;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  /**
   * A batch lane keeps its worker between chunks while its batch has work
   * and the pool does not want it elsewhere (`Pool.shouldYield`), instead of
   * a pool round trip per chunk. The lane gives `lease.worker` back with
   * `endLease` when it ends.
   */
  lease?: Lease;
  /**
   * Reads the response while the worker is still held: a ResponseShapeError
   * (an answer that does not fit the request) kills the worker and rejects
   * with WorkerFailure `malformed`, so a batch retries the rows one by one.
   */
  decode?: (frame: Frame) => void;
  /** Where a response payload of exactly this size is read to (see FrameReader.payloadTarget). */
  payloadInto?: Uint8Array | undefined;
  /**
   * Sent behind the lane's request running on `lease.worker` (`mayQueue`
   * said so just before): only on that worker, never another. It fails as
   * WorkerFailure `behind` if that worker is gone or the request ahead fails.
   */
  behind?: boolean;
}

/** A batch lane's hold on a worker. */
export interface Lease {
  worker?: DispatchWorker | undefined;
  /** The lane's requests not finished yet (two while one is queued behind another). */
  requests?: number;
  /**
   * Called when a request of the lane has been written to its worker: a
   * lane whose chunk had to wait for a worker (its first) learns when it may
   * queue the next one behind (see scheduler.ts).
   */
  onSent?: (() => void) | undefined;
}

/** What `dispatch` needs from the runner. */
export interface DispatchContext {
  readonly pool: Pool<DispatchWorker>;
  /** The per-row output cap, in bytes. */
  readonly maxOutputBytes: number;
  /** Busy milliseconds after which a worker is retired (half its lifetime CPU budget). */
  readonly retireAfterBusyMs: number;
}

/** Bytes a request may write to stderr beyond rows × the per-row cap (tracebacks, warnings). */
const OUTPUT_MARGIN = 64 * 1024;

/**
 * One request on a warm worker for `fn`. A worker that fails is killed and
 * replaced; a worker that died while it had served earlier requests is
 * retried once on a fresh one (its state, not this request, may be at fault).
 * A worker whose tree is not clean after the request (threads or processes
 * the body left running) is retired — the answer itself stands.
 */
export async function dispatch(
  ctx: DispatchContext,
  fn: ExternalFn,
  key: string,
  request: WorkerRequest,
): Promise<Frame> {
  const { lease } = request;
  if (request.behind && !lease?.worker?.alive) {
    throw new WorkerFailure('behind', 'the worker of the request ahead of it is gone');
  }
  if (!lease) return attempts(ctx, fn, key, request);
  lease.requests = (lease.requests ?? 0) + 1;
  try {
    return await attempts(ctx, fn, key, request);
  } finally {
    lease.requests--;
  }
}

/** `dispatch`'s request, once more on a fresh worker when a used one died (see there). */
async function attempts(
  ctx: DispatchContext,
  fn: ExternalFn,
  key: string,
  request: WorkerRequest,
): Promise<Frame> {
  const { header, payload, rows, timeoutMs, signal, lease, decode, payloadInto } = request;
  const limits = responseLimits(fn.returnType, rows, ctx.maxOutputBytes, responseForm(header.op));
  const outputBytes = rows * ctx.maxOutputBytes + OUTPUT_MARGIN;
  for (let attempt = 0; ; attempt++) {
    let worker = lease?.worker;
    if (request.behind && attempt > 0) {
      throw new WorkerFailure('behind', 'the worker of the request ahead of it is gone');
    }
    if (!worker?.alive) {
      if (worker) ctx.pool.release(worker, false);
      // Waiting for a slot is bounded like the registry's own backstop, so a call
      // the caller gave up on does not run later for nothing.
      worker = await ctx.pool.acquire(key, fn, signal, timeoutMs + 2_000);
      const idleWork = worker.idleWork?.();
      if (idleWork !== undefined) {
        // it kept working since its last request: not to be trusted with this one
        void worker.retire(idleWork);
        ctx.pool.release(worker, false);
        attempt--;
        continue;
      }
      if (lease) lease.worker = worker;
    }
    const fresh = worker.requests === 0;
    let keep = false;
    /** The lane's other request still runs on this worker: it decides, at its end, what becomes of the worker. */
    let shared = false;
    try {
      const reply = worker.request(header, payload, {
        deadlineMs: timeoutMs,
        signal,
        limits,
        outputBytes,
        payloadInto,
      });
      lease?.onSent?.();
      const frame = await reply;
      ctx.pool.noteWork(key, requestMs(frame));
      try {
        decode?.(frame);
      } catch (error) {
        if (!(error instanceof ResponseShapeError)) throw error;
        // it answered out of protocol: not to be trusted with another request
        void worker.retire(error.message);
        throw new WorkerFailure('malformed', error.message);
      }
      shared = lease !== undefined && (lease.requests ?? 0) > 1 && lease.worker === worker;
      // No tree check while another request runs: its body's threads are not left work.
      // Nor for one read within the window (a lane's worker it keeps, or a single call's).
      const stays =
        shared ||
        (lease !== undefined
          ? staysHeld(ctx, key, worker)
          : worker.checkPending !== undefined && readLately(worker));
      const left = stays ? undefined : worker.leftWork();
      if (left !== undefined) void worker.retire(left);
      else keep = shared || worker.busyMs < ctx.retireAfterBusyMs;
      return frame;
    } catch (error) {
      if (attempt === 0 && !fresh && error instanceof WorkerFailure && error.reason === 'exited')
        continue;
      throw error;
    } finally {
      // A lane keeps its worker while its batch has work, unless the pool wants it elsewhere.
      const held = keep && lease !== undefined && (shared || !ctx.pool.shouldYield(key));
      if (!held) {
        // Given back once: by the lane's request that still holds it (a worker that
        // failed fails the request queued behind as well, and is the lease's no more).
        if (!lease) ctx.pool.release(worker, keep);
        else if (lease.worker === worker) {
          lease.worker = undefined;
          ctx.pool.release(worker, keep);
        }
      }
    }
  }
}

/**
 * Whether a batch lane may send its next request behind the one running on
 * its worker now: the worker takes it (`takesQueued`: it runs only that one), and
 * the worker would stay the lane's after it (not due for retiring, not wanted
 * elsewhere, tree checked within CHECK_WINDOW_MS — otherwise the lane waits, so
 * the check finds the worker idle).
 */
export function mayQueue(ctx: DispatchContext, key: string, lease: Lease): boolean {
  const worker = lease.worker;
  return (
    worker?.takesQueued?.() === true && (lease.requests ?? 0) === 1 && staysHeld(ctx, key, worker)
  );
}

/**
 * Whether a lane's worker stays the lane's without a tree check now: not due
 * for retiring, not wanted elsewhere, its tree checked within CHECK_WINDOW_MS.
 */
function staysHeld(ctx: DispatchContext, key: string, worker: DispatchWorker): boolean {
  return worker.busyMs < ctx.retireAfterBusyMs && !ctx.pool.shouldYield(key) && readLately(worker);
}

/**
 * Whether a worker's tree was read within CHECK_WINDOW_MS (warm-worker.ts;
 * one that cannot say: no). Its tree is read after a request only when not:
 * for a worker a batch lane keeps for its next chunk, and for single calls
 * one after another. Reading a tree
 * from /proc costs 20–30 µs of host CPU (a fifth of a warm call; as much as
 * encoding a few hundred rows of text), and chunks and calls come every few
 * ms or µs. A lane's worker is always read when the lane gives it back
 * (`endLease`); a single call's worker that goes back unread is read once
 * it has idled a millisecond (`checkPending`, the pool's next look) or
 * before its next request after that (`idleWork`). A thread or process a
 * body leaves is so found within the window, at the batch's end, or as soon
 * as the calls pause, and its worker retired then; it could act on the rows
 * of that window, as it could on the rest of its own chunk before.
 */
function readLately(worker: DispatchWorker): boolean {
  return (worker.sinceTreeCheckMs?.() ?? CHECK_WINDOW_MS) < CHECK_WINDOW_MS;
}

/** Gives a lane's worker back to the pool when the lane ends. */
export function endLease(pool: Pool<DispatchWorker>, lease: Lease): void {
  const worker = lease.worker;
  lease.worker = undefined;
  if (!worker) return;
  const left = worker.alive ? worker.leftWork() : undefined;
  if (left !== undefined) void worker.retire(left);
  pool.release(worker, worker.alive && left === undefined);
}

/** A worker failure, load failure or anything else as the ExtFnError of `fn`. */
export function toExtFnError(fn: ExternalFn, error: unknown, timeoutMs: number): ExtFnError {
  if (ExtFnError.isInstance(error)) return error.withFunctionName(fn.name);
  if (error instanceof LoadFailure) return loadErrorToExtFnError(fn, error.error);
  if (error instanceof WorkerFailure) {
    if (ExtFnError.isInstance(error.cause)) return error.cause.withFunctionName(fn.name);
    switch (error.reason) {
      case 'closed':
        return ExtFnError.runtime(fn.name, 'the runner is closed');
      case 'timeout':
        return ExtFnError.timeout(fn.name, timeoutMs);
      case 'aborted':
        return ExtFnError.aborted(fn.name, error.abortReason);
      case 'output':
        return ExtFnError.runtime(fn.name, 'output too large', {
          limit: 'output',
          fix: OUTPUT_FIX,
          ...(error.stderr ? { stderr: error.stderr } : {}),
        });
      default: {
        const limit = error.limit ? ` (${error.limit} limit)` : '';
        return ExtFnError.runtime(fn.name, `${error.message}${limit}`, {
          ...(error.stderr ? { stderr: error.stderr } : {}),
          ...(error.limit ? { limit: error.limit } : {}),
          cause: error,
        });
      }
    }
  }
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return ExtFnError.runtime(fn.name, `runner failed: ${message}`, { cause: error });
}
