/**
 * The public API against a careless (or hostile) engine and runner author:
 * descriptors and arguments that throw when read, BigInts, cycles, revoked
 * Proxies; runners that throw odd things, answer with malformed columns,
 * ignore aborts or never settle while the registry closes; one signal shared
 * by many calls; 10^6 bad rows. Every failure is a typed ExtFnError, and
 * every call settles.
 */
import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { ABORT_WAIT_MS } from '../src/backstop.js';
import {
  decodeValue,
  ExtFnError,
  externalFnToEngineJson,
  InvalidDescriptorError,
  type LanguageRunner,
  MAX_TIMEOUT_MS,
  parseExternalFn,
  Registry,
  type RowResult,
  Value as V,
  type Value,
  valueFromEngineJson,
  valueFromJson,
} from '../src/index.js';
import { rejection as failure } from '../src/testing/index.js';
import { fakeRunner, fn } from './fake-runner.js';

const never = () => new Promise<never>(() => {});
/** Keys a lookup in a plain object finds on Object.prototype: a table keyed by input must not. */
const PROTOTYPE_KEYS = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf'];
const base = {
  name: 'f',
  language: 'fake',
  body: 'add',
  argTypes: ['number'],
  returnType: 'number',
};

function registryWith(overrides: Partial<LanguageRunner>, timeoutMs?: number): Registry {
  const runner = { ...fakeRunner().runner, ...overrides } as LanguageRunner;
  return new Registry({ runners: [runner], ...(timeoutMs ? { timeoutMs } : {}) });
}

const kinds = (results: readonly RowResult[]) =>
  results.map((r) => (ExtFnError.isInstance(r) ? r.kind : (r as { value: unknown }).value));

describe('descriptors', () => {
  test('a getter or Proxy trap that throws is an InvalidDescriptorError, not the raw throw', () => {
    const registry = new Registry();
    const getter = {
      ...base,
      get body(): string {
        throw new Error('boom');
      },
    };
    expect(() => registry.register(getter)).toThrow(InvalidDescriptorError);
    expect(() => registry.register(getter)).toThrow(
      /descriptor "f":\n {2}\(descriptor\): cannot be read: Error: boom/,
    );
    const trap = new Proxy(base, {
      has() {
        throw new Error('trap');
      },
    });
    expect(() => registry.register(trap)).toThrow(InvalidDescriptorError);
    expect(registry.size).toBe(0);
  });

  test('names with DEL, C1 controls, line separators or unpaired surrogates are refused', () => {
    const registry = new Registry();
    for (const name of [
      'a\u007fb',
      'a\u009b31mb',
      'a\u0085b',
      'a\u2028b',
      'a\ud800b',
      'a\udc00b',
    ]) {
      expect(() => registry.register({ ...base, name }), JSON.stringify(name)).toThrow(
        /name: must have no surrounding spaces, control characters/,
      );
    }
    // a surrogate pair, and any other text, is a fine name
    for (const name of ['emoji 😀', 'λ', '__proto__', 'constructor', 'toString']) {
      registry.register({ ...base, name });
    }
    expect(registry.size).toBe(5);
  });

  test('__proto__, constructor and frozen or class-made descriptors are plain data', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(
      Object.freeze({ ...base, name: '__proto__', argTypes: Object.freeze(['number']) }),
    );
    class Descriptor {
      name = 'constructor';
      language = 'fake';
      body = 'echo';
      argTypes = ['number'];
      returnType = 'number';
    }
    registry.register(new Descriptor());
    expect(await registry.eval('constructor', [V.number(4)])).toEqual(V.number(4));
    expect((await failure(registry.eval('hasOwnProperty', []))).kind).toBe('NotFound');
    // a __proto__ key of parsed JSON is an unknown field, and pollutes nothing
    const polluting = JSON.parse(`{"__proto__":{"polluted":1},${JSON.stringify(base).slice(1)}`);
    expect(() => registry.register(polluting)).toThrow(/Unrecognized key: "__proto__"/);
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
  });

  test.each(PROTOTYPE_KEYS)(
    'the type name %j is an unknown type, not a member of Object.prototype',
    (key) => {
      const ours = { ...base, argTypes: [key], returnType: key };
      const engine = { name: 'f', language: 'fake', body: '', arg_types: [key], return_type: key };
      for (const descriptor of [ours, engine]) {
        const issues = (() => {
          try {
            parseExternalFn(descriptor);
          } catch (e) {
            return (e as InvalidDescriptorError).issues;
          }
        })();
        expect(issues?.map((i) => i.path)).toEqual(
          descriptor === ours ? ['argTypes[0]', 'returnType'] : ['arg_types[0]', 'return_type'],
        );
        expect(issues?.[0]?.message).toMatch(/^expected one of number, boolean, .*, got "/);
      }
    },
  );

  test('a language id that spells a member of Object.prototype is written back as itself', () => {
    for (const language of ['constructor', 'tostring', 'hasownproperty', 'valueof']) {
      expect(externalFnToEngineJson(parseExternalFn({ ...base, language }))).toMatchObject({
        language,
      });
    }
  });

  test('10^3 bad argument types (the most there may be): every issue in .issues, a message of twenty', () => {
    const name = 'x'.repeat(256); // the longest name there may be (limits.test.ts: longer ones)
    const error = (() => {
      try {
        new Registry().register({ ...base, name, argTypes: new Array(1_000).fill('nope') });
      } catch (e) {
        return e as InvalidDescriptorError;
      }
    })()!;
    expect(error.issues).toHaveLength(1_000);
    expect(error.message.length).toBeLessThan(10_000);
    expect(error.message).toMatch(/argTypes\[19\]: expected one of/);
    expect(error.message).toMatch(/… and 980 more \(see \.issues\)$/);
  });
});

