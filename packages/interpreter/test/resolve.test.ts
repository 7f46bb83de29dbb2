/** Finding the interpreter (`resolve.ts`): option > environment > PATH, shims seen through, and one the sandbox uid can run preferred. */
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { resolveExecutable } from '../src/index.js';
import { hasPython, PYTHON } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'extfn-resolve-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!hasPython)('resolveExecutable', () => {
  test('explicit option > environment variable > PATH, made real', async () => {
    symlinkSync(PYTHON, join(dir, 'py-link'));
    const env = { PATH: `${dir}:/usr/bin`, MY_PY: join(dir, 'py-link') };
    const fromPath = await resolveExecutable({ names: ['py-link'], env });
    expect(fromPath?.path).toMatch(/^\/usr\/bin\/python3\.\d+$/);
    const fromEnv = await resolveExecutable({ envVar: 'MY_PY', names: ['nothing-here'], env });
    expect(fromEnv?.path).toBe(fromPath?.path);
    const explicit = await resolveExecutable({
      explicit: '/bin/sh',
      envVar: 'MY_PY',
      names: ['py-link'],
      env,
    });
    expect(explicit?.path).toMatch(/\/(dash|bash|sh)$/);
    expect(
      await resolveExecutable({ names: ['no-such-interpreter-anywhere'], env }),
    ).toBeUndefined();
    await expect(
      resolveExecutable({ explicit: '/nonexistent/python3', names: [], env }),
    ).rejects.toThrow(
      'the `interpreter` option is set to /nonexistent/python3, which does not exist',
    );
  });

  test('a shim script is seen through by asking the interpreter for its executable', async () => {
    const shim = join(dir, 'python-shim');
    writeFileSync(shim, `#!/bin/sh\nexec ${PYTHON} "$@"\n`);
    chmodSync(shim, 0o755);
    const plain = await resolveExecutable({ explicit: shim, names: [] });
    expect(plain?.path).toBe(shim);
    const seen = await resolveExecutable({
      explicit: shim,
      names: [],
      realPathArgs: ['-c', 'import sys; print(sys.executable)'],
      readOnlyPaths: (path) => [path.replace(/\/bin\/[^/]+$/, '')],
    });
    expect(seen?.path).toMatch(/^\/usr\/bin\/python3\.\d+$/);
    expect(seen?.readOnlyPaths).toEqual(['/usr']);
  });

  test('what a shim reports is asked once per process, and again when the shim changes', async () => {
    const shim = join(dir, 'counting-shim');
    const log = join(dir, 'asked.log');
    const write = (version: string) => {
      writeFileSync(shim, `#!/bin/sh\n# ${version}\necho asked >> ${log}\nexec ${PYTHON} "$@"\n`);
      chmodSync(shim, 0o755);
    };
    write('one');
    const ask = () =>
      resolveExecutable({
        explicit: shim,
        names: [],
        realPathArgs: ['-c', 'import sys; print(sys.executable)'],
      });
    const asked = () => readFileSync(log, 'utf8').split('\n').filter(Boolean).length;
    const first = await ask();
    const second = await ask();
    expect(second).toEqual(first);
    expect(first?.path).toMatch(/^\/usr\/bin\/python3\.\d+$/);
    expect(asked()).toBe(1);
    write('two, a longer line so that the size changes');
    expect((await ask())?.path).toBe(first?.path);
    expect(asked()).toBe(2);
  });

  test('on PATH, an interpreter the sandbox uid can run wins over a private one found first', async () => {
    const privateDir = join(dir, 'private');
    const publicDir = join(dir, 'public');
    mkdirSync(privateDir, { mode: 0o700 });
    mkdirSync(publicDir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    for (const d of [privateDir, publicDir]) {
      writeFileSync(join(d, 'fakepy'), '#!/bin/sh\n');
      chmodSync(join(d, 'fakepy'), 0o755);
    }
    const env = { PATH: `${privateDir}:${publicDir}` };
    expect((await resolveExecutable({ names: ['fakepy'], env }))?.path).toBe(
      join(publicDir, 'fakepy'),
    );
    // Only the private one: it is returned, and the sandbox will say what to do.
    expect((await resolveExecutable({ names: ['fakepy'], env: { PATH: privateDir } }))?.path).toBe(
      join(privateDir, 'fakepy'),
    );
    // An explicit choice is taken as given.
    expect(
      (await resolveExecutable({ explicit: join(privateDir, 'fakepy'), names: [], env }))?.path,
    ).toBe(join(privateDir, 'fakepy'));
  });
});

