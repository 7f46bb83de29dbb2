/**
 * Which zygote a worker starts from (zygote-starts.ts), with a stand-in
 * for the sandbox's Zygote: none for a cold refresh's first starts, a zygote
 * booted for later ones and shared by runners of one setting, off for good
 * when it cannot start or its first worker fails, replaced when it dies (up
 * to three times), closed with the last runner holding it.
 */
import { beforeEach, describe, expect, test, vi } from 'vitest';

interface Fake {
  alive: boolean;
  unfit: boolean;
  pid: number;
  closed: number;
  close(): Promise<void>;
}
const made: Fake[] = [];
let startFails: Error | undefined;

vi.mock('@improv/extfn-sandbox', async (original) => ({
  ...(await original<typeof import('@improv/extfn-sandbox')>()),
  Zygote: {
    start: async () => {
      if (startFails) throw startFails;
      const fake: Fake = {
        alive: true,
        unfit: false,
        pid: 1000 + made.length,
        closed: 0,
        async close() {
          this.closed++;
          this.alive = false;
        },
      };
      made.push(fake);
      return fake;
    },
  },
}));

const { ZygoteStarts, BOOT_AFTER_MS } = await import('../src/zygote-starts.js');

let n = 0;
/** A setting of its own per test (zygotes are shared per setting in the process). */
const setting = () => ({
  sandbox: { command: `/usr/bin/python3-${++n}`, functionName: 'f' },
  program: async () => 'program',
  maxWorkers: 2,
  startupMs: 1000,
});
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

beforeEach(() => {
  made.length = 0;
  startFails = undefined;
});

describe('zygote starts', () => {
  test('a cold refresh starts trees and boots nothing; a later start boots one', async () => {
    expect(BOOT_AFTER_MS).toBeGreaterThan(0);
    const starts = new ZygoteStarts(60_000);
    const s = setting();
    expect(starts.zygoteFor(s)).toBeUndefined();
    expect(starts.zygoteFor(s)).toBeUndefined();
    await tick();
    expect(made.length).toBe(0);
    expect(starts.stats().zygote).toBe('not started');
    const later = new ZygoteStarts(0);
    expect(later.zygoteFor(setting())).toBeUndefined(); // this start: a tree while it boots
    expect(later.stats().zygote).toBe('starting');
    await tick();
    expect(made.length).toBe(1);
    await starts.close();
    await later.close();
    expect(made[0]!.closed).toBe(1);
  });

  test('shared by the runners of one setting, closed with the last', async () => {
    const s = setting();
    const a = new ZygoteStarts(0);
    const b = new ZygoteStarts(0);
    a.zygoteFor(s);
    await tick();
    const zygote = a.zygoteFor(s);
    expect(zygote).toBe(made[0]);
    expect(b.zygoteFor(s)).toBe(zygote);
    a.succeeded(zygote as never);
    expect(a.stats()).toEqual({ zygoteStarts: 1, zygote: `ready (pid ${made[0]!.pid})` });
    expect(b.stats().zygoteStarts).toBe(0);
    await a.close();
    expect(made[0]!.closed).toBe(0);
    await b.close();
    expect(made[0]!.closed).toBe(1);
    expect(b.stats().zygote).toBe('closed');
  });

  test('its first worker fails: off for the rest of the process, with the reason', async () => {
    const s = setting();
    const starts = new ZygoteStarts(0);
    starts.zygoteFor(s);
    await tick();
    const zygote = starts.zygoteFor(s)!;
    starts.failed(zygote, new Error('worker 1: step "mount /proc" failed'));
    expect(made[0]!.closed).toBe(1);
    expect(starts.stats().zygote).toMatch(/^off: its first worker did not start: .*mount \/proc/);
    expect(starts.zygoteFor(s)).toBeUndefined();
    await tick();
    expect(made.length).toBe(1); // none booted again
    // another runner of the setting too
    const other = new ZygoteStarts(0);
    expect(other.zygoteFor(s)).toBeUndefined();
    await other.close();
    await starts.close();
  });

  test('a proven zygote survives a failed worker, unless it exited 70', async () => {
    const s = setting();
    const starts = new ZygoteStarts(0);
    starts.zygoteFor(s);
    await tick();
    const zygote = starts.zygoteFor(s)!;
    starts.succeeded(zygote);
    starts.failed(zygote, new Error('did not dial back'));
    expect(starts.zygoteFor(s)).toBe(zygote);
    made[0]!.unfit = true;
    starts.failed(zygote, new Error('exit code 70'));
    expect(starts.zygoteFor(s)).toBeUndefined();
    expect(starts.stats().zygote).toMatch(/^off:/);
    await starts.close();
  });

  test('cannot start: off; dies: replaced, three times at most', async () => {
    startFails = new Error('no ready line');
    const starts = new ZygoteStarts(0);
    const s = setting();
    starts.zygoteFor(s);
    await tick();
    expect(starts.stats().zygote).toBe('off: it could not start: no ready line');
    expect(starts.zygoteFor(s)).toBeUndefined();
    await starts.close();

    startFails = undefined;
    const again = new ZygoteStarts(0);
    const t = setting();
    for (let death = 0; death < 3; death++) {
      expect(again.zygoteFor(t)).toBeUndefined(); // boots (a replacement after a death)
      await tick();
      const zygote = again.zygoteFor(t);
      expect(zygote).toBe(made.at(-1));
      made.at(-1)!.alive = false; // it dies
    }
    expect(again.zygoteFor(t)).toBeUndefined();
    expect(again.stats().zygote).toBe('off: the zygote died 3 times');
    expect(made.length).toBe(3);
    await again.close();
  });
});
