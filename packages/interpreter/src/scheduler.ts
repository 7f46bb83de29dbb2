/**
 * Batches: rows go to warm workers in chunks sized to take about `chunkMs`,
 * on every worker the pool allows. A chunk whose worker times out, dies,
 * writes a malformed frame or too much output is re-run one row per request
 * (hang isolation; a huge vectorized chunk first as pieces of MAX_CHUNK rows):
 * only the row that really hangs gets Timeout, every
 * other row still gets exactly what `eval` would give it.
 *
 * A batch runs at most `lanes` requests at once. Its first lane starts at
 * once, the others only once its time per row is known (the first results
 * of a chunk large enough, or an earlier batch's figure): a cold batch waits
 * for one interpreter start, not for several competing for the CPU. It tells
 * the pool the work it has not handed out yet (`trackBacklog`), and opens a
 * further lane only when the pool would serve it at once (`wouldServe`: a
 * start that work pays for, see pool.ts) — looked at again after every
 * chunk — so its lanes never queue for the function's own busy worker.
 *
 * A lane that knows its time per row sends its next chunk behind the one
 * running on its worker (when `mayQueue` allows: see dispatch.ts), so the
 * worker starts it the moment it has answered instead of waiting for the host
 * to read that answer and encode the next chunk. Two at most per lane; not
 * for vectorized functions (few, large chunks) nor while failed rows are
 * re-run. If the chunk ahead fails, the one behind never ran (`behind`): it
 * is sent again whole, never counted against its rows.
 *
 * The scheduler knows rows only by index (a `RowSource`) and reaches workers
 * only through its context (`request`, `endLease`), so it is tested with fakes.
 */
import { type BatchOptions, type ExternalFn, ExtFnError } from '@improv/extfn-core';
import type { Lease, WorkerRequest } from './dispatch.js';
import { WorkerFailure } from './failures.js';
import { type Frame, requestMs } from './frames.js';
import type { RowSource } from './row-sources.js';

/** Largest chunk in rows, whatever the timing says (a batch's last one may take up to a quarter more: see take). */
const MAX_CHUNK = 32_768;
/**
 * A vectorized function pays a fixed cost per chunk (a frame, a copy into
 * numpy, one body call) and almost nothing per row, so its chunks may be far
 * larger and are sized to take at least VECTORIZED_CHUNK_MS.
 */
export const MAX_VECTORIZED_CHUNK = 4_194_304;
const VECTORIZED_CHUNK_MS = 200;
/**
 * A vectorized chunk's share of the last rows is not cut below this many
 * milliseconds of work (rather than a quarter of a chunk, which for a 200 ms
 * chunk would keep a 40 ms batch on one lane while a warm worker idles).
 */
const VECTORIZED_SHARE_FLOOR_MS = 2;
/**
 * A failed chunk larger than this is re-run as chunks of this size first, and
 * only the pieces that fail again row by row: isolating one hanging row of a
 * million-row vectorized chunk then costs one more chunk deadline, not a
 * million requests.
 */
const ISOLATION_PIECE = MAX_CHUNK;
/**
 * A chunk is sized to take milliseconds, so it gets a deadline of its own:
 * this many times its expected time, at least CHUNK_DEADLINE_FLOOR_MS, at
 * most the per-row deadline. Past it the chunk's rows are re-run one by one
 * with the full per-row deadline, so a hanging row costs about one deadline,
 * not two, and no row gets less time than `timeoutMs`.
 */
const CHUNK_DEADLINE_FACTOR = 50;
const CHUNK_DEADLINE_FLOOR_MS = 1_000;
/**
 * A batch's other lanes start once its time per row is known well enough to
 * judge whether more workers pay: from RAMP_ROWS rows or RAMP_MS of requests
 * past the first chunk (a fresh worker's first request, mostly round trip),
 * taking the cheapest chunk per row — small chunks are mostly round trip and
 * a loaded host only makes chunks slower, so the cheapest is nearest the
 * true cost. The chunk size keeps its own estimate (`perRowMs`).
 */
const RAMP_ROWS = 256;
const RAMP_MS = 50;
/**
 * A chunk held up (another process on the CPU; the host's own garbage
 * collection too, for a driver that does not give `workMs`) takes many times
 * its rows' cost; counted in full it would shrink the next chunks to a few
 * hundred rows, each mostly round trip. So one chunk moves the time per row
 * up by at most this factor of the figure so far: a real slowdown still shows
 * within a few chunks.
 */
