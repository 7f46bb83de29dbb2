/**
 * The rows of a table file as they are read: text pieces → CSV records or
 * JSON lines → rows to evaluate, with how far into the file each piece got.
 */
import type { ExternalFn } from '@improv/extfn-core';
import type { CsvReader } from './csv.js';
import type { CsvRows } from './csv-rows.js';
import type { TextSource } from './input.js';
import { JsonLinesRows } from './jsonl-rows.js';
import { LineSplitter } from './lines.js';
import type { RowPiece } from './row-pipeline.js';
import type { TableFormat, TableOptions, TableRow } from './table.js';

/** The rows of a text source, piece by piece, stopping when `signal` aborts even if the source is blocked. */
export async function* readPieces(
  source: TextSource,
  format: TableFormat,
  fn: ExternalFn,
  options: TableOptions,
  csv: { reader: CsvReader; rows: CsvRows } | undefined,
  signal: AbortSignal,
): AsyncGenerator<RowPiece> {
  const lines = new LineSplitter();
  const json = format === 'jsonl' ? new JsonLinesRows(fn, options) : undefined;
  const toRows = (records: ReturnType<CsvReader['push']>): TableRow[] => {
    const rows: TableRow[] = [];
    for (const record of records) {
      const row = csv!.rows.read(record);
      if (row) rows.push(row);
    }
    return rows;
  };
  const fromLines = (read: ReturnType<LineSplitter['push']>): TableRow[] => {
    const rows: TableRow[] = [];
    for (const line of read) {
      const row = json!.read(line);
      if (row) rows.push(row);
    }
    return rows;
  };
  const iterator = source.chunks[Symbol.asyncIterator]();
  // Not Promise.race with one long-lived promise: each race would stay subscribed to it,
  // keeping every chunk read alive.
  const nextOrAbort = () =>
    new Promise<IteratorResult<string> | 'aborted'>((resolve, reject) => {
      if (signal.aborted) return resolve('aborted');
      const onAbort = () => resolve('aborted');
      signal.addEventListener('abort', onAbort, { once: true });
      iterator.next().then(
        (result) => {
          signal.removeEventListener('abort', onAbort);
          resolve(result);
        },
        (error: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(error);
        },
      );
    });
  try {
    for (;;) {
      const next = await nextOrAbort();
      if (next === 'aborted' || next.done) break;
      const rows = csv ? toRows(csv.reader.push(next.value)) : fromLines(lines.push(next.value));
      yield { rows, bytes: source.bytesRead() };
    }
    if (signal.aborted) return;
    const rows = csv ? toRows(csv.reader.end()) : fromLines(lines.end());
    yield { rows, bytes: source.bytesRead() };
  } finally {
    void iterator.return?.();
  }
}
