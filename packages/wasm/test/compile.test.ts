/** Compiling (`compile.ts`, `module-cache.ts`, `compile-worker.ts`): the body size cap, compiles off the main thread under the deadline, shared and aborted compiles. */
import { ExtFnError, Value } from '@improv/extfn-core';
import { rejection as failure } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import { DEFAULT_MAX_BODY_BYTES, wasm } from '../src/index.js';
import { DOUBLE, fnBody, MULTIPLY_BASE64, slowWat, wat } from './fixtures/bodies.js';
import { currentRunner, wasmRegistry } from './fixtures/registry.js';

/** A registry with a fresh wasm runner and functions by name → body (one number argument unless told). */
const setup = (functions: Record<string, string>, options = {}, argTypes = ['number']) =>
  wasmRegistry(functions, { argTypes, options });

const n = Value.number;
/** A `wat:` body of exactly `bytes` bytes of UTF-8 after the prefix, doubling its argument. */
function watOfSize(bytes: number, filler = ' '): string {
  const text = DOUBLE.slice(4);
  const pad = bytes - Buffer.byteLength(text);
  const fill = filler.repeat(Math.floor(pad / Buffer.byteLength(filler)));
  return wat(`${text}${fill}${' '.repeat(pad - Buffer.byteLength(fill))}`);
}

describe('body size cap (maxBodyBytes)', () => {
  test('a wat: body over the default 1 MiB is a Runtime error naming the limit and the option; no worker starts', async () => {
    expect(DEFAULT_MAX_BODY_BYTES).toBe(1_048_576);
    const r = setup({ f: watOfSize(DEFAULT_MAX_BODY_BYTES + 1) });
    const error = await failure(r.eval('f', [n(1)]));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toBe(
      'function f: the wat: body is 1.0 MiB of text, above the limit of 1 MiB; a host that trusts its models can raise it with the maxBodyBytes option of wasm()',
    );
    expect(currentRunner().stats()).toMatchObject({ workersStarted: 0, compileWorkersStarted: 0 });
    // The verdict is remembered: the body is not looked at again.
    expect((await failure(r.eval('f', [n(1)]))).message).toBe(error.message);
    expect(currentRunner().stats().compiledBodies).toBe(1);
  });

  test('the cap counts UTF-8 bytes of the text and lets a body of exactly the cap through', async () => {
    const exact = watOfSize(1_000, ';; é\n');
    expect(exact.length).toBeLessThan(1_004); // multi-byte characters: fewer characters than bytes
    const r = setup({ exact, over: watOfSize(1_001, ';; é\n') }, { maxBodyBytes: 1_000 });
    expect(await r.eval('exact', [n(21)])).toEqual(n(42));
    const error = await failure(r.eval('over', [n(21)]));
    expect(error.message).toMatch(
      /the wat: body is 1001 bytes of text, above the limit of 1000 bytes/,
    );
  });

  test('a 34 MB body is refused before any worker sees it', async () => {
    const r = setup({ f: wat(`(module)${' '.repeat(34_000_000)}`) });
    const error = await failure(r.eval('f', [n(1)]));
    expect(error.message).toContain(
      'the body is 34,000,012 characters long, above the limit of 1 MiB; a host that trusts its models can raise it with the maxBodyBytes option',
    );
    // Refused on its length alone, again in O(1) on every call: the cache does not keep 34 MB alive.
    expect(currentRunner().stats()).toMatchObject({ compileWorkersStarted: 0, compiledBodies: 0 });
  });

  test('a wasm: body is measured by its decoded binary', async () => {
    const binary = Buffer.from(MULTIPLY_BASE64, 'base64').length;
    const body = `wasm:${MULTIPLY_BASE64}`;
    const fits = setup({ f: body }, { maxBodyBytes: binary }, ['number', 'number']);
    expect(await fits.eval('f', [n(6), n(7)])).toEqual(n(42));
    // A binary is read, checked and compiled on the compile worker too.
    expect(currentRunner().stats().compileWorkersStarted).toBe(1);
    await fits.close();
    const over = setup({ f: body }, { maxBodyBytes: binary - 1 }, ['number', 'number']);
    const error = await failure(over.eval('f', [n(6), n(7)]));
    expect(error.message).toContain(
      `the wasm: body is a binary of ${binary} bytes, above the limit of ${binary - 1} bytes; a host that trusts its models can raise it with the maxBodyBytes option`,
    );
    // Line breaks in the base64 do not count.
    const wrapped = `wasm:${MULTIPLY_BASE64.replace(/(.{8})/g, '$1\n')}`;
    const lenient = setup({ f: wrapped }, { maxBodyBytes: binary }, ['number', 'number']);
    expect(await lenient.eval('f', [n(6), n(7)])).toEqual(n(42));
  });

  test('maxBodyBytes must be a positive number', () => {
    expect(() => wasm({ maxBodyBytes: 0 })).toThrow(/maxBodyBytes must be a positive number/);
  });
});