/** How resolveExecutable rejects: the error, or a failed assertion when it resolves. */
async function rejection(promise: Promise<unknown>): Promise<ExtFnError> {
  const outcome = await promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if (!('error' in outcome))
    throw new Error(`expected a rejection, got ${JSON.stringify(outcome)}`);
  expect(ExtFnError.isInstance(outcome.error)).toBe(true);
  return outcome.error as ExtFnError;
}

describe('an interpreter option or variable that names no executable', () => {
  const choose = (value: string, extra: { explicit?: string; PATH?: string } = {}) =>
    resolveExecutable({
      explicit: extra.explicit,
      envVar: 'MY_PY',
      names: ['python3'],
      executable: 'a Python 3 executable',
      env: { MY_PY: value, PATH: extra.PATH ?? dir },
    });
  const FIX = 'set MY_PY to a Python 3 executable, or unset it to use python3 from PATH';

  test('a path that does not exist: the variable, its value, what is wrong, and the fix', async () => {
    const error = await rejection(choose('/nope/python3'));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toBe(`MY_PY is set to /nope/python3, which does not exist; ${FIX}`);
    expect(error.fix).toBe(FIX);
  });

  test('a relative path is shown as given and as resolved', async () => {
    const error = await rejection(choose('./no-such-python3'));
    expect(error.message).toBe(
      `MY_PY is set to ./no-such-python3 (${resolve('no-such-python3')}), which does not exist; ${FIX}`,
    );
  });

  test('a directory', async () => {
    const sub = join(dir, 'a-directory');
    mkdirSync(sub, { recursive: true });
    expect((await rejection(choose(sub))).message).toBe(
      `MY_PY is set to ${sub}, which is a directory; ${FIX}`,
    );
  });

  test('a file that is not executable', async () => {
    const file = join(dir, 'not-executable');
    writeFileSync(file, '#!/bin/sh\n');
    chmodSync(file, 0o644);
    expect((await rejection(choose(file))).message).toBe(
      `MY_PY is set to ${file}, which is not executable; ${FIX}`,
    );
  });

  test('a command name that is not on PATH', async () => {
    expect((await rejection(choose('python9'))).message).toBe(
      `MY_PY is set to python9, which is not a command on PATH; ${FIX}`,
    );
  });

  test('the `interpreter` option: named as the option, and the fix says to leave it out', async () => {
    const error = await rejection(choose('/usr/bin/python3', { explicit: '/nope/python3' }));
    const fix =
      'set the `interpreter` option to a Python 3 executable, or leave it out to use MY_PY or python3 from PATH';
    expect(error.message).toBe(
      `the \`interpreter\` option is set to /nope/python3, which does not exist; ${fix}`,
    );
    expect(error.fix).toBe(fix);
  });

  test('without `executable`, the fix names the commands looked for', async () => {
    const error = await rejection(
      resolveExecutable({ envVar: 'MY_LUA', names: ['lua5.4', 'lua'], env: { MY_LUA: '/nope' } }),
    );
    expect(error.fix).toBe(
      'set MY_LUA to a lua5.4 or lua executable, or unset it to use lua5.4 or lua from PATH',
    );
  });

  test('an executable file is used, and an empty or unset variable falls back to PATH', async () => {
    const file = join(dir, 'fake-python3');
    writeFileSync(file, '#!/bin/sh\n');
    chmodSync(file, 0o755);
    expect((await choose(file))?.path).toBe(file);
    expect(await choose('', { PATH: '/nonexistent' })).toBeUndefined();
    expect(
      await resolveExecutable({
        envVar: 'MY_PY',
        names: ['python3'],
        env: { PATH: '/nonexistent' },
      }),
    ).toBeUndefined();
  });
});
