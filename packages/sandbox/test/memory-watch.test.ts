/**
 * The host's look at a tree's memory where it has no cgroup (memory-watch.ts):
 * a process that exits between the tree's listing and the look at its
 * proportional share holds nothing. It used to count its resident memory,
 * pages shared with its parent included in full, so children exiting at
 * once could make a tree within its budget look several times over it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { processBytes } from '../src/memory-watch.js';

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
