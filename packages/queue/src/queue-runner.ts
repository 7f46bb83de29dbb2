/**
 * `queue()`: LanguageRunners that evaluate on worker hosts instead of here.
 * A batch is cut into chunks, each chunk one BullMQ job; results come back
 * per row with a local runner's semantics, because a worker evaluates each
 * chunk with a local runner and sends back its per-row values and errors.
 */
import {
  type BatchOptions,
  type CallOptions,
  type ColumnResults,
  type ExternalFn,
  ExtFnError,
  isAllNumbers,
  type LanguageRunner,
  type RowResult,
  type RunnerProbe,
  type Value,
  type WarmUpOptions,
} from '@improv/extfn-core';
import { type Chunk, type ChunkOutcome, type DriveOptions, driveChunks } from './chunk-driver.js';
import {
  ColumnFormatError,
  decodeNumberResults,
  decodeResults,
  encodeNumberColumns,
  encodeRows,
} from './columns.js';
import { type ConnectionInput, describeConnection, resolveConnection } from './connection.js';
import { QueueClient } from './queue-client.js';
import { redisDelay, redisRefusal } from './redis-reply.js';
import { DEFAULT_QUEUE_NAME, errorFromWire, MAX_CHUNK_ROWS } from './wire.js';

/** How long a warm-up waits for the hosts' answers when the registry gives no deadline. */
const WARM_UP_WAIT_MS = 30_000;

export const PACKAGE_NAME = '@improv/extfn-queue';

export interface QueueOptions {
  /** Redis URL or ioredis options; default IMPROV_EXTFN_REDIS_URL (password from IMPROV_EXTFN_REDIS_PASSWORD). */
  connection?: ConnectionInput;
  /** Queue name shared with the workers (default `improv-extfn`); one BullMQ queue per language under it. */
  queueName?: string;
  /** The languages to send to workers: one runner each. */
  languages: readonly string[];
  /** BullMQ key prefix (default `bull`). */
  prefix?: string;
  /** Fixed rows per job, at most 65 536 (default: about 32 chunks per batch, 64 to 8 192 rows each). */
  chunkRows?: number;
  /** How often Redis is polled for jobs whose events were missed (default 500 ms). */
  pollMs?: number;
  /** How long Redis may stay unreachable before the unfinished rows fail (default 15 000 ms). */
  connectionTimeoutMs?: number;
  /** Bound on each Redis round trip (default 5 000 ms). */
  requestTimeoutMs?: number;
  /** How many times a chunk that Redis lost (restart, flush) is submitted again (default 3). */
  maxResubmits?: number;
  /** At most this many chunks of one batch are in Redis at once (default 1 000): Redis holds a window of a huge refresh, not all of it. */
  maxQueuedChunks?: number;
  /** The environment the connection defaults are read from (default process.env). */
  env?: NodeJS.ProcessEnv;
}

function checkCount(
  value: number | undefined,
  fallback: number,
  name: string,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < 1 || n > max) {
    throw new RangeError(
      `queue(): ${name} must be an integer in [1, ${max}], got ${String(value)}`,
    );
  }
  return n;
}

/**
 * Rows per job: the caller's fixed size, or about 32 chunks per batch (so a
 * fleet shares it) of 64 to 8 192 rows (so a worker's per-call cost, a few
 * milliseconds, is spread over many rows).
 */
function chunkSize(rows: number, fixed: number | undefined): number {
  return fixed ?? Math.min(8_192, Math.max(64, Math.ceil(rows / 32)));
}

