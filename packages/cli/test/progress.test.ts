/**
 * What the progress bar is fed: the part of the input the finished rows
 * cover. A read is up to 64 KiB, so a small table arrives in one piece; the
 * fraction must follow the rows done, not the bytes read ahead of them.
 */
import type { ExternalFn, Registry, RowResult, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import type { RowSink } from '../src/output.js';
import { type RowPiece, runPipeline } from '../src/row-pipeline.js';
import { Tally } from '../src/run-summary.js';
import type { TableRow } from '../src/table.js';

const fn: ExternalFn = {
  name: 'f',
  language: 'wasm',
  body: 'x',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
};

/** Evaluates row by row, a macrotask each, reporting progress as a runner does. */
const registry = {
  async evalBatch(
    _name: string,
    args: Value[][],
    options: { onProgress?: (done: number) => void },
  ): Promise<RowResult[]> {
    const out: RowResult[] = [];
    for (const row of args) {
      await new Promise((resolve) => setImmediate(resolve));
      out.push(row[0]!);
      options.onProgress?.(out.length);
    }
    return out;
  },
} as unknown as Registry;

const sink: RowSink = {
  write: () => {},
  flush: async () => {},
  closed: false,
  onClosed: () => {},
  commit: async () => {},
  discard: async () => {},
};

async function reports(pieces: RowPiece[]): Promise<{ rows: number; bytes: number }[]> {
  const seen: { rows: number; bytes: number }[] = [];
  async function* read() {
    yield* pieces;
  }
  await runPipeline(read(), {
    registry,
    fn,
    sink,
    writer: { header: () => '', row: () => '' },
    tally: new Tally(fn),
    signal: new AbortController().signal,
    cancel: () => {},
    header: () => '',
    onProgress: (rows, bytes) => seen.push({ rows, bytes }),
  });
  return seen;
}

const rows = (from: number, n: number): TableRow[] =>
  Array.from({ length: n }, (_, i) => ({
    line: from + i + 1,
    args: [{ type: 'number', value: from + i }],
  }));

describe('progress of run', () => {
  test('a 400-row table read in one piece: the bytes reported are those of the rows done', async () => {
    // 10 bytes a row; the whole file is read before the first row is done.
    const seen = await reports([
      { rows: rows(0, 400), bytes: 4_000 },
      { rows: [], bytes: 4_000 },
    ]);
    expect(seen.length).toBeGreaterThan(100);
    for (const { rows: done, bytes } of seen) {
      expect(bytes / 4_000, `${done} rows done`).toBeCloseTo(done / 400, 9);
    }
    expect(seen.at(-1)).toEqual({ rows: 400, bytes: 4_000 });
  });

  test('pieces of different sizes: each row takes its share of its own piece', async () => {
    const seen = await reports([
      { rows: rows(0, 10), bytes: 100 },
      { rows: rows(10, 390), bytes: 4_000 },
      { rows: [], bytes: 4_000 },
    ]);
    for (const { rows: done, bytes } of seen) {
      expect(bytes / 4_000, `${done} rows done`).toBeCloseTo(done / 400, 9);
    }
    expect(seen.at(-1)).toEqual({ rows: 400, bytes: 4_000 });
  });
});
