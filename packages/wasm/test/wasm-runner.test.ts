/** The Wasm runner (`wasm-runner.ts`): calls across the numeric ABI, one compile per body, one-shot mode, and the bodies it refuses with the reason. */
import { ExtFnError, Value } from '@improv/extfn-core';
import { engineSerdeFixture, rejection as failure } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import { wasm } from '../src/index.js';
import {
  DOUBLE,
  fnBody,
  HYPOT_SQUARED,
  LOOP,
  MULTIPLY_BASE64,
  RAISE_NOPE,
  RETURNS_I32,
  TRAP_IF_NEGATIVE,
  wat,
} from './fixtures/bodies.js';
import { currentRunner, wasmRegistry } from './fixtures/registry.js';

/** A registry with a fresh wasm runner and one function `f` with the given body. */
const setup = (body: string, argTypes = ['number'], returnType = 'number', options = {}) =>
  wasmRegistry({ f: body }, { argTypes, returnType, pure: true, options });

const n = Value.number;

describe('calls', () => {
  test('doubles 21 to 42', async () => {
    expect(await setup(DOUBLE).eval('f', [n(21)])).toEqual(n(42));
  });

  test('two arguments: a*a + b*b on 3, 4 is 25', async () => {
    expect(await setup(HYPOT_SQUARED, ['number', 'number']).eval('f', [n(3), n(4)])).toEqual(n(25));
  });

  test("the engine's fixture (fn double, serde form) loads and runs", async () => {
    const fixture = JSON.parse(JSON.stringify(engineSerdeFixture));
    const registry = wasmRegistry({}, { options: { workers: 1 } });
    registry.register(fixture.external_fns.double);
    expect(registry.get('double')?.language).toBe('wasm');
    expect(await registry.eval('double', [n(21)])).toEqual(n(42));
  });

  test('a base64 binary module (wasm:) runs', async () => {
    const r = setup(`wasm:${MULTIPLY_BASE64}`, ['number', 'number']);
    expect(await r.eval('f', [n(6), n(7)])).toEqual(n(42));
  });

  test('NaN, infinities and -0 cross the ABI unchanged', async () => {
    const r = setup(fnBody(1, 'local.get 0'));
    for (const x of [Number.NaN, Infinity, -Infinity, -0, 5e-324]) {
      expect(await r.eval('f', [n(x)])).toEqual(n(x)); // toEqual tells -0 from 0 and matches NaN
    }
  });

  test('a module is compiled once per distinct body, not per call', async () => {
    const r = setup(DOUBLE);
    r.register({
      name: 'g',
      language: 'wasm',
      body: DOUBLE,
      argTypes: ['number'],
      returnType: 'number',
    });
    for (let i = 0; i < 5; i++) await r.eval('f', [n(i)]);
    await r.evalBatch('g', [[n(1)], [n(2)]]);
    expect(currentRunner().stats().compiledBodies).toBe(1);
    r.register({
      name: 'h',
      language: 'wasm',
      body: `${DOUBLE} `,
      argTypes: ['number'],
      returnType: 'number',
    });
    await r.eval('h', [n(1)]);
    expect(currentRunner().stats().compiledBodies).toBe(2);
  });

  test('post-MVP features V8 enables by default work: SIMD, multi-value, reference types', async () => {
    const body = wat(`(module
      (global $g (mut v128) (v128.const f64x2 1 2))
      (table 1 funcref)
      (func $pair (param f64) (result f64 f64) local.get 0 local.get 0)
      (func (export "improv_call") (param f64) (result f64)
        (f64x2.extract_lane 1
          (f64x2.add (global.get $g) (f64x2.splat (local.get 0))))
        (call $pair (local.get 0))
        f64.add
        f64.add))`);
    expect(await setup(body).eval('f', [n(10)])).toEqual(n(12 + 20));
  });

  test('one-shot mode uses a worker that ends with the call', async () => {
    const r = setup(DOUBLE);
    expect(await r.eval('f', [n(2)], { mode: 'oneShot' })).toEqual(n(4));
    expect(currentRunner().stats()).toMatchObject({ workersStarted: 1, workersAlive: 0 });
  });
});

