/**
 * Caps on what a descriptor holds (limits.ts): a name, a language id, a body
 * and an argument list beyond them are refused at registration, naming the
 * field and the limit; a name no function can have (too long) that a caller
 * passes to a call keeps every message short.
 */
import { describe, expect, test } from 'vitest';
import {
  ExtFnError,
  InvalidDescriptorError,
  type LanguageRunner,
  MAX_ARGUMENTS,
  MAX_BODY_LENGTH,
  MAX_LANGUAGE_LENGTH,
  MAX_NAME_LENGTH,
  parseExternalFn,
  parseExternalFns,
  Registry,
  Value as V,
} from '../src/index.js';
import { rejection as failure } from '../src/testing/index.js';
import { fakeRunner } from './fake-runner.js';

const base = {
  name: 'f',
  language: 'fake',
  body: 'echo',
  argTypes: ['number'],
  returnType: 'number',
};

/** What registering `descriptor` throws (fails the test when it does not). */
function refusal(descriptor: unknown): InvalidDescriptorError {
  try {
    new Registry().register(descriptor);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidDescriptorError);
    return error as InvalidDescriptorError;
  }
  throw new Error('registered');
}

const MB = 1_048_576;

describe('caps at registration', () => {
  test('the limits', () => {
    expect(MAX_NAME_LENGTH).toBe(256);
    expect(MAX_LANGUAGE_LENGTH).toBe(64);
    expect(MAX_ARGUMENTS).toBe(1_000);
    expect(MAX_BODY_LENGTH).toBe(64 * MB);
  });

  test('a name: 256 characters are fine, 257 or 1 MB are refused naming the field and the limit', () => {
    const registry = new Registry();
    registry.register({ ...base, name: 'n'.repeat(MAX_NAME_LENGTH) });
    expect(registry.size).toBe(1);
    const over = refusal({ ...base, name: 'n'.repeat(MAX_NAME_LENGTH + 1) });
    expect(over.issues).toEqual([
      {
        path: 'name',
        message:
          'must have at most 256 characters, got 257; register the function under a shorter name',
      },
    ]);
    const huge = refusal({ ...base, name: 'n'.repeat(MB) });
    expect(huge.issues).toHaveLength(1);
    expect(huge.message).toBe(
      `invalid external function descriptor "${'n'.repeat(100)}…" (1048576 characters):\n` +
        '  name: must have at most 256 characters, got 1048576; register the function under a shorter name',
    );
  });

  test('argTypes: 1000 are fine, 1001 or 10^6 are refused at once, in either form', () => {
    const registry = new Registry();
    registry.register({ ...base, argTypes: new Array(MAX_ARGUMENTS).fill('number') });
    expect(registry.get('f')?.argTypes).toHaveLength(1_000);
    const over = refusal({ ...base, argTypes: new Array(MAX_ARGUMENTS + 1).fill('number') });
    expect(over.issues).toHaveLength(1);
    expect(over.issues[0]!.path).toBe('argTypes');
    expect(over.issues[0]!.message).toMatch(/^must have at most 1000 entries .* got 1001; /);
    // one issue, not one per entry; the entries are not read
    const started = performance.now();
    const million = refusal({ ...base, argTypes: new Array(1_000_000).fill('nope') });
    expect(million.issues).toEqual([
      { path: 'argTypes', message: expect.stringMatching(/got 1000000;/) },
    ]);
    expect(performance.now() - started).toBeLessThan(1_000);
    const engine = {
      name: 'g',
      language: 'Python',
      body: 'result = 1',
      arg_types: new Array(MAX_ARGUMENTS + 1).fill('Number'),
      return_type: 'Number',
    };
    expect(() => parseExternalFns({ g: engine })).toThrow(
      /arg_types: must have at most 1000 entries/,
    );
  });

  test('a body of 64 Mi characters is fine, one more is refused', () => {
    const registry = new Registry();
    registry.register({ ...base, body: 'b'.repeat(MAX_BODY_LENGTH) });
    const over = refusal({ ...base, body: 'b'.repeat(MAX_BODY_LENGTH + 1) });
    expect(over.issues).toEqual([
      {
        path: 'body',
        message: expect.stringMatching(/^must have at most 67108864 characters .* got 67108865; /),
      },
    ]);
  });

  test('a language id of at most 64 characters', () => {
    new Registry().register({ ...base, language: 'l'.repeat(MAX_LANGUAGE_LENGTH) });
    const over = refusal({ ...base, language: 'l'.repeat(MB) });
    expect(over.issues).toEqual([
      {
        path: 'language',
        message: expect.stringMatching(/^must have at most 64 characters, got 1048576; /),
      },
    ]);
  });

  test('a 1 MB type name or unknown key makes short issues, in the message and in .issues', () => {
    const type = refusal({ ...base, returnType: 't'.repeat(MB) });
    expect(type.issues[0]!.message).toMatch(/got "t{60}…" \(1048576 characters\)$/);
    expect(type.message.length).toBeLessThan(500);
    const key = refusal({ ...base, ['k'.repeat(MB)]: 1 });
    expect(key.issues[0]!.message.length).toBeLessThan(1_100);
    expect(key.issues[0]!.message).toMatch(/^Unrecognized key: "k+… \(1048596 characters\)$/);
    const keys = refusal({
      ...base,
      ...Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i])),
    });
    expect(keys.issues[0]!.message.length).toBeLessThan(1_100);
  });

  test('parseExternalFn (and so the standalone eval) applies them too', () => {
    expect(() => parseExternalFn({ ...base, name: 'n'.repeat(MAX_NAME_LENGTH + 1) })).toThrow(
      /name: must have at most 256 characters/,
    );
  });
});

