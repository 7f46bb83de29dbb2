/** The Registry (`registry.ts`, `runner-handle.ts`) with fake runners: validation before dispatch, typed failures, deadlines and abort, evalBatch = eval, close, spec versions, the pure-result cache. */
import { describe, expect, test } from 'vitest';
import { functionDigest } from '../src/cache.js';
import {
  type Column,
  checkColumnArguments,
  type EvalOptions,
  ExtFnError,
  eval as evalFn,
  evaluate,
  type LanguageRunner,
  Registry,
  type RowResult,
  readCell,
  Value as V,
  VALUE_TYPES,
  type Value,
  type ValueType,
} from '../src/index.js';
import { counting } from '../src/testing/harness.js';
import { rejection as failure } from '../src/testing/index.js';
import { fakeRunner, fn } from './fake-runner.js';

describe('Registry', () => {
  test('register returns the previous descriptor; get and size', () => {
    const registry = new Registry();
    expect(registry.register(fn('add', 'add', ['number', 'number'], 'number'))).toBeUndefined();
    const previous = registry.register(fn('add', 'add', ['number', 'number'], 'number', true));
    expect(previous?.pure).toBe(false);
    expect(registry.get('add')?.pure).toBe(true);
    expect(registry.size).toBe(1);
    expect(() => registry.register({ name: 'x' })).toThrow(
      /invalid external function descriptor "x"/,
    );
  });

  test('eval dispatches to the runner and checks the result', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner], timeoutMs: 1234 });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    expect(await registry.eval('add', [V.number(2), V.number(3)])).toEqual(V.number(5));
    expect(calls[0]!.options.timeoutMs).toBe(1234);
    await registry.eval('add', [V.number(2), V.number(3)], { timeoutMs: 99 });
    expect(calls[1]!.options.timeoutMs).toBe(99);
  });

  test('NotFound, ArityMismatch, TypeMismatch never reach the runner', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const notFound = await failure(registry.eval('nope', []));
    expect(notFound).toMatchObject({ kind: 'NotFound', available: ['add'] });
    expect(await failure(registry.eval('add', [V.number(1)]))).toMatchObject({
      kind: 'ArityMismatch',
      expected: 2,
      got: 1,
    });
    const type = await failure(registry.eval('add', [V.number(1), V.text('2')]));
    expect(type).toMatchObject({ kind: 'TypeMismatch', position: 2, expected: 'number' });
    expect(type.message).toBe('function add: argument 2 expected number, got text "2"');
    const error = await failure(registry.eval('add', [V.number(1), V.error('DivisionByZero')]));
    expect(error.message).toMatch(/got error DivisionByZero/);
    const malformed = await failure(
      registry.eval('add', [V.number(1), { type: 'number', value: '2' } as unknown as Value]),
    );
    expect(malformed.message).toBe(
      'function add: argument 2 expected number, got a number whose value is "2"',
    );
    expect(calls).toHaveLength(0);
  });

  test('arguments not in an array: an ArityMismatch naming the function, what was given and a call that works', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('h', 'echo', ['number'], 'number'));
    const single = await failure(registry.eval('h', V.number(3) as never));
    expect(single).toMatchObject({
      kind: 'ArityMismatch',
      functionName: 'h',
      expected: 1,
      got: 'a single Value (number 3), not an array',
    });
    expect(single.message).toBe(
      "function h: the arguments must be an array of Values, one per argument (number), got a single Value (number 3), not an array; pass them in an array, e.g. eval('h', [Value.number(3)]); each row of evalBatch is such an array, e.g. evalBatch('h', [[Value.number(3)], …])",
    );
    expect(single.message).not.toMatch(/NaN/);
    expect(single.fix).toMatch(/eval\('h', \[Value\.number\(3\)\]\)/);
    // the example follows the declared argument types; nothing given at all says so
    registry.register(fn('mix', 'echo', ['text', 'boolean', 'datetime', 'enum'], 'text'));
    const none = await failure(registry.eval('mix', undefined as never));
    expect(none.message).toMatch(
      /^function mix: the arguments must be an array of Values, one per argument \(text, boolean, datetime, enum\), got undefined;/,
    );
    expect(none.fix).toMatch(
      /eval\('mix', \[Value\.text\('a'\), Value\.boolean\(true\), Value\.datetime\('2024-01-01T00:00:00Z'\), Value\.enum\(0\)\]\)/,
    );
    expect((await failure(registry.eval('h', 'x' as never))).got).toBe('a string ("x")');
    expect((await failure(registry.eval('h', 3 as never))).got).toBe('a number (3)');
    expect((await failure(registry.eval('h', { a: 1 } as never))).got).toBe('an object ({"a":1})');
    expect((await failure(registry.eval('h', new Float64Array(1) as never))).got).toBe(
      'a Float64Array',
    );
    // the standalone eval checks the same way
    await expect(
      evaluate(fn('h', 'echo', ['number'], 'number'), V.number(3) as never, { runners: [runner] }),
    ).rejects.toMatchObject({
      kind: 'ArityMismatch',
      got: 'a single Value (number 3), not an array',
    });
    expect(calls).toHaveLength(0);
  });

  test("evalBatch: a row not in an array is that row's error, as eval gives it; rows not in an array reject the call", async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('h', 'echo', ['number'], 'number'));
    const batch = await registry.evalBatch('h', [
      [V.number(1)],
      V.number(3) as never,
      [V.number(2)],
    ]);
    expect(batch[0]).toEqual(V.number(1));
    expect(batch[2]).toEqual(V.number(2));
    const alone = await failure(registry.eval('h', V.number(3) as never));
    expect(batch[1]).toMatchObject({ kind: 'ArityMismatch', message: alone.message });
    expect((batch[1] as ExtFnError).message).toMatch(
      /evalBatch\('h', \[\[Value\.number\(3\)\], …\]\)/,
    );
    calls.length = 0;
    for (const rows of [V.number(3), 'x', 5, undefined, new Float64Array(2)]) {
      const whole = await failure(registry.evalBatch('h', rows as never));
      expect(whole).toMatchObject({ kind: 'ArityMismatch', functionName: 'h', expected: 1 });
      expect(whole.message).toMatch(
        /^function h: evalBatch's rows must be an array of rows, each an array of Values, one per argument \(number\), got .+; pass e\.g\. evalBatch\('h', \[\[Value\.number\(3\)\], …\]\)$/,
      );
    }
    expect(calls).toHaveLength(0);
    // an unknown name still comes first
    expect((await failure(registry.evalBatch('nope', 5 as never))).kind).toBe('NotFound');
  });

  test('evalColumns: columns not in an array name the columns to pass', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    registry.register(fn('echo', 'echo', ['text'], 'text'));
    const numbers = await failure(registry.evalColumns('add', new Float64Array(3) as never));
    expect(numbers).toMatchObject({ kind: 'ArityMismatch', expected: 2, got: 'a Float64Array' });
    expect(numbers.message).toBe(
      "function add: evalColumns' columns must be an array of columns, one per argument (number, number), got a Float64Array; pass them in an array, e.g. evalColumns('add', [new Float64Array([3]), new Float64Array([3])])",
    );
    const text = await failure(registry.evalColumns('echo', 'abc' as never));
    expect(text.message).toMatch(
      /got a string \("abc"\); pass them in an array, e.g. evalColumns\('echo', \[\['a'\]\]\)$/,
    );
    // what runners call for their own columnar paths says the same
    expect(
      checkColumnArguments(fn('add', 'add', ['number', 'number'], 'number'), 5 as never)?.message,
    ).toMatch(
      /^function add: evalColumns' columns must be an array of columns.*got a number \(5\)/,
    );
    expect(calls).toHaveLength(0);
  });

  test('a language with no runner names the package to install and what is installed', async () => {
    const registry = new Registry({ runners: [fakeRunner('wasm').runner] });
    registry.register(fn('hyp', 'x', ['number'], 'number', false, 'r'));
    const error = await failure(registry.eval('hyp', [V.number(1)]));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toMatch(/install @improv\/extfn-r/);
    expect(error.message).toMatch(/installed: wasm/);
  });

  test('a language with no runner yet is registered (a runner may be added later); its calls name the language, the runners and the fix', async () => {
    const registry = new Registry({
      runners: [fakeRunner('python').runner, fakeRunner('wasm').runner],
    });
    expect(
      registry.register(fn('h', 'echo', ['number'], 'number', false, 'cobol')),
    ).toBeUndefined();
    expect(registry.get('h')?.language).toBe('cobol');
    const error = await failure(registry.eval('h', [V.number(1)]));
    expect(error).toMatchObject({
      kind: 'LanguageUnavailable',
      functionName: 'h',
      language: 'cobol',
      available: ['python', 'wasm'],
    });
    expect(error.message).toBe(
      'function h: no runner for language "cobol" is installed; install a runner package for "cobol" (one that implements LanguageRunner from @improv/extfn-core) and pass its runner to the Registry (installed: python, wasm)',
    );
    const [row] = await registry.evalBatch('h', [[V.number(1)]]).catch((e) => [e]);
    expect(row).toMatchObject({ kind: 'LanguageUnavailable', message: error.message });
    // the runner that comes later serves it
    registry.addRunner(fakeRunner('cobol').runner);
    expect(await registry.eval('h', [V.number(7)])).toEqual(V.number(7));
    await registry.close();
  });

  test('a third-party language gets a generic fix, never a guessed package name', async () => {
    const registry = new Registry({ runners: [fakeRunner('wasm').runner] });
    registry.register(fn('l', 'x', ['number'], 'number', false, 'lua'));
    const error = await failure(registry.eval('l', [V.number(1)]));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).not.toMatch(/@improv\/extfn-lua/);
    expect(error.fix).toBe(
      'install a runner package for "lua" (one that implements LanguageRunner from @improv/extfn-core) and pass its runner to the Registry',
    );
    // a caller that knows the package (e.g. from a runner's packageName) names it
    expect(ExtFnError.languageUnavailable('l', 'lua', [], 'some-extfn-lua').fix).toBe(
      'install some-extfn-lua and pass its runner to the Registry',
    );
    // an inherited property name is not a first-party language
    expect(ExtFnError.languageUnavailable('l', 'constructor', []).fix).toMatch(
      /runner package for "constructor"/,
    );
  });

  test('runner failures become typed errors; wrong result types are Runtime', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('plain', 'throw-plain', [], 'number'));
    registry.register(fn('typed', 'throw-typed', [], 'number'));
    registry.register(fn('wrong', 'wrong-type', [], 'number'));
    registry.register(fn('malformed', 'malformed', [], 'number'));
    const plain = await failure(registry.eval('plain', []));
    expect(plain).toMatchObject({
      kind: 'Runtime',
      message: 'function plain: runner failed: TypeError: plain failure',
    });
    expect(plain.cause).toBeInstanceOf(TypeError);
    expect((await failure(registry.eval('typed', []))).message).toBe(
      'function typed: ValueError: nope',
    );
    expect((await failure(registry.eval('wrong', []))).message).toBe(
      'function wrong: result expected number, got text "five"',
    );
    expect((await failure(registry.eval('malformed', []))).kind).toBe('Runtime');
  });

  test('a runner that ignores its deadline is stopped by the backstop', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('hang', 'hang', [], 'number'));
    const error = await failure(registry.eval('hang', [], { timeoutMs: 50 }));
    expect(error).toMatchObject({ kind: 'Timeout', ms: 50 });
  });

  test('an AbortSignal rejects the call with an aborted Runtime error and reaches the runner', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('hang', 'hang', [], 'number'));
    const controller = new AbortController();
    const pending = registry.eval('hang', [], { signal: controller.signal });
    controller.abort(new Error('user cancelled'));
    const error = await failure(pending);
    expect(error).toMatchObject({ kind: 'Runtime', aborted: true });
    expect(calls[0]!.options.signal).toBe(controller.signal);
    expect(
      (await failure(registry.eval('hang', [], { signal: AbortSignal.abort() }))).aborted,
    ).toBe(true);
  });

  test('evalBatch equals eval on each row, and reports progress', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    registry.register(fn('wrong', 'wrong-type', ['number'], 'number'));
    const rows: Value[][] = [
      [V.number(1), V.number(2)],
      [V.number(1)],
      [V.text('a'), V.number(1)],
      [V.number(Number.NaN), V.number(1)],
    ];
    const progress: number[] = [];
    const batch = await registry.evalBatch('add', rows, {
      onProgress: (done, total) => progress.push(done / total),
    });
    for (let i = 0; i < rows.length; i++) {
      const single = await registry.eval('add', rows[i]!).catch((e: ExtFnError) => e);
      if (ExtFnError.isInstance(single))
        expect((batch[i] as ExtFnError).message).toBe(single.message);
      else expect(batch[i]).toEqual(single);
    }
    expect(progress.at(-1)).toBe(1);
    const wrong = await registry.evalBatch('wrong', [[V.number(1)]]);
    expect((wrong[0] as ExtFnError).message).toMatch(/result expected number/);
    await expect(registry.evalBatch('nope', [])).rejects.toMatchObject({ kind: 'NotFound' });
  });

  test('close closes each runner once; the registry refuses work afterwards', async () => {
    const fake = fakeRunner();
    const registry = new Registry({ runners: [fake.runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    await Promise.all([registry.close(), registry.close()]);
    expect(fake.closedCount()).toBe(1);
    expect((await failure(registry.eval('add', [V.number(1), V.number(2)]))).message).toMatch(
      /closed/,
    );
    expect(() => registry.register(fn('b', 'add', [], 'number'))).toThrow(/closed/);
  });

  test('a runner of another specification version is refused with a clear message', () => {
    const { runner } = fakeRunner();
    expect(
      () => new Registry({ runners: [{ ...runner, specificationVersion: 'v2' as 'v1' }] }),
    ).toThrow(/specification v2; this core supports v1/);
    expect(() => new Registry({ runners: [runner, fakeRunner().runner] })).toThrow(
      /already installed/,
    );
  });
});

describe('pure-result cache', () => {
  test('a hit skips the runner; every field of the function is part of the key', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number', true));
    const args = [V.number(2), V.number(3)];
    await registry.eval('add', args);
    await registry.eval('add', args);
    expect(calls).toHaveLength(1);
    await registry.eval('add', [V.number(2), V.number(4)]);
    expect(calls).toHaveLength(2);
    // Same body under another name shares the entry (content-keyed) …
    registry.register(fn('add2', 'add', ['number', 'number'], 'number', true));
    await registry.eval('add2', args);
    expect(calls).toHaveLength(2);
    // … but a different body, type or return type misses.
    registry.register(fn('add', 'add:', ['number', 'number'], 'number', true));
    await registry.eval('add', args).catch(() => {});
    expect(calls).toHaveLength(3);
    registry.register(fn('echo', 'echo', ['number'], 'number', true));
    registry.register(fn('echoE', 'echo', ['enum'], 'enum', true));
    await registry.eval('echo', [V.number(1)]);
    await registry.eval('echoE', [V.enum(1)]);
    expect(calls).toHaveLength(5);
    // -0 and 0 are different arguments.
    await registry.eval('echo', [V.number(-0)]);
    expect(calls).toHaveLength(6);
    await registry.eval('add', args, { cache: false }).catch(() => {});
    expect(calls).toHaveLength(7);
    expect(registry.cache!.hits).toBeGreaterThan(0);
  });

  test('a vectorized body never shares entries with the same text run per row (its args are columns)', async () => {
    const fake = fakeRunner();
    const runner = {
      ...fake.runner,
      capabilities: { ...fake.runner.capabilities, vectorized: true },
    };
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('row', 'echo', ['number'], 'number', true));
    registry.register({ ...fn('columns', 'echo', ['number'], 'number', true), vectorized: true });
    await registry.eval('row', [V.number(7)]);
    await registry.eval('columns', [V.number(7)]);
    await registry.eval('columns', [V.number(7)]);
    await registry.eval('row', [V.number(7)]);
    expect(fake.calls.map((c) => c.fn)).toEqual(['row', 'columns']);
    expect(functionDigest(fn('a', 'echo', ['number'], 'number', true))).not.toBe(
      functionDigest({ ...fn('a', 'echo', ['number'], 'number', true), vectorized: true }),
    );
    // a per-row function's digest is what it was before vectorized functions existed
    expect(
      functionDigest({ ...fn('a', 'echo', ['number'], 'number', true), vectorized: false }),
    ).toBe(functionDigest(fn('a', 'echo', ['number'], 'number', true)));
  });

  test('impure functions are evaluated every time; errors are never cached', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('impure', 'add', ['number', 'number'], 'number', false));
    registry.register(fn('fails', 'throw-typed', [], 'number', true));
    for (let i = 0; i < 3; i++) await registry.eval('impure', [V.number(1), V.number(1)]);
    for (let i = 0; i < 3; i++) await registry.eval('fails', []).catch(() => {});
    expect(calls).toHaveLength(6);
  });

  test('evalBatch uses and fills the cache', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number', true));
    const rows = Array.from({ length: 10 }, (_, i) => [V.number(i), V.number(1)]);
    await registry.evalBatch('add', rows);
    const again = await registry.evalBatch('add', rows);
    expect(calls).toHaveLength(10);
    expect(again[9]).toEqual(V.number(10));
  });

  test('evalBatch puts each result at its row when rows settle here mid-batch', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number', true));
    // Rows 4 and 6 are cached; rows 2 and 7 are invalid; the rest go to the runner.
    await registry.evalBatch('add', [
      [V.number(4), V.number(1)],
      [V.number(6), V.number(1)],
    ]);
    const rows: Value[][] = Array.from({ length: 9 }, (_, i) => [V.number(i), V.number(1)]);
    rows[2] = [V.number(2)];
    rows[7] = [V.text('7'), V.number(1)];
    const before = calls.length;
    const batch = await registry.evalBatch('add', rows);
    expect(calls.length - before).toBe(5);
    for (const i of [0, 1, 3, 4, 5, 6, 8]) expect(batch[i]).toEqual(V.number(i + 1));
    expect(batch[2]).toMatchObject({ kind: 'ArityMismatch' });
    expect(batch[7]).toMatchObject({ kind: 'TypeMismatch' });
    expect(batch).toHaveLength(9);
  });

  test('evalBatch checks every result of a batch sent whole', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('wrong', 'wrong-type', ['number'], 'number'));
    registry.register(fn('echo', 'echo', ['text'], 'text'));
    const wrong = await registry.evalBatch('wrong', [[V.number(1)], [V.number(2)]]);
    for (const result of wrong)
      expect((result as ExtFnError).message).toMatch(/result expected number/);
    const echoed = await registry.evalBatch('echo', [[V.text('a')], [V.text('\ud800')]]);
    expect(echoed).toEqual([V.text('a'), V.text('\ud800')]);
  });

  test('evalBatch checks the results of a runner that returns a frozen array', async () => {
    const { runner } = fakeRunner();
    const frozen: LanguageRunner = {
      ...runner,
      capabilities: { ...runner.capabilities, batch: true },
      async callBatch(_fn, rows) {
        const results: RowResult[] = rows.map((_, i) => (i === 0 ? V.number(1) : V.text('x')));
        return Object.freeze(results) as RowResult[];
      },
    };
    const registry = new Registry({ runners: [frozen], cache: false });
    registry.register(fn('f', 'add', ['number'], 'number'));
    const batch = await registry.evalBatch('f', [[V.number(1)], [V.number(2)]]);
    expect(batch[0]).toEqual(V.number(1));
    expect((batch[1] as ExtFnError).message).toMatch(/result expected number, got text/);
  });

  test('bounded by entries and bytes, least recently used first', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner], cache: { maxEntries: 3 } });
    registry.register(fn('echo', 'echo', ['text'], 'text', true));
    for (const s of ['a', 'b', 'c']) await registry.eval('echo', [V.text(s)]);
    await registry.eval('echo', [V.text('a')]); // a is now most recent
    await registry.eval('echo', [V.text('d')]); // evicts b
    expect(registry.cache!.size).toBe(3);
    const hits = registry.cache!.hits;
    await registry.eval('echo', [V.text('a')]);
    expect(registry.cache!.hits).toBe(hits + 1);
    await registry.eval('echo', [V.text('b')]);
    expect(registry.cache!.hits).toBe(hits + 1);

    const small = new Registry({ runners: [fakeRunner().runner], cache: { maxBytes: 10_000 } });
    small.register(fn('echo', 'echo', ['text'], 'text', true));
    for (let i = 0; i < 50; i++) await small.eval('echo', [V.text(`${i}`.repeat(200))]);
    expect(small.cache!.bytes).toBeLessThanOrEqual(10_000);
    expect(small.cache!.size).toBeLessThan(50);
  });
});

