/**
 * What every language's host-allowed libraries share (Python's `packages`,
 * R's `libraries`): the chosen directories checked (absolute, existing,
 * readable by the sandbox's uid) and made real, what a resolved choice holds,
 * and the digest that salts the pure-result cache. Each language keeps only
 * its own rules: where its libraries live and how their versions are read.
 */
import { createHash } from 'node:crypto';
import { constants, realpathSync, statSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { dirname, isAbsolute } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';

/** One installed library: its name, version and the directory it was found in. */
export interface Library {
  readonly name: string;
  readonly version: string;
  readonly path: string;
}

/** A language's choice of libraries, resolved. */
export interface AllowedLibraries {
  /** Real paths, in the order the interpreter searches them. */
  readonly directories: readonly string[];
  /** What those directories hold, by their metadata files. */
  readonly libraries: readonly Library[];
  /** Changes whenever a directory or a library version does. */
  readonly digest: string;
}

/** The option a directory list comes from, for its errors: `python packages`, `r libraries`. */
export interface LibraryOption {
  readonly language: string;
  readonly option: string;
  /** What the option takes, as the fix of a malformed entry. */
  readonly fix: string;
}

/** LanguageUnavailable for a choice that cannot be honoured, prefixed with the option. */
export function libraryOptionError(
  where: LibraryOption,
  message: string,
  fix = where.fix,
): ExtFnError {
  return new ExtFnError('LanguageUnavailable', `${where.language} ${where.option}: ${message}`, {
    language: where.language,
    fix,
  });
}

/**
 * The chosen directories as real paths, deduplicated, in order: each must be
 * an absolute path to a directory the sandbox's uid can read, else a
 * LanguageUnavailable error naming it.
 */
export async function readableDirectories(
  chosen: readonly unknown[],
  where: LibraryOption,
): Promise<string[]> {
  const real: string[] = [];
  for (const dir of chosen) {
    if (typeof dir !== 'string' || !isAbsolute(dir)) {
      throw libraryOptionError(where, `${JSON.stringify(dir)} is not an absolute directory path`);
    }
    let path: string;
    try {
      path = realpathSync(dir);
    } catch {
      throw libraryOptionError(where, `${dir} does not exist`);
    }
    if (!statSync(path).isDirectory()) throw libraryOptionError(where, `${dir} is not a directory`);
    if (real.includes(path)) continue;
    await assertSandboxCanRead(path, where.language, where.option);
    real.push(path);
  }
  return real;
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
