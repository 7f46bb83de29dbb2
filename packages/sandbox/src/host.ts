/**
 * Facts about the host process the sandbox starts from: where an executable
 * really is, which descriptors it would leak to a child, and the fixed Perl
 * program that closes them.
 */
import { accessSync, constants, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

/** An executable found on the host's PATH (or the absolute path given), symlinks resolved. */
export function findExecutable(name: string, path = process.env.PATH ?? ''): string | undefined {
  const candidates = isAbsolute(name)
    ? [name]
    : name.includes('/')
      ? [resolve(name)]
      : path
          .split(delimiter)
          .filter((dir) => isAbsolute(dir))
          .map((dir) => join(dir, name));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      const real = realpathSync(candidate);
      if (statSync(real).isFile()) return real;
    } catch {}
  }
  return undefined;
}

const found = new Map<string, { at: number; path: string | undefined }>();

/**
 * findExecutable() on the host's PATH, re-resolved at most every two seconds:
 * each tree looks up its interpreter and bwrap, and an install rarely moves.
 */
export function findExecutableCached(name: string): string | undefined {
  const now = Date.now();
  const key = `${name}\0${process.env.PATH ?? ''}\0${process.cwd()}`;
  let hit = found.get(key);
  if (!hit || now - hit.at > 2000) {
    hit = { at: now, path: findExecutable(name) };
    found.set(key, hit);
  }
  return hit.path;
}

const O_CLOEXEC = 0o2000000;

/**
 * File descriptors this process inherited without close-on-exec (Node opens
 * its own with it): every child would inherit them, the sandbox included.
 */
let leakCache: { at: number; fds: number[] } | undefined;

/** leakingDescriptors(), re-read at most every two seconds (inherited ones rarely change). */
export function leakingDescriptorsCached(): number[] {
  const now = Date.now();
  if (!leakCache || now - leakCache.at > 2000) leakCache = { at: now, fds: leakingDescriptors() };
  return leakCache.fds;
}

export function leakingDescriptors(): number[] {
  const leaking: number[] = [];
  let names: string[];
  try {
    names = readdirSync('/proc/self/fdinfo');
  } catch {
    return leaking;
  }
  for (const name of names) {
    const fd = Number(name);
    if (!(fd > 2)) continue;
    try {
      const flags = /flags:\s*([0-7]+)/.exec(readFileSync(`/proc/self/fdinfo/${name}`, 'utf8'));
      if (flags?.[1] && (Number.parseInt(flags[1], 8) & O_CLOEXEC) === 0) leaking.push(fd);
    } catch {}
  }
  return leaking;
}

/**
 * A fixed Perl program (perl-base is part of every Debian/Ubuntu system) that
 * closes every descriptor above `keep` and execs its arguments. Node cannot
 * mark inherited descriptors close-on-exec, and bwrap passes on whatever it
 * gets, so without this a leaked pipe or file would reach the body.
 */
export function closeDescriptorsArgs(perl: string, keep: number): string[] {
  const program = [
    'opendir(my $d, "/proc/self/fd") or die "fd: $!\\n";',
    `my @f = grep { /^\\d+$/ && $_ > ${keep} } readdir $d; closedir $d;`,
    'for my $n (@f) { my $h; if (open($h, "+<&=", $n) || open($h, "<&=", $n) || open($h, ">&=", $n)) { close $h } }',
    'exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\\n";',
  ].join(' ');
  return [perl, '-e', program, '--'];
}
