/**
 * The binary columnar form a chunk's arguments and results travel in: one
 * column per declared type, column after column, no tags (the descriptor's
 * types say how to read each column), little-endian throughout.
 *
 *   number    n × f64 (NaN, ±Infinity and -0 travel as themselves)
 *   boolean   n × u8 (0 or 1)
 *   text      n × u32 byte lengths, then the bytes of every row: UTF-8, or
 *             UTF-16LE with bit 31 of the length set for a string holding a
 *             lone surrogate (UTF-8 cannot carry one; the kit checks they survive)
 *   datetime  n × f64 epoch milliseconds, then n × u32 nanoseconds below the
 *             millisecond (the whole Date range, not only i64 nanoseconds')
 *   enum      n × u32
 *
 * BullMQ keeps job data as JSON, so a frame rides in it as base64.
 */
import type { Value, ValueType } from '@improv/extfn-core';

/** A frame that does not match its declared types: what is wrong with it. */
export class ColumnFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ColumnFormatError';
  }
}

const WIDTH: Record<Exclude<ValueType, 'text'>, number> = {
  number: 8,
  boolean: 1,
  datetime: 12,
  enum: 4,
};

/** Bit 31 of a text length: the row is UTF-16LE (it holds a lone surrogate). */
const UTF16_FLAG = 0x8000_0000;

