/**
 * SharedFile's own bounds, without a worker: it is made only where it can
 * be, it never grows past its limits, and on a file system too small for a
 * request (a container's small /dev/shm) it says no (the request then goes
 * on the pipes) instead of leaving pages that a worker mapping the file
 * would fault on (SIGBUS).
 */
import { execFileSync } from 'node:child_process';
import { fstatSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, test } from 'vitest';
import { SharedFile } from '../src/shared-file.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0).reverse()) cleanup();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'extfn-shm-test-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('no directory or a missing one: no shared file (the pipes are used)', () => {
  expect(SharedFile.create(undefined, 1 << 20)).toBeUndefined();
  expect(SharedFile.create('/nonexistent/extfn', 1 << 20)).toBeUndefined();
});

test('reserve grows the file to whole MiB, and refuses past the room or the maximum', () => {
  const file = SharedFile.create(tempDir(), 2 << 20, 8 << 20);
  expect(file).toBeDefined();
  if (!file) return;
  cleanups.push(() => file.close());
  expect(file.reserve(100, 1000)).toEqual({ out: 0, room: 1000, at: 1000, bytes: 100 });
  expect(fstatSync(file.fd).size).toBe(1 << 20);
  expect(file.intact()).toBe(true);
  expect(file.reserve(0, (2 << 20) + 1)).toBeUndefined(); // room past RLIMIT_FSIZE
  expect(file.reserve(8 << 20, 8)).toBeUndefined(); // past the maximum
  expect(fstatSync(file.fd).size).toBe(1 << 20);
});

const root = process.getuid?.() === 0;
test.skipIf(!root)(
  `a file system too small for the request: reserve says no and the file keeps its size${root ? '' : ' (skipped: mounting a 1 MiB tmpfs needs root)'}`,
  () => {
    const dir = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
    cleanups.push(() => execFileSync('umount', [dir]));
    const file = SharedFile.create(dir, 16 << 20);
    expect(file).toBeDefined();
    if (!file) return;
    cleanups.push(() => file.close());
    expect(file.reserve(1000, 1000)).toBeDefined(); // 1 MiB: fits exactly
    expect(file.reserve(4 << 20, 1 << 20)).toBeUndefined(); // 6 MiB: ENOSPC while allocating
    expect(fstatSync(file.fd).size).toBe(1 << 20);
    expect(file.intact()).toBe(true);
  },
);
