/**
 * The Pure driver checked without Pure: the bootstrap and the driver are
 * well-formed Pure as far as a structural reader can tell (no Pure parser
 * exists for Node), every driver function they use is defined, and what a
 * call sends carries bodies and values only as JSON data.
 */

import { readFileSync } from 'node:fs';
import { type ExternalFn, parseExternalFns, Registry, Value } from '@improv/extfn-core';
import { engineSerdeFixture } from '@improv/extfn-core/testing';
import { encodeFrame, FrameReader } from '@improv/extfn-interpreter';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { BOOTSTRAP_PATH, DRIVER_SOURCE, DRIVERS_DIR, PURE_ARGS, pure } from '../src/index.js';
import { definedNames, statements, tokenize, usedNames } from './pure-syntax.js';

const BOOTSTRAP_SOURCE = readFileSync(BOOTSTRAP_PATH, 'utf8');
const fixtures = JSON.parse(JSON.stringify(engineSerdeFixture));
const addPure = parseExternalFns(fixtures.external_fns).find((fn) => fn.name === 'add_pure')!;

/** Constructors: symbols the driver applies but never defines (Pure keeps such terms as data). */
const CONSTRUCTORS = new Set([
  'extfn_num',
  'extfn_ok',
  'extfn_failed',
  'extfn_bad_text',
  'extfn_result_type',
  'extfn_eval_error',
  'extfn_compiled',
]);

describe('the structural reader', () => {
  test('rejects unbalanced Pure (so a pass below means something)', () => {
    expect(() => statements('f x = (x + 1;')).toThrow(/unbalanced|unclosed/);
    expect(() => statements('f x = y when y = x;')).toThrow(/unclosed end/);
    expect(() => statements('f x = "abc;')).toThrow(/unterminated/);
    expect(() => statements('let x = 1')).toThrow(/without ;/);
    expect(statements('f x = y when y = x; z = y end; let a = f 1;')).toHaveLength(2);
  });
});

describe('the programs pure runs', () => {
  test('the bootstrap is a file on the command line, not a program on stdin', () => {
    expect(PURE_ARGS).toEqual(['-q', BOOTSTRAP_PATH]);
    expect(BOOTSTRAP_PATH.startsWith(DRIVERS_DIR)).toBe(true);
  });

  test('bootstrap and driver are ASCII (the bootstrap counts characters as bytes) and well-formed', () => {
    for (const source of [BOOTSTRAP_SOURCE, DRIVER_SOURCE]) {
      expect(/^[\x00-\x7f]*$/.test(source)).toBe(true);
      expect(statements(source).length).toBeGreaterThan(3);
    }
  });

  test('every extfn_ function used is defined (or is a constructor)', () => {
    const defined = new Set([...definedNames(BOOTSTRAP_SOURCE), ...definedNames(DRIVER_SOURCE)]);
    const used = new Set([
      ...usedNames(BOOTSTRAP_SOURCE, 'extfn_'),
      ...usedNames(DRIVER_SOURCE, 'extfn_'),
    ]);
    const missing = [...used].filter((name) => !defined.has(name) && !CONSTRUCTORS.has(name));
    expect(missing).toEqual([]);
    expect(defined.has('extfn_start')).toBe(true);
  });

  test('the driver answers every op of the protocol and writes the ready frame', () => {
    for (const clause of ['"load" = extfn_load', '"call" = extfn_call', '"exit" = exit 0']) {
      expect(DRIVER_SOURCE).toContain(clause);
    }
    expect(DRIVER_SOURCE).toContain('{\\"ready\\":1,\\"protocol\\":1,\\"version\\":');
    // The protocol channel is a duplicate of fd 1, and fd 1 is pointed at stderr.
    expect(DRIVER_SOURCE).toContain('let extfn_proto = extfn_open_proto (dup 1);');
    expect(DRIVER_SOURCE).toContain('let extfn_redirected = dup2 2 1;');
  });

  test('the engine fixture add_pure is a well-formed statement of the simple, compiled-once form', () => {
    expect(addPure.body).toBe('let result = args!0 + args!1;');
    const [statement] = statements(addPure.body);
    expect(statement!.map((t) => t.text)).toEqual([
      'let',
      'result',
      '=',
      'args',
      '!',
      '0',
      '+',
      'args',
      '!',
      '1',
    ]);
    // What extfn_compile evaluates for it:
    const compiled = `extfn_compiled args = (${addPure.body.trim().slice(12, -1)});`;
    expect(compiled).toBe('extfn_compiled args = ( args!0 + args!1);');
    expect(statements(compiled)).toHaveLength(1);
  });
});