describe('refused bodies', () => {
  test('an empty module is a Runtime error naming improv_call', async () => {
    const error = await failure(setup(wat('(module)')).eval('f', [n(1)]));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(/improv_call/);
    expect(error.message).toMatch(/exports found: none/);
  });

  test('a mis-typed export is a Runtime error naming improv_call and the signature found', async () => {
    const error = await failure(setup(RETURNS_I32, []).eval('f', []));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toContain('improv_call has the signature (result i32)');
    const params = await failure(
      setup(
        wat('(module (func (export "improv_call") (param i64 f64) (result f64) f64.const 0))'),
        ['number', 'number'],
      ).eval('f', [n(1), n(2)]),
    );
    expect(params.message).toContain('(param i64 f64) (result f64)');
  });

  test('an export that is not a function, and an arity that does not match, are named', async () => {
    const memory = await failure(
      setup(wat('(module (memory (export "improv_call") 1))')).eval('f', [n(1)]),
    );
    expect(memory.message).toContain('the export improv_call is a memory, not a function');
    const arity = await failure(setup(DOUBLE, ['number', 'number']).eval('f', [n(1), n(2)]));
    expect(arity.message).toContain(
      'improv_call takes 1 f64 parameter(s) but the function declares 2',
    );
  });

  test('a text argument or result is a Runtime error explaining the numeric ABI', async () => {
    const text = await failure(setup(DOUBLE, ['text']).eval('f', [Value.text('hi')]));
    expect(text.kind).toBe('Runtime');
    expect(text.message).toMatch(/numeric ABI/);
    expect(text.message).toContain('(text) -> number');
    const result = await failure(setup(DOUBLE, ['number'], 'boolean').eval('f', [n(1)]));
    expect(result.message).toMatch(/numeric ABI/);
    expect(currentRunner().stats().workersStarted).toBe(0);
  });

  test('a module with an import is refused', async () => {
    const body = wat(
      '(module (import "env" "log" (func $log (param f64))) (func (export "improv_call") (param f64) (result f64) local.get 0 call $log local.get 0))',
    );
    const error = await failure(setup(body).eval('f', [n(1)]));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toContain('imports env.log (function)');
    expect(error.message).toMatch(/may not import anything/);
    expect(currentRunner().stats().workersStarted).toBe(0);
  });

  test('invalid WAT is a Runtime error with wabt message, line and column', async () => {
    const error = await failure(
      setup(
        wat('(module\n  (func (export "improv_call") (param f64) (result f64)\n    local.get 7))'),
      ).eval('f', [n(1)]),
    );
    expect(error.kind).toBe('Runtime');
    expect(error.message).toMatch(/body\.wat:3:15: error: local variable out of range/);
    const syntax = await failure(setup(wat('(module (fnuc))')).eval('f', [n(1)]));
    expect(syntax.message).toMatch(/body\.wat:1:10: error: unexpected token "fnuc"/);
  });

  test('a body without a known prefix names the accepted prefixes', async () => {
    const error = await failure(setup('(module)').eval('f', [n(1)]));
    expect(error.kind).toBe('Runtime');
    expect(error.message).toContain('"wat:"');
    expect(error.message).toContain('"wasm:"');
  });

  test('bad base64 and a malformed binary are Runtime errors', async () => {
    expect((await failure(setup('wasm:not base64!').eval('f', [n(1)]))).message).toMatch(
      /not valid base64/,
    );
    const truncated = await failure(
      setup(`wasm:${MULTIPLY_BASE64.slice(0, 40)}`).eval('f', [n(1)]),
    );
    expect(truncated.message).toMatch(/invalid WebAssembly module/);
  });
});