const STALL_FACTOR = 4;
/** Failures that one of the chunk's rows may have caused: retry the rows one by one. */
const ROW_FAILURES = new Set(['timeout', 'exited', 'malformed', 'output']);

/** What the scheduler needs from the runner. */
export interface SchedulerContext {
  /** Most requests in flight at once (the pool's bound). */
  readonly lanes: number;
  /** Target time per chunk in milliseconds. */
  readonly chunkMs: number;
  /**
   * Bytes of answers a batch may receive (frames' `wireBytes`); past it the
   * batch stops and the rows not answered fail with limit `output`. Without
   * it, no bound.
   */
  readonly maxBatchResultBytes?: number;
  /** Measured milliseconds per row by function key, so the next batch starts at the right chunk size. */
  readonly perRowMs: Map<string, number>;
  /** Runs one request on a worker for `fn` (see dispatch). */
  request(fn: ExternalFn, key: string, request: WorkerRequest): Promise<Frame>;
  /** Gives a lane's worker back when the lane ends. */
  endLease(lease: Lease): void;
  /**
   * Tells the pool, while the batch runs, how many milliseconds of work it
   * has not handed out yet: `estimateMs` to judge starts by (0 until the time
   * per row is measured well enough), `leftMs` to give turns by (undefined
   * until measured); see Pool.trackBacklog. Returns the function that ends it.
   */
  trackBacklog?(
    key: string,
    estimateMs: () => number,
    leftMs?: () => number | undefined,
  ): () => void;
  /**
   * Whether a request for `key` would get a worker at once (see Pool.wouldServe);
   * with `idleOnly`, an idle worker of its own (no start). Without it, every lane opens.
   */
  wouldServe?(key: string, idleOnly?: boolean): boolean;
  /**
   * Whether a worker start now forks from a zygote (a few milliseconds of
   * CPU, not an interpreter's boot). Without it, never.
   */
  startsFork?(): boolean;
  /** A failure as the ExtFnError of `fn`. */
  toError(fn: ExternalFn, error: unknown, timeoutMs: number): ExtFnError;
  /**
   * Whether a lane may send its next request behind the one now running on
   * its leased worker (see dispatch's `mayQueue`). Without it, never.
   */
  mayQueue?(key: string, lease: Lease): boolean;
}

