/**
 * A body that fails to load (a syntax error, or an error the driver raises at
 * load) fails a one-shot call with the very error a warm call gets. One-shot
 * writes load, call and exit at once, so the driver also answers the call:
 * it used to say "call before load" with `"id":null`, and the run failed on
 * that frame ("unexpected frame from the driver") instead of the load's error.
 */
import { type ExtFnError, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { DRIVER_SOURCE } from '../src/index.js';
import {
  driverRun,
  failure,
  frames,
  line,
  restrictedOk,
  type Signature,
  scopedRegistry,
  skipReason,
} from './helpers.js';

const failing: Record<string, Signature> = {
  unclosed: ['result <- (args[[1]] +', ['number'], 'number'],
  escape: ['result <- "\\q"', ['number'], 'number'],
  // not a syntax error: the driver's own check at load
  vectorizedNoArgs: ['result <- 1', [], 'number', { vectorized: true }],
};

const expected: Record<string, RegExp> = {
  unclosed: /^function unclosed: SyntaxError: <text>:2:0: unexpected end of input/,
  escape: /^function escape: SyntaxError: '\\q' is an unrecognized escape/,
  vectorizedNoArgs:
    /^function vectorizedNoArgs: SyntaxError: function vectorizedNoArgs: a vectorized function needs at least one argument/,
};

function shape(error: ExtFnError) {
  return {
    kind: error.kind,
    message: error.message,
    functionName: error.functionName,
    stderr: error.stderr,
  };
}

describe.skipIf(!restrictedOk)(
  `R one-shot calls of a body that fails to load (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test.each(Object.keys(failing))(
      'one-shot eval fails with the same error as warm eval (%s)',
      async (name) => {
        const { registry: warm } = scopedRegistry({ [name]: failing[name]! });
        const { registry: oneShot } = scopedRegistry(
          { [name]: failing[name]! },
          { mode: 'oneShot' },
        );
        const args = failing[name]![1].map(() => Value.number(3));
        const warmError = await failure(warm.eval(name, args));
        const oneShotError = await failure(oneShot.eval(name, args));
        expect(warmError.message).toMatch(expected[name]!);
        expect(shape(oneShotError)).toEqual(shape(warmError));
        // and per call, on a warm runner
        expect(shape(await failure(warm.eval(name, args, { mode: 'oneShot' })))).toEqual(
          shape(warmError),
        );
      },
    );

    test('a one-shot batch gives every row the load error, as a warm batch does', async () => {
      const fns = { unclosed: failing.unclosed! };
      const { registry: warm } = scopedRegistry(fns);
      const { registry: oneShot } = scopedRegistry(fns, { mode: 'oneShot' });
      const rows = [[Value.number(1)], [Value.number(2)]];
      const settle = (p: Promise<unknown>) =>
        p.then(
          (value) => ({ value }),
          (error: ExtFnError) => ({ error: shape(error) }),
        );
      const warmBatch = await settle(warm.evalBatch('unclosed', rows));
      expect(JSON.stringify(warmBatch)).toMatch(/unexpected end of input/);
      expect(await settle(oneShot.evalBatch('unclosed', rows))).toEqual(warmBatch);
    });
  },
);

describe.skipIf(!restrictedOk)(
  `the R driver answers a request it cannot serve with its id (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('after a failed load, a call is answered "call before load" with the call\'s id; a malformed call too', async () => {
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
        line({
          op: 'load',
          id: 3,
          fn: {
            name: 'g',
            body: 'result <- args[[1]]',
            argTypes: ['number'],
            returnType: 'number',
          },
        }),
        line({ rows: [[1, 2]], op: 'call', id: 4 }), // one argument too many
        line({ op: 'call', id: 5, rows: [[7]] }),
        line({ op: 'exit' }),
      ]);
      const answers = frames((await driverRun(true, stdin)).stdout).map((f) => f.header);
      expect(answers.map((h) => h.id)).toEqual([undefined, 1, 2, 3, 4, 5]);
      expect(answers[1]).toMatchObject({ id: 1, error: { type: 'SyntaxError' } });
      expect(answers[2]).toEqual({
        id: 2,
        error: { type: 'ProtocolError', message: 'call before load' },
      });
      expect(answers[3]).toEqual({ id: 3, ok: true });
      expect(answers[4]).toEqual({
        id: 4,
        error: { type: 'ProtocolError', message: 'every row needs 1 argument(s)' },
      });
      expect(answers[5]).toMatchObject({ id: 5, values: [7] });
    });
  },
);

test.skipIf(restrictedOk)(`R one-shot load errors: ${skipReason}`, () => {});
