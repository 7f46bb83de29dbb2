/**
 * Drives one batch's chunks through the queue until every chunk has a result
 * or an error: submits them, listens for completions and progress, polls
 * Redis for what the event stream may have missed, resubmits chunks Redis
 * lost (a restart without persistence), and gives up with a clear error when
 * Redis stays unreachable. Abort settles the rest at once and cancels them.
 */
import { type ExternalFn, ExtFnError } from '@improv/extfn-core';
import { describeConnection } from './connection.js';
import { type QueueClient, RedisUnreachableError } from './queue-client.js';
import { type RedisDelay, type RedisRefusal, redisDelay, redisRefusal } from './redis-reply.js';
import {
  type ChunkResult,
  chunkResultSchema,
  DESCRIPTOR_MISSING,
  formatMiB,
  type JobData,
  MAX_FRAME_BYTES,
  WIRE_VERSION,
} from './wire.js';

export interface Chunk {
  /** Index of the chunk's first row in the batch. */
  start: number;
  count: number;
  /** Encodes the arguments' frame (see columns.ts) when the chunk is submitted, not before. */
  encode: () => Buffer;
}

export type ChunkOutcome = { result: ChunkResult } | { error: ExtFnError };

export interface DriveOptions {
  timeoutMs: number;
  mode?: 'warm' | 'oneShot';
  signal?: AbortSignal;
  onProgress?: (done: number, total: number) => void;
  /** How often Redis is polled for jobs whose events were missed. */
  pollMs: number;
  /**
   * How long Redis may stay silent before the unfinished rows fail with `lost
   * the queue`: counted from the start of the first request it left
   * unanswered (or its last answer since), and ended by a timer, not by the
   * request's own bound, so that a bound shorter than requestTimeoutMs (a
   * call's) holds.
   */
  connectionTimeoutMs: number;
  /** How many times a chunk Redis lost is submitted again. */
  maxResubmits: number;
  /** At most this many of the batch's chunks are in Redis at once; the rest wait here. */
  maxQueuedChunks: number;
  /**
   * How long the batch's chunks may wait with no worker host connected to the
   * language's queue before the unfinished rows fail (and the chunks are
   * withdrawn). While a worker is connected, the wait is reported as progress,
   * so that core's silence bound does not take a busy fleet for a dead runner.
   */
  noWorkerMs: number;
}

interface ChunkState {
  chunk: Chunk;
  id: string;
  /** Built on first submission, kept for a resubmission. */
  data: JobData | undefined;
  /** Waiting to be (re)submitted. */
  unsent: boolean;
  resubmits: number;
  done: number;
  settled: boolean;
}

const STALLED = /stalled more than allowable limit/;

function failureMessage(reason: string): string {
  if (STALLED.test(reason)) {
    return `the queue gave up on this chunk: its worker died or stopped answering on every attempt (${reason}); it is not retried further`;
  }
  return `the queue worker failed this chunk: ${reason}`;
}