/** Runs every row of `source` on warm workers for `fn`; each row ends with a result or its error. */
export async function schedule(
  ctx: SchedulerContext,
  fn: ExternalFn,
  key: string,
  source: RowSource,
  options: BatchOptions,
): Promise<void> {
  const n = source.count;
  const settled = new Uint8Array(n);
  const lanes = Math.max(1, Math.min(ctx.lanes, n));
  const maxChunk = fn.vectorized === true ? MAX_VECTORIZED_CHUNK : MAX_CHUNK;
  const chunkMs = fn.vectorized === true ? Math.max(ctx.chunkMs, VECTORIZED_CHUNK_MS) : ctx.chunkMs;
  /** Ranges to re-run after a failed chunk (hang isolation): pieces, then single rows. */
  let retries: [start: number, count: number][] = [];
  let next = 0;
  // What the last batch of this function learnt: start at its chunk size instead of ramping from 1.
  let perRowMs: number | undefined = ctx.perRowMs.get(key);
  const reliable = perRowMs !== undefined;
  /**
   * Whether `perRowMs` is good enough to judge more workers by: the other lanes start then.
   * A vectorized function's earlier figure is: its batch is a few large chunks, and
   * waiting for the first one before opening the other lanes would run it alone. So is
   * any function's when a start forks from a zygote: a fork takes the first chunk's
   * worker little CPU, where an interpreter's boot would slow it (then the other lanes
   * wait for its results).
   */
  let rampedUp = reliable && (fn.vectorized === true || ctx.startsFork?.() === true);
  let chunksDone = 0;
  let sampledRows = 0;
  let sampledMs = 0;
  /** The cheapest chunk past the first, per row: what the work left is judged by. */
  let cheapestPerRowMs = Number.POSITIVE_INFINITY;
  /** The least work per row of a chunk past the first (see `leftMs`). */
  let leastWorkPerRowMs = Number.POSITIVE_INFINITY;
  /** Whether a chunk past the first took half a chunk's target time of work: its rows, more than its fixed cost. */
  let sizedChunk = false;
  let size = perRowMs === undefined ? 1 : maxChunk;
  /** Rows behind `perRowMs` in this batch, halved at each sample so recent chunks count most. */
  let weight = 0;
  let done = 0;
  /** Rows in requests now. */
  let inFlight = 0;
  /** Bytes of answers received so far (see `maxBatchResultBytes`). */
  let received = 0;
  let stopped: ExtFnError | undefined;

  const hasWork = () => stopped === undefined && (retries.length > 0 || next < n);
  /**
   * Work not handed out yet, in ms: 0 until the time per row is known (one
   * lane until then); unbounded while failed rows wait to be re-run, since
   * each may hang for its whole deadline (hang isolation wants every lane).
   */
  const backlogMs = () => {
    if (stopped !== undefined) return 0;
    if (retries.length > 0) return Number.POSITIVE_INFINITY;
    if (!rampedUp) return 0;
    const cost = Number.isFinite(cheapestPerRowMs) ? cheapestPerRowMs : (perRowMs ?? 0);
    return (n - next) * cost;
  };

  /**
   * Work not handed out yet, in ms, for turns between functions (see
   * Pool.shouldYield): rows left × the least work per row of a chunk so far
   * (the worker's own time when it gives it), once a chunk has taken at
   * least half a chunk's target time, or by an earlier batch's figure.
   * Undefined (not measured yet) before: a fresh worker's first chunks are
   * mostly fixed cost, and a figure from them came out up to fifteen times
   * too high. The least, since CPU taken by other processes only ever makes
   * a chunk slower. Unbounded while failed rows wait to be re-run (each may
   * hang for its whole deadline).
   */
  const leftMs = () => {
    if (stopped !== undefined) return 0;
    if (retries.length > 0) return Number.POSITIVE_INFINITY;
    const cost = sizedChunk ? leastWorkPerRowMs : reliable ? perRowMs : undefined;
    return cost === undefined ? undefined : (n - next) * cost;
  };

  /** The next range: a piece or row to retry, or a fresh chunk. */
  const take = (): [start: number, count: number] => {
    if (retries.length > 0) return retries.shift()!;
    if (perRowMs !== undefined) {
      const target = Math.max(1, Math.round(chunkMs / Math.max(perRowMs, 1e-6)));
      size = Math.min(target, size * 8, maxChunk);
    }
    // Share the last rows among the lanes, but not below a quarter of a chunk:
    // halving again and again would end the batch with a tail of tiny round trips.
    // Rows other lanes are running count as theirs: a lane that opens while the
    // first runs half of a vectorized batch takes the other half, not a quarter.
    const floor =
      fn.vectorized === true && perRowMs !== undefined
        ? Math.ceil(VECTORIZED_SHARE_FLOOR_MS / Math.max(perRowMs, 1e-6))
        : Math.ceil(size / 4);
    const fair = Math.max(Math.ceil((n - next + inFlight) / lanes), Math.min(floor, size));
    let count = Math.min(Math.max(1, Math.min(size, fair)), n - next);
    // A lane that runs alone, with no other lane able to open (no idle worker, no
    // start that pays: each of several functions sharing the slots has one), takes
    // full chunks to the end, and rows left under a quarter of a chunk with the one
    // before them: halving the last rows for lanes that never come, or a request of
    // their own, would only add round trips, which the worker idles through when the
    // lane may not queue them behind (a turn due to another function). A vectorized
    // batch's lane looks only once nothing is in flight, and keeps its chunk size.
    const full = Math.min(size, n - next);
    const tail = fn.vectorized !== true && full < n - next && n - next - full < Math.ceil(size / 4);
    const alone = () =>
      (fn.vectorized !== true || inFlight === 0) &&
      running.size <= 1 &&
      !(ctx.wouldServe?.(key) ?? true);
    if ((count < full || tail) && alone()) count = tail ? n - next : full;
    // Near the result budget, no chunk larger than what is left of it at the bytes per row so far.
    if (ctx.maxBatchResultBytes !== undefined && done > 0) {
      const fits = Math.floor((ctx.maxBatchResultBytes - received) / (received / done));
      count = Math.max(1, Math.min(count, fits));
    }
    const start = next;
    next += count;
    return [start, count];
  };

  const send = async (
    start: number,
    count: number,
    lease: Lease,
    behind: boolean,
  ): Promise<void> => {
    const timeoutMs =
      count > 1 && perRowMs !== undefined
        ? Math.min(
            options.timeoutMs,
            Math.max(CHUNK_DEADLINE_FLOOR_MS, CHUNK_DEADLINE_FACTOR * perRowMs * count),
          )
        : options.timeoutMs;
    const frame = await ctx.request(fn, key, {
      ...source.encode(start, count),
      rows: count,
      timeoutMs,
      signal: options.signal,
      lease,
      // Decoded before the worker is kept: a response of the wrong shape fails it as malformed.
      decode: (response) => source.decode(response, start, count),
      payloadInto: source.payloadInto?.(start, count),
      ...(behind ? { behind } : {}),
    });
    received += frame.wireBytes ?? 0;
    const budget = ctx.maxBatchResultBytes;
    if (budget !== undefined && received > budget) {
      stopped ??= ExtFnError.runtime(
        fn.name,
        `the batch's results passed ${mib(budget)}, what one batch may bring into the host, so this row was not evaluated: ` +
          'return smaller results, refresh fewer rows at once, or raise the runner option maxBatchResultBytes',
        { limit: 'output' },
      );
    }
    // Request time only (not waiting for or starting a worker).
    const elapsed = frame.elapsedMs ?? 0;
    // What a chunk's size controls: the worker's own time on it, when its driver
    // says (`workMs`). The request's time also holds the host's delay in getting
    // to the answer: sized by it, chunks shrank whenever the host was busy (other
    // functions' chunks, starts), and more, smaller chunks kept it busier.
    const work = frame.workMs ?? elapsed;
    // Weighted by rows, so a few tiny chunks (whose time is mostly the round
    // trip) do not make the next batch start with tiny chunks.
    // A chunk counts as at most STALL_FACTOR times the figure so far (see there).
    perRowMs =
      perRowMs === undefined || weight === 0
        ? work / count
        : (perRowMs * weight + Math.min(work, STALL_FACTOR * perRowMs * count)) / (weight + count);
    // A cold batch's first chunk is mostly its fresh worker's first request (the body
    // compiled, pages faulted in): the next chunk's figure replaces it rather than
    // averaging with it, so chunks do not stay at one row for a dozen round trips.
    weight = chunksDone === 0 && !reliable ? 0 : 0.5 * weight + count;
    settled.fill(1, start, start + count);
    if (chunksDone++ > 0 || reliable) {
      sampledRows += count;
      // How long the work left takes, and whether the batch has run long enough to
      // judge more workers by: what the host saw, its own share included, but no
      // less than the worker's own time (else a queued chunk read late would make
      // the cheapest a fraction of the cost).
      const seen = requestMs(frame);
      sampledMs += seen;
      cheapestPerRowMs = Math.min(cheapestPerRowMs, seen / count);
      leastWorkPerRowMs = Math.min(leastWorkPerRowMs, work / count);
      sizedChunk ||= work >= chunkMs / 2;
    }
    rampedUp ||= reliable || sampledRows >= RAMP_ROWS || sampledMs >= RAMP_MS;
    if (rampedUp) grow(); // looked at after every chunk: a slot may have come free
  };

  const lane = async () => {
    const lease: Lease = {};
    try {
      await laneLoop(lease);
    } finally {
      ctx.endLease(lease);
    }
  };
  /** Whether this batch queues chunks at all now (the lane's worker aside). */
  const queues = () =>
    ctx.mayQueue !== undefined &&
    fn.vectorized !== true &&
    perRowMs !== undefined &&
    retries.length === 0 &&
    hasWork();
  /** Whether a lane's next chunk may go behind the one it has just sent (see the header). */
  const mayQueue = (lease: Lease) => queues() && ctx.mayQueue!(key, lease);
  /** Keeps a chunk running on the lane's worker and, when allowed, the next queued behind it. */
  const laneLoop = async (lease: Lease) => {
    let ahead: Promise<boolean> | undefined;
    for (;;) {
      // A chunk that must wait for a worker (a lane's first) can have the next one
      // behind it once it is written to the one it gets (`onSent`). Looked at at
      // once, the lane has no worker yet, and its worker would idle for a round
      // trip after that chunk.
      const sent =
        ahead === undefined && lease.worker === undefined && queues()
          ? new Promise<void>((resolve) => {
              lease.onSent = resolve;
            })
          : undefined;
      const current = ahead ?? (hasWork() ? runChunk(lease, false) : undefined);
      ahead = undefined;
      if (!current) return;
      if (sent) {
        await Promise.race([sent, current]);
        lease.onSent = undefined;
      }
      if (mayQueue(lease)) ahead = runChunk(lease, true);
      if (!(await current)) {
        await ahead; // settles as it may: its rows keep a result, or the batch's failure
        return;
      }
    }
  };
  /** Takes the next range and runs it; false when the batch stops (aborted, no worker at all). */
  const runChunk = async (lease: Lease, behind: boolean): Promise<boolean> => {
    const [start, count] = take();
    inFlight += count;
    try {
      await send(start, count, lease, behind);
    } catch (error) {
      if (
        options.signal?.aborted ||
        (error instanceof WorkerFailure && error.reason === 'aborted')
      ) {
        stopped ??= ExtFnError.aborted(fn.name, options.signal?.reason);
        return false;
      }
      if (error instanceof WorkerFailure && error.reason === 'behind') {
        // never ran: sent again as it is (before the rows of the failed chunk ahead)
        retries.unshift([start, count]);
        return true;
      }
      const rowFailure = error instanceof WorkerFailure && ROW_FAILURES.has(error.reason);
      if (count > 1 && rowFailure) {
        // hang isolation: one row per request (pieces first for a huge chunk), on fresh workers
        const piece = count > ISOLATION_PIECE ? ISOLATION_PIECE : 1;
        const ranges: [number, number][] = [];
        for (let k = 0; k < count; k += piece) {
          ranges.push([start + k, Math.min(piece, count - k)]);
        }
        retries = ranges.concat(retries);
        spawnLanes();
        return true;
      }
      const failure = ctx.toError(fn, error, options.timeoutMs);
      if (count === 1 && rowFailure) {
        source.fail(start, failure); // this row's own failure
        settled[start] = 1;
      } else {
        stopped ??= failure; // cannot start workers at all: every remaining row gets it
        return false;
      }
    } finally {
      inFlight -= count;
    }
    done += count;
    options.onProgress?.(done, n);
    return true;
  };

  const running = new Set<Promise<void>>();
  function spawnLanes(most = lanes) {
    while (running.size < most && hasWork()) {
      const p: Promise<void> = lane().finally(() => running.delete(p));
      running.add(p);
    }
  }
  /** Opens lanes, one at a time, while the pool would serve each at once. */
  function grow() {
    while (running.size < lanes && hasWork() && (ctx.wouldServe?.(key) ?? true)) {
      spawnLanes(running.size + 1);
    }
  }
  const untrack = ctx.trackBacklog?.(key, backlogMs, leftMs);
  try {
    // One lane until the time per row is known (then `grow`, see send): one interpreter
    // start before the first rows come back, and each function started together gets
    // a worker before any gets two.
    spawnLanes(1);
    if (rampedUp) grow();
    // A warm batch (an earlier figure) also takes its function's idle workers at once:
    // its first chunk, a tenth of a 10⁵-row batch, would otherwise run alone. Workers
    // to start still wait for the first results (see send).
    else if (reliable) {
      while (running.size < lanes && hasWork() && (ctx.wouldServe?.(key, true) ?? true)) {
        spawnLanes(running.size + 1);
      }
    }
    while (running.size > 0) await Promise.all([...running]);
  } finally {
    untrack?.();
  }

  if (done < n) {
    const failure = stopped ?? ExtFnError.runtime(fn.name, 'row was not evaluated');
    for (let i = settled.indexOf(0); i >= 0 && i < n; i = settled.indexOf(0, i + 1)) {
      source.fail(i, failure);
    }
  }
  if (perRowMs !== undefined) {
    ctx.perRowMs.delete(key);
    ctx.perRowMs.set(key, perRowMs); // most recent last; the oldest goes past a bound
    if (ctx.perRowMs.size > 1024) ctx.perRowMs.delete(ctx.perRowMs.keys().next().value!);
  }
  if (done < n) options.onProgress?.(n, n); // the rest were settled at once (aborted, closed)
}

/** Bytes as MiB for a message ("1024 MiB"), or bytes when under one. */
function mib(bytes: number): string {
  return bytes >= 2 ** 20 ? `${Math.floor(bytes / 2 ** 20)} MiB` : `${bytes} bytes`;
}
