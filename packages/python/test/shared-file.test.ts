/**
 * callf64 payloads through the file a warm worker shares with the host
 * (docs/protocol.md, "Shared file"): the same results as the pipes and as
 * per-row eval, for vectorized and per-row bodies; the pipes when no shared
 * file can be made (IMPROV_EXTFN_SHM_DIR, the seam); and bodies that find the
 * file and write to it, shrink it or try to grow it spoil nothing but their
 * own rows and pin no more than RLIMIT_FSIZE. Restricted sandbox, /usr/bin/python3.
 */
import { ExtFnError, type RowResult, Value } from '@improv/extfn-core';
import { DEFAULT_LIMITS } from '@improv/extfn-sandbox';
import { afterEach, describe, expect, test } from 'vitest';
import { type FnExtras, noRestricted, restrictedOk, scopedRegistry } from './helpers.js';

const VEC: FnExtras = { vectorized: true };

/** A body prelude: the worker's shared file (an unlinked regular file among its descriptors), or -1. */
const FIND_SHARED = [
  'import os, stat',
  'fd = -1',
  'for name in os.listdir("/proc/self/fd"):',
  '    try:',
  '        st = os.fstat(int(name))',
  '    except OSError:',
  '        continue',
  '    if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:',
  '        fd = int(name)',
].join('\n');

const ROWS = 120_000;
const xs = Float64Array.from({ length: ROWS }, (_, i) => (i % 7 === 0 ? -i : i * 0.25));
const ys = Float64Array.from({ length: ROWS }, (_, i) => ((i + 500) % 1000) - 500);
xs[1] = Number.NaN;
xs[2] = Number.POSITIVE_INFINITY;
xs[3] = -0;

const BODIES = {
  // per row: a raising row (y = -500) fails alone
  rows: [
    'if args[1] == -500: raise ValueError("no -500")\nresult = args[0] * 1.5 + args[1]',
    ['number', 'number'],
    'number',
  ],
  // vectorized, lists (no numpy needed): the chunk re-runs row by row when a row raises
  vector: [
    'result = [x * 1.5 + y if y != -500 else 1 / 0 for x, y in zip(*args)]',
    ['number', 'number'],
    'number',
    VEC,
  ],
  probe: [
    `${FIND_SHARED}\nresult = [1.0 if fd >= 0 else 0.0] * len(args[0])`,
    ['number'],
    'number',
    VEC,
  ],
} as const;

const outcome = (r: RowResult) =>
  ExtFnError.isInstance(r) ? { error: r.kind, message: r.message } : r;

const savedDir = process.env.IMPROV_EXTFN_SHM_DIR;
afterEach(() => {
  if (savedDir === undefined) delete process.env.IMPROV_EXTFN_SHM_DIR;
  else process.env.IMPROV_EXTFN_SHM_DIR = savedDir;
});

/** A registry whose workers start with IMPROV_EXTFN_SHM_DIR = `dir` (undefined: the default, /dev/shm). */
function registryWithDir(dir: string | undefined, fns = BODIES) {
  if (dir === undefined) delete process.env.IMPROV_EXTFN_SHM_DIR;
  else process.env.IMPROV_EXTFN_SHM_DIR = dir;
  return scopedRegistry('restricted', fns as never, { maxWorkers: 2 }).registry;
}

async function columnsOf(registry: ReturnType<typeof registryWithDir>, name: string) {
  const { values, errors } = await registry.evalColumns(name, [xs, ys]);
  return Array.from(values, (v, i): RowResult => errors.get(i) ?? Value.number(v)).map(outcome);
}

