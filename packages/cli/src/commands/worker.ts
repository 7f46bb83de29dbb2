/**
 * `improv-extfn worker`: a worker host for refreshes spread through Redis.
 * Parses the flags, loads this host's runners (under this host's sandbox
 * policy) and hands them to `startQueueWorker` from @improv/extfn-queue,
 * which does the work; runs until interrupted.
 */
import { ExtFnError, type LanguageRunner } from '@improv/extfn-core';
import { CliError, usage } from '../cli-error.js';
import { EXIT_CODES_HELP, ExitCode } from '../exit-codes.js';
import { cliWording } from '../hints.js';
import { type CliIo, interruptedBy, interruptedExitCode } from '../io.js';
import { checkLibrariesExist, OPTION, parseLibraries } from '../libraries-flag.js';
import { parseCommandLine, parseTimeout } from '../options.js';
import {
  defaultImport,
  loadExternalRunner,
  loadRunner,
  messageOf,
  RUNNER_PACKAGES,
  type RunnerLoad,
  type RunnerSettings,
  runnerPackageFor,
} from '../runners.js';

export const WORKER_HELP = `Usage: improv-extfn worker [--redis URL] [--queue NAME] [--runner LANG|PKG ...] [--concurrency N]

Takes chunks of refreshes from Redis (BullMQ) and evaluates them with this
host's own runners, under this host's sandbox policy. Engines send work with
queue() from @improv/extfn-queue. Runs until interrupted (Ctrl-C, SIGTERM):
running chunks get up to 10 s to finish, then are cancelled and handed back to
the queue; a second Ctrl-C exits at once. A Redis that cannot be reached at
start-up ends the command after --connect-timeout (exit 3); once serving, the
worker reconnects on its own and says so on stderr (once, then every minute).

Options:
      --redis URL        redis://[user:password@]host:port[/db] or rediss:// (default
                         IMPROV_EXTFN_REDIS_URL; a password may also come from
                         IMPROV_EXTFN_REDIS_PASSWORD)
      --queue NAME       the queue name the engines use (default improv-extfn)
      --runner LANG|PKG  serve this language (python, r, julia, pure, wasm) or load this
                         third-party runner package (repeatable; default: every language
                         this host can run)
      --libraries WHAT   what Python and R bodies may import besides the standard library:
                         system (the interpreter's own packages; R's default), none,
                         venv:PATH (Python's; R keeps its site libraries) or DIR[:DIR...]
      --concurrency N    chunks evaluated at once per language (default: the host's cores)
      --connect-timeout TIME
                         how long to wait for Redis at start-up (default 30s)
      --json             report a failure to start as JSON
  -h, --help             show this help

Jobs name a function by digest and carry its arguments; they cannot choose a
sandbox policy, a file or a command. The policy comes from this host's
environment (IMPROV_EXTFN_TRUSTED, IMPROV_EXTFN_ALLOW_UNSANDBOXED), never from a job.

Example:
  redis-server --port 6379 &
  IMPROV_EXTFN_REDIS_URL=redis://127.0.0.1:6379 improv-extfn worker --runner python --runner wasm

${EXIT_CODES_HELP}
`;

/** The part of @improv/extfn-queue this command uses, typed here so the package stays optional. */
interface QueueModule {
  /** Throws (an ExtFnError with a `fix`) on a URL that is not one. */
  parseRedisUrl?(url: string): { host?: string; port?: number; db?: number };
  startQueueWorker(options: {
    connection?: string;
    queueName?: string;
    runners: readonly LanguageRunner[];
    concurrency?: number;
    env?: NodeJS.ProcessEnv;
    connectTimeoutMs?: number;
    signal?: AbortSignal;
    onChunk?: (event: { phase: string; jobId: string; language: string; reason?: string }) => void;
    onWarmUp?: (event: { digest: string; name?: string; outcome: string; reason?: string }) => void;
    onError?: (error: Error) => void;
  }): Promise<{
    languages: readonly string[];
    queueName: string;
    redis: string;
    concurrency: number;
    close(graceMs?: number): Promise<void>;
  }>;
}

const QUEUE_PACKAGE = '@improv/extfn-queue';

async function loadQueue(io: CliIo): Promise<QueueModule> {
  try {
    const module = (await (io.importPackage ?? defaultImport)(
      QUEUE_PACKAGE,
    )) as Partial<QueueModule>;
    if (typeof module.startQueueWorker !== 'function')
      throw new Error('it exports no startQueueWorker()');
    return module as QueueModule;
  } catch (error) {
    throw new CliError(
      'LanguageUnavailable',
      `worker: ${QUEUE_PACKAGE} cannot be loaded: ${messageOf(error)}`,
      `install it: npm install ${QUEUE_PACKAGE}`,
      ExitCode.Unavailable,
    );
  }
}

