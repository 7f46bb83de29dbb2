/**
 * Where Redis is and the credentials come from the host (options or its
 * environment), and a bad address is a clear typed error.
 */
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { parseRedisUrl, queue, resolveConnection } from '../src/index.js';

describe('connection', () => {
  test('a Redis URL gives host, port, database, user, password and TLS', () => {
    expect(parseRedisUrl('redis://u:p%40ss@10.0.0.5:6380/2')).toEqual({
      host: '10.0.0.5',
      port: 6380,
      db: 2,
      username: 'u',
      password: 'p@ss',
    });
    expect(parseRedisUrl('rediss://[::1]')).toEqual({ host: '::1', port: 6379, tls: {} });
  });

  test('the URL and password come from the environment when no option gives them', () => {
    const env = {
      IMPROV_EXTFN_REDIS_URL: 'redis://cache:7000',
      IMPROV_EXTFN_REDIS_PASSWORD: 'from-env',
    };
    expect(resolveConnection(undefined, env)).toEqual({
      host: 'cache',
      port: 7000,
      password: 'from-env',
    });
    // A password in the URL wins over the environment's.
    expect(resolveConnection('redis://:inline@cache', env).password).toBe('inline');
  });

  test('no Redis, or a URL that is not one, is a LanguageUnavailable error with the fix', () => {
    for (const attempt of [
      () => resolveConnection(undefined, {}),
      () => resolveConnection('http://example.com', {}),
      () => resolveConnection('redis://host/db', {}),
      () => queue({ languages: ['python'], env: {} }),
    ]) {
      let error: unknown;
      try {
        attempt();
      } catch (e) {
        error = e;
      }
      expect(ExtFnError.isInstance(error) && error.kind).toBe('LanguageUnavailable');
      expect((error as ExtFnError).fix).toMatch(/IMPROV_EXTFN_REDIS_URL/);
    }
  });

  test('queue() refuses bad options by name', () => {
    const connection = 'redis://127.0.0.1:1';
    expect(() => queue({ connection, languages: [] })).toThrow(/languages must list at least one/);
    expect(() => queue({ connection, languages: ['Python'] })).toThrow(
      /not a lower-case language id/,
    );
    expect(() => queue({ connection, languages: ['python'], queueName: 'a:b' })).toThrow(
      /queueName/,
    );
    expect(() => queue({ connection, languages: ['python'], chunkRows: 0 })).toThrow(
      /chunkRows must be/,
    );
  });

  test('probe says what is wrong when Redis cannot be reached', async () => {
    const [runner] = queue({
      connection: 'redis://127.0.0.1:1',
      languages: ['python'],
      requestTimeoutMs: 500,
    });
    try {
      const probe = await runner!.probe();
      expect(probe.available).toBe(false);
      expect(probe.detail).toMatch(/cannot reach Redis at redis:\/\/127.0.0.1:1/);
    } finally {
      await runner!.close?.();
    }
  });
});
