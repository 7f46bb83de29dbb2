/**
 * The CPython versions the README promises: each of 3.8 to 3.13 found on this
 * machine (pyenv's, under $PYENV_ROOT or ~/.pyenv) runs the driver — every
 * value type, a batch with a failing row, an f64 batch, a Python error — and
 * 3.7 is refused at start: the error's stderr and probe() name the version. Those
 * interpreters live under a home, which Restricted never binds, so they run
 * `trusted`; the sandboxed runs are Debian's 3.11 in the other files.
 */
import { existsSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ExtFnError, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { expectScriptDepth, failure, scopedRegistry } from './helpers.js';

const root = process.env.PYENV_ROOT ?? join(homedir(), '.pyenv');

/** The newest installed X.Y.Z of `minor` (e.g. '3.8'), or undefined. */
function installed(minor: string): string | undefined {
  const dir = join(root, 'versions');
  if (!existsSync(dir)) return undefined;
  const found = readdirSync(dir)
    .filter((v) => v.startsWith(`${minor}.`) && existsSync(join(dir, v, 'bin', 'python3')))
    .sort((a, b) => Number(a.split('.')[2]) - Number(b.split('.')[2]))
    .pop();
  return found && join(dir, found, 'bin', 'python3');
}

const DT = Value.datetime('2024-02-29T12:34:56.789123456Z');

describe.each(['3.8', '3.9', '3.10', '3.11', '3.12', '3.13'])('CPython %s', (minor) => {
  const python = installed(minor);
  test.skipIf(!python)(
    python
      ? `runs the driver: every type, a batch with a failing row, f64, errors (${python})`
      : `skipped: no CPython ${minor} under ${root}/versions`,
    async () => {
      const { registry } = scopedRegistry(
        'trusted',
        {
          hyp: ['result = (args[0]**2 + args[1]**2) ** 0.5', ['number', 'number'], 'number'],
          same: ['result = args[0]', ['text'], 'text'],
          flip: ['result = not args[0]', ['boolean'], 'boolean'],
          when: ['result = args[0]', ['datetime'], 'datetime'],
          pick: ['result = args[0] + 1', ['enum'], 'enum'],
          inv: ['result = 1 / args[0]', ['number'], 'number'],
        },
        { interpreter: python },
      );
      expect(await registry.eval('hyp', [Value.number(3), Value.number(4)])).toEqual(
        Value.number(5),
      );
      expect(await registry.eval('same', [Value.text('zoë 🐍')])).toEqual(Value.text('zoë 🐍'));
      expect(await registry.eval('flip', [Value.boolean(true)])).toEqual(Value.boolean(false));
      expect(await registry.eval('when', [DT])).toEqual(DT);
      expect(await registry.eval('pick', [Value.enum(7)])).toEqual(Value.enum(8));
      const rows = [[Value.number(2)], [Value.number(0)], [Value.number(4)]];
      const batch = await registry.evalBatch('inv', rows);
      expect(batch[0]).toEqual(Value.number(0.5));
      expect(ExtFnError.isInstance(batch[1]) && batch[1].message).toMatch(/ZeroDivisionError/);
      expect(batch[2]).toEqual(Value.number(0.25));
      const { values, errors } = await registry.evalColumns('inv', [Float64Array.of(2, 0, 8)]);
      expect([values[0], values[2]]).toEqual([0.5, 0.125]);
      expect(errors.get(1)?.message).toMatch(/ZeroDivisionError/);
      const error = await failure(registry.eval('inv', [Value.number(0)]));
      expect(error.kind).toBe('Runtime');
    },
  );

  test.skipIf(!python)(
    python
      ? `a body's own recursion goes exactly as deep as at a script's top level, through eval, evalBatch and evalColumns (${python})`
      : `skipped: no CPython ${minor} under ${root}/versions`,
    async () => {
      await expectScriptDepth(python!, 'trusted');
    },
  );
});

const old = installed('3.7');
test.skipIf(!old)(
  old
    ? `CPython 3.7 is refused at start, naming the version (${old})`
    : `skipped: no CPython 3.7 under ${root}/versions to show the refusal`,
  async () => {
    const { registry } = scopedRegistry(
      'trusted',
      { one: ['result = 1', [], 'number'] },
      { interpreter: old },
    );
    const error = await failure(registry.eval('one', []));
    expect(error.message).toMatch(/exited with code 2 while starting/);
    expect(error.stderr).toMatch(/needs CPython 3\.8 or later, this is 3\.7/);
    const [probe] = await registry.probe();
    expect(probe?.available).toBe(false);
    expect(probe?.detail).toMatch(/needs CPython 3\.8 or later, this is 3\.7/);
  },
);
