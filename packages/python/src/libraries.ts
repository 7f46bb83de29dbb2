/**
 * The libraries a host lets Python bodies import (`python({ packages })`):
 * the choice resolved to directories, checked readable by the sandbox's uid,
 * and read for names and versions (for `probe()` and the pure-result cache
 * salt) from metadata files only: no library code runs on the host.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import {
  type AllowedLibraries,
  type Library,
  type LibraryOption,
  librariesDigest,
  libraryOptionError,
  readableDirectories,
} from '@improv/extfn-interpreter';

export type { AllowedLibraries, Library } from '@improv/extfn-interpreter';

/**
 * What bodies may import besides the standard library: `'system'` (the
 * interpreter's own site packages, e.g. Debian's python3-numpy),
 * `{ venv: path }` (a virtual environment's site-packages, plus the system's
 * when it was made with `--system-site-packages`), or explicit directories.
 */
export type PythonPackages = 'system' | { readonly venv: string } | readonly string[];

const PACKAGES: LibraryOption = {
  language: 'python',
  option: 'packages',
  fix: 'python({ packages }) takes "system", { venv: "/path/to/venv" } or absolute directories',
};

function run(path: string, args: readonly string[]): Promise<string> {
  return new Promise((done, fail) => {
    execFile(path, args, { timeout: 10_000, encoding: 'utf8' }, (error, stdout) =>
      error ? fail(error) : done(stdout),
    );
  });
}

/** The interpreter's site directories and its X.Y version, asked once (no user site: -s). */
async function interpreterSites(python: string): Promise<{ sites: string[]; version: string }> {
  const out = await run(python, [
    '-s',
    '-c',
    'import json, site, sys; print(json.dumps([site.getsitepackages(), "%d.%d" % sys.version_info[:2]]))',
  ]);
  const [sites, version] = JSON.parse(out.trim().split('\n').pop() ?? '[]') as [string[], string];
  return { sites: sites.filter((dir) => existsSync(dir)), version };
}

function venvDirectories(venv: string, version: string, systemSites: string[]): string[] {
  const config = join(venv, 'pyvenv.cfg');
  if (!isAbsolute(venv) || !existsSync(config)) {
    throw libraryOptionError(
      PACKAGES,
      `${venv} is not a virtual environment (no pyvenv.cfg there)`,
    );
  }
  const site = join(venv, 'lib', `python${version}`, 'site-packages');
  if (!existsSync(site)) {
    throw libraryOptionError(
      PACKAGES,
      `${venv} has no lib/python${version}/site-packages: it was made for another Python than this runner's ${version}`,
      `make the environment with the runner's interpreter (python${version} -m venv ${venv})`,
    );
  }
  const withSystem = /^\s*include-system-site-packages\s*=\s*true\s*$/im.test(
    readFileSync(config, 'utf8'),
  );
  return withSystem ? [site, ...systemSites] : [site];
}

/** The directories the choice names, before they are checked. */
async function chosenDirectories(packages: PythonPackages, python: string): Promise<unknown[]> {
  if (Array.isArray(packages)) return packages;
  const { sites, version } = await interpreterSites(python);
  if (packages === 'system') return sites;
  return venvDirectories((packages as { venv: string }).venv, version, sites);
}

function metadataField(text: string, field: string): string | undefined {
  return new RegExp(`^${field}:\\s*(.+?)\\s*$`, 'mi').exec(text)?.[1];
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

const VERSION_LITERAL = /^__version__\s*=\s*['"]([^'"]+)['"]/m;

/** Distributions by metadata, then packages that only say `__version__` in their __init__.py. */
function librariesIn(dir: string): Library[] {
  const found: Library[] = [];
  const covered = new Set<string>();
  const entries = readdirSync(dir).sort();
  for (const entry of entries) {
    const metadata = entry.endsWith('.dist-info')
      ? readText(join(dir, entry, 'METADATA'))
      : entry.endsWith('.egg-info')
        ? (readText(join(dir, entry, 'PKG-INFO')) ?? readText(join(dir, entry)))
        : undefined;
    if (metadata === undefined) continue;
    const name = metadataField(metadata, 'Name');
    const version = metadataField(metadata, 'Version');
    if (!name || !version || found.some((l) => l.name === name && l.version === version)) continue;
    found.push({ name, version, path: dir });
    covered.add(name.toLowerCase().replace(/[-.]/g, '_'));
    const topLevel = readText(join(dir, entry, 'top_level.txt'));
    for (const module of topLevel?.split('\n') ?? []) if (module) covered.add(module.toLowerCase());
  }
  for (const entry of entries) {
    if (covered.has(entry.toLowerCase())) continue;
    const init = readText(join(dir, entry, '__init__.py'));
    const version = init && VERSION_LITERAL.exec(init)?.[1];
    if (version) found.push({ name: entry, version, path: dir });
  }
  return found;
}

/**
 * Resolves `packages` for the interpreter at `python`: directories the
 * sandbox's uid can read (else a LanguageUnavailable error naming the
 * directory and the fix), what they hold, and a digest of it all.
 */
export async function allowedLibraries(
  packages: PythonPackages,
  python: string,
): Promise<AllowedLibraries> {
  const chosen = await chosenDirectories(packages, python);
  const directories = await readableDirectories(chosen, PACKAGES);
  const libraries = directories.flatMap(librariesIn);
  return { directories, libraries, digest: librariesDigest(directories, libraries) };
}
