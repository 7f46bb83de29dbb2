/**
 * callf64 payloads through the file a warm worker shares with the host
 * (docs/protocol.md, "Shared file"), R's side: the same results as the
 * pipes (IMPROV_EXTFN_SHM_DIR empty, the seam) and as per-row eval, for
 * vectorized and per-row bodies; a body that scribbles over the file after
 * computing spoils no row. Restricted sandbox, Rscript.
 */
import { ExtFnError, type RowResult, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { restrictedOk, type Signature, scopedRegistry, skipReason } from './helpers.js';

/** A body prelude: the worker's shared file (unlinked, named extfn-<pid>-<hex> by the host) as a path, or "". */
const FIND_SHARED = [
  'fds <- list.files("/proc/self/fd", full.names = TRUE)',
  'links <- Sys.readlink(fds)',
  // the host's name for it (the stdout FIFO's directory is extfn-stdout-…)
  'hit <- fds[grepl("/extfn-[0-9]+-[0-9a-f]+ [(]deleted[)]$", links)]',
  'shared <- if (length(hit)) hit[[1L]] else ""',
].join('\n');

const BODIES: Record<string, Signature> = {
  rows: [
    'if (args[[2]] == -500) stop("no -500")\nresult <- args[[1]] * 1.5 + args[[2]]',
    ['number', 'number'],
    'number',
  ],
  vector: [
    'x <- args[[1]]\ny <- args[[2]]\nif (any(y == -500)) stop("no -500")\nresult <- x * 1.5 + y',
    ['number', 'number'],
    'number',
    { vectorized: true },
  ],
  probe: [
    `${FIND_SHARED}\nresult <- rep(if (nzchar(shared)) 1 else 0, length(args[[1]]))`,
    ['number'],
    'number',
    { vectorized: true },
  ],
  scribble: [
    [
      FIND_SHARED,
      'result <- args[[1]] * 2 + args[[2]]',
      'if (!nzchar(shared)) stop("no shared file")',
      'con <- file(shared, "r+b")',
      'writeBin(as.raw(rep(255L, file.size(shared))), con)',
      'close(con)',
    ].join('\n'),
    ['number', 'number'],
    'number',
    { vectorized: true },
  ],
};

const ROWS = 60_000;
const xs = Float64Array.from({ length: ROWS }, (_, i) => (i % 7 === 0 ? -i : i * 0.25));
const ys = Float64Array.from({ length: ROWS }, (_, i) => ((i + 500) % 1000) - 500);
xs[1] = Number.NaN;
xs[2] = Number.POSITIVE_INFINITY;
xs[3] = -0;

const outcome = (r: RowResult) =>
  ExtFnError.isInstance(r) ? { error: r.kind, message: r.message } : r;

const savedDir = process.env.IMPROV_EXTFN_SHM_DIR;
afterEach(() => {
  if (savedDir === undefined) delete process.env.IMPROV_EXTFN_SHM_DIR;
  else process.env.IMPROV_EXTFN_SHM_DIR = savedDir;
});

function registryWithDir(dir: string | undefined) {
  if (dir === undefined) delete process.env.IMPROV_EXTFN_SHM_DIR;
  else process.env.IMPROV_EXTFN_SHM_DIR = dir;
  return scopedRegistry(BODIES, { maxWorkers: 2 }).registry;
}

async function columnsOf(registry: ReturnType<typeof registryWithDir>, name: string) {
  const { values, errors } = await registry.evalColumns(name, [xs, ys]);
  return Array.from(values, (v, i): RowResult => errors.get(i) ?? Value.number(v)).map(outcome);
}

describe.skipIf(!restrictedOk)(
  `r shared file (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('vectorized and per-row columns give through the shared file what the pipes and eval give', async () => {
      const shared = registryWithDir(undefined);
      expect([...(await shared.evalColumns('probe', [new Float64Array(3)])).values]).toEqual([
        1, 1, 1,
      ]);
      const viaShared = {
        rows: await columnsOf(shared, 'rows'),
        vector: await columnsOf(shared, 'vector'),
      };
      const piped = registryWithDir('');
      expect([...(await piped.evalColumns('probe', [new Float64Array(3)])).values]).toEqual([
        0, 0, 0,
      ]);
      for (const name of ['rows', 'vector'] as const) {
        expect(await columnsOf(piped, name)).toEqual(viaShared[name]);
      }
      for (const i of [0, 1, 2, 3, 7, 500, 1500, ROWS - 1]) {
        const single = await shared
          .eval('rows', [Value.number(xs[i]!), Value.number(ys[i]!)])
          .catch((e: ExtFnError) => e);
        expect(viaShared.rows[i]).toEqual(outcome(single));
      }
      expect(viaShared.rows[500]).toMatchObject({ error: 'Runtime' });
      expect(viaShared.vector[500]).toMatchObject({ error: 'Runtime' });
      expect(viaShared.vector[0]).toEqual(outcome(Value.number(xs[0]! * 1.5 + ys[0]!)));
    });

    test('a body that scribbles over the whole file after computing spoils no row', async () => {
      const registry = registryWithDir(undefined);
      for (let run = 0; run < 2; run++) {
        const { values, errors } = await registry.evalColumns('scribble', [xs, ys]);
        expect(errors.size).toBe(0);
        values.forEach((v, i) => {
          expect(Object.is(v, xs[i]! * 2 + ys[i]!)).toBe(true);
        });
      }
    });
  },
);