describe('eval(fn, args, options)', () => {
  test('validates, dispatches one-shot, and leaves the runner open', async () => {
    const fake = fakeRunner();
    expect(evalFn).toBe(evaluate);
    const result = await evaluate(
      fn('add', 'add', ['number', 'number'], 'number'),
      [V.number(1), V.number(2)],
      { runners: [fake.runner] },
    );
    expect(result).toEqual(V.number(3));
    expect(fake.calls[0]!.options.mode).toBe('oneShot');
    expect(fake.closedCount()).toBe(0);
    await expect(
      evaluate(fn('add', 'add', ['number', 'number'], 'number'), [V.number(1)], {
        runners: [fake.runner],
      }),
    ).rejects.toMatchObject({ kind: 'ArityMismatch' });
    await expect(
      evaluate(fn('x', 'add', [], 'number', false, 'julia'), [], { runners: [fake.runner] }),
    ).rejects.toMatchObject({ kind: 'LanguageUnavailable' });
    await expect(evaluate({ name: 'bad' }, [], { runners: [] })).rejects.toThrow(
      /invalid external function descriptor/,
    );
  });
});

describe('evalColumns', () => {
  test('falls back to callBatch for a runner without callColumns, with per-row errors', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const out = await registry.evalColumns('add', [
      new Float64Array([1, 2, Number.NaN]),
      new Float64Array([10, 20, 1]),
    ]);
    expect([...out.values]).toEqual([11, 22, Number.NaN]);
    expect(out.errors.size).toBe(0);
    registry.register(fn('boom', 'throw-typed', ['number'], 'number'));
    const failed = await registry.evalColumns('boom', [new Float64Array([1, 2])]);
    expect(failed.errors.get(1)?.message).toBe('function boom: ValueError: nope');
    expect(Number.isNaN(failed.values[0])).toBe(true);
  });

  test("without a columnar path, a result of the wrong type is that row's error, not a silent NaN", async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('bad', 'wrong-type', ['number'], 'number'));
    const out = await registry.evalColumns('bad', [new Float64Array([1, 2])]);
    expect(Number.isNaN(out.values[0])).toBe(true);
    expect(out.errors.size).toBe(2);
    expect(out.errors.get(1)).toMatchObject({
      kind: 'Runtime',
      message: expect.stringMatching(/^function bad: result expected number, got text/),
    });
  });

  test('uses the runner columnar path when it has one, and checks what comes back', async () => {
    const { runner } = fakeRunner();
    let seen: readonly Float64Array[] = [];
    const columnar = {
      ...runner,
      callColumns: async (_fn: unknown, columns: readonly Float64Array[]) => {
        seen = columns;
        return {
          values: columns[0]!.map((x) => x * 2),
          errors: new Map([[1, new Error('plain')]]),
        };
      },
    };
    // A runner that breaks the contract (a plain Error in `errors`) is corrected by core.
    const registry = new Registry({ runners: [columnar as unknown as LanguageRunner] });
    registry.register(fn('double', 'echo', ['number'], 'number'));
    const input = new Float64Array([1, 2, 3]);
    const out = await registry.evalColumns('double', [input]);
    expect(seen[0]).toBe(input);
    expect([...out.values]).toEqual([2, Number.NaN, 6]);
    expect(out.errors.get(1)).toMatchObject({
      kind: 'Runtime',
      message: 'function double: runner failed: Error: plain',
    });
  });

  test('typed columns of every value type equal per-row eval; error cells in are skipped and given back', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    const columns: Record<ValueType, Column> = {
      number: Float64Array.of(1.5, Number.NaN, -0),
      boolean: Uint8Array.of(1, 0, 1),
      text: ['a', '\uD800', ''],
      datetime: BigInt64Array.of(-1n, 1_700_000_000_123_456_789n, 0n),
      enum: Uint32Array.of(0, 4_294_967_295, 7),
    };
    for (const type of VALUE_TYPES) {
      registry.register(fn(`echo_${type}`, 'echo', [type], type));
      const given = ExtFnError.runtime('upstream', 'the measure failed');
      const before = calls.length;
      const out = await registry.evalColumns<Column>(`echo_${type}`, [columns[type]], {
        errors: new Map([[2, given]]),
      });
      expect(calls.length - before, type).toBe(2); // the error row is not evaluated
      expect(out.errors.get(2), type).toBe(given);
      expect(out.values.constructor, type).toBe(columns[type].constructor);
      for (const i of [0, 1]) {
        const single = await registry.eval(`echo_${type}`, [
          readCell(registry.get(`echo_${type}`)!, [columns[type]], 0, i) as Value,
        ]);
        expect(
          readCell(registry.get(`echo_${type}`)!, [out.values], 0, i),
          `${type} row ${i}`,
        ).toEqual(single);
        expect(out.errors.has(i)).toBe(false);
      }
    }
    // Nanoseconds below the millisecond survive, before 1970 too.
    const dt = registry.get('echo_datetime')!;
    expect(readCell(dt, [columns.datetime], 0, 0)).toEqual({
      type: 'datetime',
      value: new Date(-1),
      nanos: 999_999,
    });
  });

  test("typed columns reach the runner's own callTypedColumns when every cell holds; core reads them otherwise", async () => {
    const { runner, calls } = fakeRunner();
    const seen: (readonly Column[])[] = [];
    const typed = {
      ...runner,
      callTypedColumns: async (_fn: unknown, columns: readonly Column[]) => {
        seen.push(columns);
        return {
          values: (columns[0] as string[]).map((s) => s.toUpperCase()),
          errors: new Map([[1, new Error('plain')]]),
        };
      },
    };
    const registry = new Registry({ runners: [typed as unknown as LanguageRunner] });
    registry.register(fn('up', 'echo', ['text'], 'text'));
    const input = ['a', 'b'];
    const out = await registry.evalColumns<string[]>('up', [input]);
    expect(seen).toEqual([[input]]);
    expect(out.values).toEqual(['A', '']); // a failed row reads '', whatever the runner left there
    expect(out.errors.get(1)?.message).toBe('function up: runner failed: Error: plain');
    // A cell that is not a string: core reads the rows itself, that row gets its error.
    const mixed = await registry.evalColumns<string[]>('up', [['c', 5 as unknown as string]]);
    expect(seen).toHaveLength(1);
    expect(calls.map((c) => c.fn)).toEqual(['up']);
    expect(mixed.values[0]).toBe('c');
    expect(mixed.errors.get(1)?.message).toMatch(
      /argument 1 expected text, got number in a text column/,
    );
  });

  test('with error cells in, the other rows still go to callTypedColumns, compacted, and come back in place', async () => {
    const { runner, calls } = fakeRunner();
    const seen: (readonly Column[])[] = [];
    const typed = {
      ...runner,
      callTypedColumns: async (_fn: unknown, columns: readonly Column[]) => {
        seen.push(columns);
        const days = columns[1] as BigInt64Array;
        return {
          values: (columns[0] as string[]).map((s, j) => `${s.toUpperCase()}${days[j]}`),
          errors: new Map([[1, ExtFnError.runtime('up', 'no b')]]), // row 1 of the compacted rows: b
        };
      },
    };
    const registry = new Registry({ runners: [typed as unknown as LanguageRunner] });
    registry.register(fn('up', 'echo', ['text', 'datetime'], 'text'));
    const upstream = ExtFnError.runtime('up', 'an error cell');
    const into = ['x', 'x', 'x', 'x', 'x'];
    const out = await registry.evalColumns<string[]>(
      'up',
      [['a', 'skipped', 'b', 'c', 'd'], BigInt64Array.of(1n, 2n, 3n, 4n, 5n)],
      { errors: new Map([[1, upstream]]), into },
    );
    expect(seen).toEqual([[['a', 'b', 'c', 'd'], BigInt64Array.of(1n, 3n, 4n, 5n)]]);
    expect(calls).toEqual([]); // no Value row went to call or callBatch
    expect(out.values).toBe(into);
    expect(out.values).toEqual(['A1', '', '', 'C4', 'D5']);
    expect(out.errors.get(1)).toBe(upstream);
    expect(out.errors.get(2)?.message).toMatch(/no b/);
    expect([...out.errors.keys()].sort()).toEqual([1, 2]);
    // every row an error cell: nothing to run
    const none = await registry.evalColumns<string[]>('up', [['a'], BigInt64Array.of(1n)], {
      errors: new Map([[0, upstream]]),
    });
    expect(seen).toHaveLength(1);
    expect(none.errors.get(0)).toBe(upstream);
  });

  test("a cell no Value can hold is that row's error, naming the argument; the other rows run", async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('flag', 'echo', ['boolean'], 'boolean'));
    const flags = await registry.evalColumns<Uint8Array>('flag', [Uint8Array.of(2, 1)]);
    expect(flags.errors.get(0)?.message).toMatch(/argument 1 expected boolean, got the byte 2/);
    expect([...flags.values]).toEqual([0, 1]);
  });

  test('refuses columns of the wrong class, wrong column counts, ragged columns and bad error maps', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('echo', 'echo', ['text'], 'text'));
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    await expect(registry.evalColumns('echo', [new Float64Array(1)])).rejects.toThrow(
      'function echo: argument 1 expected text, got a Float64Array (a text column is an array of strings)',
    );
    await expect(
      registry.evalColumns('add', [new Float64Array(1), new Float32Array(1) as never]),
    ).rejects.toMatchObject({ kind: 'TypeMismatch', position: 2 });
    await expect(
      registry.evalColumns('add', [new Float64Array(1), new Float64Array(1)], {
        errors: new Map([[1, ExtFnError.runtime('x', 'y')]]),
      }),
    ).rejects.toThrow(/options.errors maps row indexes in \[0, 1\)/);
    await expect(registry.evalColumns('add', [new Float64Array(1)])).rejects.toMatchObject({
      kind: 'ArityMismatch',
    });
    await expect(
      registry.evalColumns('add', [new Float64Array(2), new Float64Array(3)]),
    ).rejects.toMatchObject({ kind: 'TypeMismatch', position: 2 });
  });
});