/** Applies one chunk's outcome to rows [start, start + count) of `results`. */
function applyRows(
  fn: ExternalFn,
  chunk: Chunk,
  outcome: ChunkOutcome,
  results: RowResult[],
): void {
  const { start, count } = chunk;
  if ('error' in outcome) {
    for (let i = 0; i < count; i++) results[start + i] = outcome.error;
    return;
  }
  try {
    const values = decodeResults(
      fn.returnType,
      count,
      Buffer.from(outcome.result.values, 'base64'),
    );
    for (let i = 0; i < count; i++) results[start + i] = values[i]!;
    for (const [row, error] of outcome.result.errors) {
      if (row >= count)
        throw new ColumnFormatError(`an error for row ${row} of a ${count}-row chunk`);
      results[start + row] = errorFromWire(error, fn.name);
    }
  } catch (error) {
    const failure = ExtFnError.runtime(
      fn.name,
      `the queue worker sent a malformed result: ${(error as Error).message}`,
    );
    for (let i = 0; i < count; i++) results[start + i] = failure;
  }
}

class QueueRunner implements LanguageRunner {
  readonly specificationVersion = 'v1' as const;
  readonly packageName = PACKAGE_NAME;
  // Workers evaluate with their own sandboxed runners, under their own policy.
  readonly capabilities = { isolated: true, warmWorkers: true, batch: true } as const;
  readonly language: string;
  #shared: SharedClient;
  #closed = false;

  constructor(language: string, shared: SharedClient) {
    this.language = language;
    this.#shared = shared;
  }

