/**
 * The streaming core of `run`: rows are read, evaluated in batches through
 * `Registry.evalBatch` and written as each batch finishes, in input order,
 * also while the input is stalled.
 * At most two batches are in flight and the reader waits for them, so memory
 * depends on the batch size, never on the table's length. The first batch is
 * small so the first rows come out at once; later ones grow.
 */
import {
  type ExternalFn,
  ExtFnError,
  type Registry,
  type RowResult,
  type Value,
} from '@improv/extfn-core';
import type { RowSink } from './output.js';
import type { RowWriter } from './row-writer.js';
import type { Tally } from './run-summary.js';
import { MALFORMED, type RowOutcome, type TableRow } from './table.js';

/** Rows read from one piece of the input, and how many bytes had been read by then. */
export interface RowPiece {
  readonly rows: readonly TableRow[];
  readonly bytes: number;
}

const FIRST_BATCH = 64;
const LARGEST_BATCH = 8192;
const IN_FLIGHT = 2;

/** Kinds that say this machine cannot run the function at all: every other row would fail the same way. */
export const HOST_KINDS: ReadonlySet<string> = new Set(['Sandbox', 'LanguageUnavailable']);

/** The run stopped at its first row that failed for a reason of the host's, not the row's. */
export class HostFailure extends Error {
  readonly error: ExtFnError;
  readonly line: number;
  constructor(error: ExtFnError, line: number) {
    super(error.message);
    this.name = 'HostFailure';
    this.error = error;
    this.line = line;
  }
}

interface Batch {
  readonly rows: TableRow[];
  readonly bytesBefore: number;
  readonly bytes: number;
  done: number;
  result?: Promise<{ results: RowResult[] } | { error: unknown }>;
}

export interface PipelineOptions {
  readonly registry: Registry;
  readonly fn: ExternalFn;
  readonly sink: RowSink;
  readonly writer: RowWriter;
  readonly tally: Tally;
  /** Aborted on Ctrl-C, SIGTERM, or when the reader of the output goes away. */
  readonly signal: AbortSignal;
  /** Cancels what is still running, when the pipeline fails. */
  readonly cancel: () => void;
  /** Written before the first row (the CSV header), read when the first output is due. */
  readonly header: () => string;
  readonly onProgress?: (rows: number, bytes: number) => void;
}

/**
 * Whether a row's error stops the run: a host's kind (every row needs the
 * host), or a body that did not load (`loadFailed`: every row would fail
 * the same way, so not 200 000 failed rows).
 */
function stopsRun(error: ExtFnError): boolean {
  return HOST_KINDS.has(error.kind) || error.loadFailed === true;
}

