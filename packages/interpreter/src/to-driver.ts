/**
 * Everything the host writes to a driver: rows and columns as request
 * fields and payloads — JSON `call` rows, `callf64` number columns and
 * `callcols` binary columns of every type (docs/protocol.md). Arguments
 * travel as data, never as program text. The per-value JSON form is core's
 * (`valueToJson`); what comes back is read and checked in from-driver.ts.
 */
import {
  type Column,
  type ExternalFn,
  type Json,
  numberToJson,
  readCell,
  type Value,
  type ValueType,
  valueToJson,
} from '@improv/extfn-core';

/** A number argument as JSON text: always with a fraction or exponent, so drivers parse it as a float. */
function numberText(n: number): string | undefined {
  if (!Number.isFinite(n) || Object.is(n, -0)) return undefined;
  const text = String(n);
  return Number.isInteger(n) && Math.abs(n) < 1e21 ? `${text}.0` : text;
}

/**
 * Rows `start…end` as the JSON text of an array of arrays, in one pass.
 * `plain` is true when every argument is a finite number written as a JSON
 * float (no "NaN"/"Infinity"/"-0" strings): a driver may then use the rows
 * as they parse.
 */
export function rowsJsonText(
  rows: readonly (readonly Value[])[],
  start = 0,
  end = rows.length,
): { text: string; plain: boolean } {
  // One short string per row, joined once: V8 flattens that far faster than
  // one long `+=` chain or JSON.stringify over freshly built arrays.
  const parts = new Array<string>(end - start);
  let plain = true;
  for (let i = start; i < end; i++) {
    const row = rows[i]!;
    let text = '[';
    for (let j = 0; j < row.length; j++) {
      const value = row[j]!;
      if (j > 0) text += ',';
      const number = value.type === 'number' ? numberText(value.value) : undefined;
      if (number !== undefined) {
        text += number;
      } else {
        plain = false;
        text += JSON.stringify(valueToJson(value));
      }
    }
    parts[i - start] = `${text}]`;
  }
  return { text: `[${parts.join(',')}]`, plain };
}

/** Rows `start…start+count` of number columns as the same JSON text `rowsJsonText` writes. */
export function columnsJsonText(
  columns: readonly Float64Array[],
  start: number,
  count: number,
): { text: string; plain: boolean } {
  const parts = new Array<string>(count);
  let plain = true;
  for (let i = 0; i < count; i++) {
    let text = '[';
    for (let j = 0; j < columns.length; j++) {
      const n = columns[j]![start + i]!;
      if (j > 0) text += ',';
      const number = numberText(n);
      if (number !== undefined) {
        text += number;
      } else {
        plain = false;
        text += JSON.stringify(valueToJson({ type: 'number', value: n }));
      }
    }
    parts[i] = `${text}]`;
  }
  return { text: `[${parts.join(',')}]`, plain };
}

/** One cell of a typed column as JSON text, as `rowsJsonText` would write its Value. */
function cellJsonText(fn: ExternalFn, columns: readonly Column[], k: number, i: number): string {
  switch (fn.argTypes[k]) {
    case 'number': {
      const n = (columns[k] as Float64Array)[i]!;
      return numberText(n) ?? JSON.stringify(numberToJson(n));
    }
    case 'boolean':
      return (columns[k] as Uint8Array)[i] ? 'true' : 'false';
    case 'text':
      return JSON.stringify((columns[k] as readonly string[])[i]); // lone surrogates as \u escapes
    case 'enum':
      return String((columns[k] as Uint32Array)[i]);
    default:
      return JSON.stringify(valueToJson(readCell(fn, columns, k, i) as Value));
  }
}

/** Rows `start…start+count` of typed columns (cells checked by core) as the JSON text of an array of arrays. */
export function typedColumnsJsonText(
  fn: ExternalFn,
  columns: readonly Column[],
  start: number,
  count: number,
): string {
  const parts = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    let text = '[';
    for (let k = 0; k < columns.length; k++) {
      if (k > 0) text += ',';
      text += cellJsonText(fn, columns, k, start + i);
    }
    parts[i] = `${text}]`;
  }
  return `[${parts.join(',')}]`;
}

/** Rows `start…start+count` as little-endian f64, column-major: all of argument 0, then all of argument 1… */
export function rowsToF64(
  rows: readonly (readonly Value[])[],
  arity: number,
  start = 0,
  count = rows.length - start,
): Uint8Array {
  const columns = new Float64Array(count * arity);
  for (let i = 0; i < count; i++) {
    const row = rows[start + i]!;
    for (let j = 0; j < arity; j++) columns[j * count + i] = (row[j] as { value: number }).value;
  }
  return new Uint8Array(columns.buffer, columns.byteOffset, columns.byteLength);
}

/**
 * The same payload straight from number columns: views of the column slices,
 * written one after another, so no row is copied on the host.
 */