describe('deadlines and misbehaving runners', () => {
  test('the default deadline is 5 000 ms, and each call can override it', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    expect(registry.timeoutMs).toBe(5_000);
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    await registry.eval('add', [V.number(1), V.number(2)]);
    await registry.evalBatch('add', [[V.number(1), V.number(2)]], { timeoutMs: 7 });
    expect(calls.map((c) => c.options.timeoutMs)).toEqual([5_000, 7]);
  });

  test('a nonsense deadline is refused before anything runs', async () => {
    const { runner, calls } = fakeRunner();
    expect(() => new Registry({ timeoutMs: Infinity })).toThrow(
      /timeoutMs must be a number of milliseconds in \(0, 2147483647\], got Infinity/,
    );
    expect(() => new Registry({ timeoutMs: 0 })).toThrow(RangeError);
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number', true));
    const args = [V.number(1), V.number(2)];
    const named = {
      kind: 'Runtime',
      message: expect.stringMatching(
        /^function add: option timeoutMs must be a number of milliseconds in \(0, 2147483647\], got/,
      ),
    };
    for (const timeoutMs of [0, -1, Number.NaN, 2 ** 31, Infinity]) {
      expect(await failure(registry.eval('add', args, { timeoutMs }))).toMatchObject(named);
      expect(await failure(registry.evalBatch('add', [args], { timeoutMs }))).toMatchObject(named);
      expect(
        await failure(
          registry.evalColumns('add', [new Float64Array(1), new Float64Array(1)], { timeoutMs }),
        ),
      ).toMatchObject(named);
      expect(
        await failure(
          evaluate(fn('add', 'add', ['number', 'number'], 'number'), args, {
            runners: [runner],
            timeoutMs,
          }),
        ),
      ).toMatchObject(named);
    }
    expect(calls).toHaveLength(0);
  });

  test('every bad option is an ExtFnError naming the option, and nothing runs', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const args = [V.number(1), V.number(2)];
    const bad: [string, Record<string, unknown>][] = [
      ['mode', { mode: 'cold' }],
      ['cache', { cache: 'yes' }],
      ['signal', { signal: {} }],
      ['onProgress', { onProgress: 5 }],
      ['timeoutMs', { timeoutMs: '100' }],
    ];
    for (const [option, options] of bad) {
      const error = await failure(registry.eval('add', args, options as EvalOptions));
      expect(ExtFnError.isInstance(error)).toBe(true);
      expect(error.message).toMatch(new RegExp(`^function add: option ${option} must be`));
    }
    const notAnObject = await failure(
      registry.evalBatch('add', [args], 7 as unknown as EvalOptions),
    );
    expect(notAnObject.message).toMatch(/option options must be an object, got 7/);
    expect(calls).toHaveLength(0);
  });

  test('a runner that throws synchronously, or throws a non-Error, gives a Runtime error', async () => {
    const { runner } = fakeRunner();
    const sync: LanguageRunner = {
      ...runner,
      call: (f) => {
        if (f.body === 'sync') throw new RangeError('synchronous');
        // biome-ignore lint/suspicious/noExplicitAny: deliberately not an Error
        return Promise.reject('a bare string' as any);
      },
    };
    const registry = new Registry({ runners: [sync] });
    registry.register(fn('s', 'sync', [], 'number'));
    registry.register(fn('b', 'bare', [], 'number'));
    expect(await failure(registry.eval('s', []))).toMatchObject({
      kind: 'Runtime',
      message: 'function s: runner failed: RangeError: synchronous',
    });
    expect(await failure(registry.eval('b', []))).toMatchObject({
      kind: 'Runtime',
      message: 'function b: runner failed: a bare string',
    });
    const batch = await registry.evalBatch('s', [[], []]);
    expect(batch.map((r) => (r as ExtFnError).kind)).toEqual(['Runtime', 'Runtime']);
  });
});