/** A runner's probe; one that throws is unavailable for the reason it gives. */
async function probeOf(
  runner: LanguageRunner,
): Promise<{ available: boolean; detail?: string; fix?: string }> {
  return runner.probe().catch((error: unknown) => ({ available: false, detail: messageOf(error) }));
}

/**
 * The runners asked for by name; each must load and probe available here: a
 * worker that serves a language it cannot run would fail every chunk of it.
 */
async function namedRunners(
  names: readonly string[],
  io: CliIo,
  settings: RunnerSettings,
): Promise<LanguageRunner[]> {
  const runners: LanguageRunner[] = [];
  for (const name of new Set(
    names
      .flatMap((n) => n.split(','))
      .map((n) => n.trim())
      .filter(Boolean),
  )) {
    const spec = runnerPackageFor(name);
    const load: RunnerLoad = spec
      ? await loadRunner(spec, io, settings)
      : await loadExternalRunner(name, io);
    if (!load.ok) {
      await Promise.allSettled(runners.map((r) => r.close?.()));
      throw new CliError(
        'LanguageUnavailable',
        `worker: runner ${name}: ${load.problem}`,
        load.fix,
        ExitCode.Unavailable,
      );
    }
    const probe = await probeOf(load.runner);
    if (!probe.available) {
      await Promise.allSettled([...runners, load.runner].map((r) => r.close?.()));
      // Some probes end their detail with their fix: said once, on the fix line.
      let reason = probe.detail ?? 'its probe says it is unavailable';
      if (probe.fix && reason.endsWith(`; ${probe.fix}`)) {
        reason = reason.slice(0, -probe.fix.length - 2);
      }
      throw new CliError(
        'LanguageUnavailable',
        `worker: runner ${name} cannot run here: ${cliWording(reason)}`,
        probe.fix
          ? cliWording(probe.fix)
          : 'run improv-extfn doctor to see what is missing, or serve other languages with --runner',
        ExitCode.Unavailable,
      );
    }
    runners.push(load.runner);
  }
  return runners;
}

/**
 * Every one of our runners that loads and probes available here. One that
 * --libraries was given to and that then does not probe available stops the
 * command: the setting was for it, so serving without it would surprise.
 */
async function availableRunners(io: CliIo, settings: RunnerSettings): Promise<LanguageRunner[]> {
  const runners: LanguageRunner[] = [];
  for (const spec of RUNNER_PACKAGES) {
    const load = await loadRunner(spec, io, settings);
    if (!load.ok) continue;
    const probe = await probeOf(load.runner);
    if (probe.available) {
      runners.push(load.runner);
      continue;
    }
    await load.runner.close?.();
    if (settings.libraries && OPTION[spec.language] && probe.detail) {
      await Promise.allSettled(runners.map((r) => r.close?.()));
      throw new CliError(
        'LanguageUnavailable',
        `worker: ${spec.language} with --libraries: ${cliWording(probe.detail)}`,
        probe.fix ? cliWording(probe.fix) : 'see improv-extfn worker --help for --libraries',
        ExitCode.Unavailable,
      );
    }
  }
  return runners;
}

function parseConcurrency(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 1_024) {
    throw usage(
      `worker: --concurrency ${JSON.stringify(text)} is not a count`,
      'give a whole number from 1 to 1024',
    );
  }
  return n;
}

const REDIS_URL_ENV = 'IMPROV_EXTFN_REDIS_URL';
const REDIS_URL_FIX = 'give a URL such as --redis redis://127.0.0.1:6379';
/** How long start-up waits for Redis by default (--connect-timeout). */
const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
/** How long running chunks may take to finish once the worker is asked to stop. */
const CLOSE_GRACE_MS = 10_000;
/** Past the grace, how long closing may still take (connections, runners) before the command gives up on it. */
const CLOSE_SLACK_MS = 5_000;
/** The same connection error is said again at most this often. */
export const ERROR_REPEAT_MS = 60_000;

/**
 * Where Redis is, from --redis or IMPROV_EXTFN_REDIS_URL, checked before
 * anything starts: a missing or malformed address is a usage error naming
 * where it came from. Returns the URL and how to show it (no password).
 */