describe('values from JSON whose keys or strings name Object.prototype members', () => {
  test.each(PROTOTYPE_KEYS)(
    '%j is a wrong number, an unknown engine tag, an unknown type',
    (key) => {
      const notANumber = /^function f: result expected number, got string "/;
      expect(() => valueFromJson(key, 'number', 'f')).toThrow(notANumber);
      expect(() => decodeValue({ type: 'number', value: key })).toThrow(TypeError);
      expect(() => decodeValue({ type: key, value: 1 })).toThrow(/must be a value type/);
      // as parsed from an engine's file: an own key, which is no value tag
      expect(() => valueFromEngineJson(JSON.parse(`{"${key}": 1}`))).toThrow(
        /unknown engine value tag/,
      );
    },
  );
});

describe('names', () => {
  test('NotFound names at most twenty registered functions; `available` has them all', async () => {
    const registry = new Registry();
    for (let i = 0; i < 500; i++) registry.register({ ...base, name: `f${i}` });
    const error = await failure(registry.eval('nope', []));
    expect(error.message).toMatch(
      /^function nope is not registered \(registered: f0, f1, .*f19 and 480 more\)$/,
    );
    expect(error.available).toHaveLength(500);
  });

  test('a name that is not a string is a NotFound saying what was given, never a TypeError', async () => {
    const registry = new Registry();
    const symbol = await failure(registry.eval(Symbol('s') as unknown as string, []));
    expect(symbol).toMatchObject({ kind: 'NotFound', got: 'a symbol' });
    const toStringThrows = {
      toString() {
        throw new Error('no');
      },
    };
    const object = await failure(registry.evalBatch(toStringThrows as unknown as string, []));
    expect(object.kind).toBe('NotFound');
    expect(object.message).toMatch(/a function name must be a string, got an object/);
  });
});