describe('cache keys and shared values', () => {
  test('the language is part of the key', async () => {
    const a = fakeRunner('alpha');
    const b = fakeRunner('beta');
    const registry = new Registry({ runners: [a.runner, b.runner] });
    registry.register(fn('ea', 'echo', ['number'], 'number', true, 'alpha'));
    registry.register(fn('eb', 'echo', ['number'], 'number', true, 'beta'));
    await registry.eval('ea', [V.number(1)]);
    await registry.eval('eb', [V.number(1)]);
    expect([a.calls.length, b.calls.length]).toEqual([1, 1]);
  });

  test('a cached value is frozen, so one caller cannot change what the next one gets', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('echo', 'echo', ['number'], 'number', true));
    await registry.eval('echo', [V.number(1)]);
    const hit = await registry.eval('echo', [V.number(1)]);
    expect(Object.isFrozen(hit)).toBe(true);
    expect(() => {
      (hit as { value: number }).value = 2;
    }).toThrow(TypeError);
    expect(await registry.eval('echo', [V.number(1)])).toEqual(V.number(1));
  });
});

describe('onRegister: the notice of a registration', () => {
  /** The fake runner (language `fake`) recording each notice by function name. */
  function noticing(onRegister?: (name: string) => void) {
    const fake = fakeRunner();
    const notices: string[] = [];
    const runner: LanguageRunner = {
      ...fake.runner,
      onRegister(f) {
        notices.push(f.name);
        onRegister?.(f.name);
      },
    };
    return { runner, notices };
  }

  test('each registration of its language, those in the constructor too, before any call', async () => {
    const { runner, notices } = noticing();
    const other = fakeRunner('other');
    const registry = new Registry({
      runners: [runner, other.runner],
      functions: [fn('a', 'add', ['number', 'number'], 'number')],
    });
    expect(notices).toEqual(['a']);
    registry.register(fn('b', 'echo', ['number'], 'number'));
    registry.register(fn('c', 'echo', ['number'], 'number', false, 'other'));
    registry.register(fn('b', 'echo', ['number'], 'number', true)); // replaced: told again
    expect(notices).toEqual(['a', 'b', 'b']);
    expect(() => registry.register({ name: 'bad', language: 'fake' })).toThrow(/invalid/);
    expect(notices).toEqual(['a', 'b', 'b']);
    expect(await registry.eval('a', [V.number(1), V.number(2)])).toEqual(V.number(3));
    expect(notices).toEqual(['a', 'b', 'b']);
  });

  test('functions registered before their runner is added are told when it is', () => {
    const registry = new Registry();
    registry.register(fn('a', 'add', ['number', 'number'], 'number'));
    registry.register(fn('z', 'echo', ['number'], 'number', false, 'other'));
    const { runner, notices } = noticing();
    registry.addRunner(runner);
    expect(notices).toEqual(['a']);
  });

  test('a notice that throws changes nothing; none after close', async () => {
    const { runner, notices } = noticing(() => {
      throw new Error('a broken notice');
    });
    const registry = new Registry({ runners: [runner], cache: false });
    expect(registry.register(fn('a', 'add', ['number', 'number'], 'number'))).toBeUndefined();
    expect(registry.get('a')?.name).toBe('a');
    expect(await registry.eval('a', [V.number(1), V.number(2)])).toEqual(V.number(3));
    await registry.close();
    expect(() => registry.register(fn('b', 'echo', ['number'], 'number'))).toThrow(/closed/);
    expect(notices).toEqual(['a']);
  });
});

