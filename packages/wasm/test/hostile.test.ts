/**
 * Hostile modules, attempted for real against the runner, each with a control:
 * declarations that would make V8 allocate without bound are refused before
 * they are compiled (the host's resident memory is measured around the call),
 * and a start function that never returns is stopped at the call's deadline
 * with its thread really gone (its /proc task and the process's CPU after the
 * call are measured). Linux /proc is read directly.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { ExtFnError, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { encodeLeb } from '../src/binary.js';
import { type WasmRunnerOptions, wasm } from '../src/index.js';
import { wat } from './fixtures/bodies.js';
import { currentRunner, wasmRegistry } from './fixtures/registry.js';

const ENTRY = '(func (export "improv_call") (result f64) f64.const 1)';
const MIB = 1_048_576;

/** A registry with a fresh wasm runner and functions of no argument by name → body. */
const setup = (bodies: Record<string, string>, options: WasmRunnerOptions = {}) =>
  wasmRegistry(bodies, { argTypes: [], timeoutMs: 10_000, options });

async function outcome(promise: Promise<Value>): Promise<Value | ExtFnError> {
  try {
    return await promise;
  } catch (error) {
    if (!ExtFnError.isInstance(error)) throw error;
    return error;
  }
}

const proc = existsSync('/proc/self/status') && existsSync('/proc/self/task');

function residentBytes(): number {
  const kib = /VmRSS:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  return Number(kib) * 1024;
}

/** CPU clock ticks (user + system) of one thread, or of the whole process for `self`. */
function ticks(stat: string): number {
  const fields = readFileSync(stat, 'utf8').split(') ')[1]!.split(' ');
  return Number(fields[11]) + Number(fields[12]);
}
function threadTicks(): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      out.set(tid, ticks(`/proc/self/task/${tid}/stat`));
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out;
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `call` while sampling the host's resident memory; returns its outcome and the peak growth. */
async function withPeakRss<T>(call: () => Promise<T>): Promise<{ result: T; growth: number }> {
  const before = residentBytes();
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, residentBytes());
  }, 5);
  try {
    const result = await call();
    peak = Math.max(peak, residentBytes());
    return { result, growth: peak - before };
  } finally {
    clearInterval(sampler);
  }
}

/** A binary module: `improv_call` returning 1, and the given memories (not expressible in default WAT). */
function withMemories(limits: [number, number][]): string {
  const section = (id: number, payload: number[]) => [id, ...encodeLeb(payload.length), ...payload];
  const name = [...Buffer.from('improv_call')];
  const bytes = [
    ...[0, 0x61, 0x73, 0x6d, 1, 0, 0, 0],
    ...section(1, [1, 0x60, 0, 1, 0x7c]),
    ...section(3, [1, 0]),
    ...section(5, [
      ...encodeLeb(limits.length),
      ...limits.flatMap(([min, max]) => [1, ...encodeLeb(min), ...encodeLeb(max)]),
    ]),
    ...section(7, [1, name.length, ...name, 0, 0]),
    ...section(10, [1, 11, 0, 0x44, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x0b]),
  ];
  return `wasm:${Buffer.from(bytes).toString('base64')}`;
}

