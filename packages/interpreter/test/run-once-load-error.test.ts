/**
 * A load that fails in a one-shot run: the load, the call and `exit` are all
 * in the driver's stdin at once, so the driver also answers the call (R's
 * driver said "call before load", with no id). The run ends at the failed
 * load, as a warm worker does (it is killed then, never sent the call), and
 * the call fails with the load's error, exactly as in warm mode.
 */
import { type ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { createInterpreterRunner, type InterpreterRunnerOptions } from '../src/index.js';
import { DriverRunError, runDriverOnce } from '../src/run-once.js';
import { BOOTSTRAP, failure, hasPython, PYTHON, policy } from './helpers.js';

/**
 * Fails the load of any body starting with "syntax error"; what it then
 * answers to a call depends on the rest of that body. A loaded body answers
 * calls with its rows' lengths, or with a wrong id ("wrong id").
 */
const DRIVER = String.raw`
import json, os, sys
out = os.dup(1)
os.dup2(2, 1)
inp = os.fdopen(os.dup(0), 'rb')
def write(header):
    os.write(out, json.dumps(header).encode() + b'\n')
write({'ready': 1, 'protocol': 1, 'version': 'load-error-fixture'})
failed = None
body = None
while True:
    line = inp.readline()
    if not line:
        break
    request = json.loads(line)
    op, rid = request['op'], request.get('id')
    if op == 'load':
        text = request['fn']['body']
        if text == 'exit at load':
            os._exit(7)
        if text.startswith('syntax error'):
            failed = text
            write({'id': rid, 'error': {'type': 'SyntaxError', 'message': '<text>:2:0: unexpected end of input', 'traceback': '1: result <- (args[[1]] +'}})
        else:
            body = text
            write({'id': rid, 'ok': True})
    elif op == 'call':
        if body is None:
            if failed == 'syntax error':  # as R's driver did: stopped before it read the id
                write({'id': None, 'error': {'type': 'ProtocolError', 'message': 'call before load'}})
            elif failed == 'syntax error, call answered':
                write({'id': rid, 'error': {'type': 'ProtocolError', 'message': 'call before load'}})
            elif failed == 'syntax error, then not a frame':
                os.write(out, b'this is not a frame\n')
            # 'syntax error, call unanswered': nothing, as a driver that exits
        elif body == 'wrong id':
            write({'id': rid + 100, 'values': [1]})
        else:
            write({'id': rid, 'values': [len(row) for row in request['rows']]})
    elif op == 'exit':
        break
`;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function loadErrorRunner(options: InterpreterRunnerOptions = {}) {
  const runner = createInterpreterRunner(
    {
      language: 'fixture',
      packageName: '@improv/extfn-fixture',
      resolveInterpreter: async () => (hasPython ? { path: PYTHON } : undefined),
      args: ['-s', '-S', '-c', BOOTSTRAP],
      driverSource: DRIVER,
    },
    { policy, ...options },
  );
  cleanups.push(() => runner.close());
  return runner;
}

function fn(name: string, body: string) {
  return {
    name,
    language: 'fixture',
    body,
    argTypes: ['number' as const],
    returnType: 'number' as const,
    pure: true,
  };
}

const bodies = [
  'syntax error',
  'syntax error, call answered',
  'syntax error, then not a frame',
  'syntax error, call unanswered',
];

function runOnce(body: string) {
  return runDriverOnce(
    { command: PYTHON, args: ['-s', '-S', '-c', BOOTSTRAP], policy, timeoutMs: 10_000 },
    DRIVER,
    [
      { op: 'load', fn: fn('f', body), maxOutputBytes: 1 << 20 },
      { op: 'call', rows: [[1]] },
    ],
  );
}

describe.skipIf(!hasPython)(`one-shot runs whose load fails (${policy})`, () => {
  test.each(bodies)(
    'runDriverOnce ends at a failed load: only its answer, whatever follows (%s)',
    async (body) => {
      const run = await runOnce(body);
      expect(run.responses.map((f) => f.header)).toEqual([
        {
          id: 1,
          error: {
            type: 'SyntaxError',
            message: '<text>:2:0: unexpected end of input',
            traceback: '1: result <- (args[[1]] +',
          },
        },
      ]);
    },
  );

  test('after a load that worked, every answer is still checked', async () => {
    const run = await runOnce('result = 1');
    expect(run.responses.map((f) => f.header)).toEqual([
      { id: 1, ok: true },
      { id: 2, values: [1] },
    ]);
    const wrong = await runOnce('wrong id').catch((error: unknown) => error);
    expect(wrong).toBeInstanceOf(DriverRunError);
    expect((wrong as DriverRunError).message).toBe(
      'unexpected frame from the driver: {"id":102,"values":[1]}',
    );
  });

  test.each(bodies)(
    'a one-shot call fails with the same error as a warm call (%s)',
    async (body) => {
      const warm = await failure(
        loadErrorRunner().call(fn('syntax', body), [Value.number(3)], { timeoutMs: 10_000 }),
      );
      const oneShot = await failure(
        loadErrorRunner({ mode: 'oneShot' }).call(fn('syntax', body), [Value.number(3)], {
          timeoutMs: 10_000,
        }),
      );
      const shape = (e: ExtFnError) => ({
        kind: e.kind,
        message: e.message,
        functionName: e.functionName,
        stderr: e.stderr,
      });
      expect(shape(oneShot)).toEqual(shape(warm));
      expect(shape(oneShot)).toEqual({
        kind: 'Runtime',
        message: 'function syntax: SyntaxError: <text>:2:0: unexpected end of input',
        functionName: 'syntax',
        stderr: '1: result <- (args[[1]] +',
      });
    },
  );

  test('a one-shot run that ends before its load answers fails "before answering", not as the body', async () => {
    const error = await failure(
      loadErrorRunner({ mode: 'oneShot' }).call(fn('gone', 'exit at load'), [Value.number(3)], {
        timeoutMs: 10_000,
      }),
    );
    expect([error.kind, error.message]).toEqual([
      'Runtime',
      'function gone: the interpreter exited with code 7 before answering',
    ]);
  });
});
