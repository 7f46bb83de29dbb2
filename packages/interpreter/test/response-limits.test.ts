/**
 * What the host holds per worker is bounded by the largest legitimate frame
 * for the request (its rows and return type) plus a margin, enforced as bytes
 * arrive; a hostile driver's unframed stream retires the worker at once. The
 * real attempt measures the host's resident memory during a 4,700-row batch.
 */
import { type ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { FrameReader } from '../src/index.js';
import { CHUNK_RESPONSE_CAP, responseLimits } from '../src/response-limits.js';
import { fixtureRegistry, hasPython } from './helpers.js';

const MB = 1024 * 1024;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

describe('response limits', () => {
  test('a chunk of numbers may take tens of bytes a row, not the per-row output cap', () => {
    const numbers = responseLimits('number', 4096, MB, 'json');
    expect(numbers.line).toBeLessThan(8 * MB);
    expect(numbers.payload).toBe(0);
    const binary = responseLimits('number', 4096, MB, 'f64');
    expect(binary.payload).toBe(4096 * 8);
    expect(responseLimits('boolean', 4096, MB, 'json').line).toBeLessThanOrEqual(numbers.line);
  });

  test('a single row may always send up to the per-row cap (a long text, an error with its output)', () => {
    expect(responseLimits('number', 1, MB, 'json').line).toBeGreaterThan(MB);
    expect(responseLimits('text', 1, MB, 'json').line).toBeGreaterThan(MB);
  });

  test('texts scale with rows × the cap, up to a fixed ceiling per chunk', () => {
    expect(responseLimits('text', 8, MB, 'json').line).toBeGreaterThan(8 * MB);
    expect(responseLimits('text', 4096, MB, 'json').line).toBe(CHUNK_RESPONSE_CAP);
  });

  test('the reader refuses an unterminated line past its limit before holding more', () => {
    const reader = new FrameReader();
    reader.lineLimit = 1024;
    reader.push(Buffer.alloc(1000, 0x78));
    expect(() => reader.push(Buffer.alloc(100, 0x78))).toThrow(/more than 1024 bytes/);
  });

  test('the reader refuses a payload announced past its limit, and accepts one within', () => {
    const reader = new FrameReader();
    reader.payloadLimit = 16;
    expect(reader.push(Buffer.from('{"id":1,"bytes":16}\n' + 'x'.repeat(16)))).toHaveLength(1);
    expect(() => reader.push(Buffer.from('{"id":2,"bytes":17}\n'))).toThrow(/more than 16 bytes/);
  });
});

describe.skipIf(!hasPython)('a hostile driver that streams without framing', () => {
  test('during a 4,700-row batch the host grows by a small bound, the worker is retired, rows are right', async () => {
    // '#flood': answers small requests, but a chunk of 20 rows or more gets 512 MiB without a newline
    const { registry, runner } = fixtureRegistry(
      { flood: ['#flood\nresult = args[0]', ['number'], 'number'] },
      { maxWorkers: 2, chunkMs: 50 },
    );
    cleanups.push(() => registry.close());
    const rows = Array.from({ length: 4700 }, (_, i) => [Value.number(i)]);
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 5);
    let results: (Value | ExtFnError)[];
    try {
      results = await registry.evalBatch('flood', rows, { timeoutMs: 10_000 });
    } finally {
      clearInterval(sampler);
    }
    const grewMiB = (peak - before) / MB;
    expect(grewMiB, `host RSS grew by ${grewMiB.toFixed(0)} MiB`).toBeLessThan(128);
    expect(results).toEqual(rows.map(([x]) => x));
    expect(runner.stats().killed).toBeGreaterThan(0);
  });
});
