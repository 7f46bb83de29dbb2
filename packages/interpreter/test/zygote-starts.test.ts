/**
 * Which zygote a worker starts from (zygote-starts.ts), with a stand-in
 * for the sandbox's Zygote: booted at the setting's third start (or one
 * while another is under way), which waits for it as every start does
 * while it boots; shared by runners of one setting; off
 * for good when it cannot start, its first worker fails, or it would cover
 * a bound directory; replaced when it dies (up to three times); idle for a
 * while after the last runner holding it closes, then closed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { waitFor } from '@improv/extfn-core/testing';
import { beforeEach, describe, expect, test, vi } from 'vitest';

interface Fake {
  alive: boolean;
  unfit: boolean;
  unanswered: boolean;
  pid: number;
  closed: number;
  close(): Promise<void>;
}
const made: Fake[] = [];
/** The options of every Zygote.start. */
const startOptions: { maxWorkers: number }[] = [];
let startFails: Error | undefined;

vi.mock('@improv/extfn-sandbox', async (original) => ({
  ...(await original<typeof import('@improv/extfn-sandbox')>()),
  Zygote: {
    start: async (options: { maxWorkers: number }) => {
      startOptions.push(options);
      if (startFails) throw startFails;
      const fake: Fake = {
        alive: true,
        unfit: false,
        unanswered: false,
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

const { ZygoteStarts, closeIdleZygotes } = await import('../src/zygote-starts.js');

let n = 0;
/** A setting of its own per test (zygotes are shared per setting in the process). */
const setting = () => ({
  sandbox: { command: `/usr/bin/python3-${++n}`, functionName: 'f' },
  program: async () => 'program',
  maxWorkers: 2,
  startupMs: 1000,
});
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeEach(async () => {
  await closeIdleZygotes();
  made.length = 0;
  startOptions.length = 0;
  startFails = undefined;
  delete process.env.IMPROV_EXTFN_ZYGOTE_IDLE_MS;
  delete process.env.IMPROV_EXTFN_ZYGOTE_SPARES;
});

describe('zygote starts', () => {
  test("a runner's first two starts, one at a time, are trees; its third boots the zygote and waits", async () => {
    const starts = new ZygoteStarts();
    const s = setting();
    expect(starts.stats().zygote).toBe('not used');
    expect(starts.zygoteFor(s)).toBeUndefined();
    expect(starts.zygoteFor(s)).toBeUndefined();
    expect(starts.forking()).toBe(false);
    expect(made.length).toBe(0);
    const third = starts.zygoteFor(s);
    expect(third).toBeInstanceOf(Promise);
    expect(made.length).toBe(1); // Zygote.start was called before zygoteFor returned
    expect(starts.stats().zygote).toBe('starting');
    expect(starts.forking()).toBe(true);
    expect(await third).toBe(made[0]);
    expect(starts.zygoteFor(s)).toBe(made[0]); // ready: no promise
    expect(starts.stats().zygote).toBe(`ready (pid ${made[0]!.pid})`);
    await starts.close();
    expect(made[0]!.closed).toBe(0); // idle for the next runner of the setting
    expect(starts.forking()).toBe(false);
  });

  test("the setting's first two starts are trees whichever runner makes them; the third boots the zygote", async () => {
    // a process that opens a model again and again, one function at a time
    const s = setting();
    const a = new ZygoteStarts();
    expect(a.zygoteFor(s)).toBeUndefined();
    await a.close();
    const b = new ZygoteStarts();
    expect(b.zygoteFor(s)).toBeUndefined();
    await b.close();
    expect(made.length).toBe(0);
    const c = new ZygoteStarts();
    const third = c.zygoteFor(s);
    expect(third).toBeInstanceOf(Promise);
    expect(await third).toBe(made[0]);
    c.succeeded(made[0] as never);
    await c.close();
    // and the runners after it fork from the idle zygote at once
    const d = new ZygoteStarts();
    expect(d.zygoteFor(s)).toBe(made[0]);
    await d.close();
    // another setting counts on its own
    const e = new ZygoteStarts();
    expect(e.zygoteFor(setting())).toBeUndefined();
    await e.close();
    expect(made.length).toBe(1);
  });

  test('a start while another is under way boots it; every start while it boots waits for it', async () => {
    const starts = new ZygoteStarts();
    const s = setting();
    expect(starts.zygoteFor(s, 0)).toBeUndefined(); // the first: a tree
    const second = starts.zygoteFor(s, 1); // the first still starting: several functions at once
    expect(second).toBeInstanceOf(Promise);
    const third = starts.zygoteFor(s, 2);
    expect(third).toBeInstanceOf(Promise);
    expect(await second).toBe(made[0]);
    expect(await third).toBe(made[0]);
    expect(made.length).toBe(1); // one boot for both
    await starts.close();
  });

  test('shared by the runners of one setting, closed with the last (IMPROV_EXTFN_ZYGOTE_IDLE_MS=0)', async () => {
    process.env.IMPROV_EXTFN_ZYGOTE_IDLE_MS = '0';
    const s = setting();
    const a = new ZygoteStarts();
    const b = new ZygoteStarts();
    const zygote = await a.zygoteFor(s, 1);
    expect(zygote).toBe(made[0]);
    expect(b.zygoteFor(s)).toBe(zygote);
    a.succeeded(zygote as never);
    expect(a.stats()).toEqual({
      zygoteStarts: 1,
      spareStarts: 0,
      spares: 0,
      zygote: `ready (pid ${made[0]!.pid})`,
    });
    expect(b.stats().zygoteStarts).toBe(0);
    await a.close();
    expect(made[0]!.closed).toBe(0);
    await b.close();
    expect(made[0]!.closed).toBe(1);
    expect(b.stats().zygote).toBe('closed');
  });

  test('idle after its last runner: the next runner forks from it at once, and it closes when the idle time is up', async () => {
    process.env.IMPROV_EXTFN_ZYGOTE_IDLE_MS = '80';
    const s = setting();
    const a = new ZygoteStarts();
    const zygote = await a.zygoteFor(s, 1);
    a.succeeded(zygote as never);
    await a.close();
    expect(made[0]!.closed).toBe(0);
    // a new runner's first start, one at a time, would be a tree; the idle zygote serves it
    const b = new ZygoteStarts();
    expect(b.zygoteFor(s)).toBe(zygote);
    await sleep(160); // held: the idle time does not run
    expect(made[0]!.closed).toBe(0);
    await b.close();
    expect(made[0]!.closed).toBe(0);
    await sleep(160);
    expect(made[0]!.closed).toBe(1);
    // gone: the next runner starts trees first again, and a later boot is a new zygote
    const c = new ZygoteStarts();
    expect(c.zygoteFor(s)).toBeUndefined();
    expect(await c.zygoteFor(s, 1)).toBe(made[1]);
    await c.close();
    await closeIdleZygotes();
    expect(made[1]!.closed).toBe(1);
  });

  test('an idle time that is not a number of milliseconds: the default, and a warning naming the variable, once', async () => {
    process.env.IMPROV_EXTFN_ZYGOTE_IDLE_MS = '5s';
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    try {
      for (let k = 0; k < 2; k++) {
        const a = new ZygoteStarts();
        a.succeeded((await a.zygoteFor(setting(), 1)) as never);
        await a.close();
      }
      await sleep(20); // warnings are emitted on the next tick
      expect(made.map((z) => z.closed)).toEqual([0, 0]); // idle for the default 30 s, not closed
      const ours = warnings.filter((w) => /IMPROV_EXTFN_ZYGOTE_IDLE_MS/.test(w.message));
      expect(ours).toHaveLength(1);
      expect(ours[0]!.message).toMatch(
        /"5s" is not a number of milliseconds.*30000 ms.*e\.g\. 5000/,
      );
    } finally {
      process.off('warning', onWarning);
    }
  });

  test('an idle zygote that died: the next runner boots a replacement, counted as a death', async () => {
    const s = setting();
    const a = new ZygoteStarts();
    a.succeeded((await a.zygoteFor(s, 1)) as never);
    await a.close();
    made[0]!.alive = false; // killed while idle
    const b = new ZygoteStarts();
    const booting = b.zygoteFor(s); // a replacement boots at once, even for a first start
    expect(booting).toBeInstanceOf(Promise);
    expect(await booting).toBe(made[1]);
    await b.close();
  });

  test('closeIdleZygotes closes idle zygotes at once and leaves held ones', async () => {
    const idle = setting();
    const held = setting();
    const a = new ZygoteStarts();
    const b = new ZygoteStarts();
    await a.zygoteFor(idle, 1);
    await b.zygoteFor(held, 1);
    await a.close();
    expect(made.map((z) => z.closed)).toEqual([0, 0]);
    await closeIdleZygotes();
    expect(made.map((z) => z.closed)).toEqual([1, 0]);
    await b.close();
    await closeIdleZygotes();
    expect(made.map((z) => z.closed)).toEqual([1, 1]);
  });

  test('a setting that binds a directory under /tmp uses trees, with the reason', async () => {
    const dir = mkdtempSync('/tmp/extfn-lib-');
    try {
      const s = setting();
      const starts = new ZygoteStarts();
      const withLibrary = {
        ...s,
        sandbox: { ...s.sandbox, command: '/bin/sh', readOnlyPaths: [dir] },
      };
      expect(starts.zygoteFor(withLibrary, 1)).toBeUndefined();
      expect(made.length).toBe(0);
      expect(starts.stats().zygote).toMatch(
        /^off: .* is bound under \/tmp, which each of its workers mounts anew$/,
      );
      await starts.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('its first worker fails: off for the rest of the process, with the reason', async () => {
    const s = setting();
    const starts = new ZygoteStarts();
    const zygote = (await starts.zygoteFor(s, 1))!;
    starts.failed(zygote, new Error('worker 1: step "mount /proc" failed'));
    expect(made[0]!.closed).toBe(1);
    expect(starts.stats().zygote).toMatch(/^off: its first worker did not start: .*mount \/proc/);
    expect(starts.zygoteFor(s)).toBeUndefined();
    await tick();
    expect(made.length).toBe(1); // none booted again
    // another runner of the setting too
    const other = new ZygoteStarts();
    expect(other.zygoteFor(s)).toBeUndefined();
    await other.close();
    await starts.close();
    // and one after every runner holding the setting has closed
    const later = new ZygoteStarts();
    expect(later.zygoteFor(s, 1)).toBeUndefined();
    expect(later.stats().zygote).toMatch(/^off: its first worker did not start/);
    await later.close();
    expect(made.length).toBe(1);
  });

  test('a proven zygote survives a failed worker, unless it exited 70', async () => {
    const s = setting();
    const starts = new ZygoteStarts();
    const zygote = (await starts.zygoteFor(s, 1))!;
    starts.succeeded(zygote);
    starts.failed(zygote, new Error('did not dial back'));
    expect(starts.zygoteFor(s)).toBe(zygote);
    made[0]!.unfit = true;
    starts.failed(zygote, new Error('exit code 70'));
    expect(starts.zygoteFor(s)).toBeUndefined();
    expect(starts.stats().zygote).toMatch(/^off:/);
    await starts.close();
  });

  test('a proven zygote that left a fork unanswered (stopped from outside) is closed and replaced at the next start, as a death', async () => {
    const s = setting();
    const starts = new ZygoteStarts();
    const zygote = (await starts.zygoteFor(s, 1))!;
    starts.succeeded(zygote);
    // a fork it answered with a failure (could not clone, the child ended): it serves on
    starts.failed(zygote, new Error('the zygote could not clone: EAGAIN'));
    expect(made[0]!.closed).toBe(0);
    expect(starts.zygoteFor(s)).toBe(zygote);
    made[0]!.unanswered = true;
    starts.failed(zygote, new Error('the worker did not dial back in 1000 ms'));
    expect(made[0]!.closed).toBe(1);
    // the next start forks from a new zygote instead of waiting for the old one's deadline again
    const next = starts.zygoteFor(s);
    expect(next).toBeInstanceOf(Promise);
    expect(await next).toBe(made[1]);
    starts.succeeded(made[1] as never);
    made[1]!.unanswered = true;
    starts.failed(made[1] as never, new Error('no fork'));
    starts.failed(made[1] as never, new Error('again: not the zygote in use')); // counted once
    expect(await starts.zygoteFor(s)).toBe(made[2]);
    made[2]!.unanswered = true;
    starts.failed(made[2] as never, new Error('no fork'));
    expect(starts.zygoteFor(s)).toBeUndefined();
    expect(starts.stats().zygote).toBe('off: the zygote died 3 times');
    await starts.close();
  });

  test('cannot start: off; dies: replaced, three times at most', async () => {
    startFails = new Error('no ready line');
    const starts = new ZygoteStarts();
    const s = setting();
    expect(await starts.zygoteFor(s, 1)).toBeUndefined(); // the start waiting for it goes on as a tree
    expect(starts.stats().zygote).toBe('off: it could not start: no ready line');
    expect(starts.zygoteFor(s)).toBeUndefined();
    await starts.close();

    startFails = undefined;
    const again = new ZygoteStarts();
    const t = setting();
    for (let death = 0; death < 3; death++) {
      // the first boot comes with a start under way; a replacement boots at the next start, whatever it is
      const booting = again.zygoteFor(t, death === 0 ? 1 : 0);
      expect(booting).toBeInstanceOf(Promise);
      expect(await booting).toBe(made.at(-1));
      const zygote = again.zygoteFor(t);
      expect(zygote).toBe(made.at(-1));
      made.at(-1)!.alive = false; // it dies
    }
    expect(again.zygoteFor(t)).toBeUndefined();
    expect(again.stats().zygote).toBe('off: the zygote died 3 times');
    expect(made.length).toBe(3);
    await again.close();
  });

  test('spares: made once every runner of the setting is idle, killed with the zygote, counted in stats', async () => {
    process.env.IMPROV_EXTFN_ZYGOTE_SPARES = '2';
    process.env.IMPROV_EXTFN_ZYGOTE_IDLE_MS = '0';
    const s = setting();
    const busy = { a: false, b: true };
    const a = new ZygoteStarts(() => !busy.a);
    const b = new ZygoteStarts(() => !busy.b);
    const zygote = (await a.zygoteFor(s, 1)) as never;
    expect(b.zygoteFor(s)).toBe(zygote);
    // its process limit counts its spares beside the pool's workers
    expect(startOptions[0]!.maxWorkers).toBe(s.maxWorkers + 2);
    const spares: { alive: boolean; kill(): Promise<void>; killed: number }[] = [];
    const recipe = {
      fit: 'limits',
      make: async () => {
        const spare = {
          alive: true,
          killed: 0,
          async kill() {
            this.killed++;
            this.alive = false;
          },
        };
        spares.push(spare);
        return spare as never;
      },
    };
    // a burst of three starts: two spares wanted (the cap)
    const ends = [a.beginStart(), a.beginStart(), b.beginStart()];
    a.succeeded(zygote);
    a.learnSpare(recipe);
    for (const end of ends) end();
    await sleep(80);
    expect(spares.length).toBe(0); // b has work under way
    busy.b = false;
    await waitFor(() => a.stats().spares >= 2);
    expect(a.stats().spares).toBe(2);
    expect(b.stats().spares).toBe(2); // the setting's, whichever runner takes them
    const other = b.beginStart();
    expect(b.takeSpare('other limits')).toBeUndefined();
    expect(spares.map((spare) => spare.killed)).toEqual([1, 1]); // made for other limits: killed, not taken
    other();
    await waitFor(() => a.stats().spares >= 2);
    const end = b.beginStart();
    expect(b.takeSpare('limits')).toBe(spares[2]);
    b.succeeded(zygote, true);
    end();
    expect(b.stats()).toMatchObject({ zygoteStarts: 1, spareStarts: 1 });
    await waitFor(() => a.stats().spares >= 2);
    expect(a.stats().spares).toBe(2);
    expect(spares.length).toBe(5);
    // the zygote dies: its spares are killed, none is taken, a new zygote boots
    made[0]!.alive = false;
    const next = a.zygoteFor(s);
    expect(next).toBeInstanceOf(Promise);
    expect(spares.slice(3).every((spare) => spare.killed === 1)).toBe(true);
    expect(await next).toBe(made[1]);
    expect(a.takeSpare('limits')).toBeUndefined();
    // the new zygote's spares close with it, once its last runner lets go
    a.learnSpare(recipe);
    const burst = a.beginStart();
    burst();
    await waitFor(() => a.stats().spares >= 1);
    expect(a.stats().spares).toBe(1);
    await a.close();
    await b.close();
    expect(made[1]!.closed).toBe(1);
    expect(spares.at(-1)!.killed).toBe(1);
  });

  test("spares: the booting runner's trees under way count in the first burst", async () => {
    const s = setting();
    const a = new ZygoteStarts();
    // one tree under way when the second start boots the zygote; then two forks
    const zygote = (await a.zygoteFor(s, 1)) as never;
    let made = 0;
    const ends = [a.beginStart(), a.beginStart()];
    a.succeeded(zygote);
    a.learnSpare({
      fit: 'limits',
      make: async () => {
        made++;
        return { alive: true, kill: async () => {} } as never;
      },
    });
    for (const end of ends) end();
    await waitFor(() => a.stats().spares >= 3);
    await sleep(60);
    expect(made).toBe(3);
    await a.close();
    await closeIdleZygotes();
  });

  test("IMPROV_EXTFN_ZYGOTE_SPARES=0: no spares, and the process limit is the pool's", async () => {
    process.env.IMPROV_EXTFN_ZYGOTE_SPARES = '0';
    const s = setting();
    const a = new ZygoteStarts();
    const zygote = (await a.zygoteFor(s, 1)) as never;
    expect(startOptions[0]!.maxWorkers).toBe(s.maxWorkers);
    let made = 0;
    a.learnSpare({
      fit: 'limits',
      make: async () => {
        made++;
        return { alive: true, kill: async () => {} } as never;
      },
    });
    a.beginStart()();
    a.succeeded(zygote);
    await sleep(80);
    expect(made).toBe(0);
    expect(a.stats()).toMatchObject({ zygoteStarts: 1, spareStarts: 0, spares: 0 });
    await a.close();
  });
});
