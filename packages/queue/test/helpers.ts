/**
 * Test plumbing: a Redis of the test's own (redis-server on a free loopback
 * port, no persistence, so a restart loses every job — the worst case) or the
 * one .ci/run gives in IMPROV_EXTFN_TEST_REDIS; worker hosts as real
 * processes (test/fixtures/worker.mjs); interpreters the sandbox can run.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExternalFn } from '@improv/extfn-core';
import { waitFor as waitForCheck } from '@improv/extfn-core/testing';
import { probeSandbox, readProcessTree } from '@improv/extfn-sandbox';
import { execa, type ResultPromise } from 'execa';

/** `x + x` in WebAssembly: a function any worker host runs, no interpreter needed. */
export const DOUBLE: ExternalFn = {
  name: 'double',
  language: 'wasm',
  body: 'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add))',
  argTypes: ['number'],
  returnType: 'number',
  pure: false,
};

export const REDIS_SERVER = '/usr/bin/redis-server';
export const PYTHON = '/usr/bin/python3';
export const hasRedisServer = existsSync(REDIS_SERVER);
export const sharedRedis = process.env.IMPROV_EXTFN_TEST_REDIS;
export const hasRedis = hasRedisServer || sharedRedis !== undefined;
export const noRedis =
  'skipped: no redis-server at /usr/bin/redis-server and IMPROV_EXTFN_TEST_REDIS unset';
export const noRedisServer =
  'skipped: needs its own redis-server (/usr/bin/redis-server) to restart';

const sandbox = await probeSandbox({ policy: 'restricted' });
export const pythonOk = existsSync(PYTHON) && sandbox.ok;
export const rOk = sandbox.ok && ['/usr/bin/Rscript', '/usr/local/bin/Rscript'].some(existsSync);
export const noSandbox = `Restricted sandbox or interpreter unavailable (${sandbox.problem ?? sandbox.summary})`;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A redis-server owned by the test: no persistence, restartable on the same port. */
export class TestRedis {
  readonly port: number;
  readonly dir: string;
  /** More redis-server arguments (e.g. `--rename-command CLIENT ""`, as managed Redis services do). */
  readonly args: readonly string[];
  #process: ResultPromise | undefined;

  private constructor(port: number, args: readonly string[]) {
    this.port = port;
    this.args = args;
    this.dir = mkdtempSync(join(tmpdir(), 'extfn-queue-redis-'));
  }

  static async start(args: readonly string[] = []): Promise<TestRedis> {
    const redis = new TestRedis(await freePort(), args);
    await redis.up();
    return redis;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async up(): Promise<void> {
    const child = execa(
      REDIS_SERVER,
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.dir,
        ...this.args,
      ],
      { reject: false, stdout: 'pipe', stderr: 'pipe' },
    );
    this.#process = child;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error('redis-server did not start within 10 s')),
        10_000,
      );
      child.stdout!.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('Ready to accept connections')) {
          clearTimeout(timer);
          resolve();
        }
      });
      void child.then(() => reject(new Error('redis-server exited')));
    });
  }

  /** Stops the server without closing its connections (SIGSTOP): a Redis that hangs; `resume` ends it. */
  hang(): void {
    this.#process?.kill('SIGSTOP');
  }

  resume(): void {
    this.#process?.kill('SIGCONT');
  }

  /** Kills the server (SIGKILL: nothing saved) and waits until it is gone. */
  async down(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (!child) return;
    child.kill('SIGKILL');
    await child;
  }

  async stop(): Promise<void> {
    await this.down();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A Redis URL for a test: the shared one when given, else a fresh server of the test's own. */
export async function redisForTest(): Promise<{ url: string; stop: () => Promise<void> }> {
  if (sharedRedis) return { url: sharedRedis, stop: async () => {} };
  const redis = await TestRedis.start();
  return { url: redis.url, stop: () => redis.stop() };
}

export interface WorkerEvent {
  event: 'booted' | 'ready' | 'chunk' | 'warm' | 'error';
  pid: number;
  phase?: string;
  jobId?: string;
  rows?: number;
  reason?: string;
  /** warm: what the host answered a warm-up request, for which function. */
  outcome?: string;
  name?: string;
}

/** A worker host process (test/fixtures/worker.mjs); its JSON events are collected. */
export class WorkerProcess {
  readonly events: WorkerEvent[] = [];
  readonly child: ReturnType<typeof spawn>;
  /** With QUEUE_HOLD=1: booted, waiting for `release()` to connect. */
  readonly booted: Promise<void>;
  readonly ready: Promise<void>;
  readonly exited: Promise<number | null>;
  /** Settles once the process has exited and every line it printed has been read ('close'). */
  readonly outputRead: Promise<void>;
  stderr = '';

  constructor(env: Record<string, string>) {
    this.child = spawn(process.execPath, [join(import.meta.dirname, 'fixtures', 'worker.mjs')], {
      cwd: join(import.meta.dirname, '..'),
      env: { ...process.env, IMPROV_EXTFN_PYTHON: PYTHON, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let buffer = '';
    let onBooted: () => void;
    let onBootFail: (e: Error) => void;
    this.booted = new Promise((resolve, reject) => {
      onBooted = resolve;
      onBootFail = reject;
    });
    let onReady: () => void;
    let onFail: (e: Error) => void;
    this.ready = new Promise((resolve, reject) => {
      onReady = resolve;
      onFail = reject;
    });
    this.child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let newline = buffer.indexOf('\n');
      while (newline >= 0) {
        const event = JSON.parse(buffer.slice(0, newline)) as WorkerEvent;
        buffer = buffer.slice(newline + 1);
        this.events.push(event);
        if (event.event === 'booted') onBooted();
        if (event.event === 'ready') onReady();
        newline = buffer.indexOf('\n');
      }
    });
    this.child.stderr!.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-4000);
    });
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
    this.outputRead = new Promise((resolve) => this.child.on('close', () => resolve()));
    void this.exited.then(() => {
      onBootFail(new Error(`worker exited before it booted: ${this.stderr}`));
      onFail(new Error(`worker exited before it was ready: ${this.stderr}`));
    });
    this.booted.catch(() => {});
    this.ready.catch(() => {});
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Lets a worker started with QUEUE_HOLD=1, once booted, connect and serve. */
  release(): void {
    this.child.kill('SIGUSR2');
  }

  chunks(phase: string): WorkerEvent[] {
    return this.events.filter((e) => e.event === 'chunk' && e.phase === phase);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
    await this.exited;
    clearTimeout(timer);
  }
}

/** Starts worker processes on a fresh queue name and waits until each is ready. */
export async function startWorkers(
  count: number,
  env: Record<string, string>,
): Promise<WorkerProcess[]> {
  const workers = Array.from({ length: count }, () => new WorkerProcess(env));
  await Promise.all(workers.map((w) => w.ready));
  return workers;
}

/** The kit's `waitFor`, with the longer default a queue round trip needs. */
export const waitFor = (check: () => boolean, ms = 20_000) => waitForCheck(check, ms);

let queueCounter = 0;
/** A queue name no other test uses (tests may share one Redis). */
export function freshQueueName(): string {
  return `t${process.pid}x${Date.now().toString(36)}x${++queueCounter}`;
}

/** The names (comm) of the processes below `root`, as the host sees them. */
export function descendantNames(root: number): string[] {
  const tree = readProcessTree(root)?.processes.slice(1) ?? [];
  return tree.map(({ pid }) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      return '?'; // gone meanwhile
    }
  });
}
