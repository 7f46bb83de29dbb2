/**
 * `workMs` (docs/protocol.md, "Requests"): every call, callf64 and callcols
 * answer says how long the driver itself worked on the request, which the
 * host sizes chunks by. The driver alone, sandboxed, frames only.
 */
import { describe, expect, test } from 'vitest';
import { DRIVER_PROGRAM } from '../src/index.js';
import { driverRun, frames, line, restrictedOk, skipReason } from './helpers.js';

/** The answers to call, callf64 and callcols of two rows each, for `body`. */
async function answers(body: string) {
  const source = Buffer.from(DRIVER_PROGRAM);
  const f64 = Buffer.from(new Float64Array([1, 2]).buffer);
  const started = performance.now();
  const run = await driverRun(
    true,
    Buffer.concat([
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
  );
  const wallMs = performance.now() - started;
  expect(run.exit.exitCode, run.stderr).toBe(0);
  const [, loaded, ...calls] = frames(run.stdout).map((f) => f.header);
  expect(loaded).toEqual({ id: 1, ok: true });
  expect(calls.map((h) => h.id)).toEqual([2, 3, 4]);
  return { calls, wallMs };
}

describe.skipIf(!restrictedOk)(`workMs in the R driver ${restrictedOk ? '' : skipReason}`, () => {
  test("each answer gives the driver's own time on its rows", async () => {
    const slow = await answers('Sys.sleep(0.03)\nresult <- args[[1]]');
    const fast = await answers('result <- args[[1]]');
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
