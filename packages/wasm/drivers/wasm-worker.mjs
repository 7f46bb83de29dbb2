// @ts-check
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

/** progress[0]: -1 while instantiating, otherwise the batch row being evaluated. */
const progress = /** @type {Int32Array} */ (workerData.progress);

/** @typedef {{ module: WebAssembly.Module, stateful: boolean, call?: Function }} Entry */
/** @type {Map<string, Entry>} */
const modules = new Map();
const MAX_MODULES = 256;

/** @param {unknown} error */
function describe(error) {
  if (error instanceof Error) {
    // RuntimeError: unreachable, divide by zero, out of bounds…; RangeError: stack overflow.
    return error.name === 'RuntimeError' ? `trap: ${error.message}` : `${error.name}: ${error.message}`;
  }
  if (typeof WebAssembly.Exception === 'function' && error instanceof WebAssembly.Exception) {
    return 'uncaught WebAssembly exception';
  }
  return String(error);
}

/** @param {WebAssembly.Module} module */
function instantiate(module) {
  const instance = new WebAssembly.Instance(module, {});
  return /** @type {Function} */ (instance.exports.improv_call);
}

/**
 * The module for a request; a stateless module's instance is kept.
 * @param {{ key: string, module?: WebAssembly.Module, stateful: boolean }} message
 */
function entryFor(message) {
  let entry = modules.get(message.key);
  if (!entry) {
    if (!message.module) throw new Error(`module ${message.key} was never sent to this worker`);
    entry = { module: message.module, stateful: message.stateful };
    modules.set(message.key, entry);
    if (modules.size > MAX_MODULES) modules.delete(/** @type {string} */ (modules.keys().next().value));
  }
  return entry;
}

/** @param {Entry} entry */
function callable(entry) {
  if (entry.stateful) return instantiate(entry.module);
  entry.call ??= instantiate(entry.module);
  return entry.call;
}

/** @param {any} message */
function runCall(message) {
  let fn;
  try {
    progress[0] = -1;
    fn = callable(entryFor(message));
  } catch (error) {
    return { id: message.id, ok: false, phase: 'instantiate', message: describe(error) };
  }
  progress[0] = 0;
  try {
    return { id: message.id, ok: true, value: Reflect.apply(fn, undefined, message.args) };
  } catch (error) {
    return { id: message.id, ok: false, phase: 'call', message: describe(error) };
  }
}

/**
 * Rows [start, end) of a batch held in a SharedArrayBuffer: `arity` f64
 * columns of `rows` values, the result column, then one trap flag byte per
 * row. Results are written in
 * place; a trapped row's message is collected and its neighbours go on.
 * @param {any} message
 */
function runBatch(message) {
  const { id, arity, rows, start, end, buffer } = message;
  const began = performance.now();
  /** @type {[number, string][]} */
  const traps = [];
  let entry;
  let fn;
  try {
    progress[0] = -1;
    entry = entryFor(message);
    fn = callable(entry);
  } catch (error) {
    return { id, traps, failure: describe(error) };
  }
  const out = new Float64Array(buffer, arity * rows * 8, rows);
  const trapped = new Uint8Array(buffer, (arity + 1) * rows * 8, rows);
  const a = new Float64Array(buffer, 0, rows);
  const b = arity > 1 ? new Float64Array(buffer, rows * 8, rows) : a;
  const c = arity > 2 ? new Float64Array(buffer, 2 * rows * 8, rows) : a;
  const columns = Array.from({ length: arity }, (_, k) => new Float64Array(buffer, k * rows * 8, rows));
  const args = new Array(arity);
  const fresh = entry.stateful;
  // One loop per arity so that the common cases call the export directly.
  for (let i = start; i < end; i++) {
    progress[0] = i;
    try {
      if (fresh) fn = instantiate(entry.module);
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
      traps.push([i, describe(error)]);
    }
  }
  progress[0] = end;
  return { id, traps, loopMs: performance.now() - began };
}

port.on('message', (message) => {
  port.postMessage(message.op === 'batch' ? runBatch(message) : runCall(message));
});
port.postMessage({ op: 'ready' });
