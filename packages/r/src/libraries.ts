/**
 * The R libraries a host lets bodies load (`r({ libraries })`): the choice
 * resolved to directories, checked readable by the sandbox's uid, and read
 * for package names and versions (DESCRIPTION files, for `probe()` and the
 * pure-result cache salt). No package code runs on the host.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
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

/**
 * Asked R once per host process for each front end (its file as it is) and
 * environment: a new registry's runner then starts no R on the host before
 * its first worker — in a cold refresh that was a whole R start-up, and a
 * fork of the host. The packages in the directories are read afresh each
 * time (allowedRLibraries), so an upgrade still changes the digest.
 */
const askedSites = new Map<string, Promise<string[]>>();

function siteLibraries(rscript: string): Promise<string[]> {
  const front = frontEndOf(rscript);
  let key: string;
  try {
    const { ino, size, mtimeMs } = statSync(front);
    key = JSON.stringify([front, ino, size, mtimeMs, process.env]);
  } catch {
    return askSiteLibraries(front); // its own error says why
  }
  let asked = askedSites.get(key);
  if (!asked) {
    asked = askSiteLibraries(front);
    askedSites.set(key, asked);
    asked.catch(() => askedSites.delete(key)); // a failure is asked again next time
  }
  return asked;
}

/** R's site libraries as Rscript --vanilla sets them up: .libPaths() without .Library. */
function askSiteLibraries(front: string): Promise<string[]> {
  const program = 'cat(setdiff(normalizePath(.libPaths()), normalizePath(.Library)), sep = "\\n")';
  return new Promise((done, fail) => {
    execFile(
      // the front end, not the binary workers start (which needs its environment)
      front,
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
