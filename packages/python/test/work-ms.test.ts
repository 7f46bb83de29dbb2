/**
 * `workMs` (docs/protocol.md, "Requests"): every call, callf64 and callcols
 * answer says how long the driver itself worked on the request, which the
 * host sizes chunks by. Spoken to the driver directly (no sandbox, frames only).
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { DRIVER_SOURCE, PYTHON_ARGS } from '../src/index.js';
import { hasPython, PYTHON } from './helpers.js';

const line = (header: object) => Buffer.from(`${JSON.stringify(header)}\n`);

/** Header lines of the driver's output, each followed by its `bytes` of payload (skipped). */
function headers(stdout: Buffer): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  let at = 0;
  while (at < stdout.length) {
    const end = stdout.indexOf(0x0a, at);
    const header = JSON.parse(stdout.subarray(at, end).toString('utf8'));
    out.push(header);
    at = end + 1 + (typeof header.bytes === 'number' ? header.bytes : 0);
  }
  return out;
}

/** The answers to call, callf64 and callcols of two rows each, for `body`. */
function answers(body: string) {
  const source = Buffer.from(DRIVER_SOURCE);
  const f64 = Buffer.from(new Float64Array([1, 2]).buffer);
  const started = performance.now();
  const stdout = execFileSync(PYTHON, PYTHON_ARGS, {
    input: Buffer.concat([
      Buffer.from(`${source.length}\n`),
      source,
      line({
        op: 'load',
        id: 1,
        fn: { name: 'f', body, argTypes: ['number'], returnType: 'number' },
      }),
      line({ op: 'call', id: 2, rows: [[1], [2]] }),
      line({ op: 'callf64', id: 3, rows: 2, bytes: 16 }),
      f64,
      line({ op: 'callcols', id: 4, rows: 2, bytes: 16 }),
      f64,
      line({ op: 'exit' }),
    ]),
    env: { PYTHONHASHSEED: '0' },
  });
  const wallMs = performance.now() - started;
  const [, loaded, ...calls] = headers(stdout);
  expect(loaded).toEqual({ id: 1, ok: true });
  expect(calls.map((h) => h.id)).toEqual([2, 3, 4]);
  return { calls, wallMs };
}

describe.skipIf(!hasPython)('workMs in the Python driver', () => {
  test("each answer gives the driver's own time on its rows", () => {
    const slow = answers('import time\ntime.sleep(0.03)\nresult = args[0]');
    const fast = answers('result = args[0]');
    for (const [k, header] of slow.calls.entries()) {
      const ms = header.workMs as number;
      expect(typeof ms, `answer ${k}`).toBe('number');
      expect(ms, `answer ${k}: two rows of 30 ms`).toBeGreaterThanOrEqual(59);
      expect(ms, `answer ${k}`).toBeLessThan(slow.wallMs);
      const quick = fast.calls[k]!.workMs as number;
      expect(quick, `answer ${k}`).toBeGreaterThanOrEqual(0);
      expect(quick, `answer ${k}`).toBeLessThan(ms);
    }
  });
});
