/**
 * What R's speed rests on, checked for what it must not change: binary
 * `callf64` answers on a reopened stdout (and the JSON fallback without
 * one), and rows checked per block, not per row: the RNG reset skipped
 * until a row draws, globals and the output cap checked once per block,
 * with every result what a check after each row gives; and R started with
 * base alone, the default packages attached only for a body that may use them.
 */
import { execFileSync } from 'node:child_process';
import { type ExtFnError, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { DRIVER_SOURCE } from '../src/index.js';
import {
  driverRun,
  frames,
  line,
  RSCRIPT,
  restrictedOk,
  scopedRegistry,
  skipReason,
} from './helpers.js';

const numbers = (results: readonly unknown[]) => results.map((v) => (v as { value: number }).value);

describe.skipIf(!restrictedOk)('R at its own speed', () => {
  test.skipIf(!restrictedOk)(
    'callf64 answers with binary f64 on a pipe, with JSON values on a socket; printed output never reaches the channel',
    async () => {
      const source = Buffer.from(DRIVER_SOURCE);
      const x = new Float64Array([1.5, -0, Number.POSITIVE_INFINITY, Number.NaN]);
      const y = new Float64Array([2, 1, 1, 1]);
      const stdin = Buffer.concat([
        Buffer.from(`${source.length}\n`),
        source,
        line({
          op: 'load',
          id: 1,
          fn: {
            name: 'f',
            body: 'cat("printed by the body\\n")\nresult <- args[[1]] * args[[2]]',
            argTypes: ['number', 'number'],
            returnType: 'number',
          },
        }),
        line({ op: 'callf64', id: 2, rows: 4, bytes: 64 }),
        Buffer.from(x.buffer),
        Buffer.from(y.buffer),
        line({ op: 'exit' }),
      ]);
      const expected = [3, -0, Number.POSITIVE_INFINITY, Number.NaN];

      const piped = await driverRun(true, stdin);
      expect(piped.exit.exitCode, piped.stderr).toBe(0);
      const [ready, load, answer] = frames(piped.stdout);
      expect(ready?.header.ready).toBe(1);
      expect(load?.header).toEqual({ id: 1, ok: true });
      expect(answer?.header).toEqual({
        id: 2,
        rows: 4,
        bytes: 32,
        errors: {},
        workMs: expect.any(Number),
      });
      const values = new Float64Array(new Uint8Array(answer!.payload!).buffer);
      expect([...values].map((v, k) => Object.is(v, expected[k]))).toEqual([
        true,
        true,
        true,
        true,
      ]);
      expect(piped.stderr).toContain('printed by the body');

      const socket = await driverRun(false, stdin);
      expect(socket.exit.exitCode, socket.stderr).toBe(0);
      const json = frames(socket.stdout)[2]!;
      expect(json.payload).toBeUndefined();
      expect(json.header).toEqual({
        id: 2,
        values: [3, '-0', 'Infinity', 'NaN'],
        errors: {},
        workMs: expect.any(Number),
      });
      expect(socket.stderr).toContain('printed by the body');
    },
  );

  test.skipIf(!restrictedOk)(
    'a drawing body gives the same values across batches, processes and row orders',
    async () => {
      const fns = {
        // draws in every row
        draw: ['result <- args[[1]] + runif(1)', ['number'], 'number'],
        // draws only past row 2250: the first draw comes late in a block of rows,
        // after the worker has byte-compiled its per-row code (past 2000 rows)
        late: [
          'x <- args[[1]]\nif (x > 2250) x <- x + runif(1)\nresult <- x',
          ['number'],
          'number',
        ],
      } as const;
      const rows = Array.from({ length: 2500 }, (_, k) => [Value.number(k + 1)]);
      const reversed = [...rows].reverse();
      const first = scopedRegistry(fns as never).registry;
      const second = scopedRegistry(fns as never).registry;
      for (const name of ['draw', 'late']) {
        const forward = numbers(await first.evalBatch(name, rows));
        const backward = numbers(await first.evalBatch(name, reversed)).reverse();
        const elsewhere = numbers(await second.evalBatch(name, rows));
        expect(backward).toEqual(forward);
        expect(elsewhere).toEqual(forward);
        // each row as if alone: one-shot processes for a few rows
        for (const k of [0, 2249, 2250, 2499]) {
          const alone = await first.eval(name, rows[k]!, { mode: 'oneShot' });
          expect([name, k, alone]).toEqual([name, k, Value.number(forward[k]!)]);
        }
      }
      // `late` rows before the first draw have their own value, every drawing row the same offset.
      const late = numbers(await first.evalBatch('late', rows));
      expect(late.slice(0, 2250)).toEqual(rows.slice(0, 2250).map((_, k) => k + 1));
      const offsets = new Set(late.slice(2250).map((v, k) => v - (k + 2251)));
      expect(offsets.size).toBe(1);
      expect([...offsets][0]).toBeGreaterThan(0);
    },
  );

  test.skipIf(!restrictedOk)(
    'a body that never draws skips the reset and stays deterministic: the generator state it sees is the seed in every row',
    async () => {
      const { registry } = scopedRegistry({
        // reads the state without drawing: a skipped reset would show if anything moved it
        state: ['result <- args[[1]] + sum(.Random.seed[2:4] %% 1000)', ['number'], 'number'],
        draw: ['result <- runif(1)', [], 'number'],
      });
      const rows = Array.from({ length: 300 }, (_, k) => [Value.number(k)]);
      const batch = numbers(await registry.evalBatch('state', rows));
      const offsets = new Set(batch.map((v, k) => v - k));
      expect(offsets.size).toBe(1);
      // a fresh process and a reversed order see the same
      expect(await registry.eval('state', [Value.number(0)], { mode: 'oneShot' })).toEqual(
        Value.number(batch[0]!),
      );
      const backward = numbers(await registry.evalBatch('state', [...rows].reverse())).reverse();
      expect(backward).toEqual(batch);
      // control: a draw moves the state, so the check above can fail
      const { registry: other } = scopedRegistry({
        moved: ['runif(1)\nresult <- sum(.Random.seed[2:4] %% 1000)', [], 'number'],
      });
      expect(await other.eval('moved', [])).not.toEqual(
        Value.number(offsets.values().next().value!),
      );
    },
  );

  test.skipIf(!restrictedOk)(
    'in a large batch, a row over the output cap fails alone and a global one row leaves is seen by no other',
    async () => {
      const { registry } = scopedRegistry(
        {
          // 600 bytes a row, 3000 at row 150: the block prints past the cap in all, one row alone
          chatty: [
            'cat(strrep("x", if (args[[1]] == 150) 3000 else 600), "\\n")\nresult <- args[[1]]',
            ['number'],
            'number',
          ],
          leaky: [
            'before <- if (exists("leaked")) leaked else -1\nif (args[[1]] == 200) leaked <<- 1\nresult <- before',
            ['number'],
            'number',
          ],
        },
        { maxOutputBytes: 2000 },
      );
      const rows = Array.from({ length: 300 }, (_, k) => [Value.number(k + 1)]);
      const chatty = await registry.evalBatch('chatty', rows);
      chatty.forEach((result, k) => {
        if (k === 149) {
          expect((result as ExtFnError).limit).toBe('output');
        } else {
          expect([k, result]).toEqual([k, Value.number(k + 1)]);
        }
      });
      const leaky = numbers(await registry.evalBatch('leaky', rows));
      expect(new Set(leaky)).toEqual(new Set([-1]));
    },
  );
});

describe.skipIf(!restrictedOk)('R starts with base alone', () => {
  test.skipIf(!restrictedOk)(
    'a body that may use the default packages gets the search path Rscript gives; a base-only body does not pay for them',
    async () => {
      const { registry } = scopedRegistry({
        base: ['result <- paste(search(), collapse = ",")', [], 'text'],
        stats: [
          'm <- median(c(1, 5, 2))\nresult <- paste0(m, ":", paste(search(), collapse = ","))',
          [],
          'text',
        ],
        dataset: ['result <- nrow(mtcars) + sd(c(1, 3))', [], 'number'],
        byName: ['result <- get("sd")(c(1, 3))', [], 'number'],
      });
      // What Rscript attaches when told the same default packages as before (methods aside).
      const expected = execFileSync(
        RSCRIPT,
        ['--vanilla', '-e', 'cat(paste(search(), collapse = ","))'],
        {
          env: { ...process.env, R_DEFAULT_PACKAGES: 'datasets,utils,grDevices,graphics,stats' },
        },
      ).toString();
      expect(expected).toContain('package:stats');
      expect(await registry.eval('stats', [])).toEqual(Value.text(`2:${expected}`));
      expect(await registry.eval('base', [])).toEqual(
        Value.text('.GlobalEnv,Autoloads,package:base'),
      );
      expect(await registry.eval('dataset', [])).toEqual(Value.number(32 + Math.SQRT2));
      expect(await registry.eval('byName', [])).toEqual(Value.number(Math.SQRT2));
    },
  );
});

test.skipIf(restrictedOk)(skipReason, () => {});
