/** Shared by the sandbox suites: what this host has, and a guest Python run under a policy. */
import { readdirSync, readFileSync } from 'node:fs';
import { expect } from 'vitest';
import { findExecutable } from '../src/host.js';
import {
  runSandboxed,
  type SandboxOptions,
  type SandboxPolicy,
  spawnerReady,
} from '../src/index.js';

export const PYTHON = '/usr/bin/python3';
export const isRoot = process.getuid?.() === 0;
export const hasBwrap = findExecutable('bwrap') !== undefined;
export const hasPython = findExecutable(PYTHON) !== undefined;
export const linux = process.platform === 'linux';

/** Python the guest runs before each attempt: `attempt(f)` → {"ok": value} or {"errno": "ENOENT"}. */
const PRELUDE = `
import ctypes, errno, json, os, platform, signal, socket, sys, time
def attempt(f):
    try:
        return {'ok': f()}
    except OSError as e:
        return {'errno': errno.errorcode.get(e.errno, str(e.errno))}
def read(path):
    with open(path) as f:
        return f.read()
`;

export type Options = Partial<Omit<SandboxOptions, 'command' | 'args'>> & { stdin?: string };

/**
 * Runs a guest Python program; the program is on the command line only
 * because this is a test. Through the spawner, as every tree but a host's
 * first few (launch-sandboxed.test.ts covers trees the host starts itself).
 */
export async function python(program: string, options: Options = {}) {
  await spawnerReady();
  return runSandboxed({
    command: PYTHON,
    args: ['-I', '-S', '-c', PRELUDE + program],
    timeoutMs: 15_000,
    ...options,
  });
}

/** Runs a program that prints one JSON document; fails the test on a non-zero exit. */
export async function pythonJson<T = Record<string, unknown>>(
  program: string,
  policy: SandboxPolicy,
  options: Options = {},
): Promise<T> {
  const result = await python(program, { policy, ...options });
  expect(result.exitCode, result.stderr).toBe(0);
  return JSON.parse(result.stdout.toString()) as T;
}

/** Host processes whose command line contains `marker` (survivors of a sandbox). */
export function hostProcessesWith(marker: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      const state = /State:\s+(\w)/.exec(readFileSync(`/proc/${name}/status`, 'utf8'))?.[1];
      if (cmdline.includes(marker) && state !== 'Z') found.push(Number(name));
    } catch {}
  }
  return found;
}