describe.skipIf(!restrictedOk)(
  `python shared file (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    test('vectorized and per-row columns give through the shared file what the pipes and eval give', async () => {
      const shared = registryWithDir(undefined);
      const sharedProbe = await shared.evalColumns('probe', [new Float64Array(4)]);
      expect([...sharedProbe.values]).toEqual([1, 1, 1, 1]); // the worker has it
      const viaShared = {
        rows: await columnsOf(shared, 'rows'),
        vector: await columnsOf(shared, 'vector'),
      };
      const piped = registryWithDir('');
      const pipedProbe = await piped.evalColumns('probe', [new Float64Array(4)]);
      expect([...pipedProbe.values]).toEqual([0, 0, 0, 0]); // the seam: no shared file
      for (const name of ['rows', 'vector'] as const) {
        expect(await columnsOf(piped, name)).toEqual(viaShared[name]);
      }
      // per-row eval on rows that cover every kind: NaN, ±Infinity, -0, a raising row
      for (const i of [0, 1, 2, 3, 7, 500, 1500, 1501, ROWS - 1]) {
        const single = await shared
          .eval('rows', [Value.number(xs[i]!), Value.number(ys[i]!)])
          .catch((e: ExtFnError) => e);
        expect(viaShared.rows[i]).toEqual(outcome(single));
        if (!ExtFnError.isInstance(single)) expect(viaShared.vector[i]).toEqual(outcome(single));
      }
      expect(viaShared.rows[0]).toEqual(outcome(Value.number(xs[0]! * 1.5 + ys[0]!)));
      expect(viaShared.rows[500]).toMatchObject({ error: 'Runtime' });
      expect(viaShared.vector[500]).toMatchObject({ error: 'Runtime' });
    });

    test('with no writable shared directory, tree workers use the pipes', async () => {
      // a zygote's workers make theirs in the zygote's own directory instead (the first test)
      const zygote = process.env.IMPROV_EXTFN_ZYGOTE;
      process.env.IMPROV_EXTFN_ZYGOTE = '0';
      try {
        const registry = registryWithDir('/proc/no-such-directory');
        const probe = await registry.evalColumns('probe', [new Float64Array(3)]);
        expect([...probe.values]).toEqual([0, 0, 0]);
        const rows = await columnsOf(registry, 'rows');
        expect(rows[0]).toEqual(outcome(Value.number(xs[0]! * 1.5 + ys[0]!)));
        expect(rows[500]).toMatchObject({ error: 'Runtime' });
      } finally {
        if (zygote === undefined) delete process.env.IMPROV_EXTFN_ZYGOTE;
        else process.env.IMPROV_EXTFN_ZYGOTE = zygote;
      }
    });

    test('a body that scribbles over the whole file after computing spoils no row of any chunk', async () => {
      const registry = registryWithDir(undefined, {
        scribble: [
          [
            FIND_SHARED,
            'result = [x * 2 + y for x, y in zip(*args)]',
            'assert fd >= 0, "no shared file"',
            'os.pwrite(fd, b"\\xff" * os.fstat(fd).st_size, 0)',
          ].join('\n'),
          ['number', 'number'],
          'number',
          VEC,
        ],
      } as never);
      for (let run = 0; run < 2; run++) {
        const { values, errors } = await registry.evalColumns('scribble', [xs, ys]);
        expect(errors.size).toBe(0);
        values.forEach((v, i) => {
          expect(Object.is(v, xs[i]! * 2 + ys[i]!)).toBe(true);
        });
      }
    });

    test('a body cannot grow the file past RLIMIT_FSIZE: ftruncate and pwrite beyond it fail', async () => {
      const registry = registryWithDir(undefined, {
        grow: [
          [
            FIND_SHARED,
            'assert fd >= 0, "no shared file"',
            'for attempt in (lambda: os.ftruncate(fd, 1 << 30), lambda: os.pwrite(fd, b"x", 100 << 20)):',
            '    try:',
            '        attempt()',
            '    except OSError:',
            '        pass',
            'result = [float(os.fstat(fd).st_size)] * len(args[0])',
          ].join('\n'),
          ['number'],
          'number',
          VEC,
        ],
      } as never);
      const { values, errors } = await registry.evalColumns('grow', [new Float64Array(8)]);
      expect(errors.size).toBe(0);
      expect(values[0]).toBeGreaterThan(0);
      expect(values[0]).toBeLessThanOrEqual(DEFAULT_LIMITS.fileSizeBytes);
    });

    test('a body that shrinks the file fails its own rows (never wrong values); the runner goes on', async () => {
      const registry = registryWithDir(undefined, {
        shrink: [
          `${FIND_SHARED}\nassert fd >= 0, "no shared file"\nos.ftruncate(fd, 0)\nresult = [x + 1 for x in args[0]]`,
          ['number'],
          'number',
          VEC,
        ],
        fine: ['result = [x + 1 for x in args[0]]', ['number'], 'number', VEC],
      } as never);
      const column = Float64Array.of(1, 2, 3);
      const shrunk = await registry.evalColumns('shrink', [column]);
      expect(shrunk.errors.size).toBe(3);
      for (const error of shrunk.errors.values()) {
        expect(error.kind).toBe('Runtime');
        // the host's check, or the driver's SIGBUS writing past the end: never the body's own failure
        expect(error.message).toMatch(/shared file was resized|SIGBUS/);
      }
      const fine = await registry.evalColumns('fine', [column]);
      expect(fine.errors.size).toBe(0);
      expect([...fine.values]).toEqual([2, 3, 4]);
    });
  },
);
