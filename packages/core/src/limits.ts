/**
 * How large a descriptor's fields may be, and how a name too long for them
 * shows in a message. Lengths are UTF-16 code units, as `String.length`
 * counts them. A descriptor beyond a limit is refused at registration
 * (InvalidDescriptorError naming the field and the limit); a name beyond
 * MAX_NAME_LENGTH given to a call (which no function can have) is shown
 * cut, so no message grows with what a caller passed.
 */

/**
 * Longest function name: a cell formula's name (Excel's defined names stop
 * at 255 characters), with room to spare; every error of a call quotes it.
 */
export const MAX_NAME_LENGTH = 256;

/** Longest language id (`python`, `wasm`, a third party's). */
export const MAX_LANGUAGE_LENGTH = 64;

/**
 * Most arguments a function declares: WebAssembly's limit on a function's
 * parameters (the JS API's, which V8 enforces: a module whose function
 * takes 1 001 does not compile). Python and R have none, and the driver
 * frames carry arguments in JSON and columns, without a field width.
 */
export const MAX_ARGUMENTS = 1_000;

/**
 * Longest body: 64 Mi characters, the size of core's other default budgets
 * (the result cache's bytes, the interpreter's frame reader). Far above
 * what a runner takes by default (the Wasm runner's `maxBodyBytes` is
 * 1 MiB), while a body is hashed at registration and sent to every worker
 * that loads it.
 */
export const MAX_BODY_LENGTH = 64 * 1024 * 1024;

/**
 * What a name must not hold: control characters (C0, DEL, C1: a C1 CSI
 * rewrites a terminal that shows an error naming the function), line and
 * paragraph separators, and unpaired surrogates (no UTF-8 for them: two
 * names could reach a driver as one).
 */
const BAD_NAME_CHARACTER =
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Whether `name` is spelt as a registered name can be (its length aside):
 * not empty, no surrounding spaces, no BAD_NAME_CHARACTER. The descriptor's
 * check and NotFound's quoting both ask this.
 */
export function nameSpelling(name: string): boolean {
  return name.length > 0 && name.trim() === name && !BAD_NAME_CHARACTER.test(name);
}

/** Characters of an over-long name a message shows. */
const SHOWN_NAME_CHARACTERS = 100;

/**
 * A name as messages show it: itself, up to MAX_NAME_LENGTH characters (any
 * registered name); a longer one (a caller's, never registered) as its start,
 * an ellipsis and its length: `xxxx… (1048576 characters)`.
 */
export function shownName(name: string): string {
  return typeof name === 'string' ? cut(name, MAX_NAME_LENGTH, SHOWN_NAME_CHARACTERS) : name;
}

/**
 * Names as a message lists them: the first `max`, each as `shownName` shows
 * it, then `and N more`.
 */
export function listedNames(names: readonly string[], max: number): string {
  const head = names.slice(0, max).map(shownName).join(', ');
  return names.length > max ? `${head} and ${names.length - max} more` : head;
}

/**
 * `text` itself up to `max` characters; a longer one as its first `keep`, an
 * ellipsis and its length: `xxxx… (1048576 characters)`.
 */
export function cut(text: string, max: number, keep = max): string {
  return text.length <= max ? text : `${cutAt(text, keep)}… (${text.length} characters)`;
}

/**
 * `text` as a JSON string for a message, cut to `max` characters with an
 * ellipsis and its length when longer: `"nope…" (1048576 characters)`.
 * Escaped beyond what JSON asks too (DEL, C1 controls, line and paragraph
 * separators), so nothing in it acts on a terminal or splits a log line.
 */
export function quoted(text: string, max = 60): string {
  if (text.length <= max) return jsonString(text);
  return `${jsonString(`${cutAt(text, max)}…`)} (${text.length} characters)`;
}

function jsonString(text: string): string {
  return JSON.stringify(text).replace(
    /[\u007f-\u009f\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** The first `n` UTF-16 code units of `text`, not splitting a surrogate pair. */
function cutAt(text: string, n: number): string {
  const last = text.charCodeAt(n - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? n - 1 : n);
}
