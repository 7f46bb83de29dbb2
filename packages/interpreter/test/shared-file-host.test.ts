/**
 * The host's checks on a worker that shares a file (docs/protocol.md,
 * "Shared file"), against a fixture driver that misbehaves on purpose:
 * results come back through the file when the driver takes it and through
 * the pipes when the host makes none; a result past the room reserved, a
 * negative size, a result in both places, or a file the worker grew or cut
 * is never read — the worker is killed and its rows fail. A batch lane's
 * chunk queued behind a shared one goes through the file too, in a region
 * of its own (unless `pipeline: false`).
 */
import { readFileSync } from 'node:fs';
import { Registry } from '@improv/extfn-core';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { createInterpreterRunner, forgetTimings } from '../src/index.js';
import { SharedFile, type SharedRegion } from '../src/shared-file.js';
import { BOOTSTRAP, hasPython, PYTHON, policy } from './helpers.js';

const SHARED_DRIVER = readFileSync(new URL('./fixtures/shared-driver.py', import.meta.url), 'utf8');
const savedDir = process.env.IMPROV_EXTFN_SHM_DIR;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  forgetTimings(); // each batch as cold as in a new process: many chunks, not a learnt size
  for (const cleanup of cleanups.splice(0)) await cleanup();
  if (savedDir === undefined) delete process.env.IMPROV_EXTFN_SHM_DIR;
  else process.env.IMPROV_EXTFN_SHM_DIR = savedDir;
});

function sharedRegistry(bodies: string[], pipeline?: boolean) {
  const runner = createInterpreterRunner(
    {
      language: 'shared',
      packageName: '@improv/extfn-shared-fixture',
      resolveInterpreter: async () => (hasPython ? { path: PYTHON } : undefined),
      args: ['-s', '-S', '-c', BOOTSTRAP],
      driverSource: SHARED_DRIVER,
      f64: true,
    },
    { policy, maxWorkers: 1, ...(pipeline === undefined ? {} : { pipeline }) },
  );
  const registry = new Registry({ runners: [runner], timeoutMs: 5_000 });
  for (const body of bodies) {
    registry.register({
      name: body,
      language: 'shared',
      body,
      argTypes: ['number'],
      returnType: 'number',
      pure: false,
    });
  }
  cleanups.push(() => registry.close());
  return registry;
}

const column = Float64Array.of(1, 2, 3, 4);

describe.skipIf(!hasPython)('shared file: the host checks every answer', () => {
  test('results come through the shared file, or the pipes when none can be made', async () => {
    const registry = sharedRegistry(['honest']);
    const into = new Float64Array(4);
    const { values, errors } = await registry.evalColumns('honest', [column], { into });
    expect(errors.size).toBe(0);
    expect(values).toBe(into); // read straight into the caller's column
    expect([...values]).toEqual([2, 3, 4, 5]);
    process.env.IMPROV_EXTFN_SHM_DIR = '';
    const piped = sharedRegistry(['honest']);
    expect([...(await piped.evalColumns('honest', [column])).values]).toEqual([
      1001, 1002, 1003, 1004,
    ]);
  });

  test.each([
    [true, 'queued behind in a region of its own'],
    [false, 'one at a time'],
  ])('pipeline %s: a batch of many chunks goes through the file, %s', async (pipeline) => {
    // Every reservation, and the region of the request running then when it was queued behind one.
    const reserved: { avoid: SharedRegion | undefined; got: SharedRegion | undefined }[] = [];
    const reserve = SharedFile.prototype.reserve;
    vi.spyOn(SharedFile.prototype, 'reserve').mockImplementation(function (
      this: SharedFile,
      ...args: Parameters<SharedFile['reserve']>
    ) {
      const got = reserve.apply(this, args);
      reserved.push({ avoid: args[2], got });
      return got;
    });
    const registry = sharedRegistry(['honest'], pipeline);
    const n = 60_000;
    const xs = Float64Array.from({ length: n }, (_, i) => i);
    const { values, errors } = await registry.evalColumns('honest', [xs]);
    expect(errors.size).toBe(0);
    const wrong = values.findIndex((v, i) => v !== i + 1); // x + 1: the file; the pipes answer x + 1000
    expect(wrong).toBe(-1);
    expect(reserved.length).toBeGreaterThan(5);
    expect(reserved.every(({ got }) => got !== undefined)).toBe(true);
    const behind = reserved.filter(({ avoid }) => avoid !== undefined);
    if (!pipeline) {
      expect(behind).toEqual([]);
      return;
    }
    expect(behind.length).toBeGreaterThan(0);
    const end = (r: SharedRegion) => Math.max(r.out + r.room, r.at + r.bytes);
    for (const { avoid, got } of behind) {
      expect(end(got!) <= avoid!.out || got!.out >= end(avoid!)).toBe(true); // disjoint
    }
    expect(behind.some(({ got }) => got!.out > 0)).toBe(true);
  });

  test.each([
    ['oversize', 'reserved'],
    ['negative', 'reserved'],
    ['both', 'both in the shared file and on the pipe'],
    ['grow', 'resized'],
    ['shrink', 'resized'],
  ])('%s: the answer is not read; every row fails as malformed', async (body, why) => {
    const registry = sharedRegistry([body]);
    const { values, errors } = await registry.evalColumns(body, [column]);
    expect(errors.size).toBe(4);
    expect(Number.isNaN(values[0])).toBe(true);
    for (const error of errors.values()) {
      expect(error.kind).toBe('Runtime');
      expect(error.message).toContain(why);
    }
  });
});