describe('compiling off the main thread, under the deadline', () => {
  test('a slow compile times out at its deadline while the main thread keeps firing timers', async () => {
    const r = setup({ slow: slowWat(4_000_000), d: DOUBLE }, { maxBodyBytes: 8 * 1_048_576 });
    await r.eval('d', [n(1)]); // the compile worker is up: what follows is the slow body's own time
    let ticks = 0;
    const timer = setInterval(() => ticks++, 20);
    const started = performance.now();
    try {
      const error = await failure(r.eval('slow', [n(1)], { timeoutMs: 200 }));
      const elapsed = performance.now() - started;
      expect(error.kind).toBe('Timeout');
      expect(error.ms).toBe(200);
      expect(elapsed).toBeLessThan(3_000);
      expect(ticks).toBeGreaterThanOrEqual(5); // 200 ms of 20 ms ticks; a blocked main thread gives ~0
    } finally {
      clearInterval(timer);
    }
    // The compile worker that overran was terminated, and the runner goes on.
    expect(currentRunner().stats().compileWorkersAlive).toBe(0);
    expect(await r.eval('d', [n(21)])).toEqual(n(42));
  });

  test('a timeout is not remembered: given time, the same body compiles and runs', async () => {
    const r = setup({ slow: slowWat(4_000_000) }, { maxBodyBytes: 8 * 1_048_576 });
    expect((await failure(r.eval('slow', [n(1)], { timeoutMs: 200 }))).kind).toBe('Timeout');
    expect(await r.eval('slow', [n(5)], { timeoutMs: 20_000 })).toEqual(n(5));
    expect(currentRunner().stats().compiledBodies).toBe(2);
  });

  test('callers of one body share its compile, each under its own deadline', async () => {
    const r = setup({ slow: slowWat(4_000_000) }, { maxBodyBytes: 8 * 1_048_576 });
    const [short, long] = await Promise.allSettled([
      r.eval('slow', [n(1)], { timeoutMs: 200 }),
      r.eval('slow', [n(2)], { timeoutMs: 20_000 }),
    ]);
    expect(short.status === 'rejected' && (short.reason as ExtFnError).kind).toBe('Timeout');
    expect(long).toEqual({ status: 'fulfilled', value: n(2) });
    expect(currentRunner().stats()).toMatchObject({ compiledBodies: 1, compileWorkersStarted: 1 });
  });

  test('concurrent first calls of a new body compile it once', async () => {
    const r = setup({ d: DOUBLE });
    const values = await Promise.all(Array.from({ length: 20 }, (_, i) => r.eval('d', [n(i)])));
    expect(values).toEqual(Array.from({ length: 20 }, (_, i) => n(2 * i)));
    expect(currentRunner().stats()).toMatchObject({ compiledBodies: 1, compileWorkersStarted: 1 });
  });

  test('abort during a compile stops it and terminates its worker', async () => {
    const r = setup({ slow: slowWat(4_000_000), d: DOUBLE }, { maxBodyBytes: 8 * 1_048_576 });
    // A compile worker that is up and idle takes the slow body: on a loaded machine one still
    // starting at the abort would come up afterwards and rightly stay, idle.
    await r.eval('d', [n(1)]);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('user cancelled')), 150);
    const started = performance.now();
    const error = await failure(r.eval('slow', [n(1)], { signal: controller.signal }));
    expect(error.aborted).toBe(true);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(currentRunner().stats().compileWorkersAlive).toBe(0);
  });

  test('evalBatch and callColumns: a slow compile times out every row at once', async () => {
    const r = setup({ slow: slowWat(4_000_000) }, { maxBodyBytes: 8 * 1_048_576 });
    const rows = Array.from({ length: 1_000 }, (_, i) => [n(i)]);
    const started = performance.now();
    const batch = await r.evalBatch('slow', rows, { timeoutMs: 200 });
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(batch.every((v) => ExtFnError.isInstance(v) && v.kind === 'Timeout')).toBe(true);
    expect(currentRunner().stats().workersStarted).toBe(0);
    const columns = await failure(
      currentRunner().callColumns(r.get('slow')!, [new Float64Array(10)], { timeoutMs: 200 }),
    );
    expect(columns.kind).toBe('Timeout');
  });

  test("wabt's messages keep file:line:col, and thousands of errors are cut short", async () => {
    const broken = wat(`(module\n${'  (func (result f64) local.get 9)\n'.repeat(5_000)})`);
    const r = setup({ f: broken, g: fnBody(1, 'local.get 3') });
    const error = await failure(r.eval('f', [n(1)]));
    expect(error.message).toMatch(
      /^function f: invalid WebAssembly text: validate failed:\nbody\.wat:2:\d+: error:/,
    );
    expect(error.message.length).toBeLessThan(2_200);
    expect(error.message.endsWith(' …')).toBe(true);
    expect((await failure(r.eval('g', [n(1)]))).message).toMatch(
      /body\.wat:1:\d+: error: local variable out of range/,
    );
  });

  test('a body that crashes wabt (deep nesting) is refused, and later bodies still assemble', async () => {
    const deep = wat(
      `(module (func (export "improv_call") (param f64) (result f64) ${'(block '.repeat(1_000)}${')'.repeat(1_000)} local.get 0))`,
    );
    const r = setup({ deep, d: DOUBLE, e: fnBody(1, 'local.get 0') }, { workers: 1 });
    const error = await failure(r.eval('deep', [n(1)]));
    expect(error.message).toMatch(
      /^function deep: the WebAssembly text could not be assembled: wabt failed with "memory access out of bounds"/,
    );
    // Before, the broken wabt instance failed every later body; now the next one gets a fresh instance.
    expect(await r.eval('d', [n(21)])).toEqual(n(42));
    expect(await r.eval('e', [n(7)])).toEqual(n(7));
    expect(currentRunner().stats().compileWorkersStarted).toBe(1);
  });

  test('close() during a compile ends it; the caller gets a Runtime error, no worker is left', async () => {
    const r = setup({ slow: slowWat(4_000_000) }, { maxBodyBytes: 8 * 1_048_576 });
    const pending = failure(r.eval('slow', [n(1)], { timeoutMs: 20_000 }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    await r.close();
    const error = await pending;
    expect(error.message).toMatch(/closed/);
    expect(currentRunner().stats()).toMatchObject({ workersAlive: 0, compileWorkersAlive: 0 });
  });
});

