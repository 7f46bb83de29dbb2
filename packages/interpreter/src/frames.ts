/**
 * Framing of the driver protocol (docs/protocol.md): one line of compact JSON
 * per frame, optionally followed by exactly `bytes` raw bytes (f64 columns).
 */

import type { ResourceLimit } from '@improv/extfn-core';

export const PROTOCOL_VERSION = 1;

/** A frame's JSON header. `bytes`, when present, is the length of the raw payload after it. */
export type FrameHeader = Record<string, unknown> & { bytes?: number };

/**
 * The start of what a driver sent, for an error message. A body can write
 * any JSON to the protocol channel, and JSON.stringify of a value nested a
 * few thousand levels deep overflows the stack: thrown in a stream handler,
 * that would end the host process.
 */
export function preview(value: unknown, max = 200): string {
  try {
    return String(JSON.stringify(value)).slice(0, max);
  } catch {
    return '(a value nested too deeply to show)';
  }
}

/** The driver's first frame when it speaks this protocol version. */
export function isReadyFrame(header: FrameHeader | undefined): header is FrameHeader {
  return header?.ready === 1 && header.protocol === PROTOCOL_VERSION;
}

export interface Frame {
  header: FrameHeader;
  payload?: Buffer;
  /** For a response: milliseconds from sending the request to receiving this frame. */
  elapsedMs?: number;
  /**
   * For a response: the driver's own milliseconds on the request (its `workMs`,
   * docs/protocol.md), when it says and the figure fits inside the time since
   * the request was written (for one queued behind another, more than `elapsedMs`).
   */
  workMs?: number;
  /**
   * Bytes the frame took on the wire, header line and payload: about what its
   * results hold in the host (a batch's budget, `maxBatchResultBytes`).
   */
  wireBytes?: number;
}

/**
 * A response's `workMs` (docs/protocol.md, "Requests"): the driver's own time
 * on the request, taken when it is a number from 0 to `sawMs`, the time the
 * host saw the request out. Only a hint for chunk sizes and turns: a body
 * could make its driver say anything, and the host never believes more than
 * it saw itself.
 */
export function driverWorkMs(header: FrameHeader, sawMs: number): number | undefined {
  const work = header.workMs;
  return typeof work === 'number' && work >= 0 && work <= sawMs ? work : undefined;
}

/**
 * How long a request took, as work goes: the host's time on it, but no less
 * than the driver's own (`workMs`). A request queued behind another is timed
 * from the host's reading of the answer ahead, which can come after the
 * worker has done most of it.
 */
export function requestMs(frame: Frame): number {
  return Math.max(frame.elapsedMs ?? 0, frame.workMs ?? 0);
}

/** An error the driver reports for a row or for `load`. */
export interface DriverError {
  /** The exception's type, e.g. `ValueError`; `ResultTypeError` for a result of the wrong type. */
  type: string;
  message: string;
  /** Traceback (or the interpreter's equivalent) with the body's own line numbers. */
  traceback?: string;
  /**
   * `output` when the row printed or returned more than the per-row cap,
   * `memory` when it ran out of memory, `processes` when it could not start one.
   */
  limit?: ResourceLimit;
  /** For a result of the wrong type: the declared type and what was received. */
  expected?: string;
  got?: string;
}

/** A request's binary payload: one buffer, or parts sent one after another (column slices, never joined). */
export type Payload = Uint8Array | readonly Uint8Array[];

/** Bytes in a payload. */
export function payloadBytes(payload: Payload): number {
  if (payload instanceof Uint8Array) return payload.byteLength;
  let bytes = 0;
  for (const part of payload) bytes += part.byteLength;
  return bytes;
}

const NEWLINE = 0x0a;

/**
 * JSON text spliced into a header as is (rows rendered in one pass by
 * `rowsJsonText`, instead of building arrays for JSON.stringify to walk).
 */
export class RawJson {
  constructor(readonly text: string) {}
  toJSON(): never {
    throw new Error('RawJson is spliced by encodeFrame, not stringified');
  }
}

/** Encodes a frame: the header as one JSON line, then the payload if any. */
export function encodeFrame(header: FrameHeader, payload?: Uint8Array): Buffer {
  const line = Buffer.from(frameLine(payload ? { ...header, bytes: payload.byteLength } : header));
  return payload ? Buffer.concat([line, payload]) : line;
}

/**
 * A frame's header line, as text: a stream writes a string without a Buffer
 * of the host's own (a warm call's header goes this way).
 */
export function frameLine(header: FrameHeader): string {
  // Copied without the RawJson fields rather than copied and deleted from: an object
  // a field is deleted from turns slow to stringify.
  const head: FrameHeader = {};
  let raw = '';
  for (const key in header) {
    const value = header[key];
    if (value instanceof RawJson) raw += `,${JSON.stringify(key)}:${value.text}`;
    else head[key] = value;
  }
  const json = JSON.stringify(head);
  return raw ? `${json.slice(0, -1)}${json.length > 2 ? raw : raw.slice(1)}}\n` : `${json}\n`;
}

/** Thrown when the protocol channel carries something that is not a frame, or too much. */
export class FrameError extends Error {
  constructor(
    message: string,
    readonly budget = false,
  ) {
    super(message);
    this.name = 'FrameError';
  }
}

