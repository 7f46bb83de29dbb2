/**
 * One warm worker: a sandboxed interpreter running the driver, serving one
 * function, one request at a time — a second may be queued behind it (a
 * batch lane's next chunk, see `request`). Anything unexpected — deadline passed,
 * exit, malformed frame, a response past its limits, too much output, abort
 * — kills the whole process tree and fails the request; a dead worker is
 * never reused. After a request the owner asks `leftWork()` whether the
 * body left threads or processes running, and retires the worker if so
 * (dispatch: after every request, or every 25 ms while a batch keeps it).
 * Only a request in flight keeps the host's event loop alive: a host that
 * forgets `close()` still exits once its workers idle.
 */
import { type ProcessTree, ProcessTreeReader, type SandboxedTree } from '@improv/extfn-sandbox';
import { WorkerFailure } from './failures.js';
import {
  driverWorkMs,
  encodeFrame,
  type Frame,
  FrameError,
  type FrameHeader,
  FrameReader,
  frameLine,
  isReadyFrame,
  type Payload,
  PROTOCOL_VERSION,
  payloadBytes,
  preview,
} from './frames.js';
import type { ResponseLimits } from './response-limits.js';
import type { SharedFile, SharedRegion } from './shared-file.js';

/** What a Node Writable adds for batching writes into one writev. */
interface Corkable {
  cork(): void;
  uncork(): void;
}

/** The last preamble made: every start of a runner sends the same driver (~180 KB for Python). */
let lastPreamble: { source: string; bytes: Buffer } | undefined;

/**
 * The bootstrap's stdin preamble: `N\n` then N bytes of driver source.
 * Encoded once per driver, not per start; streams never write into a Buffer
 * they are given, so one may be written to many workers.
 */
export function driverPreamble(driverSource: string): Buffer {
  if (lastPreamble?.source === driverSource) return lastPreamble.bytes;
  const source = Buffer.from(driverSource, 'utf8');
  const bytes = Buffer.concat([Buffer.from(`${source.length}\n`, 'ascii'), source]);
  lastPreamble = { source: driverSource, bytes };
  return bytes;
}

interface Waiting {
  id: number | undefined;
  /** Whether it runs the function's body on rows (a call, not `ready` or `load`). */
  body: boolean;
  resolve(frame: Frame): void;
  reject(error: WorkerFailure): void;
  /** When (performance.now()) it must be answered by. */
  deadlineAt: number;
  /** Fails it for missing its deadline. */
  late(): void;
  /** Whether its tree wrote more than allowed so far; undefined when unbounded. */
  overOutput: (() => boolean) | undefined;
}

/** A request written to the worker while another runs: it starts when that one is answered. */
interface Queued {
  start(): void;
  reject(error: WorkerFailure): void;
}

export interface RequestOptions {
  /** Wall-clock deadline for this request. */
  deadlineMs: number;
  signal?: AbortSignal | undefined;
  /** Most bytes of the response's header line and payload. */
  limits: ResponseLimits;
  /**
   * Most bytes the tree may write to stderr while the request runs: the
   * body's print(), os.write to fd 1 or 2, a child's output — however it writes.
   */
  outputBytes: number;
  /** Where a response payload of exactly this size goes, instead of a buffer of its own. */
  payloadInto?: Uint8Array | undefined;
}

/**
 * Added to "the interpreter exited with code N" when it ended while a call
 * ran: what the function's author reads on the row, naming the cause and the fix.
 */
export const BODY_ENDED =
  " while running this row: the function's body ended its interpreter (an exit, an abort, " +
  "a signal to its own process, the driver's connections closed) or crashed it; a body must " +
  'return its result, or raise an error to fail its row';

/** How often stderr is looked at while a request runs (it is drained to a bounded tail meanwhile). */
const OUTPUT_POLL_MS = 50;

/** The requests that run the function's body (docs/protocol.md, "Requests"). */
const BODY_OPS: ReadonlySet<string> = new Set(['call', 'callf64', 'callcols']);

/** CPU an idle tree may use (clock ticks are 10 ms) before it counts as working. */
const IDLE_CPU_SECONDS = 0.05;
/**
 * A worker idle for less than this since its last request, whose tree was
 * read within CHECK_WINDOW_MS, is not read before its next request
 * (`idleWork`): calls one after another then read the tree once per
 * window, not once each. Once it has idled this long it is read (by the
 * pool's look soon after it was parked, `checkPending`, or before its next
 * request), so work its last calls left is found within milliseconds.
 */
