/**
 * One warm worker: a sandboxed interpreter running the driver, serving one
 * function, one request at a time. Anything unexpected — deadline passed,
 * exit, malformed frame, too many bytes, abort — kills the whole process
 * tree and fails the request; a dead worker is never reused.
 */
import type { ResourceLimit } from '@improv/extfn-core';
import type { SandboxedProcess } from '@improv/extfn-sandbox';
import {
  type DriverError,
  encodeFrame,
  type Frame,
  FrameError,
  type FrameHeader,
  FrameReader,
  isReadyFrame,
  PROTOCOL_VERSION,
} from './frames.js';

/**
 * `closed`: the runner was closed (or the worker stopped) while the request ran;
 * `startup`: the interpreter or the sandbox could not start.
 */
export type FailureReason =
  | 'timeout'
  | 'exited'
  | 'malformed'
  | 'output'
  | 'aborted'
  | 'startup'
  | 'closed';

/** Why a worker could not answer. The runner turns it into an ExtFnError for the function. */
export class WorkerFailure extends Error {
  constructor(
    readonly reason: FailureReason,
    message: string,
    readonly stderr?: string,
    readonly limit?: ResourceLimit,
    readonly abortReason?: unknown,
  ) {
    super(message);
    this.name = 'WorkerFailure';
  }
}

/** `load` failed in the driver (a syntax error): deterministic, so the runner remembers it. */
export class LoadFailure extends Error {
  constructor(readonly error: DriverError) {
    super(`${error.type}: ${error.message}`);
    this.name = 'LoadFailure';
  }
}

/** The bootstrap's stdin preamble: `N\n` then N bytes of driver source. */
export function driverPreamble(driverSource: string): Buffer {
  const source = Buffer.from(driverSource, 'utf8');
  return Buffer.concat([Buffer.from(`${source.length}\n`, 'ascii'), source]);
}

interface Waiting {
  id: number | undefined;
  resolve(frame: Frame): void;
  reject(error: WorkerFailure): void;
}

export interface RequestOptions {
  /** Wall-clock deadline for this request. */
  deadlineMs: number;
  signal?: AbortSignal | undefined;
  /** Most bytes the response may take (header + payload). */
  budget: number;
}

export class Worker {
  readonly key: string;
  readonly process: SandboxedProcess;
  /** Sum of request wall times: an upper bound on CPU used by a single-threaded body. */
  busyMs = 0;
  requests = 0;
  #reader = new FrameReader();
  #waiting: Waiting | undefined;
  #failure: WorkerFailure | undefined;
  #nextId = 1;
  #killing: Promise<void> | undefined;

