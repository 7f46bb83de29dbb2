/**
 * A zygote's spare workers (spare-workers.ts), with stand-in workers: as
 * many as the largest burst of starts (up to the cap), made one at a time
 * and only while the setting is quiet, taken only by a start whose limits
 * they fit, killed when they no longer do, off once one fails to start.
 */
import { waitFor } from '@improv/extfn-core/testing';
import { describe, expect, test, vi } from 'vitest';
import { SpareWorkers, spareCap } from '../src/spare-workers.js';

interface Fake {
  alive: boolean;
  killed: number;
  n: number;
  kill(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Spares of cap `cap`, with a recipe that counts what it made and how many were being made at once. */
function setup(cap: number, fit = 'limits A') {
  const state = {
    idle: true,
    made: [] as Fake[],
    making: 0,
    most: 0,
    fails: undefined as Error | undefined,
    /** While set, a spare being made waits for it to resolve. */
    gate: undefined as Promise<void> | undefined,
  };
  const spares = new SpareWorkers<Fake>(cap, () => state.idle);
  const recipe = (its = fit) => ({
    fit: its,
    make: async () => {
      state.most = Math.max(state.most, ++state.making);
      await sleep(2);
      await state.gate;
      state.making--;
      if (state.fails) throw state.fails;
      const fake: Fake = {
        alive: true,
        killed: 0,
        n: state.made.length,
        async kill() {
          this.killed++;
          this.alive = false;
        },
      };
      state.made.push(fake);
      return fake;
    },
  });
  return { spares, state, recipe };
}

/** A gate for `state.gate`, and its opening. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** `n` starts at once (begun, then all ended). */
function burst(spares: SpareWorkers<Fake>, n: number): void {
  const ends = Array.from({ length: n }, () => spares.begin());
  for (const end of ends) end();
}

/** Waits until `check` holds (or fails the test after 3 s). */
async function until(check: () => boolean): Promise<void> {
  expect(await waitFor(check)).toBe(true);
}

describe('spare workers', () => {
  test('as many as the largest burst of starts, made one at a time once the setting is quiet', async () => {
    const { spares, state, recipe } = setup(4);
    spares.learn(recipe());
    await sleep(60);
    expect(state.made.length).toBe(0); // no start yet: none wanted
    burst(spares, 3);
    await until(() => spares.count === 3);
    await sleep(60);
    expect(state.made.length).toBe(3);
    expect(state.most).toBe(1);
    // a burst of two takes two and makes two again; the three stay wanted
    burst(spares, 2);
    expect(spares.take('limits A')).toBe(state.made[0]);
    expect(spares.take('limits A')).toBe(state.made[1]);
    await until(() => spares.count === 3);
    expect(state.made.length).toBe(5);
    await spares.close();
  });

  test("the starts before the zygote booted (its runner's trees) count in the first burst", async () => {
    const state = { made: 0 };
    const spares = new SpareWorkers<Fake>(4, () => true, 1);
    spares.learn({
      fit: 'limits',
      make: async () => {
        state.made++;
        return { alive: true, killed: 0, n: state.made, kill: async () => {} };
      },
    });
    burst(spares, 3);
    await until(() => spares.count === 4);
    await sleep(60);
    expect(state.made).toBe(4);
    await spares.close();
  });

  test('never more than the cap, and none with a cap of 0', async () => {
    const { spares, state, recipe } = setup(2);
    spares.learn(recipe());
    burst(spares, 5);
    await until(() => spares.count === 2);
    await sleep(60);
    expect(state.made.length).toBe(2);
    await spares.close();
    const none = setup(0);
    none.spares.learn(none.recipe());
    burst(none.spares, 3);
    await sleep(60);
    expect(none.state.made.length).toBe(0);
  });

  test('none is made while a runner has work under way or a start is in flight', async () => {
    const { spares, state, recipe } = setup(4);
    spares.learn(recipe());
    state.idle = false;
    burst(spares, 2);
    await sleep(80);
    expect(state.made.length).toBe(0);
    state.idle = true;
    const end = spares.begin(); // a start in flight
    await sleep(80);
    expect(state.made.length).toBe(0);
    end();
    await until(() => spares.count === 3); // that start made the burst three
    await spares.close();
  });

  test('a refresh that begins stops the making after the spare in hand', async () => {
    const { spares, state, recipe } = setup(4);
    spares.learn(recipe());
    const held = gate();
    state.gate = held.promise;
    burst(spares, 4);
    await until(() => state.making === 1);
    state.idle = false;
    held.open();
    await sleep(60);
    expect(state.made.length).toBe(1);
    expect(spares.count).toBe(1);
    state.idle = true;
    await until(() => spares.count === 4);
    await spares.close();
  });

  test('taken only for the limits it was made for; dead ones and others are killed, not taken', async () => {
    const { spares, state, recipe } = setup(4);
    spares.learn(recipe());
    burst(spares, 3);
    await until(() => spares.count === 3);
    state.made[0]!.alive = false; // died while it waited
    expect(spares.take('limits A')).toBe(state.made[1]);
    expect(state.made[0]!.killed).toBe(1);
    expect(spares.take('limits B')).toBeUndefined();
    expect(state.made[2]!.killed).toBe(1);
    expect(spares.count).toBe(0);
    // a start with other limits teaches them: spares are made for those now
    spares.learn(recipe('limits B'));
    await until(() => spares.count === 3);
    expect(spares.take('limits B')).toBe(state.made[3]);
    await spares.close();
  });

  test('one that died while it waited no longer counts, and is made again at the next start', async () => {
    const { spares, state, recipe } = setup(4);
    spares.learn(recipe());
    burst(spares, 2);
    await until(() => spares.count === 2);
    state.made[0]!.alive = false;
    expect(spares.count).toBe(1);
    spares.begin()();
    await until(() => spares.count === 2);
    expect(state.made.length).toBe(3);
    await spares.close();
  });

  test('off for good once a spare fails to start', async () => {
    const { spares, state, recipe } = setup(4);
    state.fails = new Error('no room');
    spares.learn(recipe());
    burst(spares, 2);
    await until(() => spares.off !== undefined);
    expect(spares.off).toBe('a spare did not start: no room');
    state.fails = undefined;
    spares.learn(recipe());
    burst(spares, 2);
    await sleep(80);
    expect(state.made.length).toBe(0);
  });

  test('close kills every spare, and one made meanwhile', async () => {
    const { spares, state, recipe } = setup(4);
    spares.learn(recipe());
    burst(spares, 2);
    await until(() => spares.count === 2);
    const held = gate();
    state.gate = held.promise;
    burst(spares, 3);
    await until(() => state.making === 1);
    await spares.close();
    held.open();
    await sleep(20);
    expect(state.made.length).toBe(3);
    expect(state.made.every((fake) => fake.killed === 1)).toBe(true);
    expect(spares.take('limits A')).toBeUndefined();
  });

  test('IMPROV_EXTFN_ZYGOTE_SPARES: 0 to 16, else the default of 4 with one warning per value', () => {
    expect(spareCap({})).toBe(4);
    expect(spareCap({ IMPROV_EXTFN_ZYGOTE_SPARES: '0' })).toBe(0);
    expect(spareCap({ IMPROV_EXTFN_ZYGOTE_SPARES: '16' })).toBe(16);
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      expect(spareCap({ IMPROV_EXTFN_ZYGOTE_SPARES: '17' })).toBe(4);
      expect(spareCap({ IMPROV_EXTFN_ZYGOTE_SPARES: '17' })).toBe(4);
      expect(spareCap({ IMPROV_EXTFN_ZYGOTE_SPARES: 'many' })).toBe(4);
      expect(warn).toHaveBeenCalledTimes(2);
      expect(String(warn.mock.calls[0]![0])).toContain('IMPROV_EXTFN_ZYGOTE_SPARES="17"');
    } finally {
      warn.mockRestore();
    }
  });
});
