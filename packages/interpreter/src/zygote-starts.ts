/**
 * Which zygote a warm worker starts from, if any (docs/architecture.md,
 * "Zygote"). Only for a spec that has a zygote program (Python), under
 * `restricted`, unless IMPROV_EXTFN_ZYGOTE=0. One zygote per sandbox setting
 * (interpreter, binds, limits, environment), shared by the runners of this
 * process that have that setting and closed with the last of them.
 *
 * A zygote boots in the background at a worker start that comes
 * BOOT_AFTER_MS or more after the runner's first (the workers of a cold
 * refresh start as trees, which a zygote booting beside them, or waited for,
 * only slowed down: measured); that start goes through a tree meanwhile,
 * later ones fork once it is ready. Its first worker is the probe: if that one does
 * not reach its ready frame, or a zygote cannot start, the setting uses trees
 * for the rest of the process. A zygote that dies is replaced at the next
 * start, up to MAX_DEATHS times.
 */
import { type SandboxOptions, Zygote } from '@improv/extfn-sandbox';

const MAX_DEATHS = 3;
/** A zygote boots at a start this long after the runner's first (see `zygoteFor`). */
export const BOOT_AFTER_MS = 2_000;

interface Entry {
  key: string;
  users: number;
  zygote: Zygote | undefined;
  booting: Promise<void> | undefined;
  /** The first fork reached its ready frame. */
  proven: boolean;
  deaths: number;
  /** Why this setting uses trees for the rest of the process. */
  off: string | undefined;
}

const entries = new Map<string, Entry>();

export interface ZygoteSetting {
  sandbox: Omit<SandboxOptions, 'timeoutMs'>;
  /** The zygote's program, made when it boots (Python precompiles it then). */
  program: () => Promise<string>;
  maxWorkers: number;
  startupMs: number;
}

/** One runner's hold on the zygote of its setting. */
export class ZygoteStarts {
  #entry: Entry | undefined;
  #closed = false;
  #firstStart: number | undefined;
  /** This runner's workers started from a zygote. */
  #forks = 0;
  readonly #bootAfterMs: number;

  constructor(bootAfterMs = BOOT_AFTER_MS) {
    this.#bootAfterMs = bootAfterMs;
  }

  /** The zygote to fork a worker from now, or undefined (a tree); may start one booting. */
  zygoteFor(setting: ZygoteSetting): Zygote | undefined {
    if (this.#closed) return undefined;
    const entry = this.#hold(setting);
    if (entry.off) return undefined;
    const { zygote } = entry;
    if (zygote?.alive) return zygote;
    if (zygote && !zygote.alive) {
      entry.zygote = undefined;
      if (++entry.deaths >= MAX_DEATHS) entry.off = `the zygote died ${entry.deaths} times`;
      if (entry.off) return undefined;
    }
    // A cold refresh starts its workers at once: a zygote booting beside them
    // would only compete for the CPU (measured: slower). Boot it for a runner
    // that still starts workers later (new functions, retired or idle ones).
    this.#firstStart ??= performance.now();
    if (performance.now() - this.#firstStart >= this.#bootAfterMs) {
      entry.booting ??= this.#boot(entry, setting);
    }
    return undefined;
  }

  /** A worker from `zygote` failed before its ready frame (the caller starts a tree instead). */
  failed(zygote: Zygote, error: unknown): void {
    const entry = this.#entry;
    if (!entry || entry.zygote !== zygote) return;
    if (zygote.unfit || !entry.proven) {
      entry.off = `its first worker did not start: ${(error as Error)?.message ?? String(error)}`;
      entry.zygote = undefined;
      void zygote.close();
    }
  }

  /** A worker from `zygote` reached its ready frame. */
  succeeded(zygote: Zygote): void {
    const entry = this.#entry;
    if (entry?.zygote !== zygote) return;
    entry.proven = true;
    this.#forks++;
  }

  /** What `stats()` shows: workers started from zygotes, and why none is used (if so). */
  stats(): { zygoteStarts: number; zygote: string } {
    const entry = this.#entry;
    if (!entry) return { zygoteStarts: this.#forks, zygote: this.#closed ? 'closed' : 'not used' };
    const state = this.#closed
      ? 'closed'
      : entry.off
        ? `off: ${entry.off}`
        : entry.zygote?.alive
          ? `ready (pid ${entry.zygote.pid})`
          : entry.booting
            ? 'starting'
            : 'not started';
    return { zygoteStarts: this.#forks, zygote: state };
  }

  /** Lets go of the zygote; the last runner holding it closes it. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const entry = this.#entry;
    if (!entry || --entry.users > 0) return;
    entries.delete(entry.key);
    await entry.booting?.catch(() => {});
    await entry.zygote?.close();
  }

  #hold(setting: ZygoteSetting): Entry {
    if (this.#entry) return this.#entry;
    const { sandbox } = setting;
    const key = JSON.stringify([
      sandbox.command,
      sandbox.args,
      sandbox.env,
      sandbox.readOnlyPaths,
      sandbox.bwrapPath,
      sandbox.limits,
      setting.maxWorkers,
    ]);
    let entry = entries.get(key);
    if (!entry) {
      entry = {
        key,
        users: 0,
        zygote: undefined,
        booting: undefined,
        proven: false,
        deaths: 0,
        off: undefined,
      };
      entries.set(key, entry);
    }
    entry.users++;
    this.#entry = entry;
    return entry;
  }

  async #boot(entry: Entry, setting: ZygoteSetting): Promise<void> {
    const { sandbox } = setting;
    try {
      const program = await setting.program();
      const zygote = await Zygote.start({
        command: sandbox.command,
        args: sandbox.args,
        env: sandbox.env,
        readOnlyPaths: sandbox.readOnlyPaths,
        bwrapPath: sandbox.bwrapPath,
        limits: sandbox.limits,
        program,
        maxWorkers: setting.maxWorkers,
        functionName: sandbox.functionName ?? 'zygote',
        startupMs: setting.startupMs,
      });
      if (entries.get(entry.key) !== entry) {
        await zygote.close(); // every runner let go while it booted
        return;
      }
      entry.zygote = zygote;
    } catch (error) {
      entry.off = `it could not start: ${(error as Error).message}`;
    } finally {
      entry.booting = undefined;
    }
  }
}