/**
 * Incremental frame parser, fed bytes as they arrive. `push` returns the
 * complete frames so far and throws FrameError on a malformed frame, on an
 * unterminated line longer than `lineLimit`, or on a payload announced
 * larger than `payloadLimit`: what it holds is bounded by those two limits
 * plus one chunk, whatever a runaway or hostile driver sends.
 */
export class FrameReader {
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** Bytes of payload still expected for `#pending`. */
  #pending: FrameHeader | undefined;
  /** The header line's bytes of the frame whose payload is awaited. */
  #pendingLine = 0;
  /** Bytes at the start of the buffer already known to hold no newline (keeps long lines linear). */
  #scanned = 0;
  /** Most bytes one header line may take. */
  lineLimit: number;
  /** Most bytes one payload may announce. */
  payloadLimit: number;
  /**
   * Where the next payload of exactly this many bytes is copied (the caller's
   * result column), saving a buffer and a copy per chunk; other sizes get a
   * buffer of their own.
   */
  payloadTarget: Uint8Array | undefined;

  constructor(budget = 64 * 1024 * 1024) {
    this.lineLimit = budget;
    this.payloadLimit = budget;
  }

  /** Sets both limits at once; reads the line limit. */
  set budget(bytes: number) {
    this.lineLimit = bytes;
    this.payloadLimit = bytes;
  }

  get budget(): number {
    return this.lineLimit;
  }

  get buffered(): number {
    return this.#buffered;
  }

  push(chunk: Buffer): Frame[] {
    this.add(chunk);
    const frames: Frame[] = [];
    for (;;) {
      const frame = this.next();
      if (!frame) break;
      frames.push(frame);
    }
    return frames;
  }

  /** Buffers a chunk without reading frames from it (see `next`). */
  add(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
  }

  /**
   * The next whole frame buffered, read with the limits and target set now:
   * a caller expecting several answers sets each one's before reading it.
   */
  next(): Frame | undefined {
    const frame = this.#next();
    // What is left is part of one line (or of an announced, bounded payload).
    if (!frame && !this.#pending && this.#buffered > this.lineLimit) {
      throw new FrameError(`the driver sent more than ${this.lineLimit} bytes in one frame`, true);
    }
    return frame;
  }

  #take(n: number): Buffer {
    const all = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.#chunks = rest.length ? [rest] : [];
    this.#buffered = rest.length;
    this.#scanned = 0;
    return out;
  }

  /** The next `size` bytes copied once into a buffer of their own (a payload may span many chunks). */
  #takePayload(size: number): Buffer {
    const target = this.payloadTarget;
    this.payloadTarget = undefined;
    const out =
      target?.byteLength === size
        ? Buffer.from(target.buffer, target.byteOffset, size)
        : Buffer.allocUnsafe(size);
    let filled = 0;
    while (filled < size) {
      const chunk = this.#chunks[0]!;
      const k = Math.min(chunk.length, size - filled);
      chunk.copy(out, filled, 0, k);
      filled += k;
      if (k === chunk.length) this.#chunks.shift();
      else this.#chunks[0] = chunk.subarray(k);
    }
    this.#buffered -= size;
    this.#scanned = 0;
    return out;
  }

  #next(): Frame | undefined {
    if (this.#pending) {
      const size = this.#pending.bytes!;
      if (this.#buffered < size) return undefined;
      const header = this.#pending;
      this.#pending = undefined;
      const wireBytes = this.#pendingLine + size;
      return { header, payload: this.#takePayload(size), wireBytes };
    }
    const end = this.#indexOfNewline();
    if (end < 0) return undefined;
    if (end > this.lineLimit) {
      throw new FrameError(`the driver sent more than ${this.lineLimit} bytes in one frame`, true);
    }
    const line = this.#take(end + 1).toString('utf8', 0, end);
    let header: unknown;
    try {
      header = JSON.parse(line);
    } catch {
      throw new FrameError(
        `malformed frame from the driver: ${JSON.stringify(line.slice(0, 120))}`,
      );
    }
    if (typeof header !== 'object' || header === null || Array.isArray(header)) {
      throw new FrameError(
        `malformed frame from the driver: ${JSON.stringify(line.slice(0, 120))}`,
      );
    }
    const h = header as FrameHeader;
    if (h.bytes !== undefined) {
      if (!Number.isSafeInteger(h.bytes) || h.bytes < 0) {
        throw new FrameError(
          `malformed frame from the driver: bad payload size ${String(h.bytes)}`,
        );
      }
      if (h.bytes > this.payloadLimit) {
        throw new FrameError(
          `the driver sent more than ${this.payloadLimit} bytes in one frame`,
          true,
        );
      }
      this.#pending = h;
      this.#pendingLine = end + 1;
      return this.#next();
    }
    return { header: h, wireBytes: end + 1 };
  }

  #indexOfNewline(): number {
    let offset = 0;
    for (const chunk of this.#chunks) {
      if (offset + chunk.length > this.#scanned) {
        const i = chunk.indexOf(NEWLINE, Math.max(0, this.#scanned - offset));
        if (i >= 0) return offset + i;
      }
      offset += chunk.length;
    }
    this.#scanned = offset;
    return -1;
  }
}