  async probe(): Promise<RunnerProbe> {
    const where = describeConnection(this.#shared.client.options.connection);
    const queue = `${this.#shared.client.options.queueName}-${this.language}`;
    try {
      const workers = await this.#shared.client.workerCount(this.language);
      if (workers === undefined) {
        // Redis answered, so calls can be sent; whether a worker takes them cannot be known here.
        return {
          language: this.language,
          available: true,
          detail: `the workers serving ${this.language} on queue ${queue} cannot be counted: Redis at ${where} does not list its clients (no CLIENT LIST); a batch no worker takes ends at core's bound, with a Timeout`,
          protection: "the workers' own sandbox policy",
        };
      }
      return {
        language: this.language,
        available: workers > 0,
        detail: `${workers} worker(s) serving ${this.language} on queue ${queue} at ${where}`,
        protection: "the workers' own sandbox policy",
        ...(workers > 0
          ? {}
          : {
              fix: `start a worker host: improv-extfn worker --redis ${where} --runner ${this.language}`,
            }),
      };
    } catch (error) {
      const said =
        redisRefusal(error, where, this.#shared.client.options.prefix) ?? redisDelay(error, where);
      return {
        language: this.language,
        available: false,
        detail: said
          ? said.said('listing workers')
          : `cannot reach Redis at ${where}: ${(error as Error).message}`,
        fix: said?.fix ?? 'start Redis, or point connection / IMPROV_EXTFN_REDIS_URL at it',
      };
    }
  }

  /**
   * Asks every worker host on the queue to warm `fn` up (each through its
   * own runner, under its own policy) and waits for their answers, at most
   * the call deadline: ready when one host has it ready; the calls' error
   * when a host's runner says the body cannot load; else why nothing is warm
   * (no host listening, none serving the language, none answering in time).
   */
  async warmUp(fn: ExternalFn, options: WarmUpOptions = {}): Promise<string | undefined> {
    this.#assertOpen(fn);
    const { client } = this.#shared;
    const queue = `queue ${client.options.queueName}`;
    const waitMs = options.timeoutMs ?? WARM_UP_WAIT_MS;
    const { listeners, answers } = await client
      .warmUp(fn, waitMs, options.mode)
      .catch((error: unknown) => {
        const where = describeConnection(client.options.connection);
        const said = redisRefusal(error, where, client.options.prefix) ?? redisDelay(error, where);
        if (!said) throw error;
        throw ExtFnError.runtime(fn.name, `${said.said('the warm-up')}; ${said.fix}`, {
          fix: said.fix,
        });
      });
    const failed = answers.find((a) => a.outcome === 'error' && a.error);
    if (failed) throw errorFromWire(failed.error!, fn.name);
    if (answers.some((a) => a.outcome === 'warm')) return undefined;
    if (listeners === 0) return `no worker host listens on ${queue}`;
    const reason = answers.find((a) => a.outcome === 'reason');
    if (reason) return `worker host ${reason.host}: ${reason.reason ?? 'nothing kept warm'}`;
    if (answers.length === listeners) return `no worker host on ${queue} serves ${fn.language}`;
    return `no worker host on ${queue} had ${fn.name} ready within ${waitMs} ms`;
  }

  #drive(options: BatchOptions): DriveOptions {
    const s = this.#shared.settings;
    return {
      timeoutMs: options.timeoutMs,
      ...(options.mode ? { mode: options.mode } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      pollMs: s.pollMs,
      connectionTimeoutMs: s.connectionTimeoutMs,
      maxResubmits: s.maxResubmits,
      maxQueuedChunks: s.maxQueuedChunks,
      // Well inside core's silence bound (twice the deadline plus at least 2 s), so that a queue
      // with no worker ends in an error that says so rather than a Timeout from core.
      noWorkerMs: Math.max(500, options.timeoutMs),
    };
  }

  #assertOpen(fn: ExternalFn): void {
    if (this.#closed) throw ExtFnError.runtime(fn.name, 'the queue runner is closed');
  }

  async call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    this.#assertOpen(fn);
    // Core stops waiting for a call at its deadline plus its grace (the deadline, at least 2 s),
    // with a Timeout; the job is removed then too, so a call nobody waits for does not stay queued.
    const graceMs = Math.max(2_000, options.timeoutMs);
    const bound = AbortSignal.timeout(options.timeoutMs + graceMs);
    const signal = options.signal ? AbortSignal.any([options.signal, bound]) : bound;
    const drive = this.#drive({ ...options, signal });
    // Redis silent for the grace (for a deadline of 2 s or more: the deadline itself) fails the
    // call with `lost the queue at …` and the fix, as a batch's rows, before core's bound would
    // end it with a Timeout that names no cause. Counted from the first request Redis left
    // unanswered, so the call says so whenever Redis stops answering within its deadline.
    const [result] = await this.#rows(fn, [args], {
      ...drive,
      connectionTimeoutMs: Math.min(drive.connectionTimeoutMs, graceMs),
    });
    if (
      ExtFnError.isInstance(result) &&
      result.aborted &&
      bound.aborted &&
      !options.signal?.aborted
    ) {
      throw ExtFnError.timeout(fn.name, options.timeoutMs);
    }
    if (ExtFnError.isInstance(result)) throw result;
    return result!;
  }

  async callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    this.#assertOpen(fn);
    return this.#rows(fn, rows, this.#drive(options));
  }

  async #rows(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    drive: DriveOptions,
  ): Promise<RowResult[]> {
    const results: RowResult[] = new Array(rows.length);
    const size = chunkSize(rows.length, this.#shared.settings.chunkRows);
    const chunks: Chunk[] = [];
    for (let start = 0; start < rows.length; start += size) {
      const slice = rows.slice(start, start + size);
      chunks.push({ start, count: slice.length, encode: () => encodeRows(fn.argTypes, slice) });
    }
    await driveChunks(this.#shared.client, fn, chunks, drive, (chunk, outcome) =>
      applyRows(fn, chunk, outcome, results),
    );
    return results;
  }

  async callColumns(
    fn: ExternalFn,
    columns: readonly Float64Array[],
    options: BatchOptions,
  ): Promise<ColumnResults> {
    this.#assertOpen(fn);
    if (!isAllNumbers(fn))
      throw ExtFnError.runtime(fn.name, 'columnar calls need an all-number function');
    const count = columns[0]?.length ?? 0;
    const values = new Float64Array(count).fill(Number.NaN);
    const errors = new Map<number, ExtFnError>();
    const size = chunkSize(count, this.#shared.settings.chunkRows);
    const chunks: Chunk[] = [];
    for (let start = 0; start < count; start += size) {
      const end = Math.min(count, start + size);
      chunks.push({
        start,
        count: end - start,
        encode: () => encodeNumberColumns(columns, start, end),
      });
    }
    await driveChunks(this.#shared.client, fn, chunks, this.#drive(options), (chunk, outcome) => {
      const { start, count: n } = chunk;
      const fail = (error: ExtFnError) => {
        for (let i = 0; i < n; i++) errors.set(start + i, error);
      };
      if ('error' in outcome) return fail(outcome.error);
      try {
        values.set(decodeNumberResults(n, Buffer.from(outcome.result.values, 'base64')), start);
        for (const [row, error] of outcome.result.errors) {
          if (row >= n) throw new ColumnFormatError(`an error for row ${row} of a ${n}-row chunk`);
          values[start + row] = Number.NaN;
          errors.set(start + row, errorFromWire(error, fn.name));
        }
      } catch (error) {
        fail(
          ExtFnError.runtime(
            fn.name,
            `the queue worker sent a malformed result: ${(error as Error).message}`,
          ),
        );
      }
    });
    return { values, errors };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#shared.release();
  }
}

