/**
 * `improv-extfn worker`: a worker host for refreshes spread through Redis.
 * Parses the flags, loads this host's runners (under this host's sandbox
 * policy) and hands them to `startQueueWorker` from @improv/extfn-queue,
 * which does the work; runs until interrupted.
 */
import type { LanguageRunner } from '@improv/extfn-core';
import { CliError, usage } from '../cli-error.js';
import { EXIT_CODES_HELP, ExitCode } from '../exit-codes.js';
import { type CliIo, interruptedExitCode } from '../io.js';
import { parseCommandLine } from '../options.js';
import {
  defaultImport,
  loadExternalRunner,
  loadRunner,
  messageOf,
  RUNNER_PACKAGES,
  type RunnerLoad,
  runnerPackageFor,
} from '../runners.js';

export const WORKER_HELP = `Usage: improv-extfn worker [--redis URL] [--queue NAME] [--runner LANG|PKG ...] [--concurrency N]

Takes chunks of refreshes from Redis (BullMQ) and evaluates them with this
host's own runners, under this host's sandbox policy. Engines send work with
queue() from @improv/extfn-queue. Runs until interrupted (Ctrl-C, SIGTERM);
running chunks finish first, or are handed back to the queue.

Options:
      --redis URL        redis://[user:password@]host:port[/db] (default IMPROV_EXTFN_REDIS_URL;
                         a password may also come from IMPROV_EXTFN_REDIS_PASSWORD)
      --queue NAME       the queue name the engines use (default improv-extfn)
      --runner LANG|PKG  serve this language (python, r, julia, pure, wasm) or load this
                         third-party runner package (repeatable; default: every language
                         this host can run)
      --concurrency N    chunks evaluated at once per language (default: the host's cores)
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
  startQueueWorker(options: {
    connection?: string;
    queueName?: string;
    runners: readonly LanguageRunner[];
    concurrency?: number;
    env?: NodeJS.ProcessEnv;
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

/** The runners asked for by name; each must load. */
async function namedRunners(names: readonly string[], io: CliIo): Promise<LanguageRunner[]> {
  const runners: LanguageRunner[] = [];
  for (const name of new Set(
    names
      .flatMap((n) => n.split(','))
      .map((n) => n.trim())
      .filter(Boolean),
  )) {
    const spec = runnerPackageFor(name);
    const load: RunnerLoad = spec ? await loadRunner(spec, io) : await loadExternalRunner(name, io);
    if (!load.ok) {
      await Promise.allSettled(runners.map((r) => r.close?.()));
      throw new CliError(
        'LanguageUnavailable',
        `worker: runner ${name}: ${load.problem}`,
        load.fix,
        ExitCode.Unavailable,
      );
    }
    runners.push(load.runner);
  }
  return runners;
}

/** Every one of our runners that loads and probes available here. */
async function availableRunners(io: CliIo): Promise<LanguageRunner[]> {
  const runners: LanguageRunner[] = [];
  for (const spec of RUNNER_PACKAGES) {
    const load = await loadRunner(spec, io);
    if (!load.ok) continue;
    const probe = await load.runner.probe().catch(() => ({ available: false }));
    if (probe.available) runners.push(load.runner);
    else await load.runner.close?.();
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

export async function workerCommand(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const { values, positionals } = parseCommandLine('worker', argv, {
    redis: { type: 'string' },
    queue: { type: 'string' },
    runner: { type: 'string', multiple: true },
    concurrency: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(WORKER_HELP);
    return ExitCode.Ok;
  }
  if (positionals.length) {
    throw usage(`worker: unexpected argument ${positionals[0]}`, 'see improv-extfn worker --help');
  }
  const concurrency = parseConcurrency(values.concurrency as string | undefined);
  const queue = await loadQueue(io);
  const names = (values.runner as string[] | undefined) ?? [];
  const runners = names.length ? await namedRunners(names, io) : await availableRunners(io);
  if (!runners.length) {
    throw new CliError(
      'LanguageUnavailable',
      'worker: no language can run on this host',
      'run improv-extfn doctor to see what is missing',
      ExitCode.Unavailable,
    );
  }
  let worker: Awaited<ReturnType<QueueModule['startQueueWorker']>>;
  try {
    worker = await queue.startQueueWorker({
      runners,
      env: io.env,
      ...(values.redis !== undefined ? { connection: values.redis as string } : {}),
      ...(values.queue !== undefined ? { queueName: values.queue as string } : {}),
      ...(concurrency !== undefined ? { concurrency } : {}),
      onChunk: (event) => {
        if (event.phase === 'refused' || event.phase === 'failed') {
          io.stderr.write(
            `worker: chunk ${event.jobId} (${event.language}) ${event.phase}: ${event.reason}\n`,
          );
        }
      },
      onWarmUp: (event) => {
        if (event.outcome === 'error') {
          io.stderr.write(
            `worker: warm-up of ${event.name ?? event.digest} failed: ${event.reason}\n`,
          );
        }
      },
      onError: (error) => io.stderr.write(`worker: ${error.message}\n`),
    });
  } catch (error) {
    await Promise.allSettled(runners.map((r) => r.close?.()));
    throw error;
  }
  io.stderr.write(
    `improv-extfn worker: serving ${worker.languages.join(', ')} from queue ${worker.queueName} at ${worker.redis} (${worker.concurrency} at once per language); Ctrl-C to stop\n`,
  );
  await new Promise<void>((resolve) => {
    if (!io.signal || io.signal.aborted) return resolve();
    io.signal.addEventListener('abort', () => resolve(), { once: true });
  });
  await worker.close();
  return interruptedExitCode(io.signal);
}
