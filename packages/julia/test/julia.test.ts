/**
 * Real runs of julia, for a machine that has it (IMPROV_EXTFN_JULIA or
 * `julia` on PATH). Skipped here: Julia is not installable on our CI.
 */

import { parseExternalFns, Registry, sameValue, Value } from '@improv/extfn-core';
import { engineSerdeFixture, runnerConformanceSuite } from '@improv/extfn-core/testing';
import fc from 'fast-check';
import { afterAll, describe, expect, test } from 'vitest';
import { julia } from '../src/index.js';
import { failure, JULIA, juliaFound, noJulia } from './helpers.js';

const runner = () => julia({ ...(JULIA ? { interpreter: JULIA } : {}), policy: 'restricted' });

// Without the interpreter every kit test is still listed, skipped with the reason in its name.
runnerConformanceSuite(test.skipIf(!juliaFound), runner, {
  bodies: {
    identity: 'result = args[1]',
    add: '    result = args[1] + args[2]',
    raise: 'error("nope")',
    noLoad: 'result = (',
    wrongReturn: 'result = "not a number"',
    loop: 'while true\nend',
    largeResult: 'result = "x"^200000',
    flood: 'for i in 1:60000\n    println("z"^99)\nend\nresult = 0.0',
    mixedBatch: 'x = args[1]\nif x < 0\n    error("nope")\nend\nwhile x == 13\nend\nresult = 2x',
    vectorizedMixed:
      'xs = args[1]\nwhile 13 in xs\nend\nany(x -> x < 0, xs) && error("nope")\nresult = [x == 7 ? nothing : 2x for x in xs]',
  },
  datetimeDigits: 3,
  loopTimeoutMs: 3_000,
  testTimeoutMs: 180_000,
  verbatim: [
    {
      name: '$ is not interpolated from data',
      body: 'x = "a\\$b"\nresult = x',
      returnType: 'text',
      expected: Value.text('a$b'),
    },
    {
      name: 'triple-quoted strings',
      body: 'result = """q "x" """',
      returnType: 'text',
      expected: Value.text('q "x" '),
    },
  ],
  prefix: juliaFound
    ? `julia (${JULIA}, Restricted) conformance:`
    : `julia conformance (${noJulia}):`,
});

describe.skipIf(!juliaFound)(`julia specifics${juliaFound ? '' : ` (${noJulia})`}`, () => {
  const registry = new Registry({ runners: [runner()], timeoutMs: 60_000 });
  afterAll(() => registry.close());
  const fixtures = JSON.parse(JSON.stringify(engineSerdeFixture));
  for (const fn of parseExternalFns(fixtures.external_fns).filter((f) => f.language === 'julia'))
    registry.register(fn);
  registry.register({
    name: 'id_text',
    language: 'julia',
    body: 'result = args[1]',
    argTypes: ['text'],
    returnType: 'text',
  });
  registry.register({
    name: 'modules',
    language: 'julia',
    body: 'using Base.Math\nresult = args[1] * 2',
    argTypes: ['number'],
    returnType: 'number',
  });

  test('the engine fixture add_jl: 2 + 3 = 5, warm and as a batch', async () => {
    expect(await registry.eval('add_jl', [Value.number(2), Value.number(3)])).toEqual(
      Value.number(5),
    );
    const rows = Array.from({ length: 1_000 }, (_, i) => [Value.number(i), Value.number(0.5)]);
    const batch = await registry.evalBatch('add_jl', rows);
    for (const [i, v] of batch.entries()) expect(v).toEqual(Value.number(i + 0.5));
  });

  test('text with quotes, backslashes, newlines, $, #{}, NUL and non-BMP characters arrives unchanged', async () => {
    const nasty = fc.constantFrom(
      '$x',
      '$(error("no"))',
      '#{y}',
      '"',
      '\\',
      '\n',
      '\r\n',
      '\u0000',
      '😀',
      '𝄞',
      '\ud800',
    );
    const text = fc
      .array(fc.oneof(nasty, fc.string({ maxLength: 4 })), { maxLength: 12 })
      .map((p) => p.join(''));
    await fc.assert(
      fc.asyncProperty(text, async (s) => {
        const back = await registry.eval('id_text', [Value.text(s)], { cache: false });
        expect(sameValue(back, Value.text(s))).toBe(true);
      }),
      { numRuns: 100 },
    );
  });

  test('a body with top-level forms runs in a module per row', async () => {
    expect(await registry.eval('modules', [Value.number(4)])).toEqual(Value.number(8));
  });

  test('vectorized: Vectors in, one Vector out; a throwing chunk re-runs row by row, nothing is a row error', async () => {
    registry.register({
      name: 'vec',
      language: 'julia',
      body: 'x, y = args\nany(==(13.0), x) && error("thirteen")\nresult = Any[v < 0 ? nothing : v * 1.05^w for (v, w) in zip(x, y)]',
      argTypes: ['number', 'number'],
      returnType: 'number',
      vectorized: true,
    });
    const rows = [1, 13, -1, 4].map((x) => [Value.number(x), Value.number(2)]);
    const single = [];
    for (const row of rows) single.push(await registry.eval('vec', row).catch((e) => e.message));
    expect(single).toEqual([
      Value.number(1.1025),
      'function vec: ErrorException: thirteen',
      'function vec: result expected number, got nothing (a missing value in the vectorized result)',
      Value.number(4.41),
    ]);
    const batch = await registry.evalBatch('vec', rows);
    expect(batch.map((r) => ('kind' in r ? r.message : r))).toEqual(single);
  });

  test('a missing result is a Runtime error', async () => {
    registry.register({
      name: 'unset',
      language: 'julia',
      body: 'x = 1',
      argTypes: [],
      returnType: 'number',
    });
    expect((await failure(registry.eval('unset', []))).message).toMatch(/did not set result/);
  });

  // A body whose forked child returns: the child's copy of the driver would
  // answer the same request (or write the batch's values first); only the
  // worker answers (the driver's only_the_worker, docs/protocol.md "Forks").
  test('a forked child that returns never answers for its worker: eval in each mode, and batches', async () => {
    registry.register({
      name: 'forks',
      language: 'julia',
      body: 'pid = ccall(:fork, Cint, ())\nresult = args[1] * 10 + (pid == 0 ? 1 : 0)',
      argTypes: ['number'],
      returnType: 'number',
    });
    for (const mode of ['warm', 'oneShot'] as const) {
      for (const x of [1, 2, 3]) {
        expect(await registry.eval('forks', [Value.number(x)], { mode, cache: false })).toEqual(
          Value.number(x * 10),
        );
      }
    }
    const rows = Array.from({ length: 20 }, (_, i) => [Value.number(i)]);
    const batch = await registry.evalBatch('forks', rows, { cache: false });
    expect(batch).toEqual(rows.map(([x]) => Value.number(x!.value * 10)));
  });
});
