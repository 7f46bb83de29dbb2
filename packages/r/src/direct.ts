/**
 * Starting R's binary directly instead of through its front ends. Rscript
 * execs the shell script `R`, which runs `uname` and three `sed`s (for the
 * `-e` argument) and sources `etc/ldpaths` before it execs
 * `R_HOME/bin/exec/R`: six process starts before R's own, each paid inside
 * the sandbox by every worker (about 50 ms of CPU). The script's only
 * lasting effect is the environment it exports, which is read here from the
 * script itself, once per runner, without running anything.
 *
 * Only an R under /usr (a distribution's package) starts this way: there the
 * sandbox already sees every directory R reads. Any other install keeps
 * Rscript, so the sandbox binds its whole tree as before; so does an R
 * whose script does not read as expected.
 */
import { readFileSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join } from 'node:path';

/** How to start an R binary: its path and what the `R` script would have exported. */
export interface DirectR {
  /** `R_HOME/bin/exec/R`. */
  binary: string;
  /** The front end (Rscript or the `R` script) it stands for: the host still runs that. */
  frontEnd: string;
  /** R_HOME, R_SHARE_DIR, R_INCLUDE_DIR, R_DOC_DIR and LD_LIBRARY_PATH. */
  env: Record<string, string>;
}

/** Directories the `R` script sets as plain assignments (configure wrote them). */
const SCRIPT_DIRECTORIES = ['R_SHARE_DIR', 'R_INCLUDE_DIR', 'R_DOC_DIR'] as const;

/** How a source build's script writes those directories: relative to R_HOME. */
// biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's ${R_HOME}, not a template
const R_HOME_REFERENCE = '${R_HOME}';

const frontEnds = new Map<string, string>();

/**
 * The direct start for the front end at `frontEnd` (a real path to Rscript
 * or the `R` script), or undefined when it should be started as it is.
 */
export function directR(frontEnd: string): DirectR | undefined {
  if (!frontEnd.startsWith('/usr/')) return undefined;
  const bin = dirname(frontEnd);
  if (basename(bin) !== 'bin') return undefined;
  const prefix = dirname(bin);
  // Rscript in R_HOME/bin itself, or a prefix's bin with R_HOME in lib/R (Debian: /usr/lib/R).
  for (const home of [prefix, join(prefix, 'lib', 'R'), join(prefix, 'lib64', 'R')]) {
    const found = fromHome(home, frontEnd);
    if (found) {
      frontEnds.set(found.binary, frontEnd);
      return found;
    }
  }
  return undefined;
}

/** The front end a binary from `directR` stands for (for commands the host runs itself). */
export function frontEndOf(path: string): string {
  return frontEnds.get(path) ?? path;
}

function read(path: string): Buffer | undefined {
  try {
    return readFileSync(path);
  } catch {
    return undefined;
  }
}

function fromHome(home: string, frontEnd: string): DirectR | undefined {
  const binary = join(home, 'bin', 'exec', 'R');
  try {
    if (!statSync(binary).isFile()) return undefined;
  } catch {
    return undefined;
  }
  // The front end must be this R's own: R_HOME/bin holds a copy of Rscript and the script R.
  const own = join(home, 'bin', basename(frontEnd));
  if (own !== frontEnd) {
    const mine = read(own);
    const given = read(frontEnd);
    if (!mine || !given || !mine.equals(given)) return undefined;
  }
  const script = read(join(home, 'bin', 'R'))?.toString('utf8');
  if (!script) return undefined;
  const assigned = (name: string): string | undefined => {
    const value = new RegExp(`^${name}=(\\S+)$`, 'm')
      .exec(script)?.[1]
      ?.replaceAll(R_HOME_REFERENCE, home);
    return value && isAbsolute(value) && !/[$`'"\\]/.test(value) ? value : undefined;
  };
  if (assigned('R_HOME_DIR') !== home) return undefined;
  const env: Record<string, string> = { R_HOME: home };
  for (const name of SCRIPT_DIRECTORIES) {
    const value = assigned(name);
    if (!value?.startsWith('/usr/')) return undefined;
    env[name] = value;
  }
  // etc/ldpaths puts R_HOME/lib first (libR.so of a shared-library build);
  // the rest of what it adds is the system's own library directory and Java's.
  env.LD_LIBRARY_PATH = join(home, 'lib');
  return { binary, frontEnd, env };
}
