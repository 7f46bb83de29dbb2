/**
 * The R driver after a `load` that failed: `call`, `callf64` and `callcols`
 * requests are each answered with their own id and a ProtocolError (their
 * payloads read past, so the stream stays in step), and a later valid
 * `load` serves all three. The Python driver answers the same way
 * (packages/python/test/load-failure.test.ts).
 */
import { describe, expect, test } from 'vitest';
import { DRIVER_SOURCE } from '../src/index.js';
import { driverRun, frames, line, restrictedOk, skipReason } from './helpers.js';

const f64 = (...xs: number[]) => Buffer.from(Float64Array.from(xs).buffer);

/** A request with a payload: its header line (`bytes` added) and the payload. */
function withPayload(header: Record<string, unknown>, payload: Buffer): Buffer {
  return Buffer.concat([line({ ...header, bytes: payload.length }), payload]);
}

describe.skipIf(!restrictedOk)(
  `the R driver after a failed load (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('answers call, callf64 and callcols with their ids and a ProtocolError, then loads and serves', async () => {
      const source = Buffer.from(DRIVER_SOURCE);
      const stdin = Buffer.concat([
        Buffer.from(`${source.length}\n`),
        source,
        line({
          op: 'load',
          id: 1,
          fn: { name: 'f', body: 'result <- (', argTypes: ['number'], returnType: 'number' },
        }),
        line({ op: 'call', id: 2, rows: [[1]] }),
        withPayload({ op: 'callf64', id: 3, rows: 2 }, f64(1, 2)),
        withPayload({ op: 'callcols', id: 4, rows: 2 }, f64(1, 2)),
        line({
          op: 'load',
          id: 5,
          fn: {
            name: 'g',
            body: 'result <- args[[1]] * 2',
            argTypes: ['number'],
            returnType: 'number',
          },
        }),
        line({ op: 'call', id: 6, rows: [[1.5], [4]] }),
        withPayload({ op: 'callf64', id: 7, rows: 2 }, f64(3, -1)),
        withPayload({ op: 'callcols', id: 8, rows: 1 }, f64(10)),
        line({ op: 'exit' }),
      ]);
      const run = await driverRun(true, stdin);
      expect(run.exit).toMatchObject({ exitCode: 0 });
      const answers = frames(run.stdout);
      const headers = answers.map((f) => f.header);
      expect(headers.map((h) => h.id)).toEqual([undefined, 1, 2, 3, 4, 5, 6, 7, 8]);
      expect(headers[1]).toMatchObject({ id: 1, error: { type: 'SyntaxError' } });
      expect(headers[2]).toEqual({
        id: 2,
        error: { type: 'ProtocolError', message: 'call before load' },
      });
      expect(headers[3]).toEqual({
        id: 3,
        error: {
          type: 'ProtocolError',
          message: 'callf64 needs a loaded all-number function and rows x arity doubles',
        },
      });
      expect(headers[4]).toEqual({
        id: 4,
        error: { type: 'ProtocolError', message: 'callcols before load' },
      });
      expect(headers[5]).toEqual({ id: 5, ok: true });
      expect(headers[6]).toMatchObject({ id: 6, values: [3, 8] });
      expect(headers[7]).toMatchObject({ id: 7, rows: 2, bytes: 16 });
      expect([answers[7]!.payload!.readDoubleLE(0), answers[7]!.payload!.readDoubleLE(8)]).toEqual([
        6, -2,
      ]);
      expect(headers[8]).toMatchObject({ id: 8, rows: 1, bytes: 8 });
      expect(answers[8]!.payload!.readDoubleLE(0)).toBe(20);
    });
  },
);

test.skipIf(restrictedOk)(`the R driver after a failed load: ${skipReason}`, () => {});
