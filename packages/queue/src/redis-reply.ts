/**
 * Redis error replies (`-OOM …`, `-READONLY …`, `-NOAUTH …`): Redis answered,
 * and said no. The one place they are told apart from silence (a timeout, a
 * dropped connection), which the driver waits out: a refusal is no network
 * problem, waiting does not end it, and the caller is told at once what Redis
 * said and what to do about it.
 */

/** Replies that end on their own, waited out like silence; each with what to do when one outlasts the wait. */
const TRANSIENT: Record<string, (where: string) => string> = {
  LOADING: (where) =>
    `wait until Redis at ${where} has loaded its data from disk (redis-cli -u ${where} info persistence shows loading:0)`,
  BUSY: (where) =>
    `wait for the script running on Redis at ${where} to end, or end it (redis-cli -u ${where} script kill, or function kill)`,
  TRYAGAIN: (where) =>
    `wait until the Redis cluster at ${where} has finished moving the queue's keys between its nodes`,
  MASTERDOWN: (where) =>
    `point connection / IMPROV_EXTFN_REDIS_URL at the primary (redis-cli -u ${where} role names it), or wait until the replica at ${where} reaches it again`,
};

/** The reply's code: its first word (`OOM`, `LOADING`), `ERR` when it has none. */
const codeOf = (reply: string) => /^[A-Z]+/.exec(reply)?.[0] ?? 'ERR';

/**
 * What Redis said, without where in a BullMQ script (` script: <sha>, on
 * @user_script:27.`): the same refusal reads the same. For a transaction
 * Redis discarded (`EXECABORT`), the refusal of the command that caused it
 * (ioredis keeps it in `previousErrors`): that one names the cause and the fix.
 */
const replyOf = (error: Error): string => {
  const cause = (error as { previousErrors?: unknown[] }).previousErrors?.[0];
  const said = /^EXECABORT/.test(error.message) && cause instanceof Error ? cause : error;
  return said.message.replace(/ script: \w+, on @user_script:\d+\.?$/, '');
};

export interface RedisRefusal {
  /** The reply's first word: `OOM`, `NOAUTH`… */
  code: string;
  /** What Redis said, e.g. `OOM command not allowed when used memory > 'maxmemory'.` */
  reply: string;
  fix: string;
  /** `Redis at <where> refused <step>: <reply>`, as every caller's message says it. */
  said(step: string): string;
}

/** Whether `error` is a Redis error reply: ioredis gives every one, also from a pipeline or a BullMQ script, as a ReplyError. */
export function isErrorReply(error: unknown): error is Error {
  return error instanceof Error && error.name === 'ReplyError';
}

/**
 * The refusal in `error` when it is a Redis error reply that will not pass by
 * waiting, else undefined. `where` is the address (describeConnection),
 * `prefix` the queue's key prefix, and `then` what follows the fix (an
 * engine refreshes again; a worker host carries on).
 */
export function redisRefusal(
  error: unknown,
  where: string,
  prefix: string,
  then = 'then refresh again',
): RedisRefusal | undefined {
  if (!isErrorReply(error)) return undefined;
  const reply = replyOf(error);
  const code = codeOf(reply);
  if (code in TRANSIENT) return undefined;
  const toPrimary = `point connection / IMPROV_EXTFN_REDIS_URL at the primary, not a read-only replica (redis-cli -u ${where} role says which it is), ${then}`;
  const fixes: Record<string, string> = {
    OOM: `raise maxmemory or free memory on the Redis at ${where} (redis-cli -u ${where} info memory shows used_memory and maxmemory), ${then}`,
    READONLY: toPrimary,
    // a blocking read cut short when the node became a replica (a failover)
    UNBLOCKED: toPrimary,
    NOAUTH: `give the Redis password (redis://:password@host:port, or IMPROV_EXTFN_REDIS_PASSWORD), ${then}`,
    WRONGPASS: `give the right Redis user and password (redis://:password@host:port, or IMPROV_EXTFN_REDIS_PASSWORD), ${then}`,
    NOPERM: `let the Redis user run BullMQ's commands and scripts on the keys ${prefix}:*, ${then}`,
    WRONGTYPE: `a key under ${prefix}: on ${where} holds something the queue did not write: give queue() and the worker hosts another queueName or prefix, or delete that key, ${then}`,
    MISCONF: `Redis at ${where} refuses writes because it cannot save to disk: fix its disk or persistence settings (see its log), ${then}`,
  };
  return {
    code,
    reply,
    said: (step) => `Redis at ${where} refused ${step}: ${reply}`,
    fix:
      fixes[code] ??
      `fix what Redis at ${where} reported (it must accept BullMQ's commands and Lua scripts), ${then}`,
  };
}

export interface RedisDelay {
  /** What Redis said, e.g. `BUSY Redis is busy running a script. …` */
  reply: string;
  fix: string;
  /** `Redis at <where> answered <step> only with <code> for <ms> ms: <reply>` (without ms: `… with <code>: …`). */
  said(step: string, ms?: number): string;
}

/**
 * The delay in `error` when it is one of the replies that pass on their own
 * (LOADING, BUSY, TRYAGAIN, MASTERDOWN), else undefined: waited out like
 * silence, but when it outlasts the wait, the caller says what Redis kept
 * answering rather than that it did not answer.
 */
export function redisDelay(error: unknown, where: string): RedisDelay | undefined {
  if (!isErrorReply(error)) return undefined;
  const reply = replyOf(error);
  const code = codeOf(reply);
  const fix = TRANSIENT[code]?.(where);
  if (fix === undefined) return undefined;
  return {
    reply,
    fix: `${fix}, or raise connectionTimeoutMs (a queue() option) past how long that takes; then refresh again`,
    said: (step, ms) =>
      ms === undefined
        ? `Redis at ${where} answered ${step} with ${code}: ${reply}`
        : `Redis at ${where} answered ${step} only with ${code} for ${ms} ms: ${reply}`,
  };
}