describe('prepare: the hint before a batch', () => {
  /** The fake runner with a `prepare` that records each hint and how many batches had been entered by then. */
  function preparing() {
    const fake = fakeRunner();
    const hints: { fn: string; mode: string | undefined; batches: number }[] = [];
    let batches = 0;
    const runner: LanguageRunner = {
      ...fake.runner,
      prepare(f, options) {
        hints.push({ fn: f.name, mode: options?.mode, batches });
      },
      async callBatch(f, rows, options) {
        batches++;
        return Promise.all(rows.map((args) => fake.runner.call(f, args, options)));
      },
    };
    return { runner, hints };
  }

  test('once per evalBatch and evalColumns, before the batch, with its mode; never for eval or zero rows', async () => {
    const { runner, hints } = preparing();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const row = [V.number(1), V.number(2)];
    await registry.eval('add', row);
    expect(hints).toEqual([]);
    await registry.evalBatch('add', []);
    await registry.evalColumns('add', [new Float64Array(0), new Float64Array(0)]);
    expect(hints).toEqual([]); // (the empty evalColumns reached callBatch: 1 batch so far)
    const results = await registry.evalBatch('add', [row, row, [V.number(1)]], { mode: 'oneShot' });
    expect(results[0]).toEqual(V.number(3));
    expect(ExtFnError.isInstance(results[2])).toBe(true);
    expect(hints).toEqual([{ fn: 'add', mode: 'oneShot', batches: 1 }]);
    const columns = await registry.evalColumns('add', [
      new Float64Array([1, 2]),
      new Float64Array([3, 4]),
    ]);
    expect([...columns.values]).toEqual([4, 6]);
    expect(hints).toEqual([
      { fn: 'add', mode: 'oneShot', batches: 1 },
      { fn: 'add', mode: undefined, batches: 2 },
    ]);
    // every row already an error: nothing will run, so nothing to prepare
    await registry.evalColumns('add', [new Float64Array([1]), new Float64Array([2])], {
      errors: new Map([[0, ExtFnError.runtime('add', 'upstream')]]),
    });
    expect(hints.length).toBe(2);
    await registry.close();
    await expect(registry.evalBatch('add', [row])).rejects.toThrow(/closed/);
    expect(hints.length).toBe(2);
  });

  test('before the row checks: no row has been read when the hint comes', async () => {
    const { runner, hints } = preparing();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    let readsAtHint: number | undefined;
    let reads = 0;
    const rows = new Proxy([[V.number(1), V.number(2)]], {
      get(target, property, receiver) {
        if (typeof property === 'string' && /^\d+$/.test(property)) {
          readsAtHint ??= hints.length > 0 ? reads : undefined;
          reads++;
        }
        return Reflect.get(target, property, receiver);
      },
    });
    expect(await registry.evalBatch('add', rows)).toEqual([V.number(3)]);
    expect(hints.length).toBe(1);
    expect(readsAtHint).toBe(0);
  });

  test('not for a batch already aborted', async () => {
    const { runner, hints } = preparing();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const signal = AbortSignal.abort();
    await registry.evalBatch('add', [[V.number(1), V.number(2)]], { signal });
    await registry.evalColumns('add', [new Float64Array([1]), new Float64Array([2])], { signal });
    expect(hints).toEqual([]);
  });

  test('not when the first row is cached (a start would likely be for nothing)', async () => {
    const { runner, hints } = preparing();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number', true));
    const rows = [
      [V.number(1), V.number(2)],
      [V.number(3), V.number(4)],
    ];
    await registry.evalBatch('add', rows);
    expect(hints.length).toBe(1);
    expect(await registry.evalBatch('add', rows)).toEqual([V.number(3), V.number(7)]);
    expect(hints.length).toBe(1);
  });

  test("a prepare that returns a promise is waited for before the batch, through the kit's counting wrapper too", async () => {
    const events: string[] = [];
    const fake = fakeRunner();
    const runner: LanguageRunner = {
      ...fake.runner,
      prepare: () =>
        new Promise<void>((resolve) =>
          setTimeout(() => {
            events.push('prepared');
            resolve();
          }, 20),
        ),
      async callBatch(f, rows, options) {
        events.push('batch');
        return Promise.all(rows.map((args) => fake.runner.call(f, args, options)));
      },
    };
    const { runner: counted, counts } = counting(runner);
    const registry = new Registry({ runners: [counted], cache: false });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    expect(await registry.evalBatch('add', [[V.number(1), V.number(2)]])).toEqual([V.number(3)]);
    expect(events).toEqual(['prepared', 'batch']);
    expect(counts.prepares()).toBe(1);
  });

  test('a runner without prepare works unchanged; a prepare that throws is ignored', async () => {
    const plain = new Registry({ runners: [fakeRunner().runner], cache: false });
    plain.register(fn('add', 'add', ['number', 'number'], 'number'));
    expect(await plain.evalBatch('add', [[V.number(1), V.number(2)]])).toEqual([V.number(3)]);
    const throwing: LanguageRunner = {
      ...fakeRunner().runner,
      prepare() {
        throw new Error('a broken hint');
      },
    };
    const registry = new Registry({ runners: [throwing], cache: false });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    expect(await registry.evalBatch('add', [[V.number(1), V.number(2)]])).toEqual([V.number(3)]);
    const columns = await registry.evalColumns('add', [
      new Float64Array([1]),
      new Float64Array([2]),
    ]);
    expect([...columns.values]).toEqual([3]);
  });
});