describe('traps and limits', () => {
  test('unreachable, integer divide by zero, out of bounds and stack overflow trap with their message', async () => {
    const cases: [string, RegExp][] = [
      [TRAP_IF_NEGATIVE, /trap: unreachable/],
      [fnBody(1, 'i32.const 1 i32.const 0 i32.div_s f64.convert_i32_s'), /trap: divide by zero/],
      [fnBody(1, 'i32.const 70000 f64.load', '(memory 1)'), /trap: memory access out of bounds/],
      [
        wat(
          '(module (func $f (export "improv_call") (param f64) (result f64) local.get 0 call $f))',
        ),
        /Maximum call stack size exceeded/,
      ],
    ];
    for (const [body, message] of cases) {
      const registry = setup(body);
      const error = await failure(registry.eval('f', [n(-1)]));
      expect(error.kind).toBe('Runtime');
      expect(error.message).toMatch(message);
      await registry.close();
    }
  });

  test('a body can name its failure through improv_error', async () => {
    const error = await failure(setup(RAISE_NOPE, []).eval('f', []));
    expect(error.message).toBe('function f: nope (trap: unreachable)');
  });

  test('memory cannot grow past the ceiling: memory.grow fails with -1', async () => {
    // Returns memory.grow's result: the old size in pages, or -1.
    const grow = (pages: number) =>
      fnBody(1, `i32.const ${pages} memory.grow f64.convert_i32_s`, '(memory 1)');
    const r = setup(grow(255), ['number'], 'number', { maxMemoryBytes: 16 * 1024 * 1024 });
    expect(await r.eval('f', [n(0)])).toEqual(n(1));
    r.register({
      name: 'g',
      language: 'wasm',
      body: grow(256),
      argTypes: ['number'],
      returnType: 'number',
    });
    expect(await r.eval('g', [n(0)])).toEqual(n(-1));
  });

  test('memory declared above the ceiling is refused, initial or maximum', async () => {
    const initial = await failure(
      setup(fnBody(1, 'local.get 0', '(memory 300)')).eval('f', [n(1)]),
    );
    expect(initial.message).toMatch(
      /declares 300 pages of initial memory, above the ceiling of 256 pages \(16 MiB\)/,
    );
    const maximum = await failure(
      setup(fnBody(1, 'local.get 0', '(memory 1 1000)')).eval('f', [n(1)]),
    );
    expect(maximum.message).toMatch(/maximum memory of 1000 pages/);
    const small = await failure(
      setup(fnBody(1, 'local.get 0', '(memory 2)'), ['number'], 'number', {
        maxMemoryBytes: 65_536,
      }).eval('f', [n(1)]),
    );
    expect(small.message).toMatch(/above the ceiling of 1 pages/);
  });

  test('a runaway loop times out in under 3 s while the main thread keeps firing timers', async () => {
    const r = setup(LOOP, []);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 50);
    const started = performance.now();
    try {
      const error = await failure(r.eval('f', [], { timeoutMs: 1_000 }));
      const elapsed = performance.now() - started;
      expect(error.kind).toBe('Timeout');
      expect(error.ms).toBe(1_000);
      expect(elapsed).toBeLessThan(3_000);
      expect(ticks).toBeGreaterThanOrEqual(10); // 1 s of 50 ms ticks; a blocked main thread gives ~0
    } finally {
      clearInterval(timer);
    }
  });

  test('a timed-out worker is replaced, never reused', async () => {
    const r = setup(LOOP, [], 'number', { workers: 1 });
    r.register({
      name: 'd',
      language: 'wasm',
      body: DOUBLE,
      argTypes: ['number'],
      returnType: 'number',
    });
    expect(await r.eval('d', [n(1)])).toEqual(n(2));
    expect((await failure(r.eval('f', [], { timeoutMs: 200 }))).kind).toBe('Timeout');
    expect(await r.eval('d', [n(2)])).toEqual(n(4));
    expect(currentRunner().stats()).toMatchObject({ workersStarted: 2, workersAlive: 1 });
  });

  test('a start function that loops forever times out too', async () => {
    const body = wat(
      '(module (func $start (loop $l (br $l))) (start $start) (func (export "improv_call") (param f64) (result f64) local.get 0))',
    );
    const error = await failure(setup(body).eval('f', [n(1)], { timeoutMs: 300 }));
    expect(error.kind).toBe('Timeout');
  });

  test('abort stops a running call and kills its worker', async () => {
    const r = setup(LOOP, [], 'number', { workers: 1 });
    const controller = new AbortController();
    const pending = failure(r.eval('f', [], { signal: controller.signal }));
    // Abort once the loop runs (compiling comes first, on a compile worker).
    while (currentRunner().stats().workersBusy === 0)
      await new Promise((resolve) => setTimeout(resolve, 10));
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort();
    const error = await pending;
    expect(error.aborted).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(currentRunner().stats().workersAlive).toBe(0);
  });

  test('stateful modules get a fresh instance per call: a counter does not leak between calls', async () => {
    const counter = fnBody(
      1,
      'global.get $count f64.const 1 f64.add global.set $count global.get $count',
      '(global $count (mut f64) (f64.const 0))',
    );
    const r = setup(counter);
    for (let i = 0; i < 3; i++) expect(await r.eval('f', [n(0)])).toEqual(n(1));
    const batch = await r.evalBatch(
      'f',
      Array.from({ length: 100 }, () => [n(0)]),
    );
    expect(batch).toEqual(Array(100).fill(n(1)));
  });
  test('reuseInstances keeps one instance per worker, and a trap discards it', async () => {
    const counter = fnBody(
      1,
      'global.get $count f64.const 1 f64.add global.set $count local.get 0 f64.const 0 f64.lt (if (then unreachable)) global.get $count',
      '(global $count (mut f64) (f64.const 0))',
    );
    const r = setup(counter, ['number'], 'number', { workers: 1, reuseInstances: true });
    expect(await r.eval('f', [n(0)])).toEqual(n(1));
    expect(await r.eval('f', [n(0)])).toEqual(n(2));
    expect((await failure(r.eval('f', [n(-1)]))).message).toMatch(/unreachable/);
    expect(await r.eval('f', [n(0)])).toEqual(n(1));
    const batch = await r.evalBatch('f', [[n(0)], [n(0)], [n(-1)], [n(0)]]);
    expect(
      batch.map((v) => (ExtFnError.isInstance(v) ? v.kind : (v as { value: number }).value)),
    ).toEqual([2, 3, 'Runtime', 1]);
  });
});