export function columnsToF64(
  columns: readonly Float64Array[],
  start: number,
  count: number,
): Uint8Array[] {
  return columns.map(
    (column) => new Uint8Array(column.buffer, column.byteOffset + start * 8, count * 8),
  );
}

// ---- callcols: binary columns of every type --------------------------------------

/** Cells a column cannot hold, by argument index then row: their JSON wire value (`valueToJson`). */
export type ColsCells = Record<string, Record<string, Json>>;

/** A `callcols` request for `rows` rows: its header fields and its payload, column after column. */
export interface ColsRequest {
  header: { op: 'callcols'; rows: number; cells?: ColsCells };
  payload: Uint8Array[];
}

/** Bytes per cell of the fixed-width column layouts (text has lengths and bytes instead). */
export const CELL_BYTES: Readonly<Record<Exclude<ValueType, 'text'>, number>> = {
  number: 8,
  boolean: 1,
  enum: 4,
  datetime: 8,
};

/** `n` rounded up to a multiple of 8: every column starts 8-aligned. */
export function padded(n: number): number {
  return (n + 7) & ~7;
}

const ZEROS = new Uint8Array(8);

/** Zero bytes after a column of `bytes` bytes, up to the next multiple of 8. */
function padding(bytes: number): Uint8Array | undefined {
  const pad = padded(bytes) - bytes;
  return pad ? ZEROS.subarray(0, pad) : undefined;
}

/**
 * Bytes of `text` in UTF-8, or -1 when it is not well-formed UTF-16 (a lone
 * surrogate has no UTF-8 form). A loop in JS beats a native call per string.
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) bytes += 1;
    else if (c < 0xd800 || c > 0xdfff) bytes += 2;
    else {
      const d = c <= 0xdbff && i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (d < 0xdc00 || d > 0xdfff) return -1;
      i++; // a pair: two units, four bytes
      bytes += 2;
    }
  }
  return bytes;
}

/**
 * A text up to this many UTF-16 units is encoded by a loop here; a longer
 * one by Buffer.write, whose native call then costs less than the loop.
 */
const NATIVE_UNITS = 64;

/**
 * Kept across requests (grown as needed): the chunk's text columns are
 * encoded here, byte lengths and UTF-8 bytes, then copied into the request.
 * Joining the texts into one string first would make as much garbage again
 * as the texts themselves (the join's own parts array, then the string),
 * and garbage is what a batch of short texts mostly costs the host.
 */
let textBytes: Buffer = Buffer.alloc(64 * 1024);
let textLengths = new Uint32Array(4 * 1024);
/**
 * Most bytes, and most rows, kept across requests: a huge chunk (a vectorized
 * one of millions of rows) is encoded in room of its own, not kept after it.
 */
const KEEP_BYTES = 4 * 1024 * 1024;
const KEEP_ROWS = 64 * 1024;

/** `textBytes` with room for `need` bytes, its first `used` bytes kept. */
function textRoom(need: number, used: number): Buffer {
  if (need <= textBytes.length) return textBytes;
  const grown = Buffer.alloc(Math.max(need, 2 * textBytes.length));
  grown.set(textBytes.subarray(0, used));
  textBytes = grown;
  return grown;
}

/**
 * Writes `text` as UTF-8 into `out` from `at` (room for 3 bytes per unit):
 * the offset after it, or -1 when it is not well-formed UTF-16 (a lone
 * surrogate has no UTF-8 form).
 */
function writeUtf8(text: string, out: Buffer, at: number): number {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) {
      out[at++] = c;
    } else if (c < 0x800) {
      out[at++] = 0xc0 | (c >> 6);
      out[at++] = 0x80 | (c & 0x3f);
    } else if (c < 0xd800 || c > 0xdfff) {
      out[at++] = 0xe0 | (c >> 12);
      out[at++] = 0x80 | ((c >> 6) & 0x3f);
      out[at++] = 0x80 | (c & 0x3f);
    } else {
      const d = c <= 0xdbff && i + 1 < text.length ? text.charCodeAt(++i) : 0;
      if (d < 0xdc00 || d > 0xdfff) return -1;
      const point = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
      out[at++] = 0xf0 | (point >> 18);
      out[at++] = 0x80 | ((point >> 12) & 0x3f);
      out[at++] = 0x80 | ((point >> 6) & 0x3f);
      out[at++] = 0x80 | (point & 0x3f);
    }
  }
  return at;
}

/**
 * Rows `start…start+count` of a text column encoded for the callcols layout:
 * byte lengths into `textLengths` from `lengthsAt`, UTF-8 into `textBytes`
 * from `at`. Returns where the bytes end. A text that is not well-formed
 * UTF-16 (a lone surrogate) has no UTF-8 form: it goes empty in the column
 * and as itself in `cells` (JSON escapes it as `\uD800`).
 */
