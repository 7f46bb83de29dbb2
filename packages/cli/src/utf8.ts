/**
 * Input that is not UTF-8. Node decodes it silently, each bad byte becoming
 * U+FFFD, so a Latin-1 file would run with its accents replaced. Here a byte
 * that is not part of a UTF-8 character becomes a lone surrogate instead
 * (U+DC80 + the byte, as Python's "surrogateescape"): text decoded from valid
 * UTF-8 never holds one, so the rows reader can tell which row, which cell and
 * which byte was wrong, and say how to fix the file.
 */
import { isUtf8 } from 'node:buffer';
import { lineAndColumn } from './json-error.js';

/** Whether `bytes[i..]` starts a well-formed UTF-8 character (Unicode Table 3-7): its length, or 0. */
function sequenceLength(bytes: Uint8Array, i: number): number {
  const b = bytes[i]!;
  if (b < 0x80) return 1;
  const n = bytes.length;
  const cont = (k: number, low = 0x80, high = 0xbf) =>
    i + k < n && bytes[i + k]! >= low && bytes[i + k]! <= high;
  if (b >= 0xc2 && b <= 0xdf) return cont(1) ? 2 : 0;
  if (b >= 0xe0 && b <= 0xef) {
    const [low, high] = b === 0xe0 ? [0xa0, 0xbf] : b === 0xed ? [0x80, 0x9f] : [0x80, 0xbf];
    return cont(1, low, high) && cont(2) ? 3 : 0;
  }
  if (b >= 0xf0 && b <= 0xf4) {
    const [low, high] = b === 0xf0 ? [0x90, 0xbf] : b === 0xf4 ? [0x80, 0x8f] : [0x80, 0xbf];
    return cont(1, low, high) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

/** Bytes → text, each byte that is not part of a UTF-8 character as U+DC80 + the byte. */
export function decodeEscaped(bytes: Uint8Array): string {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (isUtf8(buffer)) return buffer.toString('utf8');
  let text = '';
  let run = 0;
  for (let i = 0; i < buffer.length; ) {
    const length = sequenceLength(buffer, i);
    if (length > 0) {
      i += length;
      continue;
    }
    text += buffer.toString('utf8', run, i) + String.fromCharCode(0xdc00 + buffer[i]!);
    run = ++i;
  }
  return text + buffer.toString('utf8', run);
}

/** Where the character that starts at the end of `bytes` may continue in the next piece. */
function completeLength(bytes: Uint8Array): number {
  const n = bytes.length;
  for (let i = n - 1; i >= Math.max(0, n - 4); i--) {
    const b = bytes[i]!;
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return n - i < need ? i : n;
  }
  return n;
}

/** Decodes pieces of bytes as they come (a character may be cut between two), escaping bad bytes. */
export class EscapingDecoder {
  #carry: Uint8Array | undefined;

  decode(chunk: Uint8Array): string {
    let bytes = chunk;
    if (this.#carry) {
      bytes = Buffer.concat([this.#carry, chunk]);
      this.#carry = undefined;
    }
    const end = completeLength(bytes);
    if (end < bytes.length) this.#carry = bytes.slice(end);
    return decodeEscaped(end < bytes.length ? bytes.subarray(0, end) : bytes);
  }

  end(): string {
    const rest = this.#carry;
    this.#carry = undefined;
    return rest ? decodeEscaped(rest) : '';
  }
}

const SURROGATE = /[\uD800-\uDFFF]/;

/**
 * The index of the first character of `text` that is not text: a byte that
 * was not UTF-8 (escaped as above), or a lone surrogate; -1 when there is
 * none. Cheap when there is none: one scan for a surrogate at all.
 */
export function firstBadCharacter(text: string): number {
  if (!SURROGATE.test(text)) return -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    if (c <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++; // a pair: one character of another plane
        continue;
      }
    }
    return i;
  }
  return -1;
}

/** What the character at `index` (see firstBadCharacter) was, in words: "the byte 0xE9". */
export function describeBadCharacter(text: string, index: number): string {
  const c = text.charCodeAt(index);
  return c >= 0xdc80 && c <= 0xdcff
    ? `the byte 0x${(c - 0xdc00).toString(16).toUpperCase()} is not UTF-8`
    : `a lone surrogate (U+${c.toString(16).toUpperCase()}) is not text`;
}

/** The fix for input that is not UTF-8, naming the file (or standard input). */
export function reencodeFix(file: string): string {
  return file === '-' || file === 'standard input'
    ? 'convert the input to UTF-8 before it reaches improv-extfn, e.g. pipe it through iconv -f WINDOWS-1252 -t UTF-8 (name the encoding it is in)'
    : `re-encode ${file} as UTF-8, e.g. iconv -f WINDOWS-1252 -t UTF-8 ${file} > utf8-${file.split('/').pop()} (name the encoding it is in), and run on that`;
}

/**
 * The problem with text that should be UTF-8, or undefined: "line 3, column 7:
 * the byte 0xE9 is not UTF-8".
 */
export function utf8Problem(text: string): string | undefined {
  const index = firstBadCharacter(text);
  if (index === -1) return undefined;
  const { line, column } = lineAndColumn(text, index);
  return `line ${line}, column ${column}: ${describeBadCharacter(text, index)}`;
}
