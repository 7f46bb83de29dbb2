/**
 * What a runner needs for host-allowed libraries (Python's `packages`, R's
 * `libraries`): whether the sandbox's uid can read a library directory, and
 * the digest of a set of libraries that salts the pure-result cache.
 */
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';

/** One installed library: its name, version and the directory it was found in. */
export interface Library {
  readonly name: string;
  readonly version: string;
  readonly path: string;
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/**
 * A root host runs every sandbox as a uid of its own with no groups, so only
 * the "others" permission bits count: read and search on the directory,
 * search on every directory above it. Any other host runs the sandbox as
 * itself, so its own access decides.
 */
async function sandboxCanRead(dir: string): Promise<boolean> {
  try {
    if (!isRoot()) {
      await access(dir, constants.R_OK | constants.X_OK);
      return true;
    }
    if (((await stat(dir)).mode & 0o005) !== 0o005) return false;
    for (let up = dirname(dir); ; up = dirname(up)) {
      if (((await stat(up)).mode & 0o001) === 0) return false;
      if (up === '/') return true;
    }
  } catch {
    return false;
  }
}

/** Throws LanguageUnavailable naming the directory when the sandbox could not read it. */
export async function assertSandboxCanRead(
  dir: string,
  language: string,
  option: string,
): Promise<void> {
  if (await sandboxCanRead(dir)) return;
  throw new ExtFnError(
    'LanguageUnavailable',
    `${language} ${option}: the sandbox's unprivileged uid cannot read ${dir}, so bodies could not use it`,
    {
      language,
      fix: `make ${dir} readable by others (chmod o+rx on it and o+x on the directories above it), or leave it out of ${option}`,
    },
  );
}

/** A digest of the directories and every library's name and version (the cache salt). */
export function librariesDigest(directories: readonly string[], libraries: readonly Library[]) {
  const listed = libraries.map((l) => `${l.path}\0${l.name}\0${l.version}`).sort();
  return createHash('sha256')
    .update(JSON.stringify([directories, listed]))
    .digest('base64url');
}
