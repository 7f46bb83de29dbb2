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
import { join } from 'node:path';
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
    expect(
      await resolveExecutable({ explicit: '/nonexistent/python3', names: [], env }),
    ).toBeUndefined();
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
