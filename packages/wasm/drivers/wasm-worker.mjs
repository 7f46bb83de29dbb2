/**
 * The worker thread that runs WebAssembly for @improv/extfn-wasm. It holds
 * compiled modules by key, runs one call or a range of batch rows at a time,
 * and reports traps as messages. It is terminated (never reused) when a call
 * passes its deadline; the main thread watches `progress` to know which row
 * was running.
 */
import { parentPort, workerData } from 'node:worker_threads';

if (!parentPort) throw new Error('wasm-worker.mjs runs as a worker thread');
const port = parentPort;

/**
 * progress[0]: -2 before a task is picked up (set by the main thread, pool.ts),
 * -1 while instantiating, otherwise the batch row being evaluated.
 */
const progress = /** @type {Int32Array} */ (workerData.progress);

/** @typedef {{ call: Function, exports: WebAssembly.Exports }} Live */
/**
 * fresh: a new instance per call (a module that can keep state, by default);
 * stateful: the module can keep state, so a trap discards a reused instance.
 * @typedef {{ module: WebAssembly.Module, fresh: boolean, stateful: boolean, live?: Live }} Entry
 */
/** @type {Map<string, Entry>} */
const modules = new Map();
const MAX_MODULES = 256;

/**
 * What a trap says: RuntimeError (unreachable, divide by zero, out of
 * bounds…), RangeError (stack overflow), an uncaught WebAssembly exception.
 * @param {unknown} error
 */
function trapText(error) {
  if (error instanceof Error) {
    return error.name === 'RuntimeError'
      ? `trap: ${error.message}`
      : `${error.name}: ${error.message}`;
  }
  if (typeof WebAssembly.Exception === 'function' && error instanceof WebAssembly.Exception)
    return 'uncaught WebAssembly exception';
  return String(error);
}

/**
 * A trap's message. A body can say why it failed: it exports `memory` and an
 * i32 global `improv_error` holding the address of a NUL-terminated UTF-8
 * message, sets it, then traps (e.g. `unreachable`).
 * @param {unknown} error
 * @param {WebAssembly.Exports | undefined} exports
 */
function describe(error, exports) {
  const text = trapText(error);
  const own = exports && bodyMessage(exports);
  return own ? `${own} (${text})` : text;
}

const MAX_MESSAGE_BYTES = 4096;

/**
 * The body's own message, or undefined when it gave none that can be read.
 * Never throws: what the module exports is the body's choice (a v128 or
 * externref global, a shared memory…), and an exception here would end the
 * worker in the middle of a batch.
 * @param {WebAssembly.Exports} exports
 */
function bodyMessage(exports) {
  try {
    const global = exports.improv_error;
    const memory = exports.memory;
    if (!(global instanceof WebAssembly.Global) || !(memory instanceof WebAssembly.Memory))
      return undefined;
    const address = global.value; // throws for a v128 global
    if (typeof address !== 'number' || !Number.isInteger(address) || address <= 0) return undefined;
    const bytes = new Uint8Array(memory.buffer);
    if (address >= bytes.length) return undefined;
    let end = address;
    const limit = Math.min(bytes.length, address + MAX_MESSAGE_BYTES);
    while (end < limit && bytes[end] !== 0) end++;
    // A copy: TextDecoder may refuse a view of a shared memory.
    return new TextDecoder().decode(bytes.slice(address, end));
  } catch {
    return undefined;
  }
}

/** @param {WebAssembly.Module} module @returns {Live} */
function instantiate(module) {
  const { exports } = new WebAssembly.Instance(module, {});
  return { call: /** @type {Function} */ (exports.improv_call), exports };
}

/**
 * The module for a request; a stateless module's instance is kept.
 * @param {{ key: string, module?: WebAssembly.Module, fresh: boolean, stateful: boolean }} message
 */
function entryFor(message) {
  let entry = modules.get(message.key);
  if (!entry) {
    if (!message.module) throw new Error(`module ${message.key} was never sent to this worker`);
    entry = { module: message.module, fresh: message.fresh, stateful: message.stateful };
    modules.set(message.key, entry);
    if (modules.size > MAX_MODULES)
      modules.delete(/** @type {string} */ (modules.keys().next().value));
  }
  return entry;
}

/** @param {Entry} entry @returns {Live} */
function live(entry) {
  if (entry.fresh) return instantiate(entry.module);
  entry.live ??= instantiate(entry.module);
  return entry.live;
}

/**
 * After a trap, a reused instance may hold half-written state: the next call gets a new one.
 * @param {Entry} entry
 * @returns {boolean} whether the instance was dropped
 */
function afterTrap(entry) {
  if (!entry.stateful) return false;
  entry.live = undefined;
  return true;
}

/**
 * The entry and a live instance for a request, or the instantiation's failure message.
 * @param {any} message
 * @returns {{ entry: Entry, instance: Live } | { failure: string }}
 */
