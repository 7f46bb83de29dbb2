/**
 * The engine's side of Redis: one BullMQ Queue and QueueEvents per language,
 * a plain connection for descriptors and cancel messages, and the listeners
 * that route job events to whoever waits for that job. Every call here is
 * bounded in time: Redis going away must end in an error, never a hang.
 */
import { randomUUID } from 'node:crypto';
import type { ExternalFn } from '@improv/extfn-core';
import { type JobsOptions, Queue, QueueEvents } from 'bullmq';
import { Redis, type RedisOptions } from 'ioredis';
import { isErrorReply } from './redis-reply.js';
import {
  cancelChannel,
  descriptorDigest,
  descriptorKey,
  type JobData,
  languageQueueName,
  type WarmAnswer,
  type WarmRequest,
  WIRE_VERSION,
  warmAnswerSchema,
  warmChannel,
  warmReplyKey,
} from './wire.js';

/** What the batch driver hears about one job. */
export interface JobListener {
  completed(returnValue: unknown): void;
  /** A failure event: the driver confirms it by polling (a retried attempt also fails once). */
  failed(): void;
  progress(done: number): void;
}

/** The one worker BullMQ lists when Redis has no CLIENT LIST (its `baseGetClients`). */
const NO_CLIENT_LIST = 'GCP does not support client list';

/** One job as the poll sees it in Redis. */
export type JobSnapshot =
  | { state: 'missing' }
  | { state: 'pending' }
  | { state: 'completed'; returnValue: unknown }
  | { state: 'failed'; reason: string };

/** Raised when Redis does not answer within the bound. */
export class RedisUnreachableError extends Error {
  constructor(what: string, ms: number) {
    super(`Redis did not answer ${what} within ${ms} ms`);
    this.name = 'RedisUnreachableError';
  }
}

/** `promise`, or a RedisUnreachableError after `ms`. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisUnreachableError(what, ms)), ms);
    timer.unref?.();
  });
  promise.catch(() => {}); // a late rejection after the deadline is not unhandled
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

interface Lane {
  queue: Queue;
  events: QueueEvents;
  ready: Promise<unknown>;
  /** The last error reply the lane's connections heard (NOAUTH, WRONGPASS): why it is not ready. */
  refusal?: Error;
}

export interface QueueClientOptions {
  connection: RedisOptions;
  queueName: string;
  prefix: string;
  /** Bound on each Redis round trip. */
  requestTimeoutMs: number;
  /**
   * How long completed jobs stay in Redis, so that a missed completion event
   * can still be read by the poll; at most 10 000 are kept per queue (a job
   * removed before its engine read it is lost, and so submitted again).
   */
  keepCompletedSeconds: number;
}

export class QueueClient {
  readonly options: QueueClientOptions;
  readonly id = randomUUID();
  #lanes = new Map<string, Lane>();
  #listeners = new Map<string, JobListener>();
  #redis: Redis | undefined;
  #sequence = 0;
  #closed = false;
  #answeredAt = Number.NEGATIVE_INFINITY;

  constructor(options: QueueClientOptions) {
    this.options = options;
  }