const IDLE_RECHECK_MS = 1;

/**
 * Requests that follow one another within this time of the tree's last
 * read are not followed by a read of their own (dispatch.ts): a read costs
 * 20–30 µs of host CPU, a fifth of a warm call. A thread or process a body
 * leaves is found at the end of the window, or once the worker idles; until
 * then it could act on the requests of that window, as it could on the
 * rest of its own chunk.
 */
export const CHECK_WINDOW_MS = 25;

/** The process-tree facts a clean worker keeps between requests. */
interface Baseline {
  processes: number;
  threads: number;
}

export class WarmWorker {
  /** The function it serves (a spare's is set when a start takes it: spare-workers.ts). */
  key: string;
  readonly process: SandboxedTree;
  /** Sum of request wall times: an upper bound on CPU used by a single-threaded body. */
  busyMs = 0;
  requests = 0;
  #reader = new FrameReader();
  #waiting: Waiting | undefined;
  #queued: Queued | undefined;
  /** Where the request running now (not queued) has its payload and result in the shared file, if it went that way. */
  #running: SharedRegion | undefined;
  #failure: WorkerFailure | undefined;
  #nextId = 1;
  #killing: Promise<void> | undefined;
  #baseline: Baseline | undefined;
  /** Keeps the tree's /proc files open while the process lives; 'closed' once it has exited. */
  #treeReader: ProcessTreeReader | 'closed' | undefined;
  /** The tree's CPU seconds at the end of its last clean request. */
  #cpuAtRest: number | undefined;
  /** When `leftWork` last ran (performance.now()). */
  #checkedAt = 0;
  /** When its last request ended (0: none yet). */
  #endedAt = 0;
  /** The file shared with the driver for `callf64` payloads, kept only when its `ready` frame takes it. */
  #shared: SharedFile | undefined;
  /**
   * The timer that looks at the request waiting now: its deadline, and its
   * output every OUTPUT_POLL_MS. Armed by a request when it is not armed
   * already for that request's time, and left armed when a request ends
   * (calls one after another would otherwise arm and clear two timers each,
   * a few microseconds of a warm call); when it fires with nothing waiting, it stops.
   */
  #watch: NodeJS.Timeout | undefined;
  /** When #watch fires (performance.now()). */
  #watchAt = Number.POSITIVE_INFINITY;
  /** Where the last request ended on stderr, and how much more it was allowed to write (see `#lateAllowance`). */
  #lastOutput: { at: number; left: number } | undefined;

  constructor(
    key: string,
    process: SandboxedTree,
    /** Sent first; undefined for a zygote's worker, whose driver is loaded already. */
    driverSource: string | undefined,
    shared?: SharedFile | undefined,
  ) {
    this.key = key;
    this.process = process;
    this.#shared = shared;
    process.stdin.on('error', () => {}); // EPIPE after the worker died: reported through `exited`
    process.stdout.on('data', (chunk: Buffer) => this.#onData(chunk));
    process.exited
      .then(
        (info) => {
          const how = info.signal
            ? `was killed by ${info.signal}`
            : `exited with code ${info.exitCode}`;
          // While the body ran, and no limit explains it: the body did it (or crashed R or
          // CPython in native code). The row it fails is its own: a batch runs the rows of a
          // failed request again one per request.
          const during = this.#waiting?.body && !info.limit ? BODY_ENDED : '';
          const stderr = this.process.stderrTail();
          this.#fail(
            new WorkerFailure('exited', `the interpreter ${how}${during}`, stderr, info.limit),
          );
        },
        (error: unknown) => {
          const failure = new WorkerFailure(
            'startup',
            `the interpreter could not start: ${String(error)}`,
          );
          failure.cause = error; // e.g. the sandbox's own ExtFnError, passed on as is
          this.#fail(failure);
        },
      )
      .finally(() => {
        clearTimeout(this.#watch);
        if (this.#treeReader instanceof ProcessTreeReader) this.#treeReader.close();
        this.#treeReader = 'closed';
        this.#shared?.close();
        this.#shared = undefined;
      });
    if (driverSource !== undefined) process.stdin.write(driverPreamble(driverSource));
  }

  get alive(): boolean {
    return this.#failure === undefined;
  }

  get pid(): number | undefined {
    return this.process.pid;
  }

  /**
   * Waits for the driver's `ready` frame, then records the tree's shape (its
   * processes and threads: R and Julia start threads of their own) as the
   * clean state later requests are compared with.
   */
  async ready(timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const frame = await this.#await(
      undefined,
      {
        deadlineMs: timeoutMs,
        signal,
        limits: { line: 64 * 1024, payload: 0 },
        outputBytes: Number.POSITIVE_INFINITY, // start-up chatter goes to the stderr tail
      },
      'startup',
    );
    if (!isReadyFrame(frame.header)) {
      this.#fail(
        new WorkerFailure(
          'malformed',
          `the driver did not start protocol ${PROTOCOL_VERSION}: ${preview(frame.header)}`,
        ),
      );
      throw this.#failure;
    }
    const tree = this.#tree();
    if (tree) this.#baseline = { processes: tree.processes.length, threads: tree.threads };
    // The driver takes callf64 payloads through the shared file (it mapped or opened it), or not at all.
    const ops = frame.header.shared;
    if (!(Array.isArray(ops) && ops.includes('callf64'))) {
      this.#shared?.close();
      this.#shared = undefined;
    }
  }

