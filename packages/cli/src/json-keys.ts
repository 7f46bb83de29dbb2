/**
 * A key written twice in one JSON object. JSON.parse keeps the last value
 * without a word, so `{"x": 1, "x": 2}` would run on 2 while the file says
 * both. JSON.parse cannot tell, so this looks at the text: the keys written
 * (strings followed by a colon) are counted and compared with the keys parsed
 * — one pass of indexOf from string to string, nothing per character outside
 * them — and only when the counts differ is the text read again to find the
 * key and where it is. For a row without a string (an array of numbers) it is
 * one indexOf.
 */

const QUOTE = 34;
const BACKSLASH = 92;
const COLON = 58;

/** The index of the quote that closes the string opening at `open` (the text is valid JSON). */
function stringEnd(text: string, open: number): number {
  let close = text.indexOf('"', open + 1);
  for (;;) {
    let backslashes = 0;
    while (text.charCodeAt(close - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return close;
    close = text.indexOf('"', close + 1);
  }
}

/** Whether the string closing at `close` is a key: a colon follows, after white space. */
function isKey(text: string, close: number): boolean {
  let i = close + 1;
  for (let c = text.charCodeAt(i); c === 32 || c === 9 || c === 10 || c === 13; ) {
    c = text.charCodeAt(++i);
  }
  return text.charCodeAt(i) === COLON;
}

function writtenKeys(text: string, first: number): number {
  let count = 0;
  for (let open = first; open !== -1; ) {
    const close = stringEnd(text, open);
    if (isKey(text, close)) count++;
    open = text.indexOf('"', close + 1);
  }
  return count;
}

function parsedKeys(value: object): number {
  let count = 0;
  if (Array.isArray(value)) {
    for (const item of value)
      if (typeof item === 'object' && item !== null) count += parsedKeys(item);
    return count;
  }
  for (const key in value) {
    count++;
    const item = (value as Record<string, unknown>)[key];
    if (typeof item === 'object' && item !== null) count += parsedKeys(item);
  }
  return count;
}

export interface DuplicateKey {
  /** The key, as JSON.parse reads it (`"\u0078"` and `"x"` are the same key). */
  readonly key: string;
  /** Where its second writing starts in the text (the opening quote). */
  readonly index: number;
}

/** The first key written twice in one object of `text`, which JSON.parse read as `parsed`. */
export function duplicateKey(text: string, parsed: unknown): DuplicateKey | undefined {
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const first = text.indexOf('"');
  if (first === -1) return undefined;
  if (writtenKeys(text, first) === parsedKeys(parsed)) return undefined;
  // Some object lost a key: find which, with a set of keys per open object.
  const open: (Set<string> | null)[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 123) open.push(new Set());
    else if (c === 91) open.push(null);
    else if (c === 125 || c === 93) open.pop();
    else if (c === QUOTE) {
      const close = stringEnd(text, i);
      const keys = open[open.length - 1];
      if (keys && isKey(text, close)) {
        const key = JSON.parse(text.slice(i, close + 1)) as string;
        if (keys.has(key)) return { key, index: i };
        keys.add(key);
      }
      i = close;
    }
  }
  return undefined;
}