  constructor(key: string, process: SandboxedProcess, driverSource: string) {
    this.key = key;
    this.process = process;
    process.stdin.on('error', () => {}); // EPIPE after the worker died: reported through `exited`
    process.stdout.on('data', (chunk: Buffer) => this.#onData(chunk));
    process.exited.then(
      (info) => {
        const how = info.signal
          ? `was killed by ${info.signal}`
          : `exited with code ${info.exitCode}`;
        const stderr = this.process.stderrTail();
        this.#fail(new WorkerFailure('exited', `the interpreter ${how}`, stderr, info.limit));
      },
      (error: unknown) => {
        const failure = new WorkerFailure(
          'startup',
          `the interpreter could not start: ${String(error)}`,
        );
        failure.cause = error; // e.g. the sandbox's own ExtFnError, passed on as is
        this.#fail(failure);
      },
    );
    process.stdin.write(driverPreamble(driverSource));
  }

  get alive(): boolean {
    return this.#failure === undefined;
  }

  get pid(): number | undefined {
    return this.process.pid;
  }

  /** Waits for the driver's `ready` frame. */
  async ready(timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const frame = await this.#await(
      undefined,
      { deadlineMs: timeoutMs, signal, budget: 64 * 1024 },
      'startup',
    );
    if (!isReadyFrame(frame.header)) {
      this.#fail(
        new WorkerFailure(
          'malformed',
          `the driver did not start protocol ${PROTOCOL_VERSION}: ${JSON.stringify(frame.header).slice(0, 200)}`,
        ),
      );
      throw this.#failure;
    }
  }

  /** Sends one request and waits for its response. */
  async request(
    header: FrameHeader,
    payload: Uint8Array | undefined,
    options: RequestOptions,
  ): Promise<Frame> {
    if (this.#failure) throw this.#failure;
    if (this.#waiting) throw new Error('a worker serves one request at a time');
    const id = this.#nextId++;
    const started = performance.now();
    const reply = this.#await(id, options, 'timeout');
    // Header and payload as two writes: no copy of a large payload into one buffer.
    if (payload) {
      this.process.stdin.write(encodeFrame({ ...header, id, bytes: payload.byteLength }));
      this.process.stdin.write(payload);
    } else {
      this.process.stdin.write(encodeFrame({ ...header, id }));
    }
    try {
      const frame = await reply;
      frame.elapsedMs = performance.now() - started;
      return frame;
    } finally {
      this.busyMs += performance.now() - started;
      this.requests++;
    }
  }

  /**
   * Ends a worker that is not answering a request the polite way: sends
   * `exit`, lets the interpreter end on its own for up to `graceMs` (R
   * removes its temp directory then), and kills whatever is left of the tree.
   * A busy worker is killed at once. Idempotent, and never takes much longer than `graceMs`.
   */
  stop(graceMs: number): Promise<void> {
    if (this.#killing) return this.#killing;
    if (this.#failure || this.#waiting) return this.kill();
    this.#fail(new WorkerFailure('closed', 'the runner is closed'));
    this.#killing = (async () => {
      this.process.stdin.write(encodeFrame({ op: 'exit' }));
      this.process.stdin.end();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.process.exited.catch(() => {}),
        new Promise((resolve) => {
          timer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(timer);
      await this.process.kill(); // grandchildren the body left behind, and a driver that did not exit
    })().catch(() => {});
    return this.#killing;
  }

  /** Kills the process tree (idempotent) and waits for it to be gone. */
  kill(): Promise<void> {
    this.#fail(new WorkerFailure('closed', 'the runner is closed'));
    this.#killing ??= this.process.kill().catch(() => {});
    return this.#killing;
  }

  #await(
    id: number | undefined,
    options: RequestOptions,
    onDeadline: 'timeout' | 'startup',
  ): Promise<Frame> {
    return new Promise<Frame>((resolve, reject) => {
      if (this.#failure) {
        reject(this.#failure);
        return;
      }
      const { signal } = options;
      const onAbort = () =>
        this.#fail(
          new WorkerFailure('aborted', 'aborted', undefined, undefined, signal?.reason),
          true,
        );
      const timer = setTimeout(() => {
        const what = onDeadline === 'startup' ? 'did not start' : 'did not answer';
        this.#fail(
          new WorkerFailure(
            onDeadline,
            `the interpreter ${what} within ${options.deadlineMs} ms`,
            undefined,
            'wall-clock',
          ),
          true,
        );
      }, options.deadlineMs);
      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#waiting = undefined;
      };
      this.#reader.budget = options.budget;
      this.#waiting = {
        id,
        resolve: (frame) => {
          settle();
          resolve(frame);
        },
        reject: (error) => {
          settle();
          reject(error);
        },
      };
      if (signal) {
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  #onData(chunk: Buffer): void {
    if (this.#failure) return;
    let frames: Frame[];
    try {
      frames = this.#reader.push(chunk);
    } catch (error) {
      const budget = error instanceof FrameError && error.budget;
      this.#fail(
        new WorkerFailure(
          budget ? 'output' : 'malformed',
          budget ? 'output too large' : (error as Error).message,
          this.process.stderrTail(),
          budget ? 'output' : undefined,
        ),
        true,
      );
      return;
    }
    for (const frame of frames) {
      const waiting = this.#waiting;
      if (!waiting || (waiting.id !== undefined && frame.header.id !== waiting.id)) {
        this.#fail(
          new WorkerFailure(
            'malformed',
            `unexpected frame from the driver: ${JSON.stringify(frame.header).slice(0, 200)}`,
          ),
          true,
        );
        return;
      }
      waiting.resolve(frame);
    }
  }

  /** Marks the worker dead (first reason wins), fails the waiting request, and optionally kills. */
  #fail(failure: WorkerFailure, kill = false): void {
    if (!this.#failure) this.#failure = failure;
    const waiting = this.#waiting;
    if (waiting) waiting.reject(this.#failure);
    if (kill) void this.kill();
  }
}
