/**
 * `startQueueWorker()`: a worker host. Takes chunk jobs from the queues of
 * the languages it serves and evaluates them with the local runners it was
 * given — created by the host, so under the host's sandbox policy
 * (`policyFor(its own environment)`); a job cannot choose one. A job is
 * validated before anything runs: its data (zod, strict), its descriptor
 * (fetched by digest, parsed, its digest checked) and its language.
 */
import { availableParallelism, hostname } from 'node:os';
import {
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  parseExternalFn,
} from '@improv/extfn-core';
import { type Job, type JobJsonRaw, UnrecoverableError, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { type ConnectionInput, describeConnection, resolveConnection } from './connection.js';
import { evaluateChunk } from './evaluate-chunk.js';
import { redisRefusal } from './redis-reply.js';
import {
  type ChunkResult,
  cancelChannel,
  DEFAULT_QUEUE_NAME,
  DESCRIPTOR_MISSING,
  descriptorDigest,
  descriptorKey,
  errorToWire,
  jobDataSchema,
  languageQueueName,
  MAX_RESULT_BYTES,
  type WarmAnswer,
  type WarmRequest,
  WIRE_VERSION,
  warmChannel,
  warmReplyKey,
  warmRequestSchema,
} from './wire.js';

export interface QueueWorkerOptions {
  /** Redis URL or ioredis options; default IMPROV_EXTFN_REDIS_URL (password from IMPROV_EXTFN_REDIS_PASSWORD). */
  connection?: ConnectionInput;
  /** The queue name the engines use (default `improv-extfn`). */
  queueName?: string;
  /** The host's local runners, one per language served. The worker closes them on close(). */
  runners: readonly LanguageRunner[];
  /** Chunks evaluated at once per language (default: the host's cores). */
  concurrency?: number;
  /** How long a job's lock lasts without renewal; a dead host's chunk is retried after about this (default 30 000 ms). */
  lockDurationMs?: number;
  /** How often this worker looks for chunks whose worker died (default 30 000 ms). */
  stalledIntervalMs?: number;
  /** How many times a chunk may lose its worker before it fails for good (default 2). */
  maxStalledCount?: number;
  /**
   * Most bytes of values and errors one chunk's result may carry back through
   * Redis (default 64 MiB). Rows past it are not sent: each gets a Runtime
   * error (limit `output`) saying so, and the rows before keep their results.
   */
  maxResultBytes?: number;
  prefix?: string;
  env?: NodeJS.ProcessEnv;
  /** Told about each chunk as it starts and ends (for logs). */
  onChunk?: (event: ChunkEvent) => void;
  /** Told about each warm-up an engine asked for (`Registry.warmUp`), once answered (for logs). */
  onWarmUp?: (event: WarmUpEvent) => void;
  /** Told about connection errors the worker recovers from (for logs). */
  onError?: (error: Error) => void;
  /**
   * How long start-up may wait for Redis (default 30 000 ms). Past it the
   * start rejects with a LanguageUnavailable error naming the address and the
   * last connection error, and nothing is left connected. Once started, the
   * worker reconnects on its own for as long as it runs (`onError` hears of
   * each failed attempt).
   */
  connectTimeoutMs?: number;
  /**
   * Aborting it while the worker starts stops waiting for Redis: the start
   * rejects with the signal's reason and nothing is left connected. Once
   * started, stop the worker with `close()`.
   */
  signal?: AbortSignal;
}

export interface WarmUpEvent {
  /** The descriptor's digest, and its name once found. */
  digest: string;
  name?: string;
  outcome: WarmAnswer['outcome'];
  /** Why, for `skipped`, `reason` and `error`. */
  reason?: string;
}

export type ChunkEvent =
  | { phase: 'start'; jobId: string; language: string; rows: number }
  | { phase: 'done'; jobId: string; language: string; rows: number; failedRows: number; ms: number }
  | { phase: 'refused' | 'failed' | 'cancelled'; jobId: string; language: string; reason: string };

export interface QueueWorker {
  readonly languages: readonly string[];
  readonly queueName: string;
  /** `redis://host:port` (no password). */
  readonly redis: string;
  readonly concurrency: number;
  /**
   * Stops taking jobs, lets running chunks finish (at most `graceMs`, then
   * cancels them) and closes the runners. With Redis unreachable it does not
   * wait: running chunks are dropped and retried elsewhere once their locks expire.
   */
  close(graceMs?: number): Promise<void>;
}

const MAX_CACHED_DESCRIPTORS = 1_000;
/** How long start-up waits for Redis by default. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
/** How long a start that failed waits for its connections to close before it drops them. */
const TEARDOWN_MS = 2_000;
/** Ids of cancelled jobs remembered, oldest forgotten first. */
const MAX_REMEMBERED_CANCELS = 10_000;
/** What follows the fix for a Redis refusal in a worker host's log. */
const WORKER_THEN =
  'then the worker host carries on by itself (restart it if you changed its address or password)';
/** Refusals that no retry of the start ends: the host's own credentials. */
const REFUSED_START = new Set(['NOAUTH', 'WRONGPASS']);

function refuse(message: string): UnrecoverableError {
  return new UnrecoverableError(`improv-extfn worker refused the job: ${message}`);
}

/** Jobs whose fields in Redis are not JSON, with why: their processor fails them at once. */
const unreadable = new WeakMap<Job, string>();

/** The fields of a job BullMQ reads with JSON.parse, and what stands in for one that is not JSON. */
const JSON_FIELDS = { data: '{}', opts: '{}', progress: '0', parent: '' } as const;

/**
 * A BullMQ Worker that can take a job whose data (or options) in Redis is
 * not JSON — only a writer to Redis other than an engine can make one.
 * BullMQ's own worker throws while it reads such a job, after it has moved
 * the job to active: the job would stay there for ever (its lock lapses, the
 * stalled check puts it back, the next worker throws again), and the engine
 * waiting on it would wait until its own bounds. Here it is read with stand-ins
 * for the fields that are not JSON and marked, and the processor fails it for
 * good with the reason (a refused job), so it ends, and the engine hears why.
 */
class ChunkWorker extends Worker {
  /** Makes an error of handing in a chunk's result readable (and reports it); undefined to keep it. */
  handInFailed?: (job: Job, error: Error) => Error | undefined;

  /**
   * BullMQ only emits a failed hand-in (Redis refusing the write: READONLY
   * after a failover, NOAUTH…) as a bare reply: say which chunk's result was
   * refused, and what to do.
   */
  protected override async handleCompleted(
    result: unknown,
    job: Job,
    token: string,
    ...rest: unknown[]
  ): Promise<Job> {
    try {
      return await super.handleCompleted(result, job, token, ...(rest as []));
    } catch (error) {
      throw this.handInFailed?.(job, error as Error) ?? error;
    }
  }

  protected override createJob(raw: JobJsonRaw, jobId: string): Job {
    try {
      return super.createJob(raw, jobId);
    } catch (error) {
      const clean: Record<string, unknown> = { ...raw };
      const bad: string[] = [];
      for (const [field, standIn] of Object.entries(JSON_FIELDS)) {
        const text = clean[field];
        if (typeof text !== 'string' || text === '') continue;
        try {
          JSON.parse(text);
        } catch {
          bad.push(field);
          clean[field] = standIn;
        }
      }
      if (bad.length === 0) throw error;
      const job = super.createJob(clean as unknown as JobJsonRaw, jobId);
      const what = bad.map((field) => `its ${field}`).join(' and ');
      unreadable.set(
        job,
        `${what} in Redis ${bad.length > 1 ? 'are' : 'is'} not JSON (${(error as Error).message}); an engine never writes such a job: is something else writing to this Redis?`,
      );
      return job;
    }
  }
}

export async function startQueueWorker(options: QueueWorkerOptions): Promise<QueueWorker> {
  const runners = new Map<string, LanguageRunner>();
  for (const runner of options.runners) {
    if (runners.has(runner.language)) {
      throw new TypeError(`startQueueWorker: two runners for language ${runner.language}`);
    }
    runners.set(runner.language, runner);
  }
  if (runners.size === 0) throw new TypeError('startQueueWorker: give at least one runner');
  const connection = {
    ...resolveConnection(options.connection, options.env),
    maxRetriesPerRequest: null,
  };
  const queueName = options.queueName ?? DEFAULT_QUEUE_NAME;
  const prefix = options.prefix ?? 'bull';
  const concurrency = options.concurrency ?? availableParallelism();
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new RangeError(
      `startQueueWorker: concurrency must be a positive integer, got ${concurrency}`,
    );
  }
  const maxResultBytes = options.maxResultBytes ?? MAX_RESULT_BYTES;
  if (!(maxResultBytes > 0) || !Number.isFinite(maxResultBytes)) {
    throw new RangeError(
      `startQueueWorker: maxResultBytes must be a positive number of bytes, got ${maxResultBytes}`,
    );
  }
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!(connectTimeoutMs > 0) || !Number.isFinite(connectTimeoutMs)) {
    throw new RangeError(
      `startQueueWorker: connectTimeoutMs must be a positive number of milliseconds, got ${connectTimeoutMs}`,
    );
  }
  options.signal?.throwIfAborted();
  const where = describeConnection(connection);
  let lastError: Error | undefined;
  /** Set while starting: a refusal of the host's credentials ends the start at once. */
  let refusedStart: ((error: Error) => void) | undefined;
  /** A Redis refusal as a sentence with its fix (the bare reply names no host, no cause); other errors as they are. */
  const readable = (error: Error, step: string): Error => {
    const refusal = redisRefusal(error, where, prefix, WORKER_THEN);
    if (!refusal) return error;
    return Object.assign(new Error(`${refusal.said(step)}; ${refusal.fix}`, { cause: error }), {
      fix: refusal.fix,
    });
  };
  /** A refusal that ended the start, as the start's error: LanguageUnavailable, with the fix. */
  const startRefused = (error: unknown): ExtFnError | undefined => {
    const refusal = redisRefusal(error, where, prefix, 'then start the worker host again');
    if (!refusal) return undefined;
    const message = `startQueueWorker: ${refusal.said("the worker host's connection")}; ${refusal.fix}`;
    return new ExtFnError('LanguageUnavailable', message, { fix: refusal.fix });
  };
  const onError = (error: Error, step = 'a request of this worker host') => {
    const said = readable(error, step);
    lastError = said;
    options.onError?.(said);
    if (!refusedStart) return; // started: the host carries on, whatever Redis refused
    const code = redisRefusal(error, where, prefix)?.code;
    if (code !== undefined && REFUSED_START.has(code)) refusedStart(startRefused(error)!);
  };
  const redis = new Redis(connection);
  redis.on('error', onError);
  const subscriber = new Redis(connection);
  subscriber.on('error', onError);

  // Descriptors by digest: fetched once per worker, not once per chunk.
  const descriptors = new Map<string, Promise<ExternalFn>>();
  const descriptorFor = (digest: string): Promise<ExternalFn> => {
    let found = descriptors.get(digest);
    if (!found) {
      found = (async () => {
        const json = await redis.hget(descriptorKey(prefix, queueName), digest).catch((error) => {
          // A refusal (WRONGTYPE: the key holds something else) fails the chunk for good, saying so;
          // BullMQ would retry it to the same end and the engine hear a bare reply.
          const said = readable(error as Error, 'reading the descriptor');
          throw said === error ? error : refuse(said.message);
        });
        if (json === null) throw new UnrecoverableError(`${DESCRIPTOR_MISSING}: ${digest}`);
        let fn: ExternalFn;
        try {
          fn = parseExternalFn(JSON.parse(json));
        } catch (error) {
          throw refuse(`its descriptor is invalid: ${(error as Error).message}`);
        }
        if (descriptorDigest(fn) !== digest)
          throw refuse('its descriptor does not match its digest');
        return fn;
      })();
      found.catch(() => descriptors.delete(digest)); // only successes are cached
      if (descriptors.size >= MAX_CACHED_DESCRIPTORS)
        descriptors.delete(descriptors.keys().next().value!);
      descriptors.set(digest, found);
    }
    return found;
  };

  const workers: Worker[] = [];
  const cancelled = new Set<string>();
  const process =
    (language: string, runner: LanguageRunner) =>
    async (job: Job, _token?: string, signal?: AbortSignal): Promise<ChunkResult> => {
      const jobId = job.id ?? '?';
      const notJson = unreadable.get(job);
      if (notJson !== undefined) {
        options.onChunk?.({ phase: 'refused', jobId, language, reason: notJson });
        throw refuse(notJson);
      }
      const parsed = jobDataSchema.safeParse(job.data);
      if (!parsed.success) {
        const issues = parsed.error.issues
          .map((i) => `${i.path.join('.') || 'data'}: ${i.message}`)
          .join('; ');
        options.onChunk?.({ phase: 'refused', jobId, language, reason: issues });
        throw refuse(`invalid job data (${issues})`);
      }
      const data = parsed.data;
      if (cancelled.has(jobId)) {
        options.onChunk?.({
          phase: 'cancelled',
          jobId,
          language,
          reason: 'cancelled before it started',
        });
        throw new UnrecoverableError('cancelled by the engine');
      }
      const fn = await descriptorFor(data.digest);
      if (fn.language !== language) {
        throw refuse(`it asks for language ${fn.language} on the ${language} queue`);
      }
      options.onChunk?.({ phase: 'start', jobId, language, rows: data.rows });
      const started = performance.now();
      let reported = 0;
      let lastReport = 0;
      const result = await evaluateChunk(runner, fn, data, {
        maxResultBytes,
        ...(signal ? { signal } : {}),
        onProgress: (done) => {
          const now = performance.now();
          // A chunk's last row is reported by its completion, not a progress event: the engine's
          // count then never includes rows whose results it does not hold yet, beyond the one
          // running chunk (progress and completion travel in order on the same Redis stream).
          if (done <= reported || done >= data.rows || now - lastReport < 100) return;
          reported = done;
          lastReport = now;
          job.updateProgress(done).catch(() => {});
        },
      }).catch((error: Error) => {
        throw refuse(error.message);
      });
      if (signal?.aborted) {
        options.onChunk?.({
          phase: 'cancelled',
          jobId,
          language,
          reason: String(signal.reason ?? 'cancelled'),
        });
        throw new UnrecoverableError('cancelled by the engine');
      }
      options.onChunk?.({
        phase: 'done',
        jobId,
        language,
        rows: data.rows,
        failedRows: result.errors.length,
        ms: performance.now() - started,
      });
      return result;
    };

  const name = `improv-extfn@${hostname()}:${globalThis.process.pid}`;
  // Made only once Redis has accepted this host's own connection (start()): a BullMQ
  // connection still starting when its worker closes rethrows a late refusal (NOAUTH to
  // its INFO) from an emitter whose listeners the close removed: an unhandled rejection
  // in the host process, which a wrong password could crash.
  const createWorkers = () => {
    for (const [language, runner] of runners) {
      const worker = new ChunkWorker(
        languageQueueName(queueName, language),
        process(language, runner),
        {
          connection,
          prefix,
          concurrency,
          name,
          lockDuration: options.lockDurationMs ?? 30_000,
          stalledInterval: options.stalledIntervalMs ?? 30_000,
          maxStalledCount: options.maxStalledCount ?? 2,
          autorun: false,
        },
      );
      worker.handInFailed = (job, error) => {
        const said = readable(error, `handing in the result of chunk ${job.id ?? '?'}`);
        if (said === error) return undefined;
        // Not sent: the engine's rows fail with the same refusal (its poll writes too), not a hang.
        options.onChunk?.({
          phase: 'failed',
          jobId: job.id ?? '?',
          language,
          reason: said.message,
        });
        return said;
      };
      worker.on('error', onError);
      worker.on('failed', (job, error) => {
        if (job && !/^cancelled/.test(error.message)) {
          options.onChunk?.({
            phase: 'failed',
            jobId: job.id ?? '?',
            language,
            reason: error.message,
          });
        }
      });
      workers.push(worker);
    }
  };

  /** A host's answer to a warm-up request: its runner for the function's language warms it. */
  const warmAnswer = async (request: WarmRequest): Promise<[WarmAnswer, string | undefined]> => {
    const answer = (outcome: WarmAnswer['outcome'], extra: Partial<WarmAnswer> = {}) =>
      ({ v: WIRE_VERSION, host: name, outcome, ...extra }) as WarmAnswer;
    let fn: ExternalFn;
    try {
      fn = await descriptorFor(request.digest);
    } catch (error) {
      return [answer('reason', { reason: (error as Error).message }), undefined];
    }
    const runner = runners.get(fn.language);
    if (!runner) {
      const served = [...runners.keys()].join(', ');
      return [answer('skipped', { reason: `this host serves ${served}` }), fn.name];
    }
    try {
      const options = {
        timeoutMs: request.timeoutMs,
        ...(request.mode ? { mode: request.mode } : {}),
      };
      const reason = await runner.warmUp?.(fn, options);
      return [reason === undefined ? answer('warm') : answer('reason', { reason }), fn.name];
    } catch (error) {
      const failure = ExtFnError.isInstance(error)
        ? error
        : ExtFnError.runtime(fn.name, (error as Error).message);
      return [answer('error', { error: errorToWire(failure) }), fn.name];
    }
  };
  const warm = async (message: string): Promise<void> => {
    let request: WarmRequest;
    try {
      request = warmRequestSchema.parse(JSON.parse(message));
    } catch (error) {
      onError(new Error(`improv-extfn worker ignored a malformed warm-up request: ${error}`));
      return;
    }
    const [answer, fnName] = await warmAnswer(request);
    const reason = answer.reason ?? answer.error?.message;
    options.onWarmUp?.({
      digest: request.digest,
      ...(fnName === undefined ? {} : { name: fnName }),
      outcome: answer.outcome,
      ...(reason === undefined ? {} : { reason }),
    });
    const key = warmReplyKey(prefix, queueName, request.id);
    // kept a minute at most: an engine that stopped waiting does not leave it behind
    await redis
      .multi()
      .rpush(key, JSON.stringify(answer))
      .expire(key, 60)
      .exec()
      .catch((error: Error) => onError(error, 'answering a warm-up'));
  };

  // Engines publish the ids of jobs to stop; each worker cancels the ones it runs.
  // On another channel, warm-up requests: every host answers each.
  const warmOn = warmChannel(prefix, queueName);
  subscriber.on('message', (channel, message: string) => {
    if (channel === warmOn) {
      void warm(message);
      return;
    }
    const jobId = message;
    for (const worker of workers) worker.cancelJob(jobId, 'cancelled by the engine');
    // Also a job taken just now, before its processor started: it is skipped when it does.
    if (cancelled.size >= MAX_REMEMBERED_CANCELS)
      cancelled.delete(cancelled.values().next().value!);
    cancelled.add(jobId);
  });
  const start = async (): Promise<void> => {
    await redis.ping();
    await subscriber.subscribe(cancelChannel(prefix, queueName), warmOn);
    createWorkers();
    for (const worker of workers) {
      void worker.run().catch(onError);
      await worker.waitUntilReady();
    }
  };
  const refused = new Promise<never>((_, reject) => {
    refusedStart = reject;
  });
  try {
    const started = start().catch((error: unknown) => {
      throw startRefused(error) ?? error;
    });
    await startWithin(Promise.race([started, refused]), connectTimeoutMs, options.signal, () => {
      const last = lastError ? ` (${lastError.message})` : '';
      const fix = 'start Redis there, or point connection / IMPROV_EXTFN_REDIS_URL at it';
      return new ExtFnError(
        'LanguageUnavailable',
        `startQueueWorker: cannot reach Redis at ${where} within ${connectTimeoutMs} ms${last}`,
        { fix },
      );
    });
  } catch (error) {
    // Nothing may stay connected (or keep retrying) after a start that failed.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(workers.map((w) => w.close(true))),
      new Promise((resolve) => {
        timer = setTimeout(resolve, TEARDOWN_MS);
      }),
    ]);
    clearTimeout(timer);
    subscriber.disconnect();
    redis.disconnect();
    throw error;
  } finally {
    refusedStart = undefined;
  }

  let closing: Promise<void> | undefined;
  return {
    languages: [...runners.keys()],
    queueName,
    redis: describeConnection(connection),
    concurrency,
    close(graceMs = 10_000) {
      closing ??= (async () => {
        // With Redis gone, a running chunk cannot hand in its result, and a graceful
        // close would wait for Redis to come back (its commands queue until then):
        // close at once; the chunks go to another worker once their locks expire.
        const connected = redis.status === 'ready';
        const timer = setTimeout(() => {
          for (const worker of workers) worker.cancelAllJobs('the worker is closing');
        }, graceMs);
        try {
          await Promise.allSettled(workers.map((w) => w.close(!connected)));
        } finally {
          clearTimeout(timer);
        }
        subscriber.disconnect();
        if (connected) await redis.quit().catch(() => redis.disconnect());
        else redis.disconnect();
        await Promise.allSettled([...runners.values()].map((r) => r.close?.()));
      })();
      return closing;
    },
  };
}

/**
 * `started`, or the error `timedOut()` makes after `ms`, or the signal's
 * reason once it aborts: whichever comes first.
 */
function startWithin(
  started: Promise<void>,
  ms: number,
  signal: AbortSignal | undefined,
  timedOut: () => Error,
): Promise<void> {
  started.catch(() => {}); // a late rejection after the deadline is not unhandled
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timedOut()), ms);
    if (signal?.aborted) reject(signal.reason);
    else if (signal) {
      onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
    }
  });
  return Promise.race([started, stop]).finally(() => {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  });
}
