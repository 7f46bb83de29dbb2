/**
 * Attempts found by an audit, each made for real: a long range reports its
 * rows as it goes (core's silence bound otherwise fails a working batch with
 * Timeout on every row); a body answering every row with a long message of
 * its own cannot fill the host; an `improv_error` the worker cannot read (a
 * v128 global) is ignored instead of ending the worker row after row; a tag
 * section claiming 2^50 tags is refused as malformed, not run into a Timeout.
 */
import { type ExternalFn, ExtFnError, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { MAX_BATCH_MESSAGE_CHARS } from '../src/batch.js';
import { encodeLeb } from '../src/binary.js';
import { wasm } from '../src/index.js';
import { fnBody, TRAP_IF_NEGATIVE, wat } from './fixtures/bodies.js';
import { currentRunner, wasmRegistry } from './fixtures/registry.js';

const n = Value.number;

/** Spins `arg` iterations, then returns it: a row as slow as its argument asks. */
const SPIN = fnBody(
  1,
  `(local $i f64)
   (block $d (loop $l (br_if $d (f64.ge (local.get $i) (local.get 0)))
     (local.set $i (f64.add (local.get $i) (f64.const 1))) (br $l)))
   local.get 0`,
);

describe('progress inside a range', () => {
  test('a range reports its rows while it runs, not only when it ends, so core never takes it for stalled', async () => {
    const r = wasmRegistry({ spin: SPIN }, { options: { workers: 1 } });
    const fn = r.get('spin')!;
    // One worker: 400 rows are cut into 4 ranges of 100; each row spins for a few milliseconds
    // (about 5 on our machines), a range for half a second; the watchdog looks every 100 ms.
    const rows = 400;
    const reports: number[] = [];
    const { values, errors } = await currentRunner().callColumns(
      fn,
      [new Float64Array(rows).fill(4_000_000)],
      { timeoutMs: 800, onProgress: (done) => reports.push(done) },
    );
    expect(errors.size).toBe(0);
    expect(values.every((v) => v === 4_000_000)).toBe(true);
    // Before the fix the counts were exactly 100, 200, 300, 400: nothing while a range ran.
    expect(reports.some((done) => done % 100 !== 0)).toBe(true);
    expect(reports[0]).toBeLessThan(100);
    for (let i = 1; i < reports.length; i++) expect(reports[i]).toBeGreaterThan(reports[i - 1]!);
    expect(reports.at(-1)).toBe(rows);
  });

  test('rows that trap or hang in a reporting range still count once, and the count ends at the total', async () => {
    const r = wasmRegistry({ t: TRAP_IF_NEGATIVE }, { options: { workers: 1 } });
    const xs = Array.from({ length: 2_000 }, (_, i) => (i % 7 === 0 ? -i - 1 : i));
    const reports: number[] = [];
    const batch = await r.evalBatch(
      't',
      xs.map((x) => [n(x)]),
      { onProgress: (done) => reports.push(done) },
    );
    expect(batch.filter((v) => ExtFnError.isInstance(v))).toHaveLength(286);
    for (let i = 1; i < reports.length; i++) expect(reports[i]).toBeGreaterThan(reports[i - 1]!);
    expect(reports.at(-1)).toBe(2_000);
  });
});

/** Traps on every row with a 4,000-character message of its own, different for rows 0 to 4,095. */
const LONG_MESSAGE = wat(`(module
  (memory (export "memory") 1)
  (data (i32.const 16) "${'A'.repeat(4_000)}\\00")
  (global (export "improv_error") (mut i32) (i32.const 0))
  (func (export "improv_call") (param f64) (result f64) (local $x i32)
    (local.set $x (i32.trunc_f64_u (local.get 0)))
    (i32.store8 (i32.const 16) (i32.add (i32.const 66) (i32.and (local.get $x) (i32.const 15))))
    (i32.store8 (i32.const 17) (i32.add (i32.const 66) (i32.and (i32.shr_u (local.get $x) (i32.const 4)) (i32.const 15))))
    (i32.store8 (i32.const 18) (i32.add (i32.const 66) (i32.and (i32.shr_u (local.get $x) (i32.const 8)) (i32.const 15))))
    (global.set 0 (i32.const 16))
    unreachable))`);

describe("the body's own messages in a batch", () => {
  test('distinct long messages stop at the batch budget: later rows get their trap alone, saying why', async () => {
    const r = wasmRegistry({ f: LONG_MESSAGE });
    const rows = 3_000;
    const batch = await r.evalBatch(
      'f',
      Array.from({ length: rows }, (_, i) => [n(i)]),
    );
    expect(batch.every((v) => ExtFnError.isInstance(v) && v.kind === 'Runtime')).toBe(true);
    const messages = new Set((batch as ExtFnError[]).map((e) => e.message));
    const chars = [...messages].reduce((sum, m) => sum + m.length, 0);
    // Two workers may each spend what is left of the budget once; without it: 3,000 × 4 KB.
    expect(chars).toBeLessThan(2 * MAX_BATCH_MESSAGE_CHARS + 10_000);
    const leftOut = (batch as ExtFnError[]).filter((e) => /message is left out/.test(e.message));
    expect(leftOut.length).toBeGreaterThan(rows / 2);
    expect(leftOut[0]!.message).toBe(
      `function f: trap: unreachable (the body's own message is left out: this batch's messages passed ${MAX_BATCH_MESSAGE_CHARS} characters)`,
    );
    // Within the budget, a row's error is exactly eval's.
    const first = (batch as ExtFnError[]).findIndex((e) => !/left out/.test(e.message));
    const single = await r.eval('f', [n(first)]).catch((e: ExtFnError) => e);
    expect((single as ExtFnError).message).toBe((batch[first] as ExtFnError).message);
    expect((single as ExtFnError).message).toHaveLength('function f: '.length + 4_000 + 20);
  });

  test('rows failing with the same message share one error object (a repeated message costs once)', async () => {
    const r = wasmRegistry({ t: TRAP_IF_NEGATIVE });
    const { errors } = await r.evalColumns('t', [Float64Array.from({ length: 5_000 }, () => -1)]);
    expect(errors.size).toBe(5_000);
    expect(new Set(errors.values()).size).toBeLessThanOrEqual(2); // one per worker's reply at most
    expect(errors.get(0)!.message).toBe('function t: trap: unreachable');
  });
});

describe('an improv_error the worker cannot read', () => {
  const V128_ERROR = wat(`(module
    (memory (export "memory") 1)
    (global (export "improv_error") v128 (v128.const i32x4 16 0 0 0))
    (func (export "improv_call") (param f64) (result f64)
      (if (f64.lt (local.get 0) (f64.const 0)) (then unreachable))
      local.get 0))`);

  test('a v128 global is ignored: the trap is the message, in eval and in every batch row, and no worker dies', async () => {
    const r = wasmRegistry({ f: V128_ERROR });
    await expect(r.eval('f', [n(-1)])).rejects.toMatchObject({
      kind: 'Runtime',
      message: 'function f: trap: unreachable',
    });
    const xs = Array.from({ length: 200 }, (_, i) => (i % 2 ? -1 : i));
    const batch = await r.evalBatch(
      'f',
      xs.map((x) => [n(x)]),
    );
    for (let i = 0; i < xs.length; i++) {
      if (i % 2) expect((batch[i] as ExtFnError).message).toBe('function f: trap: unreachable');
      else expect(batch[i]).toEqual(n(i));
    }
    // Before the fix each trapping row ended its worker: 100 rows, 100 threads started.
    expect(currentRunner().stats().workersStarted).toBeLessThanOrEqual(2);
  });
});

describe('a tag section that claims more tags than it holds', () => {
  test('is refused as an invalid module, not compiled into a Timeout', async () => {
    const section = (id: number, payload: number[]) => [
      id,
      ...encodeLeb(payload.length),
      ...payload,
    ];
    const name = [...Buffer.from('improv_call')];
    const bytes = [
      ...[0, 0x61, 0x73, 0x6d, 1, 0, 0, 0],
      ...section(1, [1, 0x60, 1, 0x7c, 1, 0x7c]),
      ...section(3, [1, 0]),
      ...section(13, encodeLeb(2 ** 50)),
      ...section(7, [1, name.length, ...name, 0, 0]),
      ...section(10, [1, 4, 0, 0x20, 0, 0x0b]),
    ];
    const runner = wasm({ workers: 1 });
    try {
      const fn: ExternalFn = {
        name: 'tags',
        language: 'wasm',
        pure: false,
        body: `wasm:${Buffer.from(bytes).toString('base64')}`,
        argTypes: ['number'],
        returnType: 'number',
      };
      const error = await runner.call(fn, [n(1)], { timeoutMs: 3_000 }).catch((e: unknown) => e);
      expect(ExtFnError.isInstance(error)).toBe(true);
      expect(error).toMatchObject({ kind: 'Runtime' });
      expect((error as ExtFnError).message).toMatch(/invalid WebAssembly module: .*tag/);
    } finally {
      await runner.close();
    }
  });
});