describe('what a one-shot call writes to pure', () => {
  const fn: ExternalFn = {
    ...addPure,
    name: 'echo',
    argTypes: ['text'],
    returnType: 'text',
    body: 'let result = args!0;',
  };
  const input = (args: Value[]) =>
    Buffer.concat([
      Buffer.from(`${Buffer.byteLength(DRIVER_SOURCE)}\n${DRIVER_SOURCE}`),
      encodeFrame({
        op: 'load',
        id: 1,
        fn: { name: fn.name, body: fn.body, argTypes: fn.argTypes, returnType: fn.returnType },
      }),
      encodeFrame({ op: 'call', id: 2, rows: [args.map((a) => (a as { value: string }).value)] }),
      encodeFrame({ op: 'exit' }),
    ]);

  test('text with quotes, backslashes, newlines, $, #{} and non-BMP characters stays inside one JSON line', () => {
    const nasty = fc.constantFrom(
      '"',
      '\\',
      '\n',
      '\r\n',
      '$x',
      '#{y}',
      '😀',
      '𝄞',
      '"; exit 1; "',
      '\\u0041',
    );
    const text = fc
      .array(fc.oneof(nasty, fc.string({ maxLength: 4 })), { maxLength: 12 })
      .map((p) => p.join(''));
    fc.assert(
      fc.property(text, (s) => {
        const bytes = input([Value.text(s)]);
        const afterDriver = bytes.subarray(
          Buffer.byteLength(`${Buffer.byteLength(DRIVER_SOURCE)}\n${DRIVER_SOURCE}`),
        );
        const frames = new FrameReader().push(afterDriver).map((f) => f.header);
        expect(frames).toHaveLength(3);
        expect((frames[1]!.rows as string[][])[0]![0]).toBe(s);
        // The driver reads each frame with one fgets: one line per frame, whatever the text.
        expect(afterDriver.toString('utf8').split('\n')).toHaveLength(4);
      }),
      { numRuns: 300 },
    );
  });

  test('the driver tokenizes the way the bootstrap counts it: the preamble is its byte length', () => {
    expect(Buffer.byteLength(DRIVER_SOURCE)).toBe(DRIVER_SOURCE.length);
    expect(tokenize(DRIVER_SOURCE).length).toBeGreaterThan(100);
  });
});

describe('finding pure', () => {
  test('an absent interpreter is LanguageUnavailable with how to fix it, and nothing starts', async () => {
    const runner = pure({ interpreter: '/nonexistent/pure' });
    const probe = await runner.probe();
    expect(probe.available).toBe(false);
    expect(probe.fix).toMatch(/IMPROV_EXTFN_PURE/);
    await expect(
      runner.call({ ...addPure, pure: false }, [Value.number(1), Value.number(2)], {
        timeoutMs: 1_000,
      }),
    ).rejects.toMatchObject({ kind: 'LanguageUnavailable' });
    expect(runner.stats().started).toBe(0);
    await runner.close();
  });
});

describe('vectorized functions', () => {
  test('are refused by core with a Runtime error naming the fix, and nothing starts', async () => {
    const runner = pure({ interpreter: '/nonexistent/pure' });
    expect(runner.capabilities.vectorized).toBe(false);
    const registry = new Registry({ runners: [runner], timeoutMs: 1_000 });
    const fn = {
      name: 'vec',
      language: 'pure',
      body: 'let result = args!0;',
      argTypes: ['number' as const],
      returnType: 'number' as const,
    };
    registry.register({ ...fn, vectorized: true });
    registry.register({ ...fn, name: 'row' });
    const refused = {
      kind: 'Runtime',
      message: expect.stringMatching(/no vectorized functions: drop `vectorized: true`/),
    };
    await expect(registry.eval('vec', [Value.number(1)])).rejects.toMatchObject(refused);
    await expect(registry.evalBatch('vec', [[Value.number(1)]])).rejects.toMatchObject(refused);
    await expect(registry.evalColumns('vec', [Float64Array.from([1, 2])])).rejects.toMatchObject(
      refused,
    );
    // Without the flag the same function goes on to look for the interpreter.
    await expect(registry.eval('row', [Value.number(1)])).rejects.toMatchObject({
      kind: 'LanguageUnavailable',
    });
    expect(runner.stats().started).toBe(0);
    await registry.close();
  });
});