  #connectionOptions(): RedisOptions {
    // BullMQ needs maxRetriesPerRequest null for its blocking reads; our own bounds come from `within`.
    return { ...this.options.connection, maxRetriesPerRequest: null };
  }

  /**
   * When Redis last answered one of this client's bounded requests
   * (performance.now()): a driver waiting on a request counts Redis silent
   * only since then, whichever batch or call the answer was for.
   */
  get answeredAt(): number {
    return this.#answeredAt;
  }

  /** `within` the request bound; an answer is noted in `answeredAt`. */
  async #within<T>(promise: Promise<T>, what: string): Promise<T> {
    const value = await within(promise, this.options.requestTimeoutMs, what);
    this.#answeredAt = performance.now();
    return value;
  }

  #plain(): Redis {
    if (!this.#redis) {
      this.#redis = new Redis({ ...this.#connectionOptions(), lazyConnect: false });
      this.#redis.on('error', () => {}); // reconnects on its own; callers see bounded timeouts
    }
    return this.#redis;
  }

  lane(language: string): Lane {
    if (this.#closed) throw new Error('the queue client is closed');
    const lane = this.#lanes.get(language);
    if (lane) return lane;
    const name = languageQueueName(this.options.queueName, language);
    const common = { connection: this.#connectionOptions(), prefix: this.options.prefix };
    const queue = new Queue(name, common);
    const events = new QueueEvents(name, common);
    const created: Lane = {
      queue,
      events,
      ready: Promise.all([queue.waitUntilReady(), events.waitUntilReady()]),
    };
    created.ready.catch(() => {});
    const heard = (error: Error) => {
      if (isErrorReply(error)) created.refusal = error;
    };
    queue.on('error', heard);
    events.on('error', heard);
    events.on('completed', ({ jobId, returnvalue }) =>
      this.#listeners.get(jobId)?.completed(returnvalue),
    );
    events.on('failed', ({ jobId }) => this.#listeners.get(jobId)?.failed());
    events.on('progress', ({ jobId, data }) => {
      if (typeof data === 'number') this.#listeners.get(jobId)?.progress(data);
    });
    this.#lanes.set(language, created);
    return created;
  }

  /**
   * Waits for the lane to be ready. Settled once, then at once every time: not an
   * answer from Redis. A connection Redis refuses (NOAUTH) never gets ready and
   * only retries: its error reply, not a timeout, says why.
   */
  async #ready(lane: Lane): Promise<void> {
    await within(lane.ready, this.options.requestTimeoutMs, 'connecting the queue').catch(
      (error: unknown) => {
        throw lane.refusal ?? error;
      },
    );
  }

  /** Stores the descriptor under its digest (idempotent) and returns the digest. */
  async publishDescriptor(fn: ExternalFn): Promise<string> {
    const digest = descriptorDigest(fn);
    const key = descriptorKey(this.options.prefix, this.options.queueName);
    await this.#within(
      this.#plain().hset(key, digest, JSON.stringify(fn)),
      'storing the descriptor',
    );
    return digest;
  }

  /**
   * Asks every worker host listening on the queue to warm `fn` up, and
   * collects their answers for at most `timeoutMs`: `listeners` is how many
   * hosts the request reached, `answers` what came back in time.
   */
  async warmUp(
    fn: ExternalFn,
    timeoutMs: number,
    mode: 'warm' | 'oneShot' | undefined,
  ): Promise<{ listeners: number; answers: WarmAnswer[] }> {
    const { prefix, queueName } = this.options;
    const digest = await this.publishDescriptor(fn);
    const id = this.newJobId();
    const request: WarmRequest = {
      v: WIRE_VERSION,
      digest,
      id,
      timeoutMs,
      ...(mode ? { mode } : {}),
    };
    const key = warmReplyKey(prefix, queueName, id);
    const listeners = await this.#within(
      this.#plain().publish(warmChannel(prefix, queueName), JSON.stringify(request)),
      'asking the worker hosts to warm up',
    );
    const answers: WarmAnswer[] = [];
    if (listeners === 0) return { listeners, answers };
    // BLPOP holds its connection: a connection of its own, for this warm-up only
    const waiter = this.#plain().duplicate();
    waiter.on('error', () => {});
    try {
      const until = performance.now() + timeoutMs;
      while (answers.length < listeners) {
        const leftMs = until - performance.now();
        if (leftMs <= 0) break;
        const popped = await waiter.blpop(key, Math.max(0.01, leftMs / 1000));
        if (!popped) break;
        const parsed = warmAnswerSchema.safeParse(parseJson(popped[1]));
        if (parsed.success) answers.push(parsed.data);
      }
    } finally {
      waiter.disconnect();
      void this.#plain()
        .del(key)
        .catch(() => {});
    }
    return { listeners, answers };
  }

  get closed(): boolean {
    return this.#closed;
  }

  newJobId(): string {
    return `${this.id}.${++this.#sequence}`;
  }

  listen(jobId: string, listener: JobListener): void {
    this.#listeners.set(jobId, listener);
  }

  unlisten(jobId: string): void {
    this.#listeners.delete(jobId);
  }

  /** Adds jobs (ids chosen by the caller) once the lane's event stream is being read. */
  async add(language: string, jobs: readonly { id: string; data: JobData }[]): Promise<void> {
    const lane = this.lane(language);
    await this.#ready(lane);
    const opts: JobsOptions = {
      // Per-row errors are results; a job fails only when the worker could not run it
      // (a Redis hiccup): retried at once, a bounded number of times.
      attempts: 3,
      removeOnComplete: { age: this.options.keepCompletedSeconds, count: 10_000 },
      removeOnFail: { age: 3_600 },
    };
    for (let i = 0; i < jobs.length; i += 1_000) {
      const slice = jobs.slice(i, i + 1_000);
      await this.#within(
        lane.queue.addBulk(
          slice.map((job) => ({ name: 'chunk', data: job.data, opts: { ...opts, jobId: job.id } })),
        ),
        'adding jobs',
      );
    }
  }

  /**
   * The state of jobs, read straight from their hashes in one pipeline
   * (BullMQ keeps a job at `<prefix>:<queue>:<id>`). A missing hash means the
   * job was lost: Redis restarted without persistence, or was flushed.
   * The pipeline ends with a write that changes nothing (DEL of a key no one
   * sets): a Redis turned read-only replica by a failover refuses it, and so
   * says so at the next poll. Reads alone pass there, while the workers'
   * results are refused: the batch would wait for ever.
   */
  async snapshot(language: string, ids: readonly string[]): Promise<JobSnapshot[]> {
    const lane = this.lane(language);
    const pipeline = this.#plain().pipeline();
    for (const id of ids) {
      pipeline.hmget(
        lane.queue.toKey(id),
        'timestamp',
        'finishedOn',
        'returnvalue',
        'failedReason',
      );
    }
    pipeline.del(`${this.options.prefix}:${this.options.queueName}:writable`);
    const replies = (await this.#within(pipeline.exec(), 'reading job states')) ?? [];
    const writable = replies.pop();
    if (writable?.[0]) throw writable[0];
    return replies.map(([error, reply]) => {
      if (error) throw error;
      const [timestamp, finishedOn, returnValue, failedReason] = reply as (string | null)[];
      if (timestamp === null) return { state: 'missing' };
      if (finishedOn === null) return { state: 'pending' };
      if (returnValue !== null && returnValue !== undefined) {
        try {
          return { state: 'completed', returnValue: JSON.parse(returnValue) };
        } catch {
          return { state: 'failed', reason: 'the result stored in Redis is not JSON' };
        }
      }
      return { state: 'failed', reason: failedReason ?? 'the job failed without a reason' };
    });
  }

  /** Removes queued jobs (active ones are locked and stay) and tells workers to stop running ones. */
  async cancel(language: string, ids: readonly string[]): Promise<void> {
    const lane = this.lane(language);
    const channel = cancelChannel(this.options.prefix, this.options.queueName);
    const redis = this.#plain();
    await this.#within(
      Promise.all([
        ...ids.map((id) => lane.queue.remove(id).catch(() => 0)),
        ...ids.map((id) => redis.publish(channel, id)),
      ]),
      'cancelling jobs',
    );
  }

  /**
   * How many workers are connected to the language's queue, or undefined when
   * Redis cannot say: it has no CLIENT LIST (renamed or disabled, as on some
   * managed services), where BullMQ would count one made-up worker. Rejects
   * when Redis does not answer or refuses (NOAUTH, NOPERM…): the callers
   * report why (probe) or count it as unknown (the driver).
   */
  async workerCount(language: string): Promise<number | undefined> {
    const lane = this.lane(language);
    await this.#ready(lane);
    const workers = await this.#within(lane.queue.getWorkers(), 'listing workers');
    return workers.some((w) => w.name === NO_CLIENT_LIST) ? undefined : workers.length;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const lanes = [...this.#lanes.values()];
    this.#lanes.clear();
    this.#listeners.clear();
    const closing = [
      ...lanes.flatMap((lane) => [lane.queue.close(), lane.events.close()]),
      ...(this.#redis ? [this.#redis.quit().catch(() => this.#redis?.disconnect())] : []),
    ];
    // Closing waits for Redis; a Redis that is gone must not hold the engine up.
    await within(Promise.allSettled(closing), this.options.requestTimeoutMs, 'closing').catch(
      () => {
        for (const lane of lanes) {
          void lane.queue.disconnect().catch(() => {});
          void lane.events.disconnect().catch(() => {});
        }
        this.#redis?.disconnect();
      },
    );
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
