/**
 * The Julia driver checked without Julia: the driver, the bootstrap and the
 * bodies are valid Julia as a real Julia parser (tree-sitter-julia) reads
 * them, and what a call sends to the interpreter carries bodies and values
 * only as JSON data, never as program text.
 */

import { type ExternalFn, parseExternalFns, Value } from '@improv/extfn-core';
import { engineSerdeFixture } from '@improv/extfn-core/testing';
import { FrameReader } from '@improv/extfn-interpreter';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { BOOTSTRAP, DRIVER_SOURCE, JULIA_ARGS, JULIA_LIMITS, julia } from '../src/index.js';
import { bodyAsFunction, juliaSyntaxErrors, oneShotInput } from './helpers.js';

const fixtures = JSON.parse(JSON.stringify(engineSerdeFixture));
const addJl = parseExternalFns(fixtures.external_fns).find((fn) => fn.name === 'add_jl')!;

describe('the parser used for these checks', () => {
  test('rejects text that is not Julia (so a pass below means something)', async () => {
    expect(await juliaSyntaxErrors('x = (1 +')).not.toEqual([]);
    expect(await juliaSyntaxErrors('function f(x)\n  x +\n')).not.toEqual([]);
    expect(await juliaSyntaxErrors('result = args[1] + args[2]')).toEqual([]);
  });
});

describe('the programs julia runs', () => {
  test('the driver is valid Julia', async () => {
    expect(await juliaSyntaxErrors(DRIVER_SOURCE)).toEqual([]);
  });

  test('the bootstrap is valid Julia and is the constant after -e', async () => {
    expect(await juliaSyntaxErrors(BOOTSTRAP)).toEqual([]);
    expect(JULIA_ARGS.at(-2)).toBe('-e');
    expect(JULIA_ARGS.at(-1)).toBe(BOOTSTRAP);
    expect(BOOTSTRAP).toContain('read!(stdin, Vector{UInt8}(undef, n))');
  });

  test('the driver defines the entry points the bootstrap and the protocol need', () => {
    for (const name of [
      'function main()',
      'function serve()',
      'function load!(',
      'function call_json(',
      'function call_f64(',
      'function run_vectorized(',
    ]) {
      expect(DRIVER_SOURCE).toContain(name);
    }
    for (const op of ['"load"', '"call"', '"callf64"', '"exit"'])
      expect(DRIVER_SOURCE).toContain(`op == ${op}`);
    expect(DRIVER_SOURCE).toContain('{\\"ready\\":1,\\"protocol\\":1,\\"version\\":');
    // `vectorized: true` in the load frame's fn selects the column path.
    expect(DRIVER_SOURCE).toContain('get(fn, "vectorized", false) === true');
  });

  test('memory limits let Julia start: 16 GiB of address space, not the 1 GiB default', () => {
    expect(JULIA_LIMITS.memoryBytes).toBe(16 * 1024 ** 3);
  });
});

describe('bodies', () => {
  const bodies: Record<string, string> = {
    'the engine fixture add_jl (indented)': addJl.body,
    'several indented statements': '    x = args[1]\n    y = args[2]\n    result = x * y',
    'a loop and a local function':
      'f(x) = 2x\nresult = 0.0\nfor a in args\n    result += f(a)\nend',
    'a $ and #{} inside a string literal':
      'result = string("cost: \\$", args[1], " #{not interpolated}")',
    'tabs and CRLF line ends': '\tx = args[1]\r\n\tresult = x\r\n',
    'an early return': 'args[1] < 0 && return 0.0\nresult = sqrt(args[1])',
    'a vectorized body broadcasting over its column Vectors':
      'x, y = args\nresult = x .* 1.05 .^ y',
  };
  for (const [what, body] of Object.entries(bodies)) {
    test(`${what}: valid Julia as the body of the driver's function of args`, async () => {
      expect(await juliaSyntaxErrors(body)).toEqual([]);
      expect(await juliaSyntaxErrors(bodyAsFunction(body))).toEqual([]);
    });
  }

  test('a body with a syntax error is seen as one', async () => {
    expect(await juliaSyntaxErrors(bodyAsFunction('result = (args[1] +'))).not.toEqual([]);
  });
});

describe('what a one-shot call writes to julia', () => {
  const fn: ExternalFn = {
    ...addJl,
    name: 'echo',
    argTypes: ['text', 'number'],
    returnType: 'text',
    body: 'result = args[1]',
  };
  const frames = (input: Buffer) => {
    const preamble = Buffer.from(`${Buffer.byteLength(DRIVER_SOURCE)}\n${DRIVER_SOURCE}`);
    expect(input.subarray(0, preamble.length).equals(preamble)).toBe(true);
    return new FrameReader().push(input.subarray(preamble.length)).map((f) => f.header);
  };

  test('the body reaches the driver byte for byte, inside the load frame', () => {
    const body = '    result = "$(args[1]) \\" \\\\ \u0000 😀"\r\n';
    const [load] = frames(
      oneShotInput(DRIVER_SOURCE, { ...fn, body }, [Value.text('x'), Value.number(1)]),
    );
    expect((load!.fn as { body: string }).body).toBe(body);
  });

  test('text arguments with $, #{}, quotes, backslashes, newlines, NUL and non-BMP characters are data', () => {
    const nasty = fc.constantFrom(
      '$x',
      '$(run(`id`))',
      '#{y}',
      '"',
      '\\',
      '\n',
      '\r\n',
      '\u0000',
      '😀',
      '𝄞',
      '"""',
      '\\u0041',
    );
    const text = fc
      .array(fc.oneof(nasty, fc.string({ maxLength: 4 })), { maxLength: 12 })
      .map((p) => p.join(''));
    fc.assert(
      fc.property(text, fc.double(), (s, n) => {
        const input = oneShotInput(DRIVER_SOURCE, fn, [Value.text(s), Value.number(n)]);
        const [, call, exit] = frames(input);
        const row = (call!.rows as unknown[][])[0]!;
        expect(row[0]).toBe(s);
        expect(exit).toEqual({ op: 'exit' });
        // Every newline in the frames is a frame end: a value never adds a line of code.
        expect(input.toString('utf8').split('\n').length).toBe(
          DRIVER_SOURCE.split('\n').length + 1 + 3,
        );
      }),
      { numRuns: 300 },
    );
  });
});

describe('finding julia', () => {
  test('an absent interpreter is LanguageUnavailable with how to fix it, and nothing starts', async () => {
    const runner = julia({ interpreter: '/nonexistent/julia' });
    const probe = await runner.probe();
    expect(probe.available).toBe(false);
    expect(probe.fix).toMatch(/IMPROV_EXTFN_JULIA/);
    await expect(
      runner.call({ ...addJl, pure: false }, [Value.number(1), Value.number(2)], {
        timeoutMs: 1_000,
      }),
    ).rejects.toMatchObject({ kind: 'LanguageUnavailable' });
    expect(runner.stats().started).toBe(0);
    await runner.close();
  });
});