export async function driveChunks(
  client: QueueClient,
  fn: ExternalFn,
  chunks: readonly Chunk[],
  options: DriveOptions,
  settle: (chunk: Chunk, outcome: ChunkOutcome) => void,
): Promise<void> {
  const total = chunks.reduce((sum, c) => sum + c.count, 0);
  const where = describeConnection(client.options.connection);
  let remaining = chunks.length;
  let doneRows = 0;
  let needPublish = true;
  let digest = '';
  /** Since when (performance.now()) Redis has left a request of this batch unanswered, if it has. */
  let silentSince: number | undefined;
  /** Why the last round failed, while Redis stays silent. */
  let lastWhy: string | undefined;
  /** The last round's reply that passes on its own (LOADING, BUSY…), and its step: named if it outlasts the wait. */
  let lastDelay: { delay: RedisDelay; step: string } | undefined;
  /** What the round under way waits on Redis for (for the message when it never answers). */
  let step = 'connecting';
  let wake: (() => void) | undefined;
  // A poke while a round runs is kept, so the loop does not sleep through it.
  let woken = false;
  const poke = () => {
    woken = true;
    wake?.();
  };
  // Job states are read every pollMs, and at once after a failure event.
  let lastSnapshot = 0;
  let snapshotDue = false;

  const states: ChunkState[] = chunks.map((chunk) => ({
    chunk,
    id: client.newJobId(),
    data: undefined,
    unsent: true,
    resubmits: 0,
    done: 0,
    settled: false,
  }));

  const progress = (state: ChunkState, done: number) => {
    const clamped = Math.min(Math.max(done, state.done), state.chunk.count);
    if (clamped === state.done) return;
    doneRows += clamped - state.done;
    state.done = clamped;
    options.onProgress?.(doneRows, total);
  };

  const finish = (state: ChunkState, outcome: ChunkOutcome) => {
    if (state.settled) return;
    state.settled = true;
    state.data = undefined; // its frame is no longer needed
    remaining--;
    client.unlisten(state.id);
    if ('result' in outcome) progress(state, state.chunk.count);
    settle(state.chunk, outcome);
    // Wake the loop: it is done, or the window has room for the next chunk.
    poke();
  };

  const fail = (
    state: ChunkState,
    message: string,
    fields: { aborted?: boolean; fix?: string } = {},
  ) => finish(state, { error: ExtFnError.runtime(fn.name, message, fields) });

  const complete = (state: ChunkState, returnValue: unknown) => {
    const parsed = chunkResultSchema.safeParse(returnValue);
    if (parsed.success) finish(state, { result: parsed.data });
    else
      fail(state, `the queue worker sent a malformed result (${parsed.error.issues[0]?.message})`);
  };

  const resubmit = (state: ChunkState, why: string) => {
    if (state.resubmits >= options.maxResubmits) {
      fail(
        state,
        `the queue lost this chunk ${state.resubmits + 1} times (${why}); not submitted again`,
      );
      return;
    }
    state.resubmits++;
    state.unsent = true;
    needPublish = true;
    // A new id: BullMQ ignores an add under an id it still holds (a failed job stays a while).
    client.unlisten(state.id);
    state.id = client.newJobId();
    listen(state);
  };

  function listen(state: ChunkState): void {
    client.listen(state.id, {
      completed: (value) => complete(state, value),
      failed: () => {
        snapshotDue = true;
        poke();
      },
      progress: (done) => progress(state, done),
    });
  }
  for (const state of states) listen(state);

  /** Jobs to remove from Redis at the end: aborted, or withdrawn for want of a worker. */
  const abortedIds: string[] = [];
  const onAbort = () => {
    for (const state of states) {
      if (state.settled) continue;
      if (!state.unsent) abortedIds.push(state.id);
      finish(state, { error: ExtFnError.aborted(fn.name, options.signal?.reason) });
    }
  };
  if (options.signal?.aborted) onAbort();
  else options.signal?.addEventListener('abort', onAbort, { once: true });

  let noWorkerSince: number | undefined;
  /**
   * Chunks are waiting in Redis: is any worker host there to take them? With
   * one, the wait is a sign of life (core cuts a batch that shows none for
   * twice its deadline plus grace, with a Timeout on every row that would
   * leave the chunks queued for nobody). With none for `noWorkerMs`, the
   * unfinished rows fail saying so and their chunks are withdrawn.
   */
  const fleet = async (waiting: ChunkState[]) => {
    let workers: number | undefined;
    step = 'listing workers';
    try {
      workers = await client.workerCount(fn.language);
    } catch {
      // Unknown (CLIENT LIST refused by an ACL, a slow answer): neither a sign of life nor of death.
      return;
    }
    // Unknown too (no CLIENT LIST): no sign of life, so core's bound still ends a wait for no worker.
    if (workers === undefined) return;
    const now = performance.now();
    if (workers > 0) {
      noWorkerSince = undefined;
      options.onProgress?.(doneRows, total);
      return;
    }
    noWorkerSince ??= now;
    if (now - noWorkerSince < options.noWorkerMs) return;
    const queue = `${client.options.queueName}-${fn.language}`;
    const message = `no worker host has served queue ${queue} at ${where} for ${Math.round(now - noWorkerSince)} ms, so the rows not evaluated were withdrawn; start one (improv-extfn worker --redis ${where} --runner ${fn.language}), then refresh again`;
    for (const state of waiting) {
      if (state.settled) continue;
      abortedIds.push(state.id);
      fail(state, message);
    }
    for (const state of states) if (!state.settled) fail(state, message);
  };

  /** One round: (re)submit what is unsent, then read the state of what is in flight. */
  const round = async () => {
    const inRedis = states.filter((s) => !s.settled && !s.unsent).length;
    const unsent = states
      .filter((s) => !s.settled && s.unsent)
      .slice(0, Math.max(0, options.maxQueuedChunks - inRedis));
    if (unsent.length) {
      if (needPublish) {
        step = 'storing the descriptor';
        digest = await client.publishDescriptor(fn);
        needPublish = false;
      }
      for (const state of unsent) {
        let args = state.data?.args;
        if (args === undefined) {
          const frame = state.chunk.encode();
          if (frame.length > MAX_FRAME_BYTES) {
            // Workers refuse such a job; say so here, before it travels, with the fix.
            const { start, count } = state.chunk;
            const limit = `above the ${formatMiB(MAX_FRAME_BYTES)} one queue job may carry`;
            fail(
              state,
              count === 1
                ? `the arguments of row ${start} take ${formatMiB(frame.length)}, ${limit}: pass smaller arguments`
                : `the arguments of rows ${start} to ${start + count - 1} take ${formatMiB(frame.length)} as one job, ${limit}; lower chunkRows (a queue() option) so that fewer rows share a job, or pass smaller arguments`,
            );
            continue;
          }
          args = frame.toString('base64');
        }
        state.data = {
          v: WIRE_VERSION,
          digest,
          rows: state.chunk.count,
          args,
          timeoutMs: Math.round(options.timeoutMs),
          ...(options.mode ? { mode: options.mode } : {}),
        };
      }
      const sending = unsent.filter((s) => !s.settled);
      // An add that timed out is retried under the same ids: BullMQ ignores one it already holds.
      if (sending.length) {
        step = 'adding jobs';
        await client.add(
          fn.language,
          sending.map((s) => ({ id: s.id, data: s.data! })),
        );
      }
      for (const state of sending) state.unsent = false;
    }
    const inFlight = states.filter((s) => !s.settled && !s.unsent);
    if (!inFlight.length || (!snapshotDue && performance.now() - lastSnapshot < options.pollMs))
      return;
    snapshotDue = false;
    lastSnapshot = performance.now();
    step = 'reading job states';
    const snapshots = await client.snapshot(
      fn.language,
      inFlight.map((s) => s.id),
    );
    snapshots.forEach((snapshot, i) => {
      const state = inFlight[i]!;
      if (state.settled) return;
      switch (snapshot.state) {
        case 'completed':
          complete(state, snapshot.returnValue);
          break;
        case 'failed':
          if (snapshot.reason.startsWith(DESCRIPTOR_MISSING))
            resubmit(state, 'its descriptor was gone from Redis');
          else fail(state, failureMessage(snapshot.reason));
          break;
        case 'missing':
          resubmit(state, 'its job was gone from Redis: restarted or flushed');
          break;
      }
    });
    const waiting = inFlight.filter((s) => !s.settled && !s.unsent);
    if (waiting.length) await fleet(waiting);
  };

  // While Redis is slow to answer or unreachable, the wait is this runner's own, and bounded
  // (each round by requestTimeoutMs, the outage by connectionTimeoutMs, after which the rows
  // fail saying so): say so to core, whose silence bound (twice the deadline plus its grace) would
  // otherwise cut the batch first with a Timeout on every row that names no cause.
  let roundStarted: number | undefined;
  const heartbeat = setInterval(() => {
    const slow = roundStarted !== undefined && performance.now() - roundStarted >= options.pollMs;
    if (remaining > 0 && (slow || lastWhy !== undefined)) {
      options.onProgress?.(doneRows, total);
    }
  }, options.pollMs);
  heartbeat.unref?.();

  /** Since when Redis has been silent: its last answer after the first request it left unanswered. */
  const silentFrom = () => Math.max(silentSince!, client.answeredAt);
  const fix = `make Redis at ${where} answer again (redis-cli -u ${where} ping should print PONG), or point connection / IMPROV_EXTFN_REDIS_URL at one that does; then refresh again`;
  // Ends the wait on a round Redis does not answer, once the rows have failed.
  let giveUp: () => void = () => {};
  const gaveUp = new Promise<void>((resolve) => {
    giveUp = resolve;
  });
  /** Fails the unfinished rows: Redis has been silent for connectionTimeoutMs. */
  const loseQueue = () => {
    const silentMs = Math.round(performance.now() - silentFrom());
    // The request under way, else why the last round failed.
    const why =
      roundStarted !== undefined || lastWhy === undefined
        ? `Redis did not answer ${step}`
        : lastWhy;
    // Redis answering only "wait" (LOADING, BUSY…) all along is no silence: say what it answered.
    const said = lastDelay && {
      message: `${lastDelay.delay.said(lastDelay.step, silentMs)}; ${lastDelay.delay.fix}`,
      fix: lastDelay.delay.fix,
    };
    const message = client.closed
      ? 'the queue runner was closed during the call'
      : (said?.message ??
        `lost the queue at ${where}: no answer for ${silentMs} ms (${why}); ${fix}`);
    for (const state of states) {
      if (!state.settled) fail(state, message, client.closed ? {} : { fix: said?.fix ?? fix });
    }
    giveUp();
  };
  /** Fails the unfinished rows at once: Redis answered with an error reply, which waiting does not end. */
  const refuse = (refusal: RedisRefusal) => {
    const message = `${refusal.said(step)}; ${refusal.fix}`;
    for (const state of states) {
      if (state.settled) continue;
      if (!state.unsent) abortedIds.push(state.id); // withdrawn, as far as Redis lets us
      fail(state, message, { fix: refusal.fix });
    }
  };
  // Armed while Redis is silent: a round trip's own bound (requestTimeoutMs) may be longer than
  // connectionTimeoutMs (a call's is its deadline), and an answer to another request puts it back.
  let silenceTimer: NodeJS.Timeout | undefined;
  const watchSilence = () => {
    clearTimeout(silenceTimer);
    silenceTimer = undefined;
    if (silentSince === undefined || remaining === 0) return;
    const leftMs = silentFrom() + options.connectionTimeoutMs - performance.now();
    if (leftMs > 0) {
      silenceTimer = setTimeout(watchSilence, leftMs);
      silenceTimer.unref?.();
    } else loseQueue();
  };

  try {
    let first = true;
    while (remaining > 0) {
      if (!first && !woken) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, options.pollMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
      first = false;
      woken = false;
      if (remaining === 0) break;
      try {
        const started = performance.now();
        roundStarted = started;
        // A round under way is silence until Redis answers it.
        if (silentSince === undefined) {
          silentSince = started;
          watchSilence();
        }
        await Promise.race([round(), gaveUp]);
        // Redis answered; or the round asked it nothing (no poll due), which ends no silence
        // that an earlier round found, and starts none.
        if (silentSince === started || client.answeredAt >= started) {
          silentSince = undefined;
          lastWhy = undefined;
          lastDelay = undefined;
          watchSilence();
        }
      } catch (error) {
        if (client.closed) {
          for (const state of states) {
            if (!state.settled) fail(state, 'the queue runner was closed during the call');
          }
          break;
        }
        const refusal = redisRefusal(error, where, client.options.prefix);
        if (refusal) {
          refuse(refusal);
          break;
        }
        const delay = redisDelay(error, where);
        lastDelay = delay && { delay, step };
        lastWhy = error instanceof RedisUnreachableError ? error.message : String(error);
        roundStarted = undefined;
        watchSilence();
      } finally {
        roundStarted = undefined;
      }
    }
  } finally {
    clearInterval(heartbeat);
    clearTimeout(silenceTimer);
    options.signal?.removeEventListener('abort', onAbort);
    for (const state of states) client.unlisten(state.id);
    if (abortedIds.length) await client.cancel(fn.language, abortedIds).catch(() => {});
  }
}
