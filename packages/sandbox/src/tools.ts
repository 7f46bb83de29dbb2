/** Host programs the sandbox is assembled from, found once on the host's PATH. */
import { findExecutable } from './host.js';

export interface HostTools {
  prlimit?: string;
  setpriv?: string;
  kill?: string;
  perl?: string;
  ipcrm?: string;
  sh?: string;
  /** dash, the chain's shell stage where it passes its probe (chain-shell.ts). */
  dash?: string;
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
    ipcrm: findExecutable('ipcrm', path),
    sh: findExecutable('/bin/sh', path),
    dash: findExecutable('dash', path),
  };
  return cached;
}