describe.runIf(proc)('one allocation budget per module (host memory read from /proc)', () => {
  test('1,000 tables of 65,536 entries are refused before compiling, and the host does not grow; 31 such tables (just under 64 MiB) run', async () => {
    const r = setup({
      tables: wat(`(module ${'(table 65536 funcref)'.repeat(1_000)} ${ENTRY})`),
      control: wat(`(module ${'(table 65536 funcref)'.repeat(31)} ${ENTRY})`),
    });
    const { result: refused, growth } = await withPeakRss(() => outcome(r.eval('tables', [])));
    expect(refused).toBeInstanceOf(ExtFnError);
    const error = refused as ExtFnError;
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(
      /estimated 2\.0 GiB .* above its budget of 64 MiB .*: table 31 \(up to 65,536 elements\)/,
    );
    // Before the budget the same call took the host from ~85 MiB to ~1.9 GiB resident.
    expect(growth).toBeLessThan(200 * MIB);
    expect(await r.eval('control', [])).toEqual(Value.number(1));
  });

  test('the budget is an option: the same 31 tables are refused under a 32 MiB budget', async () => {
    const r = setup(
      { control: wat(`(module ${'(table 65536 funcref)'.repeat(31)} ${ENTRY})`) },
      { moduleBudgetBytes: 32 * MIB },
    );
    const error = (await outcome(r.eval('control', []))) as ExtFnError;
    expect(error.message).toMatch(/above its budget of 32 MiB .*: table 15 /);
    expect(() => wasm({ moduleBudgetBytes: 0 })).toThrow(/moduleBudgetBytes must be a positive/);
  });

  test('a function with 50,000 locals and 3,000 blocks is refused before its lazy compile (1.8 GiB, uninterruptible); with 10 locals it runs', async () => {
    const body = (locals: number) =>
      wat(
        `(module (func (export "improv_call") (result f64) (local${' f64'.repeat(locals)}) ${'(block (br 0))'.repeat(3_000)} f64.const 1))`,
      );
    const r = setup({ locals: body(50_000), control: body(10) });
    const { result, growth } = await withPeakRss(() => outcome(r.eval('locals', [])));
    expect((result as ExtFnError).kind).toBe('Runtime');
    expect((result as ExtFnError).message).toMatch(
      /: function 0 \(50,000 locals and parameters, up to 6,000 blocks and branches/,
    );
    expect(growth).toBeLessThan(200 * MIB);
    expect(await r.eval('control', [])).toEqual(Value.number(1));
  });

  test('many data segments, many globals and large element segments run under the default budget and are refused under a small one', async () => {
    const bodies = {
      data: wat(`(module (memory 1 1) ${'(data "x")'.repeat(90_000)} ${ENTRY})`),
      bigData: wat(
        `(module (memory 16 16) (data (i32.const 0) "${'x'.repeat(900_000)}") ${ENTRY})`,
      ),
      globals: wat(`(module ${'(global i32 (i32.const 0))'.repeat(38_000)} ${ENTRY})`),
      elements: wat(
        `(module (func $f) (table 65536 65536 funcref) (elem (i32.const 0) func${' $f'.repeat(65_536)}) ${'(elem func $f $f $f $f $f $f $f $f)'.repeat(10_000)} ${ENTRY})`,
      ),
    };
    const lenient = setup(bodies);
    for (const name of Object.keys(bodies)) {
      expect(await lenient.eval(name, []), name).toEqual(Value.number(1));
    }
    await lenient.close();
    const strict = setup(bodies, { moduleBudgetBytes: MIB });
    const messages = Object.fromEntries(
      await Promise.all(
        Object.keys(bodies).map(async (name) => {
          const error = (await outcome(strict.eval(name, []))) as ExtFnError;
          return [name, `${error.kind}: ${error.message}`];
        }),
      ),
    );
    expect(messages.data).toMatch(
      /^Runtime: .*above its budget of 1 MiB .*: data segment [\d,]+ \(1 bytes\)/,
    );
    expect(messages.bigData).toMatch(/^Runtime: .*: memory 0 \(up to 16 pages of 64 KiB\)/);
    expect(messages.globals).toMatch(/^Runtime: .*: global [\d,]+, about 32 bytes/);
    expect(messages.elements).toMatch(/^Runtime: .*: table 0 \(up to 65,536 elements\)/);
  });

  test('memories are summed: two memories at a 48 MiB ceiling break a 96 MiB budget; two small ones go to V8', async () => {
    const r = setup(
      {
        big: withMemories([
          [1, 768],
          [1, 768],
        ]),
        small: withMemories([
          [1, 1],
          [1, 1],
        ]),
      },
      { maxMemoryBytes: 48 * MIB },
    );
    const big = (await outcome(r.eval('big', []))) as ExtFnError;
    expect(big.message).toMatch(
      /above its budget of 96 MiB .*: memory 1 \(up to 768 pages of 64 KiB\)/,
    );
    // Node 20's V8 allows one memory; a V8 with multi-memory runs the module.
    const twoMemories = Buffer.from(
      withMemories([
        [1, 1],
        [1, 1],
      ]).slice(5),
      'base64',
    );
    const small = await outcome(r.eval('small', []));
    const { validate } = (
      globalThis as unknown as { WebAssembly: { validate(bytes: Uint8Array): boolean } }
    ).WebAssembly;
    if (validate(twoMemories)) expect(small).toEqual(Value.number(1));
    else
      expect((small as ExtFnError).message).toMatch(
        /^function small: invalid WebAssembly module: .*memory count/,
      );
  });
});

describe.runIf(proc)(
  'a start function that never returns (threads and CPU read from /proc)',
  () => {
    test('after allocating 31 tables (just under the budget), gets Timeout, its thread is gone afterwards and the process is quiet; while it ran, that thread was busy (control)', async () => {
      const r = setup({
        spin: wat(
          `(module ${'(table 65536 funcref)'.repeat(31)} (func $spin (loop $l (br $l))) (start $spin) ${ENTRY})`,
        ),
        warm: wat(`(module ${ENTRY})`),
      });
      await r.eval('warm', []); // compile and execution workers exist before the baseline
      const call = outcome(r.eval('spin', [], { timeoutMs: 3_000 }));
      // While the start function spins: find the busiest thread over one second.
      await sleep(800);
      const first = threadTicks();
      await sleep(1_000);
      const second = threadTicks();
      let busiest = '';
      let busiestTicks = -1;
      for (const [tid, t] of second) {
        const used = t - (first.get(tid) ?? t);
        if (used > busiestTicks) [busiest, busiestTicks] = [tid, used];
      }
      const error = (await call) as ExtFnError;
      expect(error.kind).toBe('Timeout');
      // Control: the spinning thread really burned CPU, so the measures below can see one.
      expect(busiestTicks).toBeGreaterThanOrEqual(5);
      expect(existsSync(`/proc/self/task/${busiest}`)).toBe(false);
      const process0 = ticks('/proc/self/stat');
      await sleep(1_000);
      const afterTicks = ticks('/proc/self/stat') - process0;
      // A leftover spinning thread would use about busiestTicks in this second.
      expect(afterTicks).toBeLessThan(Math.max(busiestTicks / 2, 5));
    });

    test('in a batch, every row gets Timeout and none of the batch’s threads is left; the process is quiet after', async () => {
      const r = setup({
        spin: wat(`(module (func $spin (loop $l (br $l))) (start $spin) ${ENTRY})`),
        warm: wat(`(module ${ENTRY})`),
      });
      await r.eval('warm', []);
      const before = readdirSync('/proc/self/task').length;
      const rows = Array.from({ length: 100 }, () => []);
      const results = await r.evalBatch('spin', rows, { timeoutMs: 1_000 });
      expect(results.every((v) => ExtFnError.isInstance(v) && v.kind === 'Timeout')).toBe(true);
      expect(readdirSync('/proc/self/task').length).toBeLessThanOrEqual(before);
      expect(currentRunner().stats().workersBusy).toBe(0);
      const process0 = ticks('/proc/self/stat');
      await sleep(1_000);
      // One spinning thread left behind would use about 100 ticks (one tick = 10 ms of CPU, a
      // whole core) in this second; the host's own background work (GC, the test runner) stays
      // far below half of that even on a loaded machine (it once took 11 ticks under CI).
      expect(ticks('/proc/self/stat') - process0).toBeLessThan(50);
    });
  },
);
