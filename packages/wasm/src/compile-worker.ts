/**
 * The compile worker: assembles WAT with wabt, reads, checks and compiles the
 * module, and posts back the WebAssembly.Module (structured-cloneable, so the
 * main thread never touches the body's bytes). All of that takes time in
 * proportion to the body, so it runs here, where the main thread can
 * terminate it at the call's deadline while its own timers keep firing.
 * One request at a time; a worker that overran is terminated, never reused.
 */
import { parentPort } from 'node:worker_threads';
import { loadWabt } from './body.js';
import { type CompileOptions, compileBody } from './compile.js';

if (!parentPort) throw new Error('compile-worker.js runs as a worker thread');
const port = parentPort;

interface CompileRequest {
  id: number;
  body: string;
  options: CompileOptions;
}

// Loaded before `ready`, so a deadline measures the body's own work, not wabt's start-up.
await loadWabt();

port.on('message', async ({ id, body, options }: CompileRequest) => {
  try {
    port.postMessage({ id, compiled: await compileBody(body, options) });
  } catch (error) {
    // A failure of this program, not a verdict on the body: the caller does not remember it.
    port.postMessage({ id, failure: error instanceof Error ? error.message : String(error) });
  }
});
port.postMessage({ op: 'ready' });
