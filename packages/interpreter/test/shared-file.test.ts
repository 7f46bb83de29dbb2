/**
 * The shared file's host side (src/shared-file.ts): made unlinked in the
 * directory given (none where it cannot be), sized only within its bound,
 * payload parts written one after another, results read back only within
 * the file, and a size the host did not set noticed. The drivers' side and
 * the hostile bodies are tested in the python and r packages.
 */
import { ftruncateSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { SharedFile, sharedDirectory } from '../src/shared-file.js';

const files: SharedFile[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const file of files.splice(0)) file.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function fresh(max = 1 << 22): { file: SharedFile; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'extfn-shared-test-'));
  dirs.push(dir);
  const file = SharedFile.create(dir, max);
  if (!file) throw new Error('no shared file in a fresh directory');
  files.push(file);
  return { file, dir };
}

describe('shared file', () => {
  test('IMPROV_EXTFN_SHM_DIR chooses the directory; empty turns it off', () => {
    expect(sharedDirectory({})).toBe('/dev/shm');
    expect(sharedDirectory({ IMPROV_EXTFN_SHM_DIR: '/somewhere' })).toBe('/somewhere');
    expect(sharedDirectory({ IMPROV_EXTFN_SHM_DIR: '' })).toBeUndefined();
  });

  test('is unlinked at once, and none is made where the directory is missing', () => {
    const { dir } = fresh();
    expect(readdirSync(dir)).toEqual([]);
    expect(SharedFile.create(join(dir, 'missing'), 1 << 20)).toBeUndefined();
    expect(SharedFile.create(undefined, 1 << 20)).toBeUndefined();
  });

  test('payload parts go one after another; the result region starts 8-aligned after them', () => {
    const { file } = fresh();
    const region = file.reserve(5, 16)!;
    expect(region).toEqual({ bytes: 5, out: 8, room: 16 });
    file.writePayload([Uint8Array.of(1, 2), Uint8Array.of(3, 4, 5)]);
    expect([...file.read(0, 5, undefined)!]).toEqual([1, 2, 3, 4, 5]);
    // read straight into a caller's array when the size matches
    const target = new Uint8Array(5);
    expect(file.read(0, 5, target)!.buffer).toBe(target.buffer);
    expect([...target]).toEqual([1, 2, 3, 4, 5]);
    expect(file.intact()).toBe(true);
  });

  test('never sized past its bound: a request that does not fit goes on the pipes', () => {
    const { file } = fresh(1 << 20);
    expect(file.reserve(1 << 19, 1 << 19)).toBeDefined();
    expect(file.reserve((1 << 19) + 1, 1 << 19)).toBeUndefined();
  });

  test('a size the host did not set is noticed, and a short file gives no result', () => {
    const { file } = fresh();
    file.reserve(64, 64);
    expect(file.intact()).toBe(true);
    ftruncateSync(file.fd, 8); // what a worker could do to it
    expect(file.intact()).toBe(false);
    expect(file.read(64, 64, undefined)).toBeUndefined();
    ftruncateSync(file.fd, 1 << 21);
    expect(file.intact()).toBe(false);
  });
});