function encodeTexts(
  column: readonly string[],
  start: number,
  count: number,
  cells: Record<string, Json>,
  lengthsAt: number,
  at: number,
): number {
  const lengths = textLengths;
  let out = textBytes;
  for (let i = 0; i < count; i++) {
    const text = column[start + i]!;
    if (at + 3 * text.length > out.length) out = textRoom(at + 3 * text.length, at);
    let end: number;
    if (text.length > NATIVE_UNITS) {
      const bytes = utf8Length(text);
      end = bytes < 0 ? -1 : at + out.write(text, at, bytes, 'utf8');
    } else {
      end = writeUtf8(text, out, at);
    }
    if (end < 0) {
      cells[i] = text;
      lengths[lengthsAt + i] = 0;
    } else {
      lengths[lengthsAt + i] = end - at;
      at = end;
    }
  }
  return at;
}

/** Bytes of one column of `count` fixed-width cells in the callcols layout, padding included. */
function columnBytes(type: ValueType, count: number): number {
  return padded(count * CELL_BYTES[type as Exclude<ValueType, 'text'>]);
}

/** Rows `start…start+count` of a fixed-width typed column: a view of it, no copy. */
function cellsView(type: ValueType, column: Column, start: number, count: number): Uint8Array {
  const width = CELL_BYTES[type as Exclude<ValueType, 'text'>];
  const typed = column as Float64Array | Uint8Array | Uint32Array | BigInt64Array;
  return new Uint8Array(typed.buffer, typed.byteOffset + start * width, count * width);
}

/**
 * Rows `start…start+count` of typed columns (cells checked by core: booleans
 * 0/1, texts strings) as a `callcols` request. Without text the payload is
 * views of the caller's columns (no copy); with text, whose bytes are encoded
 * per chunk anyway, it is one buffer: the encoded texts and the other columns
 * copied into it, so the request goes out in one write, not one per column part.
 */
export function typedColumnsToCols(
  fn: ExternalFn,
  columns: readonly Column[],
  start: number,
  count: number,
): ColsRequest {
  const types = fn.argTypes;
  const cells: ColsCells = {};
  let anyCells = false;
  // Text column k's bytes are textBytes[ends[k-1]…ends[k]], its lengths textLengths[n·count…] (its n-th text column).
  let ends: number[] | undefined;
  let texts = 0;
  let used = 0;
  for (let k = 0; k < types.length; k++) {
    if (types[k] !== 'text') continue;
    if (!ends) {
      let textColumns = 0;
      for (const type of types) if (type === 'text') textColumns++;
      if (textLengths.length < textColumns * count)
        textLengths = new Uint32Array(textColumns * count);
      ends = [];
    }
    const own: Record<string, Json> = {};
    used = encodeTexts(columns[k] as readonly string[], start, count, own, texts * count, used);
    ends[k] = used;
    texts++;
    for (const _ in own) {
      cells[k] = own;
      anyCells = true;
      break;
    }
  }
  const payload: Uint8Array[] = [];
  if (ends) {
    let total = 0;
    let from = 0;
    for (let k = 0; k < types.length; k++) {
      if (types[k] !== 'text') total += columnBytes(types[k]!, count);
      else {
        total += padded(count * 4 + ends[k]! - from);
        from = ends[k]!;
      }
    }
    // A buffer of its own (offset 0, so the lengths views are aligned). Not
    // zeroed (a zeroed one of this size is fresh pages, several times the
    // cost of the copies): every byte is written, padding included.
    const out = Buffer.allocUnsafeSlow(total);
    let at = 0;
    let n = 0;
    from = 0;
    for (let k = 0; k < types.length; k++) {
      const type = types[k]!;
      let end: number;
      if (type === 'text') {
        // `at` is a multiple of 8
        new Uint32Array(out.buffer, at, count).set(textLengths.subarray(n * count, ++n * count));
        textBytes.copy(out, at + count * 4, from, ends[k]);
        end = at + count * 4 + ends[k]! - from;
        from = ends[k]!;
      } else {
        out.set(cellsView(type, columns[k]!, start, count), at);
        end = at + count * CELL_BYTES[type as Exclude<ValueType, 'text'>];
      }
      at = padded(end);
      out.fill(0, end, at);
    }
    payload.push(out);
    if (textBytes.length > KEEP_BYTES) textBytes = Buffer.alloc(64 * 1024);
    if (textLengths.length > KEEP_ROWS) textLengths = new Uint32Array(4 * 1024);
  } else {
    for (let k = 0; k < types.length; k++) {
      const type = types[k]!;
      payload.push(cellsView(type, columns[k]!, start, count));
      const pad = padding(count * CELL_BYTES[type as Exclude<ValueType, 'text'>]);
      if (pad) payload.push(pad);
    }
  }
  const header: ColsRequest['header'] = { op: 'callcols', rows: count };
  if (anyCells) header.cells = cells;
  return { header, payload };
}

