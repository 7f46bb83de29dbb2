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

function fresh(maxRoom = 1 << 22, max = 1 << 23): { file: SharedFile; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'extfn-shared-test-'));
  dirs.push(dir);
  const file = SharedFile.create(dir, maxRoom, max);
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
    const made = SharedFile.create(dir, 1 << 20); // at most SHARED_FILE_MAX bytes
    expect(made).toBeDefined();
    files.push(made!);
    expect(readdirSync(dir)).toEqual([]);
  });

  test('the result room comes first; payload parts follow one after another, 8-aligned', () => {
    const { file } = fresh();
    const region = file.reserve(5, 12)!;
    expect(region).toEqual({ out: 0, room: 12, at: 16, bytes: 5 });
    expect(file.writePayload([Uint8Array.of(1, 2), Uint8Array.of(3, 4, 5)], region.at)).toBe(true);
    expect([...file.read(16, 5, undefined)!]).toEqual([1, 2, 3, 4, 5]);
    // read straight into a caller's array when the size matches
    const target = new Uint8Array(5);
    expect(file.read(16, 5, target)!.buffer).toBe(target.buffer);
    expect([...target]).toEqual([1, 2, 3, 4, 5]);
    expect(file.intact()).toBe(true);
  });

  test('a request queued behind the running one gets a region past it; the next fits at 0 again', () => {
    const { file } = fresh(1 << 20, 1 << 21);
    const running = file.reserve(1000, 80)!;
    expect(running).toEqual({ out: 0, room: 80, at: 80, bytes: 1000 });
    const behind = file.reserve(1200, 96, running)!;
    expect(behind).toEqual({ out: 1080, room: 96, at: 1176, bytes: 1200 });
    // written while the one ahead runs: its payload is untouched
    expect(file.writePayload(Uint8Array.of(7, 7, 7), running.at)).toBe(true);
    expect(file.writePayload(new Uint8Array(1200).fill(9), behind.at)).toBe(true);
    expect([...file.read(running.at, 3, undefined)!]).toEqual([7, 7, 7]);
    // once `behind` runs, a smaller next one fits before it, a larger one goes past it
    expect(file.reserve(800, 64, behind)).toEqual({ out: 0, room: 64, at: 64, bytes: 800 });
    expect(file.reserve(2000, 64, behind)).toEqual({ out: 2376, room: 64, at: 2440, bytes: 2000 });
    // its result room stays below RLIMIT_FSIZE (R writes it with write()), or the pipes are used
    const big = file.reserve((1 << 20) - 64, 64)!;
    expect(file.reserve(8, 64, big)).toBeUndefined();
    expect(file.intact()).toBe(true);
  });

  test('never sized past its bounds: a request that does not fit goes on the pipes', () => {
    const { file } = fresh(1 << 19, 1 << 20);
    expect(file.reserve(1 << 19, 1 << 19)).toBeDefined();
    expect(file.reserve((1 << 19) + 1, 1 << 19)).toBeUndefined(); // past the file's bound
    expect(file.reserve(8, (1 << 19) + 8)).toBeUndefined(); // a result room past RLIMIT_FSIZE
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
