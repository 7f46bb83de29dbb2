/**
 * The locks that keep two root hosts from leasing one block of sandbox uids:
 * held by one live process at most, even when many race for the same names
 * over files dead ones left; a live claim (or earlier version's lock) is never
 * taken or removed, a dead or reused pid's files are cleared; and a holder
 * that lost its claim stops handing out its uids.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { BlockLock } from '../src/block-lock.js';
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
const ROUNDS = 200;
/**
 * Past this many ms the race stops after at least MIN_ROUNDS rounds: on a
 * loaded machine (a CI runner's other jobs) 200 rounds of 12 processes can
 * outlast the test's timeout, and a slow round finds the races as well.
 */
const ROUNDS_MS = 12_000;
const MIN_ROUNDS = 50;
const parentStart = () => statFields(process.ppid)[19];
const ownClaim = (name: string) => `${name}.${process.pid}.${statFields(process.pid)[19]}`;

/** The child's stdout lines, once it has printed at least `count`. */
function lineReader(child: { stdout: NodeJS.ReadableStream }) {
  let out = '';
  child.stdout.on('data', (chunk) => {
    out += String(chunk);
  });
  return async (count: number): Promise<string[]> => {
    while (out.split('\n').length <= count) await once(child.stdout, 'data');
    return out.trim().split('\n');
  };
}