/**
 * Writes `ms` milliseconds plus `nanos` (0–999 999) since 1970 as i64
 * nanoseconds into row `i` of `words` (a datetime column's 32-bit words,
 * little-endian), in exact double arithmetic rather than a BigInt per cell.
 * False when i64 cannot hold it (before 1677-09-21 or after 2262-04-11).
 */
export function writeNanos(words: Int32Array, i: number, ms: number, nanos: number): boolean {
  // ns = ms·10⁶ + nanos, taken apart in 16-bit steps so that no partial sum passes 2⁵³.
  const hiMs = Math.floor(ms / 65_536);
  const b = (ms - hiMs * 65_536) * 1_000_000 + nanos; // < 2³⁷
  const c = hiMs * 1_000_000 + Math.floor(b / 65_536); // ns = c·2¹⁶ + (b mod 2¹⁶)
  const hi = Math.floor(c / 65_536);
  if (hi < -2_147_483_648 || hi > 2_147_483_647) return false;
  words[2 * i] = (c - hi * 65_536) * 65_536 + (b % 65_536); // the low word, as u32 bits
  words[2 * i + 1] = hi;
  return true;
}

/**
 * Kept across chunks, one per text argument: rowsToCols gathers a chunk's
 * texts here, every text argument of a row in one pass over the rows (a
 * row's Values are read once, not once per text argument, and no array of
 * the chunk's length is made), then empties them again so they keep no text alive.
 */
const gathered: string[][] = [];

/** Argument `k` of rows `start…start+count` (texts), for each text argument k, into `gathered`. */
function gatherTexts(
  argTypes: readonly ValueType[],
  rows: readonly (readonly Value[])[],
  start: number,
  count: number,
): string[][] {
  const args: number[] = [];
  for (let k = 0; k < argTypes.length; k++) if (argTypes[k] === 'text') args.push(k);
  while (gathered.length < args.length) gathered.push([]);
  const into = gathered.slice(0, args.length);
  if (args.length === 1) {
    const [k] = args as [number];
    const texts = into[0]!;
    for (let i = 0; i < count; i++) texts[i] = (rows[start + i]![k] as { value: string }).value;
  } else {
    for (let i = 0; i < count; i++) {
      const row = rows[start + i]!;
      for (let t = 0; t < args.length; t++)
        into[t]![i] = (row[args[t]!] as { value: string }).value;
    }
  }
  return into;
}

/**
 * Rows `start…start+count` of Values (already checked against the argument
 * types) as a `callcols` request: each fixed-width argument gathered into a
 * column of its type for this chunk, texts joined straight from the rows. A
 * datetime outside i64 nanoseconds (years before 1677 or after 2262) goes as
 * 0 in the column and as its ISO text in `cells`.
 */
export function rowsToCols(
  fn: ExternalFn,
  rows: readonly (readonly Value[])[],
  start: number,
  count: number,
): ColsRequest {
  const datetimeCells: ColsCells = {};
  const texts = gatherTexts(fn.argTypes, rows, start, count);
  let text = 0;
  const columns: Column[] = fn.argTypes.map((type, k): Column => {
    switch (type) {
      case 'number': {
        const column = new Float64Array(count);
        for (let i = 0; i < count; i++)
          column[i] = (rows[start + i]![k] as { value: number }).value;
        return column;
      }
      case 'boolean': {
        const column = new Uint8Array(count);
        for (let i = 0; i < count; i++)
          column[i] = (rows[start + i]![k] as { value: boolean }).value ? 1 : 0;
        return column;
      }
      case 'enum': {
        const column = new Uint32Array(count);
        for (let i = 0; i < count; i++)
          column[i] = (rows[start + i]![k] as { value: number }).value;
        return column;
      }
      case 'text':
        return texts[text++]!;
      default: {
        // Filled before the request is made: with a text column, the payload is a copy.
        const column = new BigInt64Array(count);
        const words = new Int32Array(column.buffer, column.byteOffset, count * 2);
        let own: Record<string, Json> | undefined;
        for (let i = 0; i < count; i++) {
          const value = rows[start + i]![k] as Value & { type: 'datetime' };
          if (!writeNanos(words, i, value.value.getTime(), value.nanos ?? 0)) {
            own ??= {};
            own[i] = valueToJson(value);
          }
        }
        if (own) datetimeCells[k] = own;
        return column;
      }
    }
  });
  const request = typedColumnsToCols(fn, columns, 0, count);
  for (const column of texts) {
    if (column.length > KEEP_ROWS) column.length = 0;
    else column.fill('', 0, count);
  }
  for (const k in datetimeCells) {
    request.header.cells = { ...request.header.cells, [k]: datetimeCells[k]! };
  }
  return request;
}