/** Evaluates and writes every row; resolves when done or stopped (check the signal). */
export async function runPipeline(
  pieces: AsyncIterable<RowPiece>,
  options: PipelineOptions,
): Promise<void> {
  const { registry, fn, sink, writer, tally, signal } = options;
  const inFlight: Batch[] = [];
  let pending: TableRow[] = [];
  // Where the pending rows start and end in the input. A piece's rows share its
  // bytes evenly: one read (up to 64 KiB) can be a small table's whole length, so
  // the bytes read say nothing of how many of its rows are done.
  let pendingFrom = 0;
  let pendingTo = 0;
  let target = FIRST_BATCH;
  let finishedRows = 0;
  let headerWritten = false;

  const progress = () => {
    if (!options.onProgress) return;
    let rows = finishedRows;
    // The input's bytes the done rows stand for: those before the oldest batch, and
    // each batch's share of its own (a later batch's rows count as they finish too).
    let bytes = inFlight[0]?.bytesBefore ?? pendingFrom;
    for (const batch of inFlight) {
      rows += batch.done;
      bytes += ((batch.bytes - batch.bytesBefore) * batch.done) / Math.max(1, batch.rows.length);
    }
    options.onProgress(rows, bytes);
  };

  const dispatch = () => {
    if (pending.length === 0) return;
    const rows = pending;
    const args: Value[][] = [];
    for (const row of rows) if (row.args !== undefined) args.push(row.args);
    // A signal per batch: listeners a runner leaves on it go with the batch, not onto the run's.
    const batchAbort = new AbortController();
    const forward = () => batchAbort.abort(signal.reason);
    signal.addEventListener('abort', forward, { once: true });
    const batch: Batch = { rows, bytesBefore: pendingFrom, bytes: pendingTo, done: 0 };
    batch.result = registry
      .evalBatch(fn.name, args, {
        signal: batchAbort.signal,
        onProgress: (done) => {
          batch.done = done + (rows.length - args.length);
          progress();
        },
      })
      .then(
        (results) => ({ results }),
        (error: unknown) => ({ error }),
      )
      .finally(() => signal.removeEventListener('abort', forward));
    inFlight.push(batch);
    pending = [];
    pendingFrom = pendingTo;
    target = Math.min(LARGEST_BATCH, target * 2);
  };

  const writeHeader = () => {
    if (headerWritten) return;
    headerWritten = true;
    const header = options.header();
    if (header) sink.write(header);
  };

  const finishOldest = async () => {
    const batch = inFlight[0]!;
    const outcome = (await batch.result)!;
    inFlight.shift();
    if (signal.aborted) return;
    if ('error' in outcome) throw outcome.error;
    // Results come back in the order of the well-formed rows; malformed rows keep their problem.
    let next = 0;
    const outcomes: RowOutcome[] = batch.rows.map((row) =>
      row.problem !== undefined
        ? { kind: MALFORMED, message: row.problem }
        : outcome.results[next++]!,
    );
    outcomes.forEach((result, i) => {
      if (ExtFnError.isInstance(result) && stopsRun(result)) {
        throw new HostFailure(result, batch.rows[i]!.line);
      }
    });
    writeHeader();
    outcomes.forEach((result, i) => {
      const row = batch.rows[i]!;
      sink.write(writer.row(row, result));
      tally.add(row, result);
    });
    finishedRows += batch.rows.length;
    await sink.flush();
    progress();
  };

  const iterator = pieces[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = iterator.next();
      // Batches that finish while the next piece is awaited are written at once:
      // a slow producer on stdin sees a row's result before it sends the next row.
      while (inFlight.length > 0 && !signal.aborted) {
        const first = await Promise.race([
          inFlight[0]!.result!.then(() => 'batch' as const),
          next.then(() => 'piece' as const),
        ]);
        if (first === 'piece') break;
        await finishOldest();
      }
      if (signal.aborted) return;
      const step = await next;
      if (step.done) break;
      const { rows, bytes } = step.value;
      const from = pendingTo;
      for (let i = 0; i < rows.length; i++) {
        pending.push(rows[i]!);
        pendingTo = from + ((bytes - from) * (i + 1)) / rows.length;
        if (pending.length >= target) {
          dispatch();
          while (inFlight.length >= IN_FLIGHT && !signal.aborted) await finishOldest();
          if (signal.aborted) return;
        }
      }
      // What this piece completed goes out now: a slow producer on stdin still sees its rows.
      dispatch();
      while (inFlight.length >= IN_FLIGHT && !signal.aborted) await finishOldest();
      if (signal.aborted) return;
    }
    dispatch();
    while (inFlight.length > 0 && !signal.aborted) await finishOldest();
    if (!signal.aborted) {
      writeHeader();
      await sink.flush();
    }
  } catch (error) {
    options.cancel();
    throw error;
  } finally {
    // Not awaited: a read still pending ends when the signal aborts (every early exit aborts it).
    void iterator.return?.().catch(() => {});
    // Stopped early: let the cancelled batches settle before the registry closes.
    await Promise.allSettled(inFlight.map((b) => b.result));
  }
}