describe.skipIf(!linux)('block locks (Linux /proc)', () => {
  test('taken once, refused while held, released by its holder', () => {
    const dir = lockDir();
    const lock = BlockLock.take(dir, 'block-0');
    expect(lock?.held()).toBe(true);
    expect(readdirSync(dir)).toEqual([ownClaim('block-0')]);
    expect(BlockLock.take(dir, 'block-0')).toBeUndefined(); // this process holds it
    lock!.release();
    expect(readdirSync(dir)).toEqual([]);
    expect(lock!.held()).toBe(false);
  });

  test("a live process's claim or earlier lock is left alone; a dead or reused pid's is cleared", () => {
    const dir = lockDir();
    const live = [
      `block-0.${process.ppid}.${parentStart()}`, // a claim
      'block-1', // an earlier version's lock, pid and start time
      'block-2', // an earlier version's lock, pid only
    ];
    writeFileSync(join(dir, live[0]!), '');
    writeFileSync(join(dir, 'block-1'), `${process.ppid} ${parentStart()}`);
    writeFileSync(join(dir, 'block-2'), String(process.ppid));
    for (const name of ['block-0', 'block-1', 'block-2'])
      expect(BlockLock.take(dir, name), name).toBeUndefined();
    expect(readdirSync(dir).sort()).toEqual(live.sort()); // and our withdrawn claims are gone

    const dead = [
      `block-3.${DEAD_PID}.77`,
      `block-4.${process.ppid}.1`, // the parent's pid, another start time: a reused pid
      'block-5', // earlier locks of dead owners
      'block-6',
      'block-7',
    ];
    writeFileSync(join(dir, dead[0]!), '');
    writeFileSync(join(dir, dead[1]!), '');
    writeFileSync(join(dir, 'block-5'), `${DEAD_PID} 77`);
    writeFileSync(join(dir, 'block-6'), String(DEAD_PID));
    writeFileSync(join(dir, 'block-7'), `${process.ppid} 1`);
    for (const name of ['block-3', 'block-4', 'block-5', 'block-6', 'block-7']) {
      const lock = BlockLock.take(dir, name);
      expect(lock?.held(), name).toBe(true);
    }
    for (const name of dead) expect(existsSync(join(dir, name)), name).toBe(false);
    for (const name of live) expect(existsSync(join(dir, name)), name).toBe(true);
  });

  test("an earlier version's locks and files of a take cut short are cleared once their process is gone", () => {
    const dir = lockDir();
    const names = [`.take-${DEAD_PID}-a1`, `.stale-${DEAD_PID}-b2`, `.take-${process.ppid}-c3`];
    for (const name of names) writeFileSync(join(dir, name), `${DEAD_PID} 1`);
    // and locks of other names: a dead owner's, a live one's
    writeFileSync(join(dir, 'block-7'), `${DEAD_PID} 1`);
    writeFileSync(join(dir, 'block-8'), `${process.ppid} ${parentStart()}`);
    BlockLock.take(dir, 'block-9');
    expect([...names, 'block-7', 'block-8'].map((name) => existsSync(join(dir, name)))).toEqual([
      false,
      false,
      true,
      false,
      true,
    ]);
  });

  test('a holder whose claim was removed no longer holds it, and leaves the others alone', () => {
    const dir = lockDir();
    const lock = BlockLock.take(dir, 'block-1')!;
    rmSync(lock.path);
    const other = `block-1.${process.ppid}.${parentStart()}`;
    writeFileSync(join(dir, other), '');
    expect(lock.held()).toBe(false);
    lock.release();
    expect(readdirSync(dir)).toEqual([other]);
  });

  test('12 processes racing for the same names over files dead ones left: no name goes to two', async () => {
    const module = new URL('../dist/block-lock.js', import.meta.url).pathname;
    // for each directory it is sent, each takes the first name it can and holds it, as a host would
    const taker = `
      const { BlockLock } = await import(${JSON.stringify(module)});
      const { createInterface } = await import('node:readline');
      console.log('ready');
      for await (const dir of createInterface({ input: process.stdin })) {
        let taken = 'none';
        for (let pass = 0; pass < 3 && taken === 'none'; pass++)
          for (let i = 0; i < 32; i++)
            if (BlockLock.take(dir, 'block-' + i)) { taken = i; break; }
        console.log(taken);
      }`;
    const takers = Array.from({ length: 12 }, () =>
      spawn(process.execPath, ['--input-type=module', '-e', taker], {
        stdio: ['pipe', 'pipe', 'inherit'],
      }),
    );
    try {
      const readers = takers.map(lineReader);
      await Promise.all(readers.map((read) => read(1)));
      // rounds are cheap once the takers run, so many of them: the races are narrow
      const began = performance.now();
      for (let round = 0; round < ROUNDS; round++) {
        if (round >= MIN_ROUNDS && performance.now() - began > ROUNDS_MS) break;
        const dir = lockDir();
        for (let i = 0; i < 16; i++) {
          // an earlier version's lock of a dead owner, and a dead or reused pid's claim
          writeFileSync(join(dir, `block-${i}`), `${DEAD_PID} 77`);
          const claim = i % 2 ? `${DEAD_PID}.77` : `${process.ppid}.1`;
          writeFileSync(join(dir, `block-${i}.${claim}`), '');
        }
        for (const child of takers) child.stdin.write(`${dir}\n`);
        const blocks = (await Promise.all(readers.map((read) => read(round + 2)))).map(
          (out) => out[round + 1]!,
        );
        expect(
          blocks.every((block) => /^\d+$/.test(block)),
          blocks.join(' '),
        ).toBe(true);
        expect(new Set(blocks).size, `round ${round}: ${blocks.join(' ')}`).toBe(12);
      }
    } finally {
      for (const child of takers) child.stdin.end();
      await Promise.all(takers.map((child) => once(child, 'close')));
    }
  }, 60_000);
});

describe('the uid pool', () => {
  test.skipIf(!(linux && isRoot))(
    'a block whose claim was removed under this process: none of its uids is handed out again (root host only)',
    () => {
      const uid = leaseUid();
      const block = Math.floor((uid - 0x7000_0000) / 64);
      const dir = '/run/improv-extfn-sandbox';
      const mine = join(dir, ownClaim(`block-${block}`));
      expect(existsSync(mine)).toBe(true);
      // someone emptied the directory and another (live) host claimed the block
      rmSync(mine);
      const other = join(dir, `block-${block}.${process.ppid}.${parentStart()}`);
      writeFileSync(other, '', { mode: 0o600 });
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
        rmSync(other, { force: true });
      }
    },
  );
});
