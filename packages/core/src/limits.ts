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
 */
export function quoted(text: string, max = 60): string {
  if (text.length <= max) return JSON.stringify(text);
  return `${JSON.stringify(`${cutAt(text, max)}…`)} (${text.length} characters)`;
}

/** The first `n` UTF-16 code units of `text`, not splitting a surrogate pair. */
function cutAt(text: string, n: number): string {
  const last = text.charCodeAt(n - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? n - 1 : n);
}
