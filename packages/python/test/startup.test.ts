/**
 * A worker's start-up. The driver sent precompiled (bootstrap.ts): the
 * host's interpreter compiles it once, workers load the code object. Spoken
 * to directly (no sandbox: frames only), the stub answers exactly as the
 * source does, falls back to the source on another Python version, and a
 * runner's workers get it. And the driver imports nothing a body may not
 * need (re, json, linecache, ast) before the body runs.
 */
import { execFileSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { driverStub, precompiledDriver } from '../src/bootstrap.js';
import { DRIVER_SOURCE, PYTHON_ARGS } from '../src/index.js';
import { hasPython, noRestricted, PYTHON, registryWith, restrictedOk } from './helpers.js';

const FRAMES = [
  {
    op: 'load',
    id: 1,
    fn: {
      name: 'f',
      // a hashed set: its order shows the hash seed in force; 1 / 0 a row error with a traceback
      body: 'result = "%s %r %s" % (1 / args[0], sorted(set("extfn")), list({"a", "bb", "ccc"}))',
      argTypes: ['number'],
      returnType: 'text',
    },
  },
  { op: 'call', id: 2, rows: [[1], [0.5], [0]] },
  { op: 'exit' },
];

/** The driver's answers (after `ready`) to `frames`, with `driver` as the program sent. */
function answers(driver: string, frames: readonly object[] = FRAMES): unknown[] {
  const program = Buffer.from(driver, 'utf8');
  const out = execFileSync(PYTHON, PYTHON_ARGS, {
    input: Buffer.concat([
      Buffer.from(`${program.length}\n`),
      program,
      Buffer.from(frames.map((f) => `${JSON.stringify(f)}\n`).join('')),
    ]),
    env: { PYTHONHASHSEED: '0' },
  });
  const [ready, ...rest] = out.toString().trim().split('\n');
  expect(JSON.parse(ready!)).toMatchObject({ ready: 1, protocol: 1 });
  // its timing (`workMs`, work-ms.test.ts) aside, every answer is compared whole
  return rest.map((line) => {
    const { workMs, ...answer } = JSON.parse(line);
    expect(workMs === undefined || typeof workMs === 'number').toBe(true);
    return answer;
  });
}

describe.skipIf(!hasPython)('the precompiled driver (no sandbox: frames only)', () => {
  test('the host compiles it once per interpreter, and the stub answers as the source does', async () => {
    const stub = await precompiledDriver(PYTHON, DRIVER_SOURCE);
    expect(stub).toMatch(/^import sys\nif sys.hexversion == \d+:/);
    // the code object and the source travel after a NUL, as data: only the lines before it are compiled
    expect(stub!.indexOf('\0')).toBeGreaterThan(0);
    expect(stub!.indexOf('\0')).toBeLessThan(1000);
    expect(await precompiledDriver(PYTHON, DRIVER_SOURCE)).toBe(stub);
    const fromSource = answers(DRIVER_SOURCE);
    expect(fromSource[1]).toMatchObject({
      id: 2,
      values: [expect.stringMatching(/^1\.0 /), expect.stringMatching(/^2\.0 /), null],
    });
    // the row's traceback shows the body's own line
    expect(JSON.stringify(fromSource[1])).toMatch(/ZeroDivisionError.*result = /);
    expect(answers(stub!)).toEqual(fromSource);
  });

  test('a worker starts without the modules only some bodies need, which a body still gets whole', async () => {
    const frames = [
      {
        op: 'load',
        id: 1,
        fn: {
          name: 'f',
          body: [
            'import sys',
            "loaded = sorted(m for m in ('re', 'json', 'linecache', 'tokenize', 'ast') if type(sys.modules.get(m)).__name__ == 'module')",
            'import traceback, re, json',
            'try:',
            '    1 / 0',
            'except ZeroDivisionError:',
            '    shown = traceback.format_exc()',
            "result = '%s | %s | %s | %s' % (loaded, '1 / 0' in shown, json.dumps({'a': [1.5]}), re.match(r'\\d+', '42x').group())",
          ].join('\n'),
          argTypes: [],
          returnType: 'text',
        },
      },
      { op: 'call', id: 2, rows: [[]] },
      { op: 'exit' },
    ];
    for (const driver of [DRIVER_SOURCE, (await precompiledDriver(PYTHON, DRIVER_SOURCE))!]) {
      const answer = answers(driver, frames)[1] as { values: unknown };
      // nothing of them before the body; the traceback shows the body's own line
      expect(answer.values).toEqual(['[] | True | {"a": [1.5]} | 42']);
    }
  });

  test('on another Python version the stub compiles the source instead', () => {
    expect(answers(driverStub(1, 'bm90IGEgY29kZSBvYmplY3Q=', DRIVER_SOURCE))).toEqual(
      answers(DRIVER_SOURCE),
    );
  });

  test('an interpreter that cannot compile it leaves the source in use', async () => {
    expect(await precompiledDriver('/bin/false', DRIVER_SOURCE)).toBeUndefined();
  });
});

describe.skipIf(!restrictedOk)(
  `workers started after the first get the precompiled driver${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    test.each([
      ['', {}],
      [" (a runner with `packages`: 'system')", { packages: 'system' as const }],
    ])('a later worker runs the code object%s', async (_, options) => {
      const { registry } = registryWith(
        'restricted',
        {
          // the driver's globals: the stub leaves `marshal` there, the source does not
          probe: ['import __main__\nresult = hasattr(__main__, "marshal")', [], 'boolean'],
        },
        options,
      );
      try {
        // the first call finds the interpreter and starts compiling; the runner
        // takes the stub once that ends (the same promise, awaited here after it)
        await registry.eval('probe', [], { mode: 'oneShot' });
        expect(await precompiledDriver(realpathSync(PYTHON), DRIVER_SOURCE)).toBeDefined();
        expect(await registry.eval('probe', [], { mode: 'oneShot' })).toEqual({
          type: 'boolean',
          value: true,
        });
      } finally {
        await registry.close();
      }
    });
  },
);