describe('arguments and options that cannot be read', () => {
  const cyclic: Record<string, unknown> = { type: 'number' };
  cyclic.value = cyclic;
  const hostile: [string, unknown, RegExp][] = [
    ['a BigInt', { type: 'number', value: 1n }, /got a number whose value is 1n/],
    ['a cycle', cyclic, /got a number whose value is \{…\}/],
    [
      'a getter that throws',
      {
        type: 'number',
        get value() {
          throw new Error('getter');
        },
      },
      /got a value that cannot be read \(Error: getter\)/,
    ],
    ['an invalid Date', { type: 'number', value: new Date(Number.NaN) }, /Invalid Date/],
  ];

  test.each(hostile)(
    '%s: a TypeMismatch for eval, that row’s error in a batch',
    async (_, arg, why) => {
      const { runner, calls } = fakeRunner();
      const registry = new Registry({ runners: [runner] });
      registry.register(fn('echo', 'echo', ['number'], 'number'));
      const error = await failure(registry.eval('echo', [arg as Value]));
      expect(error).toMatchObject({ kind: 'TypeMismatch', position: 1, functionName: 'echo' });
      expect(error.message).toMatch(why);
      const batch = await registry.evalBatch('echo', [[arg as Value], [V.number(2)]]);
      expect(kinds(batch)).toEqual(['TypeMismatch', 2]);
      expect(calls).toHaveLength(1);
    },
  );

  test('a revoked Proxy for the arguments: an ArityMismatch saying they cannot be read', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('echo', 'echo', ['number'], 'number'));
    const { proxy, revoke } = Proxy.revocable([V.number(1)], {});
    revoke();
    const error = await failure(registry.eval('echo', proxy));
    expect(error.kind).toBe('ArityMismatch');
    expect(error.message).toMatch(/got arguments that cannot be read \(TypeError: .*revoked/);
    const batch = await registry.evalBatch('echo', [proxy, [V.number(3)]]);
    expect(kinds(batch)).toEqual(['ArityMismatch', 3]);
  });

  test('datetimes and enums out of range say what the range is', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('d', 'echo', ['datetime'], 'datetime'));
    registry.register(fn('e', 'echo', ['enum'], 'enum'));
    const message = async (name: string, value: unknown) =>
      (await failure(registry.eval(name, [value as Value]))).message;
    expect(await message('d', { type: 'datetime', value: new Date(Number.NaN) })).toBe(
      'function d: argument 1 expected datetime, got an invalid Date',
    );
    expect(await message('d', { type: 'datetime', value: new Date(Date.UTC(10_000, 0, 1)) })).toBe(
      'function d: argument 1 expected datetime, got datetime +010000-01-01T00:00:00.000Z (datetime must be in [0001-01-01T00:00:00Z, 9999-12-31T23:59:59.999999999Z])',
    );
    expect(await message('d', { type: 'datetime', value: '2024-01-01T00:00:00Z' })).toMatch(
      /got a datetime whose value is "2024-01-01T00:00:00Z", not a Date/,
    );
    expect(await message('d', { type: 'datetime', value: new Date(0), nanos: 1e6 })).toMatch(
      /got datetime nanos 1000000 \(an integer in \[0, 999999\]/,
    );
    expect(await message('e', { type: 'enum', value: 2 ** 32 })).toBe(
      'function e: argument 1 expected enum, got enum 4294967296 (an integer in [0, 4294967295])',
    );
  });

  test('an option or column whose getter throws is a Runtime ExtFnError naming what happened', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('echo', 'echo', ['number'], 'number'));
    registry.register(fn('up', 'echo', ['text'], 'text'));
    const options = {
      get timeoutMs(): number {
        throw new Error('option getter');
      },
    };
    for (const call of [
      registry.eval('echo', [V.number(1)], options),
      registry.evalBatch('echo', [[V.number(1)]], options),
      registry.evalColumns('echo', [Float64Array.of(1)], options),
    ]) {
      const error = await failure(call);
      expect(error.kind).toBe('Runtime');
      expect(error.message).toBe(
        "function echo: reading the call's arguments or options threw: Error: option getter",
      );
    }
    // a text column whose cell throws when read: that row's TypeMismatch, the others run
    const column = new Proxy(['a', 'b'], {
      get(target, key, receiver) {
        if (key === '1') throw new Error('cell');
        return Reflect.get(target, key, receiver);
      },
    });
    // an errors map keyed by a string: the key is shown as given
    const keyed = await failure(
      registry.evalColumns('echo', [Float64Array.of(1, 2)], {
        errors: new Map([['1' as unknown as number, ExtFnError.runtime('echo', 'x')]]),
      }),
    );
    expect(keyed.message).toMatch(
      /row indexes in \[0, 2\) to ExtFnErrors; got "1" → an ExtFnError$/,
    );
    const out = await registry.evalColumns<string[]>('up', [column]);
    expect(out.values).toEqual(['a', '']);
    expect(out.errors.get(1)).toMatchObject({ kind: 'TypeMismatch', position: 1 });
    expect(out.errors.get(1)?.message).toMatch(/a cell that cannot be read \(Error: cell\)/);
  });
});

