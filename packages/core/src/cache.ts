/**
 * A bounded LRU cache of pure-function results. Keys are content hashes of
 * the function (language, body, types, vectorized or not) plus the encoded arguments, so two
 * names with the same body share entries and any change to the body misses.
 */
import { createHash } from 'node:crypto';
import type { ExternalFn } from './descriptor.js';
import type { Value } from './value.js';

export interface CacheOptions {
  /** Most entries kept (default 100 000). */
  maxEntries?: number;
  /** Most bytes kept, estimated from keys and values (default 64 MiB). */
  maxBytes?: number;
}

/**
 * A digest of everything about a function that affects its result. A
 * vectorized body is other code than the same text run per row (its args
 * are whole columns), so it never shares a per-row body's entries.
 */
export function functionDigest(fn: ExternalFn): string {
  const what: unknown[] = [fn.language, fn.body, fn.argTypes, fn.returnType];
  if (fn.vectorized === true) what.push('vectorized');
  return createHash('sha256').update(JSON.stringify(what)).digest('base64url');
}

/** A row's key within one function: a number for the common one-number row, else a string. */
export type ArgumentsKey = string | number;

/**
 * An unambiguous key for a row of arguments (type-tagged, length-prefixed
 * text). A single number other than -0 is its own key: Map keys compare
 * numbers by SameValueZero (NaN finds NaN), and it saves a number-to-string
 * conversion per row.
 */
export function argumentsKey(args: readonly Value[]): ArgumentsKey {
  if (args.length === 1) {
    const only = args[0]!;
    if (only.type === 'number' && !Object.is(only.value, -0)) return only.value;
  }
  let key = '';
  for (const arg of args) {
    switch (arg.type) {
      case 'number':
        key += Object.is(arg.value, -0) ? 'n-0;' : `n${arg.value};`;
        break;
      case 'text':
        key += `t${arg.value.length}:${arg.value}`;
        break;
      case 'datetime':
        key += `d${arg.value.getTime()}.${arg.nanos ?? 0};`;
        break;
      case 'boolean':
        key += arg.value ? 'T' : 'F';
        break;
      case 'enum':
        key += `e${arg.value};`;
        break;
      case 'error':
        key += `x${arg.error.kind};`;
        break;
    }
  }
  return key;
}

function sizeOf(key: ArgumentsKey, value: Value): number {
  const keyBytes = typeof key === 'number' ? 8 : key.length * 2;
  return 64 + keyBytes + (value.type === 'text' ? value.value.length * 2 : 16);
}

type Generation = Map<string, Map<ArgumentsKey, Value>>;

/**
 * LRU by two generations (as in hashlru): new and recently used entries live
 * in the current generation; when it fills, it becomes the previous one and
 * the old previous is dropped whole. Every operation is O(1) — a single Map
 * used as an LRU is not, since V8 leaves tombstones that `keys().next()` must
 * walk past. Entries are grouped by function digest so the digest is never
 * concatenated into a per-row key.
 */
export class ResultCache {
  readonly maxEntries: number;
  readonly maxBytes: number;
  #current: Generation = new Map();
  #previous: Generation = new Map();
  #currentCount = 0;
  #previousCount = 0;
  #currentBytes = 0;
  #previousBytes = 0;
  hits = 0;
  misses = 0;

  constructor(options: CacheOptions = {}) {
    this.maxEntries = options.maxEntries ?? 100_000;
    this.maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
    if (!(this.maxEntries >= 1) || !(this.maxBytes >= 1)) {
      throw new RangeError('cache maxEntries and maxBytes must be at least 1');
    }
  }

  get size(): number {
    return this.#currentCount + this.#previousCount;
  }
  get bytes(): number {
    return this.#currentBytes + this.#previousBytes;
  }

  /** Values handed out are shared between callers: treat them as immutable. */
  get(fnDigest: string, key: ArgumentsKey): Value | undefined {
    const value = this.#current.get(fnDigest)?.get(key);
    if (value !== undefined) {
      this.hits++;
      return value;
    }
    const previous = this.#previous.get(fnDigest);
    const old = previous?.get(key);
    if (old === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    previous!.delete(key);
    this.#previousCount--;
    this.#previousBytes -= sizeOf(key, old);
    this.#insert(fnDigest, key, old);
    return old;
  }

  set(fnDigest: string, key: ArgumentsKey, value: Value): void {
    if (value.type === 'error') return; // errors are never cached
    if (sizeOf(key, value) * 2 > this.maxBytes) return;
    const group = this.#current.get(fnDigest);
    const existing = group?.get(key);
    if (existing !== undefined) {
      group!.delete(key);
      this.#currentCount--;
      this.#currentBytes -= sizeOf(key, existing);
    }
    // Every hit hands out this same object: freeze it so no caller can change another's cell.
    this.#insert(fnDigest, key, Object.freeze(value));
  }

  #insert(fnDigest: string, key: ArgumentsKey, value: Value): void {
    const size = sizeOf(key, value);
    if (
      this.#currentCount >= Math.ceil(this.maxEntries / 2) ||
      this.#currentBytes + size > this.maxBytes / 2
    ) {
      this.#previous = this.#current;
      this.#previousCount = this.#currentCount;
      this.#previousBytes = this.#currentBytes;
      this.#current = new Map();
      this.#currentCount = 0;
      this.#currentBytes = 0;
    }
    let group = this.#current.get(fnDigest);
    if (!group) {
      group = new Map();
      this.#current.set(fnDigest, group);
    }
    group.set(key, value);
    this.#currentCount++;
    this.#currentBytes += size;
  }

  clear(): void {
    this.#current = new Map();
    this.#previous = new Map();
    this.#currentCount = this.#previousCount = 0;
    this.#currentBytes = this.#previousBytes = 0;
  }
}