function redisAddress(
  flag: string | undefined,
  io: CliIo,
  queue: QueueModule,
): { url: string; shown: string } {
  const fromEnv = flag === undefined;
  const url = flag ?? io.env[REDIS_URL_ENV];
  if (url === undefined || url === '') {
    throw usage(
      `worker: no Redis to connect to: no --redis, and ${REDIS_URL_ENV} is not set`,
      `${REDIS_URL_FIX}, or set ${REDIS_URL_ENV}`,
    );
  }
  const where = fromEnv
    ? `${REDIS_URL_ENV}=${JSON.stringify(url)}`
    : `--redis ${JSON.stringify(url)}`;
  let options: { host?: string; port?: number; db?: number };
  try {
    options = queue.parseRedisUrl ? queue.parseRedisUrl(url) : parseUrlShape(url);
  } catch (error) {
    // The queue's message ends with its own fix, which names its API option: ours names the flag.
    const fix = (error as { fix?: unknown }).fix;
    let reason = messageOf(error);
    if (typeof fix === 'string' && reason.endsWith(`; ${fix}`))
      reason = reason.slice(0, -fix.length - 2);
    throw usage(
      `worker: ${where} is not a Redis URL: ${reason}`,
      `${REDIS_URL_FIX} (redis://[user:password@]host:port[/db], or rediss:// for TLS)`,
    );
  }
  const host = options.host ?? '127.0.0.1';
  const shown = `redis://${host.includes(':') ? `[${host}]` : host}:${options.port ?? 6379}${options.db ? `/${options.db}` : ''}`;
  return { url, shown };
}

/** A queue package without parseRedisUrl: the URL's shape only. */
function parseUrlShape(url: string): { host: string; port?: number } {
  const parsed = new URL(url);
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new Error(`it must start with redis:// or rediss://, not ${parsed.protocol}//`);
  }
  return { host: parsed.hostname, ...(parsed.port ? { port: Number(parsed.port) } : {}) };
}

/** Errors of a lost or refused connection, as Node and ioredis give them. */
function isConnectionError(error: Error): boolean {
  const code = (error as { code?: unknown }).code;
  return (
    (typeof code === 'string' &&
      /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|EPIPE)$/.test(
        code,
      )) ||
    /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENOTFOUND|Connection is closed|connect ETIMEDOUT/.test(
      error.message,
    )
  );
}

/**
 * The worker's errors on stderr, each said once and then at most every
 * ERROR_REPEAT_MS with how many times it came back meanwhile: a Redis that is
 * down fails every connection every second or two. A connection error comes
 * with its fix.
 */
export class ErrorLog {
  readonly #io: CliIo;
  readonly #redis: string;
  readonly #now: () => number;
  readonly #seen = new Map<string, { at: number; repeats: number }>();
  /** The last error, for the message when start-up gives up. */
  lastError: Error | undefined;

  constructor(io: CliIo, redis: string, now: () => number = Date.now) {
    this.#io = io;
    this.#redis = redis;
    this.#now = now;
  }

  report(error: Error): void {
    const connection = isConnectionError(error);
    this.lastError = error;
    const key = error.message;
    const now = this.#now();
    const seen = this.#seen.get(key);
    if (seen && now - seen.at < ERROR_REPEAT_MS) {
      seen.repeats++;
      return;
    }
    const again = seen
      ? ` (again: ${seen.repeats + 1} time(s) in the last ${Math.round((now - seen.at) / 1000)} s)`
      : '';
    this.#seen.set(key, { at: now, repeats: 0 });
    if (this.#seen.size > 100) this.#seen.delete(this.#seen.keys().next().value!);
    let text = `improv-extfn worker: ${error.message}${again}\n`;
    if (connection) {
      text += `  fix: is Redis running at ${this.#redis}? start it, or point --redis (or ${REDIS_URL_ENV}) at it; the worker keeps trying to reconnect\n`;
    }
    this.#io.stderr.write(text);
  }
}

class StartTimeout extends Error {}

/**
 * The started worker; or, should the queue package not bound its own
 * start-up, a StartTimeout after `ms`; or the signal's reason once it aborts
 * (a worker that starts after that is closed at once).
 */
async function startedWithin<T extends { close(graceMs?: number): Promise<void> }>(
  starting: Promise<T>,
  ms: number,
  signal: AbortSignal | undefined,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  try {
    return await Promise.race([
      starting,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new StartTimeout('start-up timed out')), ms);
        onAbort = () => reject(signal!.reason);
        if (signal?.aborted) onAbort();
        else signal?.addEventListener('abort', onAbort, { once: true });
      }),
    ]);
  } catch (error) {
    starting.then((w) => w.close(0)).catch(() => {});
    throw error;
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}

