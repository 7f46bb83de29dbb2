/**
 * The locks that keep two root hosts from leasing one block of sandbox uids:
 * taken by one process only, even when many race over locks left by dead
 * ones; a live owner's never taken, a dead or reused pid's reclaimed; and a
 * holder that lost its lock stops handing out its uids.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { BlockLock, ownerAlive, sweepLeftovers } from '../src/block-lock.js';
import { statFields } from '../src/proc.js';
import { leaseUid, releaseUid } from '../src/uid-pool.js';
import { isRoot, linux } from './helpers.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function lockDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'extfn-block-lock-'));
  dirs.push(dir);
  return dir;
}

/** Above the largest pid_max Linux allows (2^22), so no process ever has it. */
const DEAD_PID = 4_194_305;
const parentRecord = () => `${process.ppid} ${statFields(process.ppid)[19]}`;

async function firstLine(child: { stdout: NodeJS.ReadableStream }): Promise<string> {
  let out = '';
  for await (const chunk of child.stdout) {
    out += String(chunk);
    if (out.includes('\n')) break;
  }
  return out.trim();
}

describe.skipIf(!linux)('block locks (Linux /proc)', () => {
  test('taken once, refused while held, released only by its holder', () => {
    const dir = lockDir();
    const lock = BlockLock.take(dir, 'block-0');
    expect(lock).toBeDefined();
    expect(lock!.held()).toBe(true);
    expect(ownerAlive(readFileSync(join(dir, 'block-0'), 'utf8'))).toBe(true);
    expect(BlockLock.take(dir, 'block-0')).toBeUndefined(); // this process holds it
    lock!.release();
    expect(existsSync(join(dir, 'block-0'))).toBe(false);
    expect(lock!.held()).toBe(false);
  });

  test("a live owner's lock is left alone, in either format; a dead or reused pid's is reclaimed", () => {
    const dir = lockDir();
    const live = parentRecord();
    writeFileSync(join(dir, 'live'), live);
    writeFileSync(join(dir, 'live-old-format'), String(process.ppid));
    expect(BlockLock.take(dir, 'live')).toBeUndefined();
    expect(BlockLock.take(dir, 'live-old-format')).toBeUndefined();
    expect(readFileSync(join(dir, 'live'), 'utf8')).toBe(live);

    writeFileSync(join(dir, 'dead'), `${DEAD_PID} 123`);
    writeFileSync(join(dir, 'dead-old-format'), String(DEAD_PID));
    // the parent's pid with another start time: a process that reused a dead owner's pid
    writeFileSync(join(dir, 'reused'), `${process.ppid} 1`);
    for (const name of ['dead', 'dead-old-format', 'reused']) {
      const lock = BlockLock.take(dir, name);
      expect(lock?.held(), name).toBe(true);
      expect(ownerAlive(readFileSync(join(dir, name), 'utf8')), name).toBe(true);
    }
  });

  test('a holder whose lock was displaced no longer holds it, and leaves the new one alone', () => {
    const dir = lockDir();
    const lock = BlockLock.take(dir, 'block-1')!;
    rmSync(join(dir, 'block-1'));
    writeFileSync(join(dir, 'block-1'), parentRecord());
    expect(lock.held()).toBe(false);
    lock.release();
    expect(readFileSync(join(dir, 'block-1'), 'utf8')).toBe(parentRecord());
  });

  test('the files of a take cut short are swept once their process is gone, not before', () => {
    const dir = lockDir();
    const names = [
      `.take-${DEAD_PID}-a1`,
      `.stale-${DEAD_PID}-b2`,
      `.take-${process.ppid}-c3`,
      'block-3',
    ];
    for (const name of names) writeFileSync(join(dir, name), `${DEAD_PID} 1`);
    sweepLeftovers(dir);
    expect(names.map((name) => existsSync(join(dir, name)))).toEqual([false, false, true, true]);
  });

  test('12 processes racing over locks left by dead ones: no block goes to two', async () => {
    const module = new URL('../dist/block-lock.js', import.meta.url).pathname;
    // each takes the first block it can and lives on, as a host would, until all have one
    const taker = `
      const { BlockLock } = await import(${JSON.stringify(module)});
      let taken = 'none';
      for (let i = 0; i < 64; i++) {
        if (BlockLock.take(process.argv[1], 'block-' + i)) { taken = i; break; }
      }
      console.log(taken);
      process.stdin.resume();`;
    for (let round = 0; round < 8; round++) {
      const dir = lockDir();
      for (let i = 0; i < 16; i++) {
        const record = [String(DEAD_PID), `${DEAD_PID} 77`, `${process.ppid} 1`][i % 3]!;
        writeFileSync(join(dir, `block-${i}`), record);
      }
      const takers = Array.from({ length: 12 }, () =>
        spawn(process.execPath, ['--input-type=module', '-e', taker, dir], {
          stdio: ['pipe', 'pipe', 'inherit'],
        }),
      );
      const blocks = await Promise.all(takers.map((child) => firstLine(child)));
      await Promise.all(
        takers.map((child) => {
          child.stdin.end();
          return once(child, 'close');
        }),
      );
      expect(
        blocks.every((block) => /^\d+$/.test(block)),
        blocks.join(' '),
      ).toBe(true);
      expect(new Set(blocks).size, `round ${round}: ${blocks.join(' ')}`).toBe(12);
    }
  });
});

describe('the uid pool', () => {
  test.skipIf(!(linux && isRoot))(
    'a block whose lock was taken from this process: none of its uids is handed out again (root host only)',
    () => {
      const uid = leaseUid();
      const block = Math.floor((uid - 0x7000_0000) / 64);
      const path = `/run/improv-extfn-sandbox/block-${block}`;
      expect(ownerAlive(readFileSync(path, 'utf8'))).toBe(true);
      // another (live) host took the block over
      rmSync(path);
      writeFileSync(path, parentRecord(), { mode: 0o600 });
      try {
        const next = leaseUid();
        expect(Math.floor((next - 0x7000_0000) / 64)).not.toBe(block);
        releaseUid(next, true);
        releaseUid(uid, true); // of the block given up: not taken back
        for (let i = 0; i < 70; i++) {
          const leased = leaseUid();
          expect(Math.floor((leased - 0x7000_0000) / 64)).not.toBe(block);
        }
      } finally {
        // left to be reclaimed: the record names a live process, so make it a dead one's
        writeFileSync(path, `${DEAD_PID} 1`);
      }
    },
  );
});
