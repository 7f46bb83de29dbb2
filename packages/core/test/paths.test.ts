/**
 * The kit's path comparison (`everyPath`, `pathProblems`) on the kit's own
 * in-memory runner: a runner that keeps every row apart shows no problem; one
 * whose rows share their variables shows where the paths part, and so does a
 * case whose expectation is wrong.
 */
import { describe, expect, test } from 'vitest';
import { Registry, Value as V } from '../src/index.js';
import { everyPath, type PathCase, pathProblems, rowOutcome } from '../src/testing/index.js';
import { type Defect, kitRunner } from './kit-runner.js';

/** `fresh` and `warm` registries with the case's body as f, each on a runner of its own. */
function registries(c: PathCase, defect?: Defect): [Registry, Registry] {
  const make = () => {
    const registry = new Registry({ runners: [kitRunner(defect)], timeoutMs: 10_000 });
    registry.register({
      name: 'f',
      language: 'kit',
      body: c.body,
      argTypes: c.argTypes ?? ['number'],
      returnType: c.returnType ?? 'number',
    });
    return registry;
  };
  return [make(), make()];
}

async function problemsOf(c: PathCase, defect?: Defect): Promise<string[]> {
  const [fresh, warm] = registries(c, defect);
  try {
    return pathProblems(c, await everyPath(c, fresh, warm));
  } finally {
    await Promise.all([fresh.close(), warm.close()]);
  }
}

// `remember`: the number an earlier row left in a shared variable, -1 when none
const remember: PathCase = {
  name: 'a variable one row sets is not seen by the next',
  body: 'remember',
  expect: () => V.number(-1),
};

describe('everyPath and pathProblems', () => {
  test('rows kept apart: every path gives every row what eval gives and what the case says', async () => {
    expect(await problemsOf(remember)).toEqual([]);
  });

  test('rows that share variables: the paths part, and the rows disagree with the case', async () => {
    const found = await problemsOf(remember, 'shared-namespace');
    expect(
      found.some((p) => p.startsWith('eval against the case: 299 rows, row 1: number 0')),
    ).toBe(true);
    expect(found.some((p) => p.startsWith('evalBatch of the rows reversed, warm: '))).toBe(true);
  });

  test('a case that says how many rows it runs gets that many on every path', async () => {
    const c: PathCase = { ...remember, rows: 12 };
    const [fresh, warm] = registries(c);
    try {
      const paths = await everyPath(c, fresh, warm);
      expect(Object.values(paths).map((rows) => rows.length)).toEqual([12, 12, 12, 12]);
      expect(pathProblems({ ...c, expect: () => V.number(0) }, paths)[0]).toMatch(
        /^eval against the case: 12 rows, /,
      );
    } finally {
      await Promise.all([fresh.close(), warm.close()]);
    }
  });

  test('a wrong expectation is found even when every path agrees', async () => {
    const found = await problemsOf({ ...remember, expect: () => V.number(0) });
    expect(found).toEqual([
      'eval against the case: 300 rows, row 0: number -1, expected number 0; row 1: number -1, expected number 0; row 2: number -1, expected number 0; row 3: number -1, expected number 0',
    ]);
  });

  test('an outcome is the value as the wire spells it, or the error without the function', () => {
    expect(rowOutcome(V.number(-0))).toBe('number "-0"');
    expect(rowOutcome(undefined)).toBe('nothing');
  });
});