describe('lifecycle', () => {
  test('close() ends every worker and later calls fail', async () => {
    const r = setup(DOUBLE);
    await Promise.all(Array.from({ length: 10 }, (_, i) => r.eval('f', [n(i)])));
    expect(currentRunner().stats().workersAlive).toBeGreaterThan(0);
    const closing = currentRunner();
    await r.close();
    expect(closing.stats().workersAlive).toBe(0);
    expect(
      (await failure(closing.call(r.get('f') ?? (undefined as never), [n(1)], { timeoutMs: 100 })))
        .message,
    ).toMatch(/closed/);
  });

  test('the pool never exceeds its bound under 1,000 concurrent evals', async () => {
    const r = setup(DOUBLE, ['number'], 'number', { workers: 2 });
    let peak = 0;
    const calls = Array.from({ length: 1_000 }, async (_, i) => {
      const value = await r.eval('f', [n(i)]);
      peak = Math.max(peak, currentRunner().stats().workersAlive);
      return value;
    });
    const values = await Promise.all(calls);
    expect(values).toEqual(Array.from({ length: 1_000 }, (_, i) => n(2 * i)));
    expect(peak).toBeLessThanOrEqual(2);
    expect(currentRunner().stats().workersStarted).toBeLessThanOrEqual(2);
  });

  test('an idle worker shuts down after idleTimeoutMs', async () => {
    const r = setup(DOUBLE, ['number'], 'number', { workers: 1, idleTimeoutMs: 100 });
    await r.eval('f', [n(1)]);
    expect(currentRunner().stats().workersAlive).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(currentRunner().stats().workersAlive).toBe(0);
    expect(await r.eval('f', [n(2)])).toEqual(n(4));
    expect(currentRunner().stats().workersStarted).toBe(2);
  });

  test('a host that never calls close() still exits: idle workers do not hold it', async () => {
    const { execFile } = await import('node:child_process');
    const dist = new URL('../dist/index.js', import.meta.url).href;
    const script = `
      import { Registry, Value } from '@improv/extfn-core';
      const { wasm } = await import(${JSON.stringify(dist)});
      const registry = new Registry({ runners: [wasm({ workers: 2 })] });
      registry.register({ name: 'd', language: 'wasm', body: ${JSON.stringify(DOUBLE)}, argTypes: ['number'], returnType: 'number' });
      const batch = await registry.evalBatch('d', Array.from({ length: 1000 }, (_, i) => [Value.number(i)]));
      console.log(batch.length);`;
    const started = performance.now();
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ['--input-type=module', '-e', script],
        { cwd: new URL('..', import.meta.url), timeout: 10_000 },
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      );
    });
    expect(out.trim()).toBe('1000');
    expect(performance.now() - started).toBeLessThan(10_000); // the idle timeout is 30 s: it did not wait for it
  });

  test('probe reports WebAssembly available and the protection', async () => {
    const probe = await wasm().probe();
    expect(probe.available).toBe(true);
    expect(probe.protection).toMatch(/no imports allowed, memory ≤ 256 pages \(16 MiB\)/);
    expect(probe.protection).toMatch(/64 MiB estimated allocation per module/);
    const raised = await wasm({ maxMemoryBytes: 64 * 1_048_576 }).probe();
    expect(raised.protection).toMatch(/112 MiB estimated allocation per module/);
  });

  test('importing the package loads no wabt, and the main thread never does: a compile worker assembles', async () => {
    const { execFileSync } = await import('node:child_process');
    const dist = new URL('../dist/index.js', import.meta.url).href;
    const script = `
      import { createRequire } from 'node:module';
      import { Registry, Value } from '@improv/extfn-core';
      const { wasm } = await import(${JSON.stringify(dist)});
      const loaded = () => Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('wabt'));
      const before = loaded();
      const runner = wasm({ workers: 1 });
      const registry = new Registry({ runners: [runner] });
      registry.register({ name: 'd', language: 'wasm', body: ${JSON.stringify(DOUBLE)}, argTypes: ['number'], returnType: 'number' });
      const value = (await registry.eval('d', [Value.number(1)])).value;
      const compileWorkers = runner.stats().compileWorkersStarted;
      await registry.close();
      console.log(JSON.stringify({ before, after: loaded(), value, compileWorkers }));`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      cwd: new URL('..', import.meta.url),
    });
    expect(JSON.parse(out)).toEqual({ before: false, after: false, value: 2, compileWorkers: 1 });
  });
});