  /**
   * What the body left running since `ready`, or undefined when the tree is
   * as it was: more threads (daemon threads) or more processes (children,
   * setsid() ones included — inside the sandbox's pid namespace an orphan
   * is re-parented to the interpreter, still in the tree; zombies count).
   * Undefined too where /proc cannot be read (the check is then off).
   */
  leftWork(): string | undefined {
    return this.#checkTree()?.left;
  }

  /** Reads the tree once: what the body left running (see leftWork), and the tree read. */
  #checkTree(): { left: string | undefined; tree: ProcessTree } | undefined {
    this.#checkedAt = performance.now();
    const baseline = this.#baseline;
    if (!baseline || !this.alive) return undefined;
    const tree = this.#tree();
    if (!tree) return undefined; // gone: `exited` reports it
    if (tree.processes.length > baseline.processes) {
      return {
        left: `${tree.processes.length - baseline.processes} process(es) left running after the call`,
        tree,
      };
    }
    if (tree.threads > baseline.threads) {
      return {
        left: `${tree.threads - baseline.threads} thread(s) left running after the call`,
        tree,
      };
    }
    this.#cpuAtRest = tree.cpuSeconds;
    return { left: undefined, tree };
  }

  /** Milliseconds since `leftWork` last looked at the tree. */
  sinceTreeCheckMs(): number {
    return performance.now() - this.#checkedAt;
  }

  /** Whether a request has ended since its tree was last read (see CHECK_WINDOW_MS); never while the check is off. */
  checkPending(): boolean {
    return this.#cpuAtRest !== undefined && this.#endedAt > this.#checkedAt;
  }

  /**
   * For an idle worker: whether it works although no request is in flight —
   * its tree changed shape, or used CPU since its last clean check (a timer
   * or signal handler the body left in the interpreter needs neither a
   * thread nor a process). One read of the tree answers both, and none is
   * made while the worker is between calls that follow one another (idle
   * under IDLE_RECHECK_MS, read within CHECK_WINDOW_MS): each read is two
   * system calls a process, several microseconds each on a VM. CPU is
   * judged only over a stretch with no request in it: the CPU of requests
   * ended since the last read is the body's work, not idle work.
   */
  idleWork(): string | undefined {
    const atRest = this.#cpuAtRest;
    if (atRest === undefined || this.#waiting) return undefined;
    const now = performance.now();
    const sinceRead = now - this.#checkedAt;
    const betweenCalls = now - this.#endedAt < IDLE_RECHECK_MS && sinceRead < CHECK_WINDOW_MS;
    if (betweenCalls || sinceRead < IDLE_RECHECK_MS) return undefined;
    const pending = this.checkPending();
    const checked = this.#checkTree();
    if (!checked || checked.left !== undefined) return checked?.left;
    const used = checked.tree.cpuSeconds - atRest;
    return !pending && used > IDLE_CPU_SECONDS
      ? `used ${used.toFixed(2)} CPU seconds while idle`
      : undefined;
  }

  /** Requests sent and not answered yet (0, 1, or 2 with one queued). */
  inFlight(): number {
    return (this.#waiting ? 1 : 0) + (this.#queued ? 1 : 0);
  }

  /**
   * Whether it takes a request queued behind the one it runs now: exactly
   * one runs. (Through the shared file too: the one behind gets a region of
   * its own, see SharedFile.reserve.)
   */
  takesQueued(): boolean {
    return this.alive && this.inFlight() === 1;
  }

  /**
   * Sends one request and waits for its response. One more may be sent
   * while a request runs: it is written at once (the driver reads it from
   * the pipe when it has answered the one before), and its deadline, output
   * budget and elapsed time start when that answer arrives. Through the
   * shared file it takes a region past the running one's. If the request
   * ahead of it fails, it fails as `behind` (or `aborted` with it): it never ran.
   */
  async request(
    header: FrameHeader,
    payload: Payload | undefined,
    options: RequestOptions,
  ): Promise<Frame> {
    if (this.#failure) throw this.#failure;
    if (this.#queued) throw new Error('a worker takes at most one request queued behind another');
    const queued = this.#waiting !== undefined;
    const id = this.#nextId++;
    const sent = performance.now();
    const timing = { started: sent };
    // The payload goes into the shared file, the header says where (the pipes when it
    // cannot); one queued behind stays clear of the running one's region.
    let region = payload
      ? this.#reserve(header, payload, queued ? this.#running : undefined)
      : undefined;
    if (region && !this.#shared!.writePayload(payload!, region.at)) region = undefined;
    if (!queued) this.#running = region;
    const body = BODY_OPS.has(header.op as string);
    const reply = queued
      ? this.#queue(id, options, timing, region, body)
      : this.#await(id, options, 'timeout', body);
    // Header and payload parts as separate writes (no copy of a large payload into
    // one buffer), corked so they leave as one writev: a syscall costs 15–30 µs here.
    if (region) {
      const { out, room, at, bytes } = region;
      this.process.stdin.write(frameLine({ ...header, id, shm: { out, room, at, bytes } }));
    } else if (payload) {
      // a Node stream (net.Socket) corks; the public type does not promise it
      const stdin = this.process.stdin as NodeJS.WritableStream & Partial<Corkable>;
      stdin.cork?.();
      stdin.write(frameLine({ ...header, id, bytes: payloadBytes(payload) }));
      for (const part of payload instanceof Uint8Array ? [payload] : payload) {
        if (part.byteLength > 0) stdin.write(part);
      }
      stdin.uncork?.();
    } else {
      this.process.stdin.write(frameLine({ ...header, id }));
    }
    try {
      const frame = await reply;
      if (region || frame.header.shm !== undefined) this.#readShared(frame, region, options);
      const now = performance.now();
      frame.elapsedMs = now - timing.started;
      // Bounded by the time since it was written, not `elapsedMs`: a request queued
      // behind another starts in the worker when that one ends, which can be well
      // before the host reads that answer and starts this one's clock.
      const work = driverWorkMs(frame.header, now - sent);
      if (work !== undefined) frame.workMs = work;
      return frame;
    } finally {
      this.#endedAt = performance.now();
      this.busyMs += Math.max(0, this.#endedAt - timing.started);
      this.requests++;
    }
  }

  /**
   * A request written behind the one in flight: waits until that one is
   * answered (then `#await`s its own answer, `timing.started` reset), or
   * fails with it.
   */
  #queue(
    id: number,
    options: RequestOptions,
    timing: { started: number },
    region: SharedRegion | undefined,
    body: boolean,
  ): Promise<Frame> {
    return new Promise<Frame>((resolve, reject) => {
      const { signal } = options;
      const onAbort = () =>
        this.#fail(
          new WorkerFailure('aborted', 'aborted', undefined, undefined, signal?.reason),
          true,
        );
      this.#queued = {
        start: () => {
          signal?.removeEventListener('abort', onAbort);
          this.#running = region;
          timing.started = performance.now();
          this.#await(id, options, 'timeout', body).then(resolve, reject);
        },
        reject: (error) => {
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        },
      };
      if (signal) {
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  /**
   * Room in the shared file for this request's payload and result, or
   * undefined to use the pipes (no shared file, an op the driver does not
   * take that way, or more than the file may hold).
   */
  #reserve(
    header: FrameHeader,
    payload: Payload,
    avoid: SharedRegion | undefined,
  ): SharedRegion | undefined {
    if (!this.#shared || header.op !== 'callf64') return undefined;
    const rows = header.rows;
    if (typeof rows !== 'number') return undefined;
    return this.#shared.reserve(payloadBytes(payload), 8 * rows, avoid); // callf64: one f64 a row
  }

  /**
   * A response to a shared request: the file must still have the host's size,
   * and a result in it (`"shm": n`, n bytes at the region's `out`) must lie
   * inside the room reserved and the payload limit. It is read into the
   * caller's column when the size matches (`payloadInto`). Anything else
   * makes the worker malformed: it is killed, and the request fails.
   */
  #readShared(frame: Frame, region: SharedRegion | undefined, options: RequestOptions): void {
    const shared = this.#shared;
    const bytes = frame.header.shm;
    let why: string | undefined;
    if (!region || !shared) why = 'a shared-file result for a request sent on the pipe';
    else if (!shared.intact()) why = 'the shared file was resized';
    else if (bytes !== undefined) {
      if (frame.payload) why = 'a result both in the shared file and on the pipe';
      else if (
        typeof bytes !== 'number' ||
        !Number.isSafeInteger(bytes) ||
        bytes < 0 ||
        bytes > region.room
      )
        why = `a shared-file result of ${JSON.stringify(bytes)} bytes, ${region.room} reserved`;
      else if (bytes > options.limits.payload) why = 'output too large';
      else {
        const payload = shared.read(region.out, bytes, options.payloadInto);
        if (!payload) why = 'the shared file was cut short';
        else frame.payload = payload;
      }
    }
    // Its own column only: the request queued behind may have set its own since.
    if (this.#reader.payloadTarget === options.payloadInto) this.#reader.payloadTarget = undefined;
    if (why === undefined) return;
    this.#fail(new WorkerFailure('malformed', why, this.process.stderrTail()), true);
    throw this.#failure;
  }

  /**
   * Ends a worker that is not answering a request the polite way: sends
   * `exit`, lets the interpreter end on its own for up to `graceMs` (R
   * removes its temp directory then), and kills whatever is left of the tree.
   * A busy or failed worker is killed at once. Idempotent, and never takes much longer than `graceMs`.
   */
  stop(graceMs: number): Promise<void> {
    if (this.#killing) return this.#killing;
    if (this.#failure || this.#waiting) return this.kill();
    this.#fail(new WorkerFailure('closed', 'the runner is closed'));
    this.process.ref(); // whoever awaits the stop (close()) must see it end
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
    if (!this.#killing) this.process.ref(); // whoever awaits the kill must see it end
    this.#killing ??= this.process.kill().catch(() => {});
    return this.#killing;
  }

  /**
   * Retires a worker for what an answered request did (left work running,
   * answered out of shape): marked failed and killed, tree and all (no
   * graceful exit). A request running now (one that was queued behind) fails
   * as `behind`: not its fault.
   */
  retire(why: string): Promise<void> {
    const reason = this.#waiting ? 'behind' : 'malformed';
    this.#fail(new WorkerFailure(reason, why));
    return this.kill();
  }

  #tree(): ProcessTree | undefined {
    if (this.process.pid === undefined || this.#treeReader === 'closed') return undefined;
    this.#treeReader ??= new ProcessTreeReader(this.process.pid);
    return this.#treeReader.read();
  }

  #await(
    id: number | undefined,
    options: RequestOptions,
    onDeadline: 'timeout' | 'startup',
    body = false,
  ): Promise<Frame> {
    return new Promise<Frame>((resolve, reject) => {
      if (this.#failure) {
        reject(this.#failure);
        return;
      }
      const { signal } = options;
      this.process.ref(); // a request in flight keeps the host alive; an idle worker does not
      const onAbort = () =>
        this.#fail(
          new WorkerFailure('aborted', 'aborted', undefined, undefined, signal?.reason),
          true,
        );
      const late = () => {
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
      };
      const stderrAtStart = this.process.stderrBytes;
      const allowed = options.outputBytes + this.#lateAllowance(stderrAtStart);
      const overOutput = () => this.process.stderrBytes - stderrAtStart > allowed;
      const settle = () => {
        const used = this.process.stderrBytes - stderrAtStart;
        this.#lastOutput = {
          at: this.process.stderrBytes,
          left: Number.isFinite(options.outputBytes) ? Math.max(0, options.outputBytes - used) : 0,
        };
        this.process.unref();
        signal?.removeEventListener('abort', onAbort);
        this.#waiting = undefined;
        // Its column is the caller's from now on: a frame that comes after its answer
        // (a body's forged answer went first, the driver's own follows) must not land
        // in it. The request queued behind sets its own.
        this.#reader.payloadTarget = undefined;
        // The request queued behind starts now: the driver reads it once it has answered.
        // (A failure fails it instead: see #fail.)
        const queued = this.#queued;
        if (queued && !this.#failure) {
          this.#queued = undefined;
          queued.start();
        }
      };
      this.#reader.lineLimit = options.limits.line;
      this.#reader.payloadLimit = options.limits.payload;
      this.#reader.payloadTarget = options.payloadInto;
      this.#waiting = {
        id,
        body,
        resolve: (frame) => {
          if (overOutput()) {
            this.#fail(this.#outputFailure(), true); // rejects through #waiting
            return;
          }
          settle();
          resolve(frame);
        },
        reject: (error) => {
          settle();
          reject(error);
        },
        deadlineAt: performance.now() + options.deadlineMs,
        late,
        overOutput: Number.isFinite(options.outputBytes) ? overOutput : undefined,
      };
      this.#armWatch(this.#waiting);
      if (signal) {
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  /** Makes #watch fire by `waiting`'s deadline, and within OUTPUT_POLL_MS when its output is bounded. */
  #armWatch(waiting: Waiting): void {
    const now = performance.now();
    const due = Math.min(waiting.deadlineAt, waiting.overOutput ? now + OUTPUT_POLL_MS : Infinity);
    if (this.#watch !== undefined && this.#watchAt <= due) return;
    clearTimeout(this.#watch);
    this.#watchAt = due;
    // Unreferenced: a request in flight holds the event loop through the process (see #await).
    this.#watch = setTimeout(() => this.#onWatch(), Math.max(0, due - now));
    this.#watch.unref();
  }

  #onWatch(): void {
    this.#watch = undefined;
    const waiting = this.#waiting;
    if (!waiting) return; // idle: armed again by the next request
    if (performance.now() >= waiting.deadlineAt) waiting.late();
    else if (waiting.overOutput?.()) this.#fail(this.#outputFailure(), true);
    else this.#armWatch(waiting);
  }

  /**
   * Output the request before may still have on its way when this one starts
   * at stderr byte `at`: stderr is a pipe of its own, so what a body wrote
   * just before its answer can arrive after it. Up to what that request was
   * still allowed to write (its own budget, not a carried one: a request
   * never gets more than twice its own), less what arrived in between.
   */
  #lateAllowance(at: number): number {
    const last = this.#lastOutput;
    this.#lastOutput = undefined;
    return last ? Math.max(0, last.left - (at - last.at)) : 0;
  }

  #outputFailure(): WorkerFailure {
    return new WorkerFailure('output', 'output too large', this.process.stderrTail(), 'output');
  }

  #onData(chunk: Buffer): void {
    if (this.#failure) return;
    this.#reader.add(chunk);
    try {
      this.#readFrames();
    } catch (error) {
      // Whatever the driver sent, reading it must not throw out of a stream
      // handler: that would end the host process, not just this worker.
      const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      this.#fail(
        new WorkerFailure('malformed', `unreadable answer from the driver (${why})`),
        true,
      );
    }
  }

  #readFrames(): void {
    // One frame at a time: answering one request starts the one queued behind it,
    // which sets the limits (and target) its own answer is read with.
    for (;;) {
      let frame: Frame | undefined;
      try {
        frame = this.#reader.next();
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
      if (!frame || this.#failure) return;
      const waiting = this.#waiting;
      if (!waiting || (waiting.id !== undefined && frame.header.id !== waiting.id)) {
        this.#fail(
          new WorkerFailure(
            'malformed',
            `unexpected frame from the driver: ${preview(frame.header)}`,
          ),
          true,
        );
        return;
      }
      waiting.resolve(frame);
    }
  }

  /**
   * Marks the worker dead (first reason wins), fails the waiting request and
   * the one queued behind it (as `behind`: it never ran; `aborted` passes
   * on), and optionally kills.
   */
  #fail(failure: WorkerFailure, kill = false): void {
    if (!this.#failure) this.#failure = failure;
    const first = this.#failure;
    const waiting = this.#waiting;
    if (waiting) waiting.reject(first);
    const queued = this.#queued;
    this.#queued = undefined;
    if (queued) {
      // Not `closed` either: a worker killed for a malformed answer is closed too; a
      // batch sends the request again, and a closed runner's pool then refuses it.
      queued.reject(
        first.reason === 'aborted'
          ? first
          : new WorkerFailure('behind', `the request ahead of it failed: ${first.message}`),
      );
    }
    if (kill) void this.kill();
  }
}