describe('runners that answer badly', () => {
  test('a thrown object without a prototype, or whose message getter throws, is a Runtime error', async () => {
    const errorWithBadMessage = new Error('x');
    Object.defineProperty(errorWithBadMessage, 'message', {
      get() {
        throw new Error('m');
      },
    });
    for (const [thrown, message] of [
      [Object.create(null), 'function f: runner failed: [object Object]'],
      [errorWithBadMessage, 'function f: runner failed: a thrown value that cannot be read'],
      [{ message: 'plain object' }, 'function f: runner failed: plain object'],
    ] as const) {
      const registry = registryWith({
        call: async () => {
          throw thrown;
        },
      });
      registry.register(fn('f', 'x', ['number'], 'number'));
      const error = await failure(registry.eval('f', [V.number(1)]));
      expect(error).toMatchObject({ kind: 'Runtime', message });
      expect(error.cause).toBe(thrown);
    }
  });

  test('results that throw when read, or are not Values, are their rows’ errors, saying what came', async () => {
    const throwing = {
      get type(): string {
        throw new Error('result getter');
      },
    };
    const registry = registryWith({
      call: async () => 5 as unknown as Value,
      callBatch: async (_f, rows) =>
        rows.map((_, i) => (i === 0 ? throwing : V.number(i))) as Value[],
    });
    registry.register(fn('f', 'x', ['number'], 'number'));
    expect((await failure(registry.eval('f', [V.number(1)]))).message).toBe(
      'function f: result expected number, got 5, not a Value',
    );
    const batch = await registry.evalBatch('f', [[V.number(1)], [V.number(2)]]);
    expect(kinds(batch)).toEqual(['Runtime', 1]);
    expect((batch[0] as ExtFnError).message).toBe(
      'function f: result expected number, got a value that cannot be read (Error: result getter)',
    );
  });

  test('a columnar answer with errors on rows outside the batch fails every row, typed', async () => {
    const registry = registryWith({
      callColumns: async (_f, columns) => ({
        values: new Float64Array(columns[0]!.length),
        errors: new Map<number, ExtFnError>([[5, ExtFnError.runtime('f', 'off by some')]]),
      }),
      callTypedColumns: async () => ({
        values: ['a', 'b'],
        errors: new Map([['1' as unknown as number, ExtFnError.runtime('up', 'string key')]]),
      }),
    });
    registry.register(fn('f', 'x', ['number'], 'number'));
    registry.register(fn('up', 'x', ['text'], 'text'));
    const into = Float64Array.of(7, 7);
    const numbers = await registry.evalColumns('f', [Float64Array.of(1, 2)], { into });
    expect([...numbers.values]).toEqual([Number.NaN, Number.NaN]);
    expect(numbers.errors.get(0)?.message).toBe(
      "function f: runner failed: Error: callColumns returned an error for row 5, outside the batch's rows [0, 2)",
    );
    expect(numbers.errors.get(1)).toBe(numbers.errors.get(0));
    expect(Object.keys(numbers.values)).toEqual(['0', '1']); // nothing written beside the rows
    const texts = await registry.evalColumns<string[]>('up', [['x', 'y']]);
    expect(texts.errors.get(0)?.message).toMatch(/returned an error for row "1", outside/);
  });

  test('typed result cells the column class does not make valid are their rows’ errors', async () => {
    const registry = registryWith({
      callTypedColumns: async (f) =>
        f.returnType === 'text'
          ? { values: ['a', 5, 'c'] as unknown as string[], errors: new Map() }
          : { values: Uint8Array.of(1, 7, 0), errors: new Map() },
    });
    registry.register(fn('up', 'x', ['text'], 'text'));
    registry.register(fn('is', 'x', ['text'], 'boolean'));
    const texts = await registry.evalColumns<string[]>('up', [['x', 'y', 'z']]);
    expect(texts.values).toEqual(['a', '', 'c']);
    expect([...texts.errors.keys()]).toEqual([1]);
    expect(texts.errors.get(1)?.message).toBe(
      'function up: result expected text, got 5, not a Value',
    );
    const booleans = await registry.evalColumns<Uint8Array>('is', [['x', 'y', 'z']]);
    expect([...booleans.values]).toEqual([1, 0, 0]);
    expect(booleans.errors.get(1)?.message).toBe(
      'function is: result expected boolean, got the byte 7 (0 or 1)',
    );
  });

  test('-0 and a NaN payload pass through a column unchanged', async () => {
    const registry = new Registry({ runners: [fakeRunner().runner] });
    registry.register(fn('echo', 'echo', ['number'], 'number'));
    const column = new Float64Array(2);
    column[0] = -0;
    new DataView(column.buffer).setBigUint64(8, 0x7ff8dead00000001n, true);
    const { values } = await registry.evalColumns('echo', [column]);
    expect(Object.is(values[0], -0)).toBe(true);
    expect(new DataView(values.buffer).getBigUint64(8, true)).toBe(0x7ff8dead00000001n);
  });
});

