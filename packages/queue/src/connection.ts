/**
 * Where Redis is and how to log in. Credentials come from the host's
 * environment or its own options, never from a job: a worker reads
 * IMPROV_EXTFN_REDIS_URL and IMPROV_EXTFN_REDIS_PASSWORD itself.
 */
import { ExtFnError } from '@improv/extfn-core';
import type { RedisOptions } from 'ioredis';

export const REDIS_URL_ENV = 'IMPROV_EXTFN_REDIS_URL';
export const REDIS_PASSWORD_ENV = 'IMPROV_EXTFN_REDIS_PASSWORD';

/** A Redis URL (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS) or ioredis options. */
export type ConnectionInput = string | RedisOptions;

/** A queue that cannot say where Redis is serves no language: LanguageUnavailable, with the fix. */
function invalid(message: string): ExtFnError {
  const fix = `give a URL such as redis://127.0.0.1:6379 (option connection, --redis, or ${REDIS_URL_ENV})`;
  return new ExtFnError('LanguageUnavailable', `${message}; ${fix}`, { fix });
}

/** Parses a Redis URL into ioredis options. */
export function parseRedisUrl(url: string): RedisOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalid(`the Redis URL ${JSON.stringify(url)} does not parse`);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw invalid(`the Redis URL must start with redis:// or rediss://, got ${parsed.protocol}//`);
  }
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db))
    throw invalid(`the Redis database ${JSON.stringify(db)} is not a number`);
  const options: RedisOptions = {
    host: parsed.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    port: parsed.port ? Number(parsed.port) : 6379,
  };
  if (db) options.db = Number(db);
  if (parsed.username) options.username = decodeURIComponent(parsed.username);
  if (parsed.password) options.password = decodeURIComponent(parsed.password);
  if (parsed.protocol === 'rediss:') options.tls = {};
  return options;
}

/**
 * The connection to use: the given URL or options, else IMPROV_EXTFN_REDIS_URL;
 * a password from IMPROV_EXTFN_REDIS_PASSWORD when none was given.
 */
export function resolveConnection(
  input: ConnectionInput | undefined,
  env: NodeJS.ProcessEnv = process.env,
): RedisOptions {
  const source = input ?? env[REDIS_URL_ENV];
  if (source === undefined || source === '') {
    throw invalid(`no Redis to connect to: no connection option and ${REDIS_URL_ENV} is not set`);
  }
  const options = typeof source === 'string' ? parseRedisUrl(source) : { ...source };
  const password = env[REDIS_PASSWORD_ENV];
  if (options.password === undefined && password) options.password = password;
  return options;
}

/** `host:port` for messages; never the password. */
export function describeConnection(options: RedisOptions): string {
  return `redis://${options.host ?? '127.0.0.1'}:${options.port ?? 6379}${options.db ? `/${options.db}` : ''}`;
}