describe('warmUp: compiles before the first call', () => {
  test('each body compiled once and a run thread up; the calls after compile nothing', async () => {
    const r = setup({ double: DOUBLE, times: fnBody(1, 'local.get 0 f64.const 3 f64.mul') });
    expect(await r.warmUp()).toEqual([
      { name: 'double', warm: true },
      { name: 'times', warm: true },
    ]);
    const warmed = currentRunner().stats();
    expect(warmed).toMatchObject({ compiledBodies: 2, workersStarted: 1 });
    expect(await r.eval('double', [n(21)])).toEqual(n(42));
    expect(await r.eval('times', [n(2)])).toEqual(n(6));
    expect(currentRunner().stats().compiledBodies).toBe(2);
  });

  test('a body that does not compile: the error its calls get, no thread needed for it', async () => {
    const r = setup({
      broken: wat('(module (func (export "f") (param f64) (result f64) (i32.const 1)))'),
    });
    const [broken] = await r.warmUp();
    expect(broken).toMatchObject({ name: 'broken', warm: false });
    const called = await failure(r.eval('broken', [n(1)]));
    expect(broken!.error?.kind).toBe(called.kind);
    expect(broken!.error?.message).toBe(called.message);
    expect(currentRunner().stats().compiledBodies).toBe(1); // the refusal is kept: compiled once
  });

  test('one-shot: the body compiled, and a reason why no thread is kept', async () => {
    const r = setup({ double: DOUBLE });
    expect(await r.warmUp(undefined, { mode: 'oneShot' })).toEqual([
      {
        name: 'double',
        warm: false,
        reason: 'one-shot calls start a thread each (the body is compiled)',
      },
    ]);
    expect(currentRunner().stats()).toMatchObject({ compiledBodies: 1, workersStarted: 0 });
  });
});
