import { findExecutable } from './host.js';

/** Host programs the sandbox is assembled from, found once on the host's PATH. */
export interface HostTools {
  prlimit?: string;
  setpriv?: string;
  kill?: string;
  perl?: string;
}

let cached: HostTools | undefined;

export function hostTools(): HostTools {
  if (cached) return cached;
  // also look where Debian keeps them when the host PATH is minimal
  const path = `${process.env.PATH ?? ''}:/usr/bin:/bin:/usr/sbin:/sbin`;
  cached = {
    prlimit: findExecutable('prlimit', path),
    setpriv: findExecutable('setpriv', path),
    kill: findExecutable('kill', path),
    perl: findExecutable('perl', path),
  };
  return cached;
}
