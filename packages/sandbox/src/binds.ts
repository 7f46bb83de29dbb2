/**
 * Which host paths a restricted sandbox sees: the one owner of that rule.
 * Every runner gets /usr, the entries of /etc interpreters read, the
 * interpreter's own tree and what the host explicitly allowed, all
 * read-only; never a directory that holds a home, /root or the working
 * directory. Runners do not compute binds of their own.
 */
import { lstatSync, readFileSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { FIX_INTERPRETER_TREE, FIX_READ_ONLY_PATH } from './fixes.js';

/** Host directories bound whole. */
export const SYSTEM_DIRECTORIES = ['/usr'] as const;

/**
 * What of /etc interpreters read: the dynamic loader's cache, Debian's
 * alternatives (libblas.so.3 → /etc/alternatives/…), user and group names,
 * time zone, locale aliases, MIME types, fonts (R graphics), and the
 * configuration directories of R (/usr/lib/R/etc links here) and Python.
 * Never shadow, gshadow, ssh, ssl keys or anything else a host keeps there.
 */
export const ETC_ENTRIES = [
  'alternatives',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'timezone',
  'nsswitch.conf',
  'passwd',
  'group',
  'hosts',
  'host.conf',
  'gai.conf',
  'protocols',
  'services',
  'os-release',
  'debian_version',
  'mime.types',
  'locale.alias',
  'fonts',
  'R',
  'python3',
  'julia',
] as const;

/** Top-level directories that are symlinks into /usr on merged-/usr systems, real elsewhere. */
const TOP_LEVEL = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];

let systemArgs: string[] | undefined;

/** bwrap arguments binding /usr, the /etc entries that exist here and the top-level links. */
export function systemBindArgs(): string[] {
  if (systemArgs) return systemArgs;
  const out: string[] = [];
  for (const dir of SYSTEM_DIRECTORIES) out.push('--ro-bind', dir, dir);
  for (const top of TOP_LEVEL) {
    try {
      const stat = lstatSync(top);
      if (stat.isSymbolicLink()) out.push('--symlink', readlinkSync(top), top);
      else if (stat.isDirectory()) out.push('--ro-bind', top, top);
    } catch {}
  }
  for (const entry of ETC_ENTRIES) {
    const path = `/etc/${entry}`;
    try {
      const stat = lstatSync(path);
      if (stat.isSymbolicLink()) out.push('--symlink', readlinkSync(path), path);
      // a file only others may not read is none of the body's business
      else if (stat.isDirectory() || (stat.mode & 0o004) !== 0) out.push('--ro-bind', path, path);
    } catch {}
  }
  systemArgs = out;
  return out;
}

/** Whether `path` lies under one of the directories bound whole (or the top-level links). */
export function isSystemPath(path: string): boolean {
  return [...SYSTEM_DIRECTORIES, ...TOP_LEVEL].some((dir) => path.startsWith(`${dir}/`));
}

/** Home directories of the host's users, as /etc/passwd lists them (system ones excluded). */
function passwdHomes(): string[] {
  let text = '';
  try {
    text = readFileSync('/etc/passwd', 'utf8');
  } catch {
    return [];
  }
  const homes: string[] = [];
  for (const line of text.split('\n')) {
    const home = line.split(':')[5];
    if (!home || home === '/' || home === '/nonexistent' || isSystemPath(home)) continue;
    if (/^\/(dev|proc|sys|bin|sbin|usr)(\/|$)/.test(home)) continue;
    homes.push(home);
  }
  return homes;
}

/** What no bind may contain: every home, /home, /root, this process's HOME and working directory. */
export function protectedPaths(): string[] {
  const paths = new Set(['/home', '/root', '/Users', '/var/home', ...passwdHomes()]);
  for (const path of [homedir(), process.env.HOME, process.cwd()]) {
    if (path && path !== '/') paths.add(path);
  }
  return [...paths];
}

/** The protected path that `dir` is, or contains; undefined when none. */
export function protectedWithin(dir: string, protectedList = protectedPaths()): string | undefined {
  if (dir === '/') return '/';
  const real = (path: string) => {
    try {
      return realpathSync(path);
    } catch {
      return path;
    }
  };
  for (const path of protectedList) {
    for (const candidate of new Set([path, real(path)])) {
      if (candidate === dir || candidate.startsWith(`${dir}/`)) return path;
    }
  }
  return undefined;
}

/**
 * The interpreter's own tree, bound read-only so it finds its standard
 * library: `<prefix>/bin/python3` → `<prefix>`, otherwise the binary's
 * directory; nothing for an interpreter under /usr (already there).
 * Throws a Sandbox error when that tree would expose a home, /root, the
 * working directory, a shared `~/.local` or a whole top-level directory.
 */
export function interpreterTree(
  realPath: string,
  functionName?: string,
  protectedList = protectedPaths(),
): string | undefined {
  if (isSystemPath(realPath)) return undefined;
  const dir = dirname(realPath);
  const tree = /\/s?bin$/.test(dir) ? dirname(dir) : dir;
  const depth = tree.split('/').filter(Boolean).length;
  const held = protectedWithin(tree, protectedList);
  let why: string | undefined;
  if (held) why = `it holds ${held}`;
  else if (depth < 2) why = 'it is a whole top-level directory';
  else if (basename(tree) === '.local') why = 'it is a shared ~/.local, with other programs’ data';
  if (!why) return tree;
  throw ExtFnError.sandbox(
    `refusing to bind the tree ${tree} of the interpreter ${realPath} into the sandbox: ${why}`,
    FIX_INTERPRETER_TREE,
    { functionName },
  );
}

/**
 * Every host path a restricted tree gets besides the system ones, real
 * paths: the interpreter's tree and the runner's `readOnlyPaths`, each
 * checked by the same rule.
 */
export function hostBinds(
  command: string,
  readOnlyPaths: readonly string[],
  functionName?: string,
): string[] {
  const protectedList = protectedPaths();
  const binds = new Set<string>();
  const tree = interpreterTree(command, functionName, protectedList);
  if (tree) binds.add(tree);
  for (const path of readOnlyPaths) {
    let real: string;
    try {
      real = realpathSync(path);
      statSync(real);
    } catch (cause) {
      throw ExtFnError.sandbox(`cannot bind ${path}: it does not exist`, 'pass an existing path', {
        functionName,
        cause,
      });
    }
    const held = protectedWithin(real, protectedList);
    if (held) {
      throw ExtFnError.sandbox(
        `refusing to bind ${path} into the sandbox: it holds ${held}`,
        FIX_READ_ONLY_PATH,
        { functionName },
      );
    }
    if (!isSystemPath(real)) binds.add(real);
  }
  return [...binds];
}
