/**
 * What is bound around the interpreter, for real: an interpreter under a
 * home gets only its own tree, never the home; a tree that would hold a
 * home (or /root, or the working directory) is refused, as is such a
 * read-only path. The control (the same layout, the directory not a home)
 * shows the secret would otherwise be read.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { runSandboxed } from '../src/index.js';
import { hasBwrap, hasPython, linux, PYTHON } from './helpers.js';

const can = linux && hasBwrap && hasPython;
const home = `/tmp/extfn-home-${randomBytes(4).toString('hex')}`;
const secret = join(home, 'secret.txt');
const realHome = process.env.HOME;

/** A copy of /usr/bin/python3 at `path` (it finds its standard library under /usr). */
function interpreterAt(path: string): string {
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
  copyFileSync(PYTHON, path);
  chmodSync(path, 0o755);
  return path;
}

if (can) {
  mkdirSync(home, { mode: 0o755 });
  chmodSync(home, 0o755);
  writeFileSync(secret, 'ssh-key', { mode: 0o644 });
}
afterEach(() => {
  process.env.HOME = realHome;
});
afterAll(() => rmSync(home, { recursive: true, force: true }));

const LOOK = `import json, os
def attempt(f):
    try:
        return {'ok': f()}
    except OSError as e:
        return {'errno': e.strerror}
print(json.dumps({'secret': attempt(lambda: open(${JSON.stringify(secret)}).read()),
  'home': attempt(lambda: sorted(os.listdir(${JSON.stringify(home)})))}))`;

const run = (command: string, readOnlyPaths: string[] = []) =>
  runSandboxed({
    command,
    args: ['-I', '-S', '-c', LOOK],
    timeoutMs: 15_000,
    policy: 'restricted',
    readOnlyPaths,
  });

async function refusal(promise: Promise<unknown>): Promise<ExtFnError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(ExtFnError.isInstance(error), String(error)).toBe(true);
  return error as ExtFnError;
}

describe('an interpreter under a home directory', () => {
  test.skipIf(!can)('~/bin/python3: refused, since its prefix is the home itself', async () => {
    const python = interpreterAt(join(home, 'bin', 'python3'));
    process.env.HOME = home;
    const error = await refusal(run(python));
    expect(error.kind).toBe('Sandbox');
    expect(error.message).toContain(`it holds ${home}`);
    expect(error.fix).toMatch(/prefix of its own/);
  });

  test.skipIf(!can)(
    'control: when that directory is no home, its tree is bound and the secret read',
    async () => {
      const python = interpreterAt(join(home, 'bin', 'python3'));
      const result = await run(python);
      expect(JSON.parse(result.stdout.toString()).secret).toEqual({ ok: 'ssh-key' });
    },
  );

  test.skipIf(!can)(
    '~/.pyenv/versions/X/bin/python3: its own tree only, not the home',
    async () => {
      const tree = join(home, '.pyenv', 'versions', '3.11');
      const python = interpreterAt(join(tree, 'bin', 'python3'));
      process.env.HOME = home;
      const result = await run(python);
      expect(result.stderr).toBe('');
      expect(JSON.parse(result.stdout.toString())).toEqual({
        secret: { errno: 'No such file or directory' },
        home: { ok: ['.pyenv'] }, // only the path down to the tree exists inside
      });
    },
  );

  test.skipIf(!can)(
    'a read-only path holding the home or the working directory is refused',
    async () => {
      process.env.HOME = home;
      const python = interpreterAt(join(home, '.pyenv', 'versions', '3.11', 'bin', 'python3'));
      for (const path of [home, dirname(process.cwd()), process.cwd()]) {
        const error = await refusal(run(python, [path]));
        expect(error.kind).toBe('Sandbox');
        expect(error.message).toMatch(/refusing to bind/);
      }
    },
  );
});