/** Whether a string is valid Unicode (no lone surrogate), so UTF-8 carries it exactly. */
const isWellFormed = (text: string): boolean =>
  (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/** The payload of a non-error Value (rows were checked against their types before encoding). */
const payload = (value: Value | undefined): unknown =>
  (value as { value?: unknown } | undefined)?.value;

/** Grows as columns are appended; one allocation per doubling. */
class Writer {
  #buffer = Buffer.allocUnsafe(256);
  #length = 0;

  reserve(bytes: number): number {
    const offset = this.#length;
    const needed = offset + bytes;
    if (needed > this.#buffer.length) {
      const grown = Buffer.allocUnsafe(Math.max(needed, this.#buffer.length * 2));
      this.#buffer.copy(grown, 0, 0, offset);
      this.#buffer = grown;
    }
    this.#length = needed;
    return offset;
  }

  get buffer(): Buffer {
    return this.#buffer;
  }

  finish(): Buffer {
    return this.#buffer.subarray(0, this.#length);
  }
}

/**
 * Appends one column of `type`. `valueAt(i)` gives row i's value, or
 * undefined for a row with nothing to send (a failed result row), written as
 * the type's zero.
 */
function writeColumn(
  writer: Writer,
  type: ValueType,
  count: number,
  valueAt: (row: number) => Value | undefined,
): void {
  if (type === 'text') {
    const encoded: Buffer[] = new Array(count);
    const utf16: boolean[] = new Array(count);
    let total = 0;
    for (let i = 0; i < count; i++) {
      const value = valueAt(i);
      const text = (payload(value) as string | undefined) ?? '';
      utf16[i] = !isWellFormed(text);
      const bytes = Buffer.from(text, utf16[i] ? 'utf16le' : 'utf8');
      encoded[i] = bytes;
      total += bytes.length;
    }
    let at = writer.reserve(4 * count + total);
    const out = writer.buffer;
    for (let i = 0; i < count; i++) {
      out.writeUInt32LE((encoded[i]!.length | (utf16[i] ? UTF16_FLAG : 0)) >>> 0, at + 4 * i);
    }
    at += 4 * count;
    for (const bytes of encoded) {
      bytes.copy(out, at);
      at += bytes.length;
    }
    return;
  }
  const at = writer.reserve(WIDTH[type] * count);
  const out = writer.buffer;
  for (let i = 0; i < count; i++) {
    const value = valueAt(i);
    switch (type) {
      case 'number':
        out.writeDoubleLE((payload(value) as number | undefined) ?? 0, at + 8 * i);
        break;
      case 'boolean':
        out[at + i] = payload(value) === true ? 1 : 0;
        break;
      case 'enum':
        out.writeUInt32LE((payload(value) as number | undefined) ?? 0, at + 4 * i);
        break;
      case 'datetime': {
        const date = value?.type === 'datetime' ? value : undefined;
        out.writeDoubleLE(date ? date.value.getTime() : 0, at + 8 * i);
        out.writeUInt32LE(date?.nanos ?? 0, at + 8 * count + 4 * i);
        break;
      }
    }
  }
}

/** Reads one column of `type` at `offset`; returns the values and the offset after it. */
function readColumn(
  frame: Buffer,
  offset: number,
  type: ValueType,
  count: number,
): { values: Value[]; next: number } {
  const need = (bytes: number) => {
    if (offset + bytes > frame.length) {
      throw new ColumnFormatError(
        `a ${type} column of ${count} rows needs ${bytes} bytes at offset ${offset}, the frame has ${frame.length}`,
      );
    }
  };
  const values: Value[] = new Array(count);
  if (type === 'text') {
    need(4 * count);
    let at = offset + 4 * count;
    for (let i = 0; i < count; i++) {
      const header = frame.readUInt32LE(offset + 4 * i);
      const length = header & ~UTF16_FLAG;
      if (at + length > frame.length) {
        throw new ColumnFormatError(`text row ${i} runs past the end of the frame`);
      }
      const encoding = header & UTF16_FLAG ? 'utf16le' : 'utf8';
      values[i] = { type: 'text', value: frame.toString(encoding, at, at + length) };
      at += length;
    }
    return { values, next: at };
  }
  need(WIDTH[type] * count);
  for (let i = 0; i < count; i++) {
    switch (type) {
      case 'number':
        values[i] = { type: 'number', value: frame.readDoubleLE(offset + 8 * i) };
        break;
      case 'boolean': {
        const byte = frame[offset + i]!;
        if (byte > 1) throw new ColumnFormatError(`boolean row ${i} is ${byte}, not 0 or 1`);
        values[i] = { type: 'boolean', value: byte === 1 };
        break;
      }
      case 'enum':
        values[i] = { type: 'enum', value: frame.readUInt32LE(offset + 4 * i) };
        break;
      case 'datetime': {
        const ms = frame.readDoubleLE(offset + 8 * i);
        const nanos = frame.readUInt32LE(offset + 8 * count + 4 * i);
        const date = new Date(ms);
        if (Number.isNaN(date.getTime()) || nanos > 999_999) {
          throw new ColumnFormatError(
            `datetime row ${i} is not an instant (${ms} ms, ${nanos} ns)`,
          );
        }
        values[i] = nanos
          ? { type: 'datetime', value: date, nanos }
          : { type: 'datetime', value: date };
        break;
      }
    }
  }
  return { values, next: offset + WIDTH[type] * count };
}

/** A chunk's arguments, rows of Values (already checked against `types`), as one frame. */
export function encodeRows(
  types: readonly ValueType[],
  rows: readonly (readonly Value[])[],
): Buffer {
  const writer = new Writer();
  types.forEach((type, k) => {
    writeColumn(writer, type, rows.length, (i) => rows[i]![k]);
  });
  return writer.finish();
}

/** A chunk's arguments from number columns (`columns[k].subarray(start, end)`), without Values. */
export function encodeNumberColumns(
  columns: readonly Float64Array[],
  start: number,
  end: number,
): Buffer {
  const count = end - start;
  const frame = Buffer.allocUnsafe(8 * count * columns.length);
  columns.forEach((column, k) => {
    const slice = column.subarray(start, end);
    Buffer.from(slice.buffer, slice.byteOffset, slice.byteLength).copy(frame, 8 * count * k);
  });
  return frame;
}

/** A frame back as rows of Values; throws ColumnFormatError when it does not fit `types` × `count`. */
export function decodeRows(types: readonly ValueType[], count: number, frame: Buffer): Value[][] {
  const columns: Value[][] = [];
  let offset = 0;
  for (const type of types) {
    const { values, next } = readColumn(frame, offset, type, count);
    columns.push(values);
    offset = next;
  }
  if (offset !== frame.length) {
    throw new ColumnFormatError(
      `the frame has ${frame.length - offset} bytes after its last column`,
    );
  }
  return Array.from({ length: count }, (_, i) => columns.map((column) => column[i]!));
}

/** One result column: a value per row, the zero of its type where the row failed. */
export function encodeResults(type: ValueType, results: readonly (Value | undefined)[]): Buffer {
  const writer = new Writer();
  writeColumn(writer, type, results.length, (i) => results[i]);
  return writer.finish();
}

/** One result column back as Values. */
export function decodeResults(type: ValueType, count: number, frame: Buffer): Value[] {
  const { values, next } = readColumn(frame, 0, type, count);
  if (next !== frame.length) {
    throw new ColumnFormatError(`the result frame has ${frame.length - next} bytes too many`);
  }
  return values;
}

/** A number result column as a Float64Array, copied out of the frame. */
export function decodeNumberResults(count: number, frame: Buffer): Float64Array {
  if (frame.length !== 8 * count) {
    throw new ColumnFormatError(
      `a number result column of ${count} rows has ${frame.length} bytes`,
    );
  }
  const out = new Float64Array(count);
  Buffer.from(out.buffer).set(frame);
  return out;
}