describe('a name too long for any function, given to a call', () => {
  const huge = 'h'.repeat(MB);
  const shown = `${'h'.repeat(100)}… (1048576 characters)`;

  function registry(): Registry {
    const r = new Registry({ runners: [fakeRunner().runner] });
    for (let i = 0; i < 30; i++) r.register({ ...base, name: `f${i}` });
    return r;
  }

  function expectShortNotFound(error: ExtFnError): void {
    expect(error.kind).toBe('NotFound');
    expect(error.message).toBe(
      `function ${shown} is not registered: a name has at most 256 characters (registered: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19 and 10 more)`,
    );
    expect(error.functionName).toBe(shown);
    expect(error.fix).toMatch(/registered under \(at most 256 characters\)/);
    expect(error.available).toHaveLength(30);
    expect(JSON.stringify(error).length).toBeLessThan(2_000);
  }

  test('eval, evalBatch, evalColumns and warmUp: a NotFound of a few hundred characters', async () => {
    const r = registry();
    expectShortNotFound(await failure(r.eval(huge, [V.number(1)])));
    expectShortNotFound(await failure(r.evalBatch(huge, [[V.number(1)]])));
    expectShortNotFound(await failure(r.evalColumns(huge, [Float64Array.of(1)])));
    expectShortNotFound(await failure(r.warmUp(['f0', huge])));
  });

  test('a name of 257 characters is cut too; one of 256 is quoted whole', async () => {
    const r = registry();
    const error = await failure(r.eval('x'.repeat(257), []));
    expect(error.message).toMatch(/^function x{100}… \(257 characters\) is not registered: /);
    const whole = await failure(r.eval('x'.repeat(256), []));
    expect(whole.message).toBe(
      `function ${'x'.repeat(256)} is not registered (registered: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19 and 10 more)`,
    );
    expect(whole.functionName).toBe('x'.repeat(256));
    expect(whole.fix).toBeUndefined();
  });

  test('on a closed registry, and with bad options: short too', async () => {
    const r = registry();
    const badOption = await failure(r.warmUp([huge], { timeoutMs: -1 }));
    expect(badOption.message.length).toBeLessThan(400);
    await r.close();
    const closed = await failure(r.eval(huge, []));
    expect(closed.message).toBe(`function ${shown}: the registry is closed`);
    expect(closed.functionName).toBe(shown);
  });

  test("every ExtFnError constructor shows a name past the limit cut, the message's and the field", () => {
    const errors = [
      ExtFnError.arityMismatch(huge, 1, 2),
      ExtFnError.typeMismatch(huge, 1, 'number', 'text "x"'),
      ExtFnError.languageUnavailable(huge, 'python', []),
      ExtFnError.runtime(huge, 'boom'),
      ExtFnError.timeout(huge, 5),
      ExtFnError.aborted(huge),
      ExtFnError.sandbox('no bwrap', 'install bubblewrap', { functionName: huge }),
      ExtFnError.runtime('f', 'boom').withFunctionName(huge),
    ];
    for (const error of errors) {
      expect(error.message.length, error.kind).toBeLessThan(400);
      expect(error.message.startsWith(`function ${shown}: `), error.message).toBe(true);
      expect(error.functionName).toBe(shown);
    }
    // a name within the limit is as it was
    expect(ExtFnError.runtime('n'.repeat(256), 'boom').functionName).toBe('n'.repeat(256));
  });
});

