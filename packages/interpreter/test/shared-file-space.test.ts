/**
 * SharedFile's own bounds, without a worker: it is made only where it can
 * be, it never grows past its limits, and on a file system too small for a
 * request (a container's small /dev/shm) it says no (the request then goes
 * on the pipes) instead of leaving pages that a worker mapping the file
 * would fault on (SIGBUS).
 */
import { execFileSync } from 'node:child_process';
import { fstatSync, mkdtempSync, readSync, rmSync } from 'node:fs';
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

test('a few-row request pins the pages it uses, not the whole file', () => {
  const file = SharedFile.create(tempDir(), 2 << 20, 8 << 20);
  expect(file).toBeDefined();
  if (!file) return;
  cleanups.push(() => file.close());
  const region = file.reserve(16, 8)!;
  expect(file.writePayload(new Uint8Array(16).fill(5), region.at)).toBe(true);
  expect(fstatSync(file.fd).size).toBe(1 << 20);
  expect(fstatSync(file.fd).blocks * 512).toBeLessThanOrEqual(8192); // one page (two where blocks are 8 KiB)
  // a larger room later holds memory too, from where the written pages end
  const big = file.reserve(8, 256 << 10)!;
  expect(fstatSync(file.fd).blocks * 512).toBeGreaterThanOrEqual(256 << 10);
  expect(big).toEqual({ out: 0, room: 256 << 10, at: 256 << 10, bytes: 8 });
});

const root = process.getuid?.() === 0;

/** A 1 MiB tmpfs mounted on a temporary directory (root only), unmounted after the test. */
function smallTmpfs(): string {
  const dir = tempDir();
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
  cleanups.push(() => execFileSync('umount', [dir]));
  return dir;
}
test.skipIf(!root)(
  `a file system too small for the request: the room's zeros or the payload's write fail (the request goes on the pipes), and a room that does not fit leaves the file its size${root ? '' : ' (skipped: mounting a 1 MiB tmpfs needs root)'}`,
  () => {
    const file = SharedFile.create(smallTmpfs(), 16 << 20);
    expect(file).toBeDefined();
    if (!file) return;
    cleanups.push(() => file.close());
    const small = file.reserve(1000, 1000)!; // fits
    expect(file.writePayload(new Uint8Array(1000), small.at)).toBe(true);
    expect(fstatSync(file.fd).size).toBe(1 << 20);
    // a room of 2 MiB cannot hold memory on a 1 MiB file system: refused, the size kept
    expect(file.reserve(8, 2 << 20)).toBeUndefined();
    expect(fstatSync(file.fd).size).toBe(1 << 20);
    expect(file.intact()).toBe(true);
    // a 4 MiB payload: its write fails, so the request goes on the pipes
    const large = file.reserve(4 << 20, 64 << 10);
    if (large) expect(file.writePayload(new Uint8Array(4 << 20), large.at)).toBe(false);
    expect(file.intact()).toBe(true);
  },
);

test("prefill (a spare's file): sized to whole MiB and every page holding memory, so a reserve writes no zeros", () => {
  const file = SharedFile.create(tempDir(), 2 << 20, 8 << 20);
  expect(file).toBeDefined();
  if (!file) return;
  cleanups.push(() => file.close());
  expect(file.prefill(1536 << 10)).toBe(true);
  expect(fstatSync(file.fd).size).toBe(2 << 20);
  expect(fstatSync(file.fd).blocks * 512).toBeGreaterThanOrEqual(2 << 20);
  expect(file.intact()).toBe(true);
  // a room inside it: nothing to fill (the file's bytes stay as a worker left them)
  expect(file.writePayload(new Uint8Array(4096).fill(7), 0)).toBe(true);
  expect(file.reserve(8, 4096)).toEqual({ out: 0, room: 4096, at: 4096, bytes: 8 });
  const byte = Buffer.alloc(1);
  readSync(file.fd, byte, 0, 1, 100);
  expect(byte[0]).toBe(7);
  // never past the maximum
  expect(file.prefill(64 << 20)).toBe(true);
  expect(fstatSync(file.fd).size).toBe(8 << 20);
});

test.skipIf(!root)(
  `prefill on a file system too small: false, the size kept, and no page past it counts as written${root ? '' : ' (skipped: mounting a 1 MiB tmpfs needs root)'}`,
  () => {
    const file = SharedFile.create(smallTmpfs(), 16 << 20);
    expect(file).toBeDefined();
    if (!file) return;
    cleanups.push(() => file.close());
    expect(file.prefill(2 << 20)).toBe(false);
    expect(fstatSync(file.fd).size).toBe(0);
    expect(file.intact()).toBe(true);
    // a later reserve still fills its room's pages: one that cannot hold memory is refused
    expect(file.reserve(8, 2 << 20)).toBeUndefined();
    const small = file.reserve(8, 4096)!;
    expect(small).toEqual({ out: 0, room: 4096, at: 4096, bytes: 8 });
    expect(fstatSync(file.fd).blocks * 512).toBeGreaterThanOrEqual(4096);
  },
);