interface Settings {
  /** Fixed rows per job, or undefined for the default sizing. */
  chunkRows: number | undefined;
  pollMs: number;
  connectionTimeoutMs: number;
  maxResubmits: number;
  maxQueuedChunks: number;
}

/** One client shared by a queue()'s runners, closed when the last of them closes. */
class SharedClient {
  readonly client: QueueClient;
  readonly settings: Settings;
  #users: number;

  constructor(client: QueueClient, settings: Settings, users: number) {
    this.client = client;
    this.settings = settings;
    this.#users = users;
  }

  async release(): Promise<void> {
    if (--this.#users === 0) await this.client.close();
  }
}

/**
 * Runners, one per language, that send evaluation to worker hosts through
 * Redis (`improv-extfn worker`). Add them to a Registry like local runners:
 *
 *   new Registry({ runners: [...queue({ connection: 'redis://10.0.0.5:6379', languages: ['python', 'r'] })] })
 *
 * Nothing connects until the first call.
 */
export function queue(options: QueueOptions): LanguageRunner[] {
  const languages = options.languages;
  if (!Array.isArray(languages) || languages.length === 0) {
    throw new TypeError('queue(): languages must list at least one language id, e.g. ["python"]');
  }
  const seen = new Set<string>();
  for (const language of languages) {
    if (
      typeof language !== 'string' ||
      !/^[a-z][a-z0-9_-]*$/.test(language) ||
      seen.has(language)
    ) {
      throw new TypeError(
        `queue(): ${JSON.stringify(language)} is not a lower-case language id, or is listed twice`,
      );
    }
    seen.add(language);
  }
  const queueName = options.queueName ?? DEFAULT_QUEUE_NAME;
  if (!/^[A-Za-z0-9_.-]+$/.test(queueName)) {
    throw new TypeError(
      `queue(): queueName ${JSON.stringify(queueName)} may hold letters, digits, '_', '.' and '-' only`,
    );
  }
  const connection = resolveConnection(options.connection, options.env);
  const client = new QueueClient({
    connection,
    queueName,
    prefix: options.prefix ?? 'bull',
    requestTimeoutMs: checkCount(options.requestTimeoutMs, 5_000, 'requestTimeoutMs'),
    keepCompletedSeconds: 300,
  });
  const shared = new SharedClient(
    client,
    {
      chunkRows:
        options.chunkRows === undefined
          ? undefined
          : checkCount(options.chunkRows, 0, 'chunkRows', MAX_CHUNK_ROWS),
      pollMs: checkCount(options.pollMs, 500, 'pollMs'),
      connectionTimeoutMs: checkCount(options.connectionTimeoutMs, 15_000, 'connectionTimeoutMs'),
      maxResubmits: options.maxResubmits ?? 3,
      maxQueuedChunks: checkCount(options.maxQueuedChunks, 1_000, 'maxQueuedChunks'),
    },
    languages.length,
  );
  return languages.map((language) => new QueueRunner(language, shared));
}
