/**
 * The per-row output cap holds however a row writes: os.write to fd 1 or 2
 * and a child's output all reach the worker's stderr, which the host counts
 * per request. A chunk over rows × the cap is re-run row by row, so only the
 * row that wrote too much fails, with limit "output", and its worker is retired.
 */
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { failure, fixtureRegistry, hasPython } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

const MB = 1024 * 1024;

function make(body: string) {
  const made = fixtureRegistry(
    { f: [body, ['number'], 'number'] },
    { maxOutputBytes: MB, maxWorkers: 1 },
  );
  cleanups.push(() => made.registry.close());
  return made;
}

describe.skipIf(!hasPython)('the per-row output cap, whatever writes', () => {
  for (const [how, body] of [
    ['os.write to fd 1', 'os.write(1, b"x" * int(args[0]))\nresult = args[0]'],
    ['os.write to fd 2', 'os.write(2, b"x" * int(args[0]))\nresult = args[0]'],
    [
      "a child's output",
      'import subprocess\nsubprocess.run(["/usr/bin/python3", "-c", "import os; os.write(1, b\\"x\\" * %d)" % int(args[0])])\nresult = args[0]',
    ],
  ] as const) {
    test(`${how}: 5 MB is "output too large" and retires the worker; 200 KB passes (control)`, async () => {
      const { registry, runner } = make(body);
      expect(await registry.eval('f', [Value.number(200_000)])).toEqual(Value.number(200_000));
      expect(await registry.eval('f', [Value.number(200_000)])).toEqual(Value.number(200_000));
      expect(runner.stats()).toMatchObject({ started: 1, killed: 0 });
      const error = await failure(registry.eval('f', [Value.number(5 * MB)]));
      expect(error.message).toBe('function f: output too large');
      expect(error.limit).toBe('output');
      expect(error.fix).toMatch(/at most maxOutputBytes .*raise maxOutputBytes/);
      expect(runner.stats().killed).toBe(1);
      expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
    });
  }

  test('in a batch only the row that wrote too much fails; rows near the cap in one chunk pass', async () => {
    // Raw writes are counted per chunk (rows × the cap, plus what the chunk
    // before left unused): 24 MB is over any chunk of these 20 rows, however
    // the scheduler cuts them (5 MB was not, in a chunk of 10 or more rows).
    const { registry } = make(
      'os.write(1, b"x" * (24 * 1024 * 1024 if args[0] == 7 else 512 * 1024))\nresult = args[0]',
    );
    const rows = Array.from({ length: 20 }, (_, i) => [Value.number(i)]);
    const results = await registry.evalBatch('f', rows);
    const failed = results.flatMap((r, i) => (ExtFnError.isInstance(r) ? [i] : []));
    expect(failed).toEqual([7]);
    expect((results[7] as ExtFnError).limit).toBe('output');
    expect(results[19]).toEqual(Value.number(19));
  });
});