describe('close', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  test('calls in flight on a runner that never answers settle with the closed error, their signals aborted', async () => {
    const signals: AbortSignal[] = [];
    const hang = (_f: unknown, _x: unknown, options: { signal?: AbortSignal }) => {
      signals.push(options.signal!);
      return never();
    };
    const registry = registryWith(
      {
        call: hang,
        callBatch: hang,
        callColumns: hang,
        callTypedColumns: hang,
        close: async () => {},
      },
      60_000,
    );
    registry.register(fn('f', 'x', ['number'], 'number'));
    registry.register(fn('up', 'x', ['text'], 'text'));
    const one = failure(registry.eval('f', [V.number(1)]));
    const batch = registry.evalBatch('f', [[V.number(1)], [V.number(2)]]);
    const columns = registry.evalColumns('f', [Float64Array.of(1)]);
    const typed = registry.evalColumns<string[]>('up', [['a']]);
    await vi.waitFor(() => expect(signals).toHaveLength(4));
    const closedAt = performance.now();
    await registry.close();
    const closed = 'function f: the registry is closed';
    expect((await one).message).toBe(closed);
    expect((await batch).map((r) => (r as ExtFnError).message)).toEqual([closed, closed]);
    expect((await columns).errors.get(0)?.message).toBe(closed);
    expect((await typed).errors.get(0)?.message).toBe('function up: the registry is closed');
    // the runner had ABORT_WAIT_MS to answer after its close; nothing waited for the deadline
    expect(performance.now() - closedAt).toBeLessThan(ABORT_WAIT_MS + 1_500);
    // the batches' runner signals abort when core cuts them off; a single call has the caller's (none here)
    expect(signals.filter(Boolean)).toHaveLength(3);
    expect(signals.filter(Boolean).every((signal) => signal.aborted)).toBe(true);
  });

  test('a runner that answers once closed keeps its answer (rows done keep their values)', async () => {
    let finish: (() => void) | undefined;
    const registry = registryWith({
      callBatch: (_f, rows) =>
        new Promise((resolve) => {
          finish = () =>
            resolve(
              rows.map((_, i) =>
                i === 0 ? V.number(1) : ExtFnError.runtime('f', 'the runner is closed'),
              ),
            );
        }),
      close: async () => finish?.(),
    });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const batch = registry.evalBatch('f', [[V.number(1)], [V.number(2)]]);
    await vi.waitFor(() => expect(finish).toBeDefined());
    await registry.close();
    const results = await batch;
    expect(results[0]).toEqual(V.number(1));
    expect((results[1] as ExtFnError).message).toBe('function f: the runner is closed');
  });

  test('close again gives the same promise; calls after it are refused at once', async () => {
    let closes = 0;
    let release: () => void = () => {};
    const registry = registryWith({
      close: () => {
        closes++;
        return new Promise<void>((resolve) => {
          release = resolve;
        });
      },
    });
    registry.register(fn('f', 'echo', ['number'], 'number'));
    const first = registry.close();
    const second = registry.close();
    expect(second).toBe(first);
    let settled = false;
    void second.then(() => {
      settled = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(settled).toBe(false); // the second close waits for the runner, as the first does
    release();
    await first;
    expect(closes).toBe(1);
    expect((await failure(registry.eval('f', [V.number(1)]))).message).toBe(
      'function f: the registry is closed',
    );
    expect((await failure(registry.evalColumns('f', [Float64Array.of(1)]))).fix).toMatch(
      /new Registry/,
    );
    expect(() => registry.register(fn('g', 'echo', [], 'number'))).toThrow(
      expect.objectContaining({ kind: 'Runtime', message: 'this Registry is closed' }),
    );
  });

  test('a registry with the longest deadline closes a slow runner: no timer overflow, no Timeout', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const slow = {
        ...fakeRunner().runner,
        close: () => new Promise<void>((resolve) => setTimeout(resolve, 30)),
      };
      await new Registry({ runners: [slow], timeoutMs: MAX_TIMEOUT_MS }).close();
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  test('a runner whose close fails or hangs: close rejects with an ExtFnError naming it, the others close', async () => {
    const secret = new Error('EACCES /home/alice/.ssh/id_rsa token=abc');
    let otherClosed = false;
    const failing = { ...fakeRunner('a').runner, close: () => Promise.reject(secret) };
    const other = {
      ...fakeRunner('b').runner,
      close: async () => {
        otherClosed = true;
      },
    };
    const error = await failure(new Registry({ runners: [failing, other] }).close());
    expect(error).toMatchObject({ kind: 'Runtime', language: 'a' });
    expect(error.message).toBe(
      'the a runner (@test/a) failed to close: Error: EACCES /home/alice/.ssh/id_rsa token=abc',
    );
    expect(error.cause).toBe(secret);
    expect(JSON.stringify(error)).not.toMatch(/cause|stack/);
    expect(otherClosed).toBe(true);
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const hanging = new Registry({ runners: [{ ...fakeRunner('h').runner, close: never }] });
    const closing = failure(hanging.close());
    await vi.advanceTimersByTimeAsync(30_000);
    expect(await closing).toMatchObject({
      kind: 'Timeout',
      language: 'h',
      ms: 30_000,
      message:
        'the h runner (@test/h) did not close within 30000 ms; its processes may still be running',
    });
  });
});

describe('aborts and give-ups', () => {
  test('one signal for 50 calls in flight adds one listener: no MaxListenersExceededWarning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const registry = new Registry({ runners: [fakeRunner().runner] });
      registry.register(fn('s', 'sleep:20', ['number'], 'number'));
      const { signal } = new AbortController();
      const calls = Array.from({ length: 50 }, (_, i) =>
        registry.eval('s', [V.number(i)], { signal }),
      );
      expect(getEventListeners(signal, 'abort').length).toBe(1);
      await Promise.all(calls);
      await registry.evalBatch('s', [[V.number(1)], [V.number(2)], [V.number(3)]], { signal });
      expect(getEventListeners(signal, 'abort').length).toBeLessThanOrEqual(1);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  test('a batch whose runner ignores the abort settles ABORT_WAIT_MS later, every row aborted', async () => {
    const registry = registryWith({ callBatch: never, callColumns: never });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const controller = new AbortController();
    const started = performance.now();
    const batch = registry.evalBatch('f', [[V.number(1)], [V.number(2)]], {
      signal: controller.signal,
    });
    const columns = registry.evalColumns('f', [Float64Array.of(1)], { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('user')), 10);
    const results = await batch;
    expect(results.every((r) => ExtFnError.isInstance(r) && r.aborted)).toBe(true);
    expect((await columns).errors.get(0)?.aborted).toBe(true);
    expect(performance.now() - started).toBeLessThan(ABORT_WAIT_MS + 1_500); // not the 15 s backstop
  });

  test('a single call core gives up on: a Timeout; its runner keeps the caller’s signal, left alone (README)', async () => {
    let seen: AbortSignal | undefined;
    const registry = registryWith({
      call: (_f, _a, options) => {
        seen = options.signal;
        return never();
      },
    });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const { signal } = new AbortController();
    const error = await failure(registry.eval('f', [V.number(1)], { timeoutMs: 20, signal }));
    expect(error).toMatchObject({ kind: 'Timeout', ms: 20 });
    expect(seen).toBe(signal);
    expect(signal.aborted).toBe(false);
  });
});

describe('10^6 rows', () => {
  test('bad rows: each its own error naming the field, alike ones sharing one, no stack built', async () => {
    const { runner, calls } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('echo', 'echo', ['number'], 'number'));
    const n = 1_000_000;
    const text = [V.text('x')];
    const wide = [V.number(1), V.number(2)];
    const rows = Array.from({ length: n }, (_, i) => (i % 2 ? text : wide));
    const started = performance.now();
    const results = await registry.evalBatch('echo', rows);
    const ms = performance.now() - started;
    expect(calls).toHaveLength(0);
    expect((results[0] as ExtFnError).message).toBe('function echo: expected 1 argument(s), got 2');
    expect((results[1] as ExtFnError).message).toBe(
      'function echo: argument 1 expected number, got text "x"',
    );
    expect(results[3]).toBe(results[1]);
    expect(results[n - 2]).toBe(results[0]);
    expect((results[1] as ExtFnError).stack).not.toMatch(/\n\s+at /);
    expect(Error.stackTraceLimit).toBeGreaterThan(0); // restored
    expect(ms).toBeLessThan(20_000); // was about 40 s on a shared 2-core VM
  }, 60_000);
});

describe('ExtFnError', () => {
  test('has own properties only for the fields it has; JSON gives kind, message and fields, never cause or stack', () => {
    const error = ExtFnError.runtime('f', 'boom', { cause: new Error('/home/alice/secret') });
    expect(Object.keys(error).sort()).toEqual(['functionName', 'kind', 'name']);
    expect(JSON.parse(JSON.stringify(error))).toEqual({
      kind: 'Runtime',
      message: 'function f: boom',
      functionName: 'f',
    });
    const timeout = ExtFnError.timeout('g', 50);
    expect(JSON.parse(JSON.stringify(timeout))).toEqual({
      kind: 'Timeout',
      message: 'function g: timed out after 50 ms',
      functionName: 'g',
      ms: 50,
      limit: 'wall-clock',
    });
    expect('stderr' in timeout).toBe(false);
  });
});

describe('a registration while a refresh runs', () => {
  test('a call in flight keeps the descriptor it started with; the next one uses the new one', async () => {
    let release: () => void = () => {};
    const registry = registryWith({
      callBatch: (f, rows) =>
        new Promise((resolve) => {
          release = () => resolve(rows.map(() => V.text(f.body)));
        }),
    });
    registry.register(fn('f', 'old', ['number'], 'text', true));
    const inFlight = registry.evalBatch('f', [[V.number(1)]]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    registry.register(fn('f', 'new', ['number'], 'text', true));
    release();
    expect(await inFlight).toEqual([V.text('old')]);
    const next = registry.evalBatch('f', [[V.number(1)]]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    release();
    // the old body's result is cached under the old body: never served for the new one
    expect(await next).toEqual([V.text('new')]);
    registry.unregister('f');
    expect((await failure(registry.eval('f', [V.number(1)]))).kind).toBe('NotFound');
  });
});