describe('a name spelt as no function can be, given to a call', () => {
  test('its control characters, line separators and surrounding spaces reach the message escaped, as a JSON string', async () => {
    const r = new Registry({ runners: [fakeRunner().runner] });
    r.register({ ...base, name: 'f0' });
    const names = [
      'f0\n[ERROR] host compromised', // a forged log line
      '\u001b[2J\u001b[Hf0', // a terminal cleared
      '\u009b31mf0', // a C1 CSI
      'f0\u2028x',
      ' f0',
      '',
      `${'\u0007'.repeat(300)}`, // too long as well: cut, and escaped
    ];
    for (const name of names) {
      for (const error of [
        await failure(r.eval(name, [V.number(1)])),
        await failure(r.evalColumns(name, [Float64Array.of(1)])),
        await failure(r.warmUp([name])),
      ]) {
        expect(error.kind).toBe('NotFound');
        expect(error.message).toMatch(
          /^function ".*"( \(\d+ characters\))? is not registered: no function name is empty or has surrounding spaces or control characters \(registered: f0\)$/,
        );
        // nothing a terminal or a line-based log acts on
        expect(error.message).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/);
        expect(error.functionName).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/);
        expect(error.functionName!.startsWith('"')).toBe(true);
        expect(error.fix).toMatch(
          /registered under \(no surrounding spaces or control characters\)/,
        );
        expect(error.message.length).toBeLessThan(1_000);
      }
    }
    const first = await failure(r.eval(names[0]!, [V.number(1)]));
    expect(first.functionName).toBe(JSON.stringify(names[0]));
  });
});

describe('a function with 1000 arguments', () => {
  test('its errors list a few types, not all 1000', async () => {
    const { runner } = fakeRunner();
    const r = new Registry({ runners: [runner as LanguageRunner] });
    r.register({ ...base, name: 'wide', argTypes: new Array(1_000).fill('datetime') });
    const single = await failure(r.eval('wide', V.number(3) as never));
    expect(single.kind).toBe('ArityMismatch');
    expect(single.message).toMatch(/one per argument \(datetime, datetime, .*… 1000 in all\)/);
    expect(single.message.length).toBeLessThan(1_500);
    const rows = await failure(r.evalBatch('wide', 5 as never));
    expect(rows.message.length).toBeLessThan(1_500);
    const columns = await failure(r.evalColumns('wide', 5 as never));
    expect(columns.message.length).toBeLessThan(1_500);
    const arity = await failure(r.eval('wide', [V.number(1)]));
    expect(arity.message).toBe('function wide: expected 1000 argument(s), got 1');
  });

  test('a bad option quoting a huge value stays short', async () => {
    const r = new Registry({ runners: [fakeRunner().runner] });
    r.register(base);
    const error = await failure(r.eval('f', [V.number(1)], { mode: 'm'.repeat(MB) as never }));
    expect(error.message).toMatch(
      /^function f: option mode must be "warm" or "oneShot", got "m+…"/,
    );
    expect(error.message.length).toBeLessThan(400);
    expect(String(error.got).length).toBeLessThan(200);
  });
});
