/**
 * The example files this package ships (examples/ beside dist/), so the
 * commands `--help` prints work wherever the package is installed: they are
 * printed with the real path of these files.
 */
import { isAbsolute, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const EXAMPLES_DIR = fileURLToPath(new URL('../examples/', import.meta.url));

/** The shipped example `name`, as the shorter of its path from `cwd` and its absolute path, quoted for a shell when needed. */
export function examplePath(name: string, cwd: string): string {
  const absolute = join(EXAMPLES_DIR, name);
  const fromCwd = relative(cwd, absolute);
  const path = !isAbsolute(fromCwd) && fromCwd.length < absolute.length ? fromCwd : absolute;
  return /^[\w./@+-]+$/.test(path) ? path : `'${path.replaceAll("'", "'\\''")}'`;
}