/** `promise`, or undefined once `ms` have passed. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export async function workerCommand(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const { values, positionals } = parseCommandLine(
    'worker',
    argv,
    {
      redis: { type: 'string' },
      queue: { type: 'string' },
      runner: { type: 'string', multiple: true },
      concurrency: { type: 'string' },
      libraries: { type: 'string' },
      'connect-timeout': { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    io.argvBytes,
  );
  if (values.help) {
    io.stdout.write(WORKER_HELP);
    return ExitCode.Ok;
  }
  if (positionals.length) {
    throw usage(`worker: unexpected argument ${positionals[0]}`, 'see improv-extfn worker --help');
  }
  const concurrency = parseConcurrency(values.concurrency as string | undefined);
  const connectTimeoutMs =
    parseTimeout(values['connect-timeout'] as string | undefined, '--connect-timeout') ??
    DEFAULT_CONNECT_TIMEOUT_MS;
  const queue = await loadQueue(io);
  const redis = redisAddress(values.redis as string | undefined, io, queue);
  const names = (values.runner as string[] | undefined) ?? [];
  const libraries = parseLibraries(values.libraries as string | undefined, io.cwd);
  checkLibrariesExist(libraries);
  const settings: RunnerSettings = libraries ? { libraries } : {};
  const runners = names.length
    ? await namedRunners(names, io, settings)
    : await availableRunners(io, settings);
  const ours = new Set(RUNNER_PACKAGES.map((p) => p.packageName));
  if (libraries && !runners.some((r) => OPTION[r.language] && ours.has(r.packageName ?? ''))) {
    await Promise.allSettled(runners.map((r) => r.close?.()));
    throw usage(
      `worker: --libraries is for python and r; this worker serves ${runners.map((r) => r.language).join(', ') || 'no language'}`,
      'drop --libraries, or serve python or r (--runner python)',
    );
  }
  if (!runners.length) {
    throw new CliError(
      'LanguageUnavailable',
      'worker: no language can run on this host',
      'run improv-extfn doctor to see what is missing',
      ExitCode.Unavailable,
    );
  }
  const closeRunners = () => Promise.allSettled(runners.map((r) => r.close?.()));
  if (io.signal?.aborted) {
    await closeRunners();
    return interruptedExitCode(io.signal);
  }
  const errors = new ErrorLog(io, redis.shown);
  const starting = queue.startQueueWorker({
    runners,
    env: io.env,
    connection: redis.url,
    connectTimeoutMs,
    ...(io.signal ? { signal: io.signal } : {}),
    ...(values.queue !== undefined ? { queueName: values.queue as string } : {}),
    ...(concurrency !== undefined ? { concurrency } : {}),
    onChunk: (event) => {
      if (event.phase === 'refused' || event.phase === 'failed') {
        io.stderr.write(
          `improv-extfn worker: chunk ${event.jobId} (${event.language}) ${event.phase}: ${event.reason}\n`,
        );
      }
    },
    onWarmUp: (event) => {
      if (event.outcome === 'error') {
        io.stderr.write(
          `improv-extfn worker: warm-up of ${event.name ?? event.digest} failed: ${event.reason}\n`,
        );
      }
    },
    onError: (error) => errors.report(error),
  });
  let worker: Awaited<ReturnType<QueueModule['startQueueWorker']>>;
  try {
    worker = await startedWithin(starting, connectTimeoutMs + 1_000, io.signal);
  } catch (error) {
    await closeRunners();
    if (io.signal?.aborted) return interruptedExitCode(io.signal);
    const unreachable =
      error instanceof StartTimeout ||
      (ExtFnError.isInstance(error) && /cannot reach Redis/.test(error.message));
    if (!unreachable) throw error;
    // The URL was checked above: Redis is not there, or does not let this worker in.
    const last = errors.lastError;
    throw new CliError(
      'Unreachable',
      `worker: cannot reach Redis at ${redis.shown} within ${formatMs(connectTimeoutMs)}${last ? ` (${last.message})` : ''}`,
      `is Redis running at ${redis.shown}? start it, or point --redis (or ${REDIS_URL_ENV}) at one that is; --connect-timeout waits longer`,
      ExitCode.Unavailable,
    );
  }
  io.stderr.write(
    `improv-extfn worker: serving ${worker.languages.join(', ')} from queue ${worker.queueName} at ${worker.redis} (${worker.concurrency} at once per language); Ctrl-C to stop\n`,
  );
  await new Promise<void>((resolve) => {
    if (!io.signal || io.signal.aborted) return resolve();
    io.signal.addEventListener('abort', () => resolve(), { once: true });
  });
  const code = interruptedExitCode(io.signal);
  io.stderr.write(
    `improv-extfn worker: stopping (${interruptedBy(io.signal)}): running chunks get up to ${CLOSE_GRACE_MS / 1000} s to finish; Ctrl-C again to exit at once\n`,
  );
  const closed = await within(
    worker.close(CLOSE_GRACE_MS).then(() => true),
    CLOSE_GRACE_MS + CLOSE_SLACK_MS,
  );
  if (!closed) {
    io.stderr.write(
      `improv-extfn worker: closing took over ${(CLOSE_GRACE_MS + CLOSE_SLACK_MS) / 1000} s (Redis unreachable?); exiting without waiting further\n`,
    );
  }
  return code;
}

function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}
