/** Shared by the suites that drive a stand-in zygote program (zygote*.test.ts). */
import { probeSandbox } from '../src/index.js';
import { seccompArch } from '../src/seccomp.js';
import { hasBwrap, hasPython, linux } from './helpers.js';

const probe =
  linux && hasBwrap && hasPython ? await probeSandbox({ policy: 'restricted' }) : undefined;
/** A restricted sandbox with seccomp: what a zygote's tree needs. */
export const available = probe?.ok === true && seccompArch() !== undefined;
export const why = `skipped: no restricted sandbox with seccomp here (${probe?.problem ?? 'no bwrap/python3'})`;

/** Reads `N\n` and N bytes of program from stdin, as Python's bootstrap does, and runs it. */
export const BOOT = [
  'import os, sys',
  "n = b''",
  "while not n.endswith(b'\\n'):",
  '    n += os.read(0, 1)',
  "p = b''",
  'while len(p) < int(n):',
  '    p += os.read(0, int(n) - len(p))',
  'exec(p)',
].join('\n');
