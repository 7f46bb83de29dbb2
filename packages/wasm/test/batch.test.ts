/** Wasm batches (`batch.ts`): evalBatch = eval row by row (traps, hangs, wrong types), hung rows cost only themselves, progress, abort, close, callColumns. */
import { ExtFnError, type Registry, type RowResult, sameValue, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import {
  DOUBLE,
  fnBody,
  HANG_IF_NEGATIVE,
  LOOP,
  TRAP_IF_NEGATIVE,
  wat,
} from './fixtures/bodies.js';
import { currentRunner, wasmRegistry } from './fixtures/registry.js';

/** A registry with a fresh wasm runner and functions by name → body (one number argument unless told). */
const setup = (functions: Record<string, string>, options = {}, argTypes = ['number']) =>
  wasmRegistry(functions, { argTypes, options });

const n = Value.number;
const rowsOf = (xs: number[]) => xs.map((x) => [n(x)]);

function describeResult(r: RowResult | undefined): string {
  if (r === undefined) return 'undefined';
  return ExtFnError.isInstance(r)
    ? `${r.kind}: ${r.message}`
    : `${r.type} ${String((r as { value?: unknown }).value)}`;
}

/** Asserts result i is exactly what eval gives on row i: the same value, or the same error kind and message. */
async function expectSameAsEval(
  r: Registry,
  name: string,
  rows: Value[][],
  batch: RowResult[],
  timeoutMs: number,
) {
  expect(batch).toHaveLength(rows.length);
  for (let i = 0; i < rows.length; i++) {
    let single: RowResult;
    try {
      single = await r.eval(name, rows[i]!, { timeoutMs });
    } catch (error) {
      single = error as ExtFnError;
    }
    const got = batch[i]!;
    const same = ExtFnError.isInstance(single)
      ? ExtFnError.isInstance(got) && got.kind === single.kind && got.message === single.message
      : !ExtFnError.isInstance(got) && sameValue(got, single);
    expect(same, `row ${i}: batch ${describeResult(got)}, eval ${describeResult(single)}`).toBe(
      true,
    );
  }
}

describe('evalBatch', () => {
  test('equals eval on each row over a mixed set: values, traps, a hang, wrong arity and types', async () => {
    const body = fnBody(
      1,
      // x < 0 traps, x == 13 hangs, otherwise 2x
      'local.get 0 f64.const 0 f64.lt (if (then unreachable)) local.get 0 f64.const 13 f64.eq (if (then (loop $l (br $l)))) local.get 0 local.get 0 f64.add',
    );
    const r = setup({ f: body });
    const rows: Value[][] = [
      [n(1)],
      [n(-1)],
      [n(13)],
      [n(Number.NaN)],
      [],
      [Value.text('x')],
      [n(-0)],
      ...rowsOf(Array.from({ length: 40 }, (_, i) => i - 5)),
    ];
    const timeoutMs = 300;
    const batch = await r.evalBatch('f', rows, { timeoutMs });
    expect(describeResult(batch[2])).toBe('Timeout: function f: timed out after 300 ms');
    expect(describeResult(batch[1])).toBe('Runtime: function f: trap: unreachable');
    await expectSameAsEval(r, 'f', rows, batch, timeoutMs);
  });

  test('a hung row in the middle of a large range costs that row only', async () => {
    const r = setup({ f: HANG_IF_NEGATIVE, t: TRAP_IF_NEGATIVE }, { workers: 1 });
    const xs = Array.from({ length: 20_000 }, (_, i) => (i === 12_345 ? -1 : i));
    const started = performance.now();
    const batch = await r.evalBatch('f', rowsOf(xs), { timeoutMs: 300 });
    expect(performance.now() - started).toBeLessThan(3_000);
    for (let i = 0; i < xs.length; i++) {
      if (i === 12_345) expect(describeResult(batch[i])).toMatch(/^Timeout/);
      else expect(batch[i], `row ${i}`).toEqual(n(2 * i));
    }
  });

  test('rows that trapped before a hung row in the same range keep their trap message', async () => {
    const body = fnBody(
      1,
      'local.get 0 f64.const 0 f64.lt (if (then unreachable)) local.get 0 f64.const 1000 f64.eq (if (then (loop $l (br $l)))) local.get 0',
    );
    const r = setup({ f: body }, { workers: 1 });
    const xs = Array.from({ length: 2_000 }, (_, i) => (i % 100 === 7 ? -1 : i));
    const batch = await r.evalBatch('f', rowsOf(xs), { timeoutMs: 300 });
    for (let i = 0; i < xs.length; i++) {
      const expected =
        xs[i]! < 0
          ? 'Runtime: function f: trap: unreachable'
          : i === 1000
            ? /^Timeout/
            : `number ${i}`;
      expect(describeResult(batch[i]), `row ${i}`).toMatch(expected);
    }
  });

  test('a large batch is right on every row and reports progress up to the total', async () => {
    const r = setup({ d: DOUBLE });
    const total = 300_000;
    const progress: number[] = [];
    const batch = await r.evalBatch('d', rowsOf(Array.from({ length: total }, (_, i) => i)), {
      onProgress: (done, all) => {
        expect(all).toBe(total);
        progress.push(done);
      },
    });
    for (let i = 0; i < total; i++)
      if ((batch[i] as { value: unknown }).value !== 2 * i) throw new Error(`row ${i}`);
    expect(progress.at(-1)).toBe(total);
    expect(progress.length).toBeGreaterThan(2);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
  });

  test('four arguments take the general path', async () => {
    const body = fnBody(
      4,
      'local.get 0 local.get 1 f64.sub local.get 2 f64.mul local.get 3 f64.div',
    );
    const r = setup({ g: body }, {}, ['number', 'number', 'number', 'number']);
    const rows = Array.from({ length: 1_000 }, (_, i) => [n(i), n(1), n(2), n(4)]);
    const batch = await r.evalBatch('g', rows);
    expect(batch.map((v) => (v as { value: unknown }).value)).toEqual(
      rows.map((_, i) => ((i - 1) * 2) / 4),
    );
  });

  test('a start function that hangs times out every row at once, not row by row', async () => {
    const body = wat(
      '(module (func $s (loop $l (br $l))) (start $s) (func (export "improv_call") (param f64) (result f64) local.get 0))',
    );
    const r = setup({ f: body });
    const started = performance.now();
    const batch = await r.evalBatch('f', rowsOf(Array.from({ length: 1_000 }, (_, i) => i)), {
      timeoutMs: 300,
    });
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(batch.every((v) => ExtFnError.isInstance(v) && v.kind === 'Timeout')).toBe(true);
  });

  test('a start function that traps fails every row with its message', async () => {
    const body = wat(
      '(module (func $s unreachable) (start $s) (func (export "improv_call") (param f64) (result f64) local.get 0))',
    );
    const batch = await setup({ f: body }).evalBatch('f', rowsOf([1, 2, 3]));
    expect(batch.map(describeResult)).toEqual(
      Array(3).fill('Runtime: function f: trap: unreachable'),
    );
  });

  test('a body refused at compile time fails every row with the same Runtime error', async () => {
    const batch = await setup({ f: wat('(module)') }).evalBatch('f', rowsOf([1, 2]));
    expect(batch.map((v) => ExtFnError.isInstance(v) && v.kind)).toEqual(['Runtime', 'Runtime']);
    expect((batch[0] as ExtFnError).message).toMatch(/no export named improv_call/);
  });

  test('abort stops the batch promptly and kills its workers; finished rows keep their values', async () => {
    const r = setup({ f: HANG_IF_NEGATIVE });
    const controller = new AbortController();
    const xs = [1, 2, -1, -1, 5, 6, -1, 8];
    const pending = r.evalBatch('f', rowsOf(xs), {
      timeoutMs: 60_000,
      signal: controller.signal,
    });
    // Abort once both workers are stuck in a loop (the body compiles first, on a compile worker).
    while (currentRunner().stats().workersBusy < 2)
      await new Promise((resolve) => setTimeout(resolve, 10));
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort(new Error('user cancelled'));
    const started = performance.now();
    const batch = await pending;
    expect(performance.now() - started).toBeLessThan(2_000);
    const aborted = batch.filter((v) => ExtFnError.isInstance(v) && v.aborted);
    expect(aborted.length).toBeGreaterThanOrEqual(3);
    batch.forEach((v, i) => {
      if (!ExtFnError.isInstance(v)) expect(v).toEqual(n(2 * xs[i]!));
    });
    // The workers stuck in a loop were terminated (a worker still starting may join the pool idle).
    expect(currentRunner().stats().workersBusy).toBe(0);
    expect(currentRunner().stats().workersAlive).toBeLessThanOrEqual(1);
  });

  test('an already aborted signal evaluates nothing', async () => {
    const r = setup({ d: DOUBLE });
    const batch = await r.evalBatch('d', rowsOf([1, 2]), { signal: AbortSignal.abort() });
    expect(batch.every((v) => ExtFnError.isInstance(v) && v.aborted)).toBe(true);
  });

  test('close() during a batch ends it and leaves no worker', async () => {
    const r = setup({ loop: LOOP }, {}, []);
    const pending = r.evalBatch('loop', [[], [], []], { timeoutMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await r.close();
    const batch = await pending;
    expect(batch.map(describeResult)).toEqual(
      Array(3).fill('Runtime: function loop: the runner is closed'),
    );
    expect(currentRunner().stats().workersAlive).toBe(0);
  });

  test('callColumns gives the same values and errors as callBatch, without Value objects', async () => {
    const r = setup({ f: TRAP_IF_NEGATIVE });
    const xs = Array.from({ length: 10_000 }, (_, i) => (i % 1_000 === 3 ? -i : i * 0.5));
    const fn = r.get('f')!;
    const { values, errors } = await currentRunner().callColumns(fn, [Float64Array.from(xs)], {
      timeoutMs: 5_000,
    });
    const batch = await currentRunner().callBatch(fn, rowsOf(xs), { timeoutMs: 5_000 });
    expect(errors.size).toBe(10);
    for (let i = 0; i < xs.length; i++) {
      const error = errors.get(i);
      expect(error ? describeResult(error) : `number ${values[i]}`).toBe(describeResult(batch[i]));
    }
    await expect(currentRunner().callColumns(fn, [], { timeoutMs: 100 })).rejects.toMatchObject({
      kind: 'ArityMismatch',
      expected: 1,
      got: 0,
    });
  });
});
