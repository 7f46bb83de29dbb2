/**
 * The host's look at a tree's memory where it has no cgroup (memory-watch.ts):
 * a process that exits between the tree's listing and the look at its
 * proportional share holds nothing. It used to count its resident memory,
 * pages shared with its parent included in full, so children exiting at
 * once could make a tree within its budget look several times over it.
 * And the files a tree holds on a /tmp and /dev/shm of its own count, but
 * only once they are its own: a process that still sees the host's (bwrap's
 * child before it has mounted the tree's) used to be charged for every inode
 * of the host's root file system, which killed small budgets' workers at start.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { FILE_BYTES, filesBytes, processBytes } from '../src/memory-watch.js';

const linux = process.platform === 'linux';
const hasPssAnon =
  linux && /Pss_Anon:/.test(spawnSync('cat', ['/proc/self/smaps_rollup']).stdout?.toString() ?? '');
const RESIDENT = 200 * 1024 * 1024;

describe.skipIf(!hasPssAnon)(
  `a process's share of a tree's memory (${hasPssAnon ? 'Pss_Anon here' : 'skipped: no /proc/PID/smaps_rollup with Pss_Anon (Linux 5.10+)'})`,
  () => {
    test('a live process: its proportional share, not the resident figure it was listed with', () => {
      const bytes = processBytes(process.pid, RESIDENT, true);
      expect(bytes).toBeGreaterThan(0);
      expect(bytes).not.toBe(RESIDENT);
      expect(processBytes(process.pid, RESIDENT, false)).toBe(RESIDENT);
    });

    test('a process that exited (a zombie, then reaped) holds nothing', async () => {
      const child = spawn('sleep', ['60'], { stdio: 'ignore' });
      await once(child, 'spawn');
      const pid = child.pid!;
      expect(processBytes(pid, RESIDENT, true)).not.toBe(0); // control: alive, it holds something
      // a zombie until Node reaps it: kill it and look before the exit event is handled
      process.kill(pid, 'SIGKILL');
      const deadline = Date.now() + 5_000;
      while (existsSync(`/proc/${pid}/smaps_rollup`) && Date.now() < deadline) {
        if (processBytes(pid, RESIDENT, true) === 0) break;
      }
      expect(processBytes(pid, RESIDENT, true)).toBe(0);
      await once(child, 'exit');
      expect(processBytes(pid, RESIDENT, true)).toBe(0); // reaped: no /proc entry at all
      expect(processBytes(pid, RESIDENT, false)).toBe(RESIDENT); // without shared: as listed
    });
  },
);

// A shell in a user and mount namespace of its own, with a fresh tmpfs on
// /tmp and /dev/shm and two files on /tmp, that then becomes a sleep.
const OWN_TMPFS_SCRIPT =
  'mount -t tmpfs none /tmp && mount -t tmpfs none /dev/shm && touch /tmp/a /tmp/b && echo ready && exec sleep 60';

describe.skipIf(!linux)('the files a tree holds on its own tmpfs', () => {
  test("a process that sees the host's /tmp and /dev/shm is charged nothing for them", () => {
    expect(filesBytes(process.pid)).toBe(0);
  });

  test('a process with a tmpfs of its own is charged FILE_BYTES for each inode on it', async (context) => {
    const child = spawn('unshare', [
      '--user',
      '--map-root-user',
      '--mount',
      'sh',
      '-c',
      OWN_TMPFS_SCRIPT,
    ]);
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk));
    try {
      const deadline = Date.now() + 10_000;
      while (!out.includes('ready') && child.exitCode === null && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 20));
      if (!out.includes('ready'))
        return context.skip(
          `skipped: no user and mount namespace to make a tmpfs in here (unshare: ${err.trim() || 'no answer'})`,
        );
      expect(readFileSync(`/proc/${child.pid}/mountinfo`, 'utf8')).toMatch(/ \/tmp .* - tmpfs /);
      // /tmp holds its root directory, a and b; /dev/shm its root directory
      expect(filesBytes(child.pid!)).toBe(4 * FILE_BYTES);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
