/**
 * An example third-party runner, to show what implementing `LanguageRunner`
 * takes: JavaScript bodies (statements that read `args` and set `result`),
 * each call in a fresh worker thread that is terminated at the deadline, with
 * fresh globals and `Math.random` seeded the same way every time.
 *
 * It is NOT a sandbox — node:vm is no security boundary. It exists to prove
 * that a runner living outside this repository's packages passes the kit.
 */
import { Worker } from 'node:worker_threads';
import {
  type CallOptions,
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  type Value,
  valueFromJson,
  valueToJson,
} from '@improv/extfn-core';

const OUTPUT_CAP = 1024 * 1024;

// Runs in the worker: wire values in, wire value (or error) out.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const vm = require('node:vm');
const { body, argTypes, args, outputCap } = workerData;
const fromWire = (v, t) => t === 'number' ? (typeof v === 'string' ? Number(v === '-0' ? -0 : v) : v)
  : t === 'datetime' ? new Date(v) : v;
let printed = 0;
const print = (...parts) => {
  printed += parts.join(' ').length + 1;
  if (printed > outputCap) { const e = new Error('output too large'); e.limit = 'output'; throw e; }
};
let script;
try {
  script = new vm.Script(body, { filename: 'body.js' });
} catch (e) {
  // does not parse: every call fails alike (the host marks it loadFailed)
  parentPort.postMessage({ error: String(e && e.name ? e.name + ': ' + e.message : e), load: true });
}
if (script) try {
  // Math.random seeded the same for every call (mulberry32 from 0), so results are deterministic.
  let seed = 0;
  const random = () => {
    seed = (seed + 0x6d2b79f5) >>> 0;
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const SeededMath = Object.assign(Object.create(Math), { random });
  const context = vm.createContext({ args: args.map((v, i) => fromWire(v, argTypes[i])), result: undefined, print, Math: SeededMath, JSON });
  script.runInContext(context);
  let r = context.result;
  if (r instanceof Date) r = r.toISOString();
  else if (typeof r === 'number' && !Number.isFinite(r)) r = String(r);
  else if (Object.is(r, -0)) r = '-0';
  parentPort.postMessage({ ok: r === undefined ? null : r });
} catch (e) {
  parentPort.postMessage({ error: String(e && e.name ? e.name + ': ' + e.message : e), limit: e && e.limit });
}
`;

function runInWorker(
  fn: ExternalFn,
  args: readonly Value[],
  options: CallOptions,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: {
        body: fn.body,
        argTypes: fn.argTypes,
        args: args.map(valueToJson),
        outputCap: OUTPUT_CAP,
      },
      resourceLimits: { maxOldGenerationSizeMb: 256 },
    });
    const finish = (settle: () => void) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      void worker.terminate();
      settle();
    };
    const timer = setTimeout(
      () => finish(() => reject(ExtFnError.timeout(fn.name, options.timeoutMs))),
      options.timeoutMs,
    );
    const onAbort = () => finish(() => reject(ExtFnError.aborted(fn.name, options.signal?.reason)));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    type Reply = { ok?: unknown; error?: string; limit?: 'output'; load?: true };
    worker.once('message', (message: Reply) =>
      finish(() =>
        message.error === undefined
          ? resolve(message.ok)
          : reject(
              ExtFnError.runtime(fn.name, message.error, {
                ...(message.limit ? { limit: message.limit } : {}),
                // a body that does not parse: an engine shows it once per function
                ...(message.load ? { loadFailed: true } : {}),
              }),
            ),
      ),
    );
    worker.once('error', (error) =>
      finish(() => reject(ExtFnError.runtime(fn.name, String(error)))),
    );
  });
}

export function javascript(): LanguageRunner {
  return {
    specificationVersion: 'v1',
    language: 'javascript',
    packageName: '@improv/example-runner-javascript',
    capabilities: { isolated: false, warmWorkers: false, batch: false },
    async probe() {
      return {
        language: 'javascript',
        available: true,
        detail: `node ${process.version} worker threads (not sandboxed)`,
      };
    },
    async call(fn, args, options) {
      return valueFromJson(await runInWorker(fn, args, options), fn.returnType, fn.name);
    },
  };
}
