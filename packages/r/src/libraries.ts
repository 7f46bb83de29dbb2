/**
 * The R libraries a host lets bodies load (`r({ libraries })`): the choice
 * resolved to directories, checked readable by the sandbox's uid, and read
 * for package names and versions (DESCRIPTION files, for `probe()` and the
 * pure-result cache salt). No package code runs on the host.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type AllowedLibraries,
  type Library,
  type LibraryOption,
  librariesDigest,
  libraryOptionError,
  readableDirectories,
} from '@improv/extfn-interpreter';
import { frontEndOf } from './direct.js';

export type { Library } from '@improv/extfn-interpreter';

/**
 * Which libraries `library()` searches besides R's own (`.Library`, always
 * there): `'system'` (R's site libraries, what Rscript --vanilla sees; the
 * default) or explicit directories (an empty list: base R only).
 */
export type RLibraries = 'system' | readonly string[];

/** The resolved choice: directories searched in this order before `.Library`, and the packages they hold. */
export type AllowedRLibraries = AllowedLibraries;

const LIBRARIES: LibraryOption = {
  language: 'r',
  option: 'libraries',
  fix: 'r({ libraries }) takes "system" or a list of absolute library directories',
};

/** R's site libraries as Rscript --vanilla sets them up: .libPaths() without .Library. */
function siteLibraries(rscript: string): Promise<string[]> {
  const program = 'cat(setdiff(normalizePath(.libPaths()), normalizePath(.Library)), sep = "\\n")';
  return new Promise((done, fail) => {
    execFile(
      // the front end, not the binary workers start (which needs its environment)
      frontEndOf(rscript),
      ['--vanilla', '-e', program],
      { timeout: 20_000, encoding: 'utf8' },
      (error, stdout) =>
        error ? fail(error) : done(stdout.split('\n').filter((dir) => dir && existsSync(dir))),
    );
  });
}

function packagesIn(dir: string): Library[] {
  const found: Library[] = [];
  for (const entry of readdirSync(dir).sort()) {
    let description: string;
    try {
      description = readFileSync(join(dir, entry, 'DESCRIPTION'), 'utf8');
    } catch {
      continue;
    }
    const name = /^Package:\s*(\S+)/m.exec(description)?.[1];
    const version = /^Version:\s*(\S+)/m.exec(description)?.[1];
    if (name && version) found.push({ name, version, path: dir });
  }
  return found;
}

/**
 * Resolves `libraries` for the Rscript at `rscript`: directories the
 * sandbox's uid can read (else LanguageUnavailable naming the directory and
 * the fix), the packages they hold, and a digest of it all.
 */
export async function allowedRLibraries(
  libraries: RLibraries,
  rscript: string,
): Promise<AllowedRLibraries> {
  if (libraries !== 'system' && !Array.isArray(libraries)) {
    throw libraryOptionError(
      LIBRARIES,
      `expected "system" or a list of directories, got ${JSON.stringify(libraries)}`,
    );
  }
  const chosen = libraries === 'system' ? await siteLibraries(rscript) : libraries;
  const directories = await readableDirectories(chosen, LIBRARIES);
  const found = directories.flatMap(packagesIn);
  return { directories, libraries: found, digest: librariesDigest(directories, found) };
}