describe('warmUp: start what a model will need before its first refresh', () => {
  /** The fake runner with a `warmUp` whose outcome the body picks: `add` ready, `full` no room, `throw-*` failing. */
  function warming() {
    const fake = fakeRunner();
    const asked: { fn: string; mode: string | undefined }[] = [];
    let release: (() => void) | undefined;
    const runner: LanguageRunner = {
      ...fake.runner,
      async warmUp(f, options) {
        asked.push({ fn: f.name, mode: options?.mode });
        if (f.body === 'full') return 'no room';
        if (f.body === 'throw-typed') throw ExtFnError.runtime(f.name, 'SyntaxError: bad body');
        if (f.body === 'throw-plain') throw new TypeError('plain failure');
        if (f.body === 'hang') await new Promise<void>((resolve) => (release = resolve));
        return undefined;
      },
    };
    return { runner, asked, release: () => release?.() };
  }

  test('one result per function, in order: ready, a reason, or the error its calls would get', async () => {
    const { runner, asked } = warming();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('a', 'add', ['number', 'number'], 'number'));
    registry.register(fn('b', 'full', ['number'], 'number'));
    registry.register(fn('c', 'throw-typed', ['number'], 'number'));
    registry.register(fn('d', 'throw-plain', ['number'], 'number'));
    const results = await registry.warmUp();
    expect(results.map(({ name, warm, reason }) => ({ name, warm, reason }))).toEqual([
      { name: 'a', warm: true, reason: undefined },
      { name: 'b', warm: false, reason: 'no room' },
      { name: 'c', warm: false, reason: undefined },
      { name: 'd', warm: false, reason: undefined },
    ]);
    expect(results[2]!.error?.message).toBe('function c: SyntaxError: bad body');
    expect(ExtFnError.isInstance(results[3]!.error)).toBe(true); // a plain throw, made typed
    expect(results[3]!.error?.functionName).toBe('d');
    expect(asked).toEqual(['a', 'b', 'c', 'd'].map((name) => ({ fn: name, mode: undefined })));
    // some names only, with a mode
    expect(await registry.warmUp(['a'], { mode: 'oneShot' })).toEqual([{ name: 'a', warm: true }]);
    expect(asked.at(-1)).toEqual({ fn: 'a', mode: 'oneShot' });
    await registry.close();
  });

  test('an unknown name or a closed registry rejects before anything starts', async () => {
    const { runner, asked } = warming();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('a', 'add', ['number', 'number'], 'number'));
    const error = await registry.warmUp(['a', 'nope']).catch((e) => e);
    expect(error.kind).toBe('NotFound');
    expect(error.message).toContain('function nope is not registered');
    expect(asked).toEqual([]);
    await registry.close();
    await expect(registry.warmUp()).rejects.toThrow(/closed/);
    expect(asked).toEqual([]);
  });

  test("bad names or options: a typed error naming them; the runner hears the calls' deadline", async () => {
    const { runner, asked } = warming();
    const seen: (number | undefined)[] = [];
    const registry = new Registry({
      runners: [
        {
          ...runner,
          warmUp: (f, o) => {
            seen.push(o?.timeoutMs);
            return runner.warmUp!(f, o);
          },
        },
      ],
      cache: false,
      timeoutMs: 1234,
    });
    registry.register(fn('a', 'add', ['number', 'number'], 'number'));
    const notArray = await registry.warmUp('a' as never).catch((e) => e);
    expect(ExtFnError.isInstance(notArray)).toBe(true);
    expect(notArray.message).toBe(
      'function warmUp: names must be an array of registered function names, got "a"',
    );
    const badMode = await registry.warmUp(['a'], { mode: 'fast' as never }).catch((e) => e);
    expect(badMode.message).toBe('function a: option mode must be "warm" or "oneShot", got "fast"');
    expect(asked).toEqual([]);
    await registry.warmUp();
    await registry.warmUp(['a'], { timeoutMs: 99 });
    expect(seen).toEqual([1234, 99]);
    await registry.close();
  });

  test('a function whose language has no runner: the error its calls get; the others warm', async () => {
    const { runner } = warming();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('a', 'add', ['number', 'number'], 'number'));
    registry.register({ ...fn('elsewhere', 'add', ['number'], 'number'), language: 'cobol' });
    const [a, elsewhere] = await registry.warmUp();
    expect(a).toEqual({ name: 'a', warm: true });
    const called = await registry.eval('elsewhere', [V.number(1)]).catch((e) => e);
    expect(elsewhere).toEqual({ name: 'elsewhere', warm: false, error: called });
    expect(called.kind).toBe('LanguageUnavailable');
    await registry.close();
  });

  test('a runner without warmUp has nothing to start: warm', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner], cache: false });
    registry.register(fn('a', 'add', ['number', 'number'], 'number'));
    expect(await registry.warmUp()).toEqual([{ name: 'a', warm: true }]);
    await registry.close();
  });

  test('an abort stops the wait, typed', async () => {
    const { runner, release } = warming();
    const registry = new Registry({ runners: [runner], cache: false });
    registry.register(fn('slow', 'hang', ['number'], 'number'));
    const controller = new AbortController();
    const waiting = registry.warmUp(undefined, { signal: controller.signal }).catch((e) => e);
    controller.abort(new Error('model closed'));
    const error = await waiting;
    expect(ExtFnError.isInstance(error)).toBe(true);
    expect(error.message).toBe('function slow: aborted');
    release();
    await registry.close();
  });
});
