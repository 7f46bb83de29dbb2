/**
 * The conformance kit tested as its users run it: a correct runner passes
 * every test, and each deliberately broken runner fails the test for its
 * defect. The kit's tests are collected with a `test` function of our own and
 * run here, so their failures can be asserted on.
 */
import { describe, expect, test } from 'vitest';
import { type LanguageRunner, Value } from '../src/index.js';
import {
  type ConformanceOptions,
  isolationSuite,
  runnerConformanceSuite,
  type TestFunction,
  valuesSuite,
  vectorizedSuite,
} from '../src/testing/index.js';
import { type Defect, kitBodies, kitRunner } from './kit-runner.js';

interface Collected {
  passed: string[];
  failed: Map<string, string>;
  skipped: string[];
}

/** A `test` function that collects the kit's tests, then runs them one by one. */
async function runKit(register: (test: TestFunction) => void): Promise<Collected> {
  const tests: { name: string; fn: () => Promise<void> }[] = [];
  const skipped: string[] = [];
  const collect: TestFunction = Object.assign(
    (name: string, fn: () => Promise<void>) => {
      tests.push({ name, fn });
    },
    { skip: (name: string) => void skipped.push(name) },
  );
  register(collect);
  const out: Collected = { passed: [], failed: new Map(), skipped };
  for (const { name, fn } of tests) {
    try {
      await fn();
      out.passed.push(name);
    } catch (error) {
      out.failed.set(name, error instanceof Error ? error.message : String(error));
    }
  }
  return out;
}

const options: ConformanceOptions = {
  bodies: kitBodies,
  datetimeDigits: 9,
  loopTimeoutMs: 100,
  verbatim: [
    {
      name: 'quotes and backslashes',
      body: 'text:a\\b"c',
      returnType: 'text',
      expected: Value.text('a\\b"c'),
    },
  ],
  prefix: 'kit:',
};

const kitFor = (defect?: Defect) =>
  runKit((test) => runnerConformanceSuite(test, () => kitRunner(defect), options));

describe('the conformance kit', () => {
  test('a correct runner passes every test, none skipped', async () => {
    const result = await kitFor();
    expect([...result.failed]).toEqual([]);
    expect(result.skipped).toEqual([]);
    expect(result.passed.length).toBeGreaterThanOrEqual(20);
    for (const topic of [
      /identity returns every text/,
      /lone surrogates/,
      /evalColumns/,
      /not visible in the next/,
      /same draw/,
      /close\(\)/,
      /vectorized: evalBatch and evalColumns/,
      /warmUp\(\) readies a function/,
    ]) {
      expect(result.passed.some((name) => topic.test(name))).toBe(true);
    }
  });

  const defects: [Defect, RegExp, RegExp][] = [
    [
      'columns-drop-errors',
      /evalColumns gives failing and hanging rows their own errors/,
      /row 1 \(-1\): expected its error/,
    ],
    [
      'shared-namespace',
      /a variable one row sets is not visible in the next/,
      /left behind by an earlier row/,
    ],
    [
      'no-reseed',
      /the default random generator gives the same draw on every row/,
      /not reseeded per row/,
    ],
    [
      'surrogates-mangled',
      /lone surrogates in text arguments come back unchanged/,
      /expected .*\\ud800/,
    ],
    [
      'vectorized-no-fallback',
      /vectorized: evalBatch and evalColumns give each row what eval gives it/,
      /evalBatch row 0/,
    ],
    ['warm-up-fails', /warmUp\(\) readies a function/, /warmUp failed: .*could not start/],
    [
      'load-unmarked',
      /a body that does not load fails every call alike, marked loadFailed/,
      /not marked loadFailed: function broken: SyntaxError/,
    ],
  ];
  test.each(defects)(
    'a runner with defect %s fails the kit where it should',
    async (defect, name, why) => {
      const result = await kitFor(defect);
      const failures = [...result.failed].filter(([test]) => name.test(test));
      expect(
        failures.length,
        `no failure for ${defect}: ${[...result.failed.keys()].join('; ')}`,
      ).toBe(1);
      expect(failures[0]![1]).toMatch(why);
    },
  );

  test('a broken callColumns is reached, not hidden behind core’s fallback', async () => {
    let reached = 0;
    const result = await runKit((test) =>
      runnerConformanceSuite(
        test,
        () => {
          const runner = kitRunner();
          const own = runner.callColumns!.bind(runner);
          return {
            ...runner,
            callColumns: (fn, columns, o) => {
              reached++;
              return own(fn, columns, o).then((out) => ({
                ...out,
                values: out.values.map((v) => v + 1),
              }));
            },
          } satisfies LanguageRunner;
        },
        options,
      ),
    );
    expect(reached).toBeGreaterThan(0);
    expect(
      [...result.failed.keys()].some((n) => /evalColumns gives what evalBatch gives/.test(n)),
    ).toBe(true);
  });

  test('a runner without vectorized functions passes by core refusing them; one that claims them needs the body', async () => {
    const perRowOnly = () => {
      const runner = kitRunner();
      return { ...runner, capabilities: { ...runner.capabilities, vectorized: false } };
    };
    const refused = await runKit((test) =>
      vectorizedSuite(test, perRowOnly, { bodies: {}, prefix: 'rows:' }),
    );
    expect([...refused.failed]).toEqual([]);
    expect(refused.passed).toHaveLength(1);
    const noBody = await runKit((test) =>
      vectorizedSuite(test, () => kitRunner(), { bodies: {}, prefix: 'claims:' }),
    );
    expect([...noBody.failed.values()]).toEqual([
      expect.stringMatching(/give bodies.vectorizedMixed, or unsupported.vectorized/),
    ]);
  });

  test('each topic runs alone', async () => {
    const result = await runKit((test) =>
      isolationSuite(test, () => kitRunner('shared-namespace'), {
        bodies: kitBodies,
        prefix: 'alone:',
      }),
    );
    expect(result.passed).toEqual([
      'alone: the default random generator gives the same draw on every row (eval, evalBatch, evalColumns)',
    ]);
    expect([...result.failed.keys()]).toEqual([
      'alone: a variable one row sets is not visible in the next (eval, evalBatch, evalColumns)',
    ]);
    const values = await runKit((test) =>
      valuesSuite(test, () => kitRunner(), { ...options, types: ['text'] }),
    );
    expect(values.failed.size).toBe(0);
    expect(values.passed.length).toBe(4); // identity, surrogates, large result, one verbatim case
  });

  test('a runner that opts out shows the reason in the skipped test name; a missing body is named too', async () => {
    const result = await runKit((test) =>
      isolationSuite(test, () => kitRunner('no-reseed'), {
        bodies: { remember: 'remember' },
        unsupported: { random: 'the language has no random generator' },
        prefix: 'k:',
      }),
    );
    expect(result.failed.size).toBe(0);
    expect(result.skipped).toEqual([
      'k: the default random generator gives the same draw on every row (eval, evalBatch, evalColumns) — not checked: the language has no random generator',
    ]);
    const missing = await runKit((test) => isolationSuite(test, () => kitRunner(), { bodies: {} }));
    expect(missing.skipped.map((n) => n.replace(/.* — /, ''))).toEqual([
      'not checked: no bodies.remember given',
      'not checked: no bodies.random given',
    ]);
  });
});