function start(message) {
  progress[0] = -1;
  try {
    const entry = entryFor(message);
    return { entry, instance: live(entry) };
  } catch (error) {
    return { failure: describe(error, undefined) };
  }
}

/** @param {any} message */
function runCall(message) {
  const started = start(message);
  if ('failure' in started)
    return { id: message.id, ok: false, phase: 'instantiate', message: started.failure };
  const { entry, instance } = started;
  progress[0] = 0;
  try {
    return {
      id: message.id,
      ok: true,
      value: Reflect.apply(instance.call, undefined, message.args),
    };
  } catch (error) {
    afterTrap(entry);
    return { id: message.id, ok: false, phase: 'call', message: describe(error, instance.exports) };
  }
}

/**
 * Rows [start, end) of a batch held in a SharedArrayBuffer: `arity` f64
 * columns of `rows` values, the result column, then one trap flag byte per
 * row. Results are written in place; a trapped row's message is collected
 * and its neighbours go on.
 *
 * Messages travel once each: `traps` holds [row, index into `messages`]. The
 * body's own messages (improv_error) may take `messageChars` characters in
 * all, new ones counted once; past that a row's message is its trap alone,
 * so that a body cannot fill the host with a 4 KB message per row.
 * @param {any} message
 */
function runBatch(message) {
  const { id, arity, rows, start: first, end, buffer } = message;
  const began = performance.now();
  /** @type {[number, number][]} */
  const traps = [];
  /** @type {string[]} */
  const messages = [];
  /** @type {Map<string, number>} */
  const indexOf = new Map();
  const messageChars = typeof message.messageChars === 'number' ? message.messageChars : Infinity;
  let usedChars = 0;
  /** @param {unknown} error @param {WebAssembly.Exports | undefined} exports */
  const trapIndex = (error, exports) => {
    const text = trapText(error);
    const own = exports && bodyMessage(exports);
    let full = own ? `${own} (${text})` : text;
    if (own && !indexOf.has(full)) {
      if (usedChars + full.length > messageChars) {
        full = `${text} (the body's own message is left out: this batch's messages passed ${message.messageLimit} characters)`;
      } else usedChars += full.length;
    }
    let k = indexOf.get(full);
    if (k === undefined) {
      k = messages.length;
      messages.push(full);
      indexOf.set(full, k);
    }
    return k;
  };
  const started = start(message);
  if ('failure' in started) return { id, traps, messages, failure: started.failure };
  const { entry } = started;
  /** @type {Live | undefined} */
  let instance = started.instance;
  let fn = instance.call;
  const out = new Float64Array(buffer, arity * rows * 8, rows);
  const trapped = new Uint8Array(buffer, (arity + 1) * rows * 8, rows);
  const a = new Float64Array(buffer, 0, rows);
  const b = arity > 1 ? new Float64Array(buffer, rows * 8, rows) : a;
  const c = arity > 2 ? new Float64Array(buffer, 2 * rows * 8, rows) : a;
  const columns = Array.from(
    { length: arity },
    (_, k) => new Float64Array(buffer, k * rows * 8, rows),
  );
  const args = new Array(arity);
  const fresh = entry.fresh;
  // A switch on the (loop-invariant, well predicted) arity lets the common cases call the export directly.
  for (let i = first; i < end; i++) {
    progress[0] = i;
    try {
      if (fresh) {
        instance = undefined; // a failed instantiation must not report the previous row's message
        instance = instantiate(entry.module);
        fn = instance.call;
      }
      switch (arity) {
        case 0:
          out[i] = fn();
          break;
        case 1:
          out[i] = fn(a[i]);
          break;
        case 2:
          out[i] = fn(a[i], b[i]);
          break;
        case 3:
          out[i] = fn(a[i], b[i], c[i]);
          break;
        default:
          for (let k = 0; k < arity; k++) args[k] = columns[k][i];
          out[i] = Reflect.apply(fn, undefined, args);
      }
    } catch (error) {
      out[i] = Number.NaN;
      trapped[i] = 1; // survives this worker being terminated later in the range
      traps.push([i, trapIndex(error, instance?.exports)]);
      // A stateless reused instance is still good; a fresh one is made for the next row anyway.
      if (!fresh && afterTrap(entry)) {
        try {
          instance = live(entry);
          fn = instance.call;
        } catch (failure) {
          return {
            id,
            traps,
            messages,
            messageChars: usedChars,
            failure: describe(failure, undefined),
          };
        }
      }
    }
  }
  progress[0] = end;
  return { id, traps, messages, messageChars: usedChars, loopMs: performance.now() - began };
}

port.on('message', (message) => {
  port.postMessage(message.op === 'batch' ? runBatch(message) : runCall(message));
});
port.postMessage({ op: 'ready' });
