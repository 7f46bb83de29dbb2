/**
 * Real runs of pure, for a machine that has it (IMPROV_EXTFN_PURE or
 * `pure` on PATH). Skipped here: Pure is not installable on our CI.
 */

import { execFileSync } from 'node:child_process';
import { parseExternalFns, Registry, Value } from '@improv/extfn-core';
import { engineSerdeFixture, runnerConformanceSuite } from '@improv/extfn-core/testing';
import { afterAll, describe, expect, test } from 'vitest';
import { pure } from '../src/index.js';

function findPure(): string | undefined {
  if (process.env.IMPROV_EXTFN_PURE) return process.env.IMPROV_EXTFN_PURE;
  try {
    return execFileSync('sh', ['-c', 'command -v pure'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}
const PURE = findPure();
const pureFound = PURE !== undefined;
const noPure = 'skipped: pure is not installed here';
const runner = () => pure({ ...(PURE ? { interpreter: PURE } : {}), policy: 'restricted' });

// Without the interpreter every kit test is still listed, skipped with the reason in its name.
runnerConformanceSuite(test.skipIf(!pureFound), runner, {
  bodies: {
    identity: 'let result = args!0;',
    add: 'let result = args!0 + args!1;',
    raise: 'let result = throw "nope";',
    wrongReturn: 'let result = "not a number";',
    loop: 'loop x = loop (x + 1);\nlet result = loop 0;',
    largeResult: 'let result = strcat ["x" | i = 1..200000];',
  },
  textNul: false,
  datetimeDigits: 6,
  unsupported: {
    loadFailed:
      'the Pure driver answers every load ok and compiles at the first call (drivers/driver.pure, extfn_load), so a body that does not parse fails each call',
  },
  verbatim: [
    {
      name: 'escapes, quotes and a CRLF line end',
      body: 'let result = "a\\\\b \\"q\\" \\t";\r\n',
      returnType: 'text',
      expected: Value.text('a\\b "q" \t'),
    },
  ],
  testTimeoutMs: 120_000,
  prefix: pureFound ? `pure (${PURE}, Restricted) conformance:` : `pure conformance (${noPure}):`,
});

describe.skipIf(!pureFound)(`pure specifics${pureFound ? '' : ` (${noPure})`}`, () => {
  const registry = new Registry({ runners: [runner()], timeoutMs: 30_000 });
  afterAll(() => registry.close());
  const fixtures = JSON.parse(JSON.stringify(engineSerdeFixture));
  for (const fn of parseExternalFns(fixtures.external_fns).filter((f) => f.language === 'pure'))
    registry.register(fn);
  registry.register({
    name: 'two_statements',
    language: 'pure',
    body: 'let x = args!0 * 2;\nlet result = x + 1;',
    argTypes: ['number'],
    returnType: 'number',
  });

  test('the engine fixture add_pure: 2 + 3 = 5, compiled once and as a batch', async () => {
    expect(await registry.eval('add_pure', [Value.number(2), Value.number(3)])).toEqual(
      Value.number(5),
    );
    const batch = await registry.evalBatch('add_pure', [
      [Value.number(1), Value.number(2)],
      [Value.number(-1), Value.number(0.5)],
    ]);
    expect(batch).toEqual([Value.number(3), Value.number(-0.5)]);
  });

  test('a body of several statements runs per row through eval', async () => {
    expect(await registry.eval('two_statements', [Value.number(4)])).toEqual(Value.number(9));
  });
});
