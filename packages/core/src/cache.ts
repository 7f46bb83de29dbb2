/**
 * A bounded LRU cache of pure-function results. Keys are content hashes of
 * the function (language, body, types) plus the encoded arguments, so two
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

/** A digest of everything about a function that affects its result. */
export function functionDigest(fn: ExternalFn): string {
  return createHash('sha256')
    .update(JSON.stringify([fn.language, fn.body, fn.argTypes, fn.returnType]))
    .digest('base64url');
}

/** An unambiguous string for a row of arguments (type-tagged, length-prefixed text). */
export function argumentsKey(args: readonly Value[]): string {
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

function sizeOf(value: Value): number {
  return 64 + (value.type === 'text' ? value.value.length * 2 : 16);
}

export class ResultCache {
  readonly maxEntries: number;
  readonly maxBytes: number;
  #entries = new Map<string, Value>();
  #bytes = 0;
  hits = 0;
  misses = 0;

  constructor(options: CacheOptions = {}) {
    this.maxEntries = options.maxEntries ?? 100_000;
    this.maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
  }

  get size(): number {
    return this.#entries.size;
  }
  get bytes(): number {
    return this.#bytes;
  }

  get(key: string): Value | undefined {
    const value = this.#entries.get(key);
    if (value === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Re-insert: Map keeps insertion order, so the first key is the least recent.
    this.#entries.delete(key);
    this.#entries.set(key, value);
    return value;
  }

  set(key: string, value: Value): void {
    if (value.type === 'error') return; // errors are never cached
    const size = key.length * 2 + sizeOf(value);
    if (size > this.maxBytes) return;
    const old = this.#entries.get(key);
    if (old !== undefined) {
      this.#entries.delete(key);
      this.#bytes -= key.length * 2 + sizeOf(old);
    }
    // Frozen: every hit hands out this same object.
    this.#entries.set(key, Object.freeze(value));
    this.#bytes += size;
    while (this.#entries.size > this.maxEntries || this.#bytes > this.maxBytes) {
      const oldest = this.#entries.keys().next().value as string;
      this.#bytes -= oldest.length * 2 + sizeOf(this.#entries.get(oldest)!);
      this.#entries.delete(oldest);
    }
  }

  clear(): void {
    this.#entries.clear();
    this.#bytes = 0;
  }
}
