/**
 * Redis error replies (`-OOM …`, `-READONLY …`, `-NOAUTH …`): Redis answered,
 * and said no. The one place they are told apart from silence (a timeout, a
 * dropped connection), which the driver waits out: a refusal is no network
 * problem, waiting does not end it, and the caller is told at once what Redis
 * said and what to do about it.
 */

/** Replies that end on their own (Redis loading its data, busy with a script): waited out like silence. */
const TRANSIENT = new Set(['LOADING', 'BUSY', 'TRYAGAIN', 'MASTERDOWN']);

export interface RedisRefusal {
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
 * `prefix` the queue's key prefix, for the fix.
 */
export function redisRefusal(
  error: unknown,
  where: string,
  prefix: string,
): RedisRefusal | undefined {
  if (!isErrorReply(error)) return undefined;
  const reply = error.message;
  const code = /^[A-Z]+/.exec(reply)?.[0] ?? 'ERR';
  if (TRANSIENT.has(code)) return undefined;
  const then = 'then refresh again';
  const fixes: Record<string, string> = {
    OOM: `raise maxmemory or free memory on the Redis at ${where} (redis-cli -u ${where} info memory shows used_memory and maxmemory), ${then}`,
    READONLY: `point connection / IMPROV_EXTFN_REDIS_URL at the primary, not a read-only replica (redis-cli -u ${where} role says which it is), ${then}`,
    NOAUTH: `give the Redis password (redis://:password@host:port, or IMPROV_EXTFN_REDIS_PASSWORD), ${then}`,
    WRONGPASS: `give the right Redis user and password (redis://:password@host:port, or IMPROV_EXTFN_REDIS_PASSWORD), ${then}`,
    NOPERM: `let the Redis user run BullMQ's commands and scripts on the keys ${prefix}:*, ${then}`,
    WRONGTYPE: `a key under ${prefix}: on ${where} holds something the queue did not write: give queue() and the worker hosts another queueName or prefix, or delete that key, ${then}`,
    MISCONF: `Redis at ${where} refuses writes because it cannot save to disk: fix its disk or persistence settings (see its log), ${then}`,
  };
  return {
    reply,
    said: (step) => `Redis at ${where} refused ${step}: ${reply}`,
    fix:
      fixes[code] ??
      `fix what Redis at ${where} reported (it must accept BullMQ's commands and Lua scripts), ${then}`,
  };
}
