/** Where JSON.parse gave up, as a line and column a person can find in an editor. */

/** 1-based line and column of a character offset. */
export function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let lf = text.indexOf('\n'); lf !== -1 && lf < offset; lf = text.indexOf('\n', lf + 1)) {
    line++;
    lineStart = lf + 1;
  }
  return { line, column: offset - lineStart + 1 };
}

const POSITION = /\s*(?:in JSON )?at position (\d+)(?: \(line \d+ column \d+\))?/;

/** Whether the first `length` characters already hold the error (rather than just ending early). */
function prefixFails(text: string, length: number): boolean {
  try {
    JSON.parse(text.slice(0, length));
    return false;
  } catch (error) {
    const message = (error as Error).message;
    if (/Unexpected end of JSON input/.test(message)) return false;
    const at = POSITION.exec(message);
    return !(at && Number(at[1]) >= length);
  }
}

/**
 * V8 names no position for an unexpected token ("Unexpected token 'o',
 * "nope" is not valid JSON"): the shortest prefix that fails ends at it.
 */
function offendingOffset(text: string): number {
  let low = 1;
  let high = text.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (prefixFails(text, mid)) high = mid;
    else low = mid + 1;
  }
  return low - 1;
}

/**
 * JSON.parse's message with the place it stopped as "line L, column C"
 * (V8 gives a character offset at most).
 */
export function describeJsonError(error: unknown, text: string): string {
  const message = error instanceof Error ? error.message : String(error);
  const at = POSITION.exec(message);
  let offset: number;
  let bare = message;
  if (at) {
    offset = Number(at[1]);
    bare = message.slice(0, at.index) + message.slice(at.index + at[0].length);
  } else if (/Unexpected end of JSON input/.test(message)) {
    offset = text.length;
  } else {
    offset = offendingOffset(text);
    bare = message.replace(/, (?:\.\.\.)?".*" is not valid JSON$/s, '');
  }
  const { line, column } = lineAndColumn(text, offset);
  return `line ${line}, column ${column}: ${bare}`;
}

/**
 * The fix for a raw line break or tab inside a JSON string (a body pasted
 * as it was written), naming the key whose value holds it; undefined for
 * any other error.
 */
export function controlCharacterFix(error: unknown, text: string): string | undefined {
  const message = error instanceof Error ? error.message : String(error);
  if (!/Bad control character in string literal/.test(message)) return undefined;
  const at = POSITION.exec(message);
  const offset = at ? Number(at[1]) : text.length;
  const key = /"((?:[^"\\]|\\.)*)"\s*:\s*"(?:[^"\\]|\\.)*$/.exec(text.slice(0, offset));
  const where = key ? `the value of "${key[1]}"` : 'a string';
  const code = text.charCodeAt(offset);
  const named: Record<number, string> = { 9: 'a tab', 10: 'a line break', 13: 'a line break' };
  if (named[code] !== undefined || Number.isNaN(code)) {
    return `${where} holds ${named[code] ?? 'a line break or tab'} as it is, which JSON does not allow: inside a string write line breaks as \\n and tabs as \\t ("body": "x = 1\\nresult = x * 2")`;
  }
  const escaped = `\\u${code.toString(16).padStart(4, '0')}`;
  return `${where} holds the control character U+${code.toString(16).toUpperCase().padStart(4, '0')} as it is, which JSON does not allow: inside a string write it as ${escaped} (line breaks as \\n, tabs as \\t)`;
}
