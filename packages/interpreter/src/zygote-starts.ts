/**
 * Which zygote a warm worker starts from, if any (docs/architecture.md,
 * "Zygote"). Only for a spec that has a zygote program (Python), under
 * `restricted`, unless IMPROV_EXTFN_ZYGOTE=0. One zygote per sandbox setting
 * (interpreter, binds, limits, environment), shared by the runners of this
 * process that have that setting and closed with the last of them.
 *
 * A zygote boots when a runner starts a worker while another of its starts
 * is still under way (several functions refreshed at once), or for the
 * setting's third start in the process (whichever runner makes it: a
 * process that opens a model again and again, one function at a time,
 * forks from the third start on); that start and every one while it boots
 * wait for it (its tree is spawned before the start that boots it gives up
 * control), and every later start forks. The setting's first two starts,
 * one at a time, are trees (unless its zygote is alive: see below): a
 * single function's cold refresh (a worker, then perhaps a second once the
 * first has answered) gets its results as soon as trees give them, with
 * nothing booting beside them. A fork costs a third of a tree's CPU
 * (no bwrap, no interpreter start): sixteen functions refreshed cold took
 * 336 ms instead of 554 (docs/measurements/python.md). Its first worker is the
 * probe: if that one does not reach its ready frame, or a zygote cannot
 * start, the setting uses trees for the rest of the process; so does one
 * that binds a directory its workers would cover (`zygoteCannotServe`). A
 * zygote that dies is replaced at the next start, up to MAX_DEATHS times.
 *
 * When the last runner holding a zygote closes, the zygote stays idle for
 * IMPROV_EXTFN_ZYGOTE_IDLE_MS (30 s by default; 0: closed with it), so the
 * next runner of the setting (a model opened again, a new Registry) forks
 * at once instead of starting trees and booting another. An idle zygote has
 * run no body and holds no data (workers fork before they load one); it
 * never keeps the host process alive and dies with it; `closeIdleZygotes()`
 * ends it at once.
 */
import { type SandboxOptions, Zygote, zygoteCannotServe } from '@improv/extfn-sandbox';
import { type SpareRecipe, SpareWorkers, spareCap } from './spare-workers.js';
import type { WarmWorker } from './warm-worker.js';

const MAX_DEATHS = 3;
const IDLE_MS = 30_000;
/** A setting's first starts, one at a time, are trees (see the top). */
const TREES_FIRST = 2;

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
  /** Starts its runners made trees while it had no zygote (up to TREES_FIRST). */
  trees: number;
  /** Set while no runner holds it: closes it when it fires. */
  idle: NodeJS.Timeout | undefined;
  /** The ready zygote's spare workers (spare-workers.ts). */
  spares: SpareWorkers<WarmWorker> | undefined;
  /** Whether each runner holding it is idle: spares are made only while all are. */
  idles: Set<() => boolean>;
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
  /** This runner's workers started from a zygote. */
  #forks = 0;
  /** Of those, the ones that began as spares. */
  #spareStarts = 0;
  /** Whether this runner has nothing under way or queued (its spares are made only then). */
  readonly #idle: () => boolean;

  constructor(idle: () => boolean = () => true) {
    this.#idle = idle;
  }

  /**
   * The zygote to fork a worker from: the ready one, or a promise of the one
   * booting (undefined if it fails: a tree then); undefined for a tree (one
   * of the setting's first starts, or a setting that uses trees). Boots one
   * when it is due, its tree spawned before this returns. `startsInFlight`:
   * the runner's other starts not finished yet.
   */
  zygoteFor(
    setting: ZygoteSetting,
    startsInFlight = 0,
  ): Zygote | Promise<Zygote | undefined> | undefined {
    if (this.#closed) return undefined;
    const entry = this.#hold(setting);
    if (entry.off) return undefined;
    const { zygote } = entry;
    if (zygote?.alive) return zygote;
    const died = zygote !== undefined; // a replacement boots at once
    if (died) {
      entry.zygote = undefined;
      void entry.spares?.close(); // died with it
      entry.spares = undefined;
      if (++entry.deaths >= MAX_DEATHS) entry.off = `the zygote died ${entry.deaths} times`;
      if (entry.off) return undefined;
    }
    if (!died && !entry.booting && startsInFlight === 0 && entry.trees < TREES_FIRST) {
      entry.trees++;
      return undefined;
    }
    entry.booting ??= this.#boot(entry, setting, startsInFlight);
    return entry.booting.then(() =>
      !this.#closed && !entry.off && entry.zygote?.alive ? entry.zygote : undefined,
    );
  }

  /** Whether a start now forks from a zygote that is ready (not booting). */
  forksReady(): boolean {
    const entry = this.#entry;
    return !this.#closed && entry !== undefined && !entry.off && entry.zygote?.alive === true;
  }

  /** Whether a start now forks: the setting's zygote is ready or booting. */
  forking(): boolean {
    return (
      this.forksReady() ||
      (!this.#closed && this.#entry?.off === undefined && this.#entry?.booting !== undefined)
    );
  }

  /**
   * A start from the ready zygote begins: it counts towards how many spares
   * the setting keeps, and none is made until it ends (call what this returns).
   */
  beginStart(): () => void {
    return this.#spares()?.begin() ?? (() => {});
  }

  /** A spare worker ready for limits `fit`, if there is one (spare-workers.ts). */
  takeSpare(fit: string): WarmWorker | undefined {
    return this.#spares()?.take(fit);
  }

  /** How spares are made: like the worker that just started from the zygote. */
  learnSpare(recipe: SpareRecipe<WarmWorker>): void {
    this.#spares()?.learn(recipe);
  }

  #spares(): SpareWorkers<WarmWorker> | undefined {
    const entry = this.#entry;
    if (this.#closed || !entry || entry.off || !entry.zygote?.alive) return undefined;
    return entry.spares;
  }

  /**
   * A worker from `zygote` failed before its ready frame (the caller starts a
   * tree instead).
   */
  failed(zygote: Zygote, error: unknown): void {
    const entry = this.#entry;
    if (!entry || entry.zygote !== zygote) return;
    if (zygote.unfit || !entry.proven) {
      entry.off = `its first worker did not start: ${(error as Error)?.message ?? String(error)}`;
    } else if (!zygote.unanswered) {
      return; // the worker's own failure, or one the zygote answered: it serves on
    } else if (++entry.deaths >= MAX_DEATHS) {
      entry.off = `the zygote died ${entry.deaths} times`;
    } else {
      entry.trees = TREES_FIRST; // a replacement boots at the next start, as for one that died
    }
    // A proven zygote that did not answer a fork (stopped from outside, wedged) would make
    // every later start wait for its deadline: it is ended, and replaced as one that died.
    entry.zygote = undefined;
    void entry.spares?.close();
    entry.spares = undefined;
    void zygote.close();
  }

  /** A worker from `zygote` is ready for its function (`spare`: it began as a spare). */
  succeeded(zygote: Zygote, spare = false): void {
    const entry = this.#entry;
    if (entry?.zygote !== zygote) return;
    entry.proven = true;
    this.#forks++;
    if (spare) this.#spareStarts++;
  }

  /** What `stats()` shows: workers started from zygotes, spares, and why none is used (if so). */
  stats(): { zygoteStarts: number; spareStarts: number; spares: number; zygote: string } {
    const counts = {
      zygoteStarts: this.#forks,
      spareStarts: this.#spareStarts,
      spares: this.#spares()?.count ?? 0,
    };
    const entry = this.#entry;
    if (!entry) return { ...counts, zygote: this.#closed ? 'closed' : 'not used' };
    const state = this.#closed
      ? 'closed'
      : entry.off
        ? `off: ${entry.off}`
        : entry.zygote?.alive
          ? `ready (pid ${entry.zygote.pid})`
          : entry.booting
            ? 'starting'
            : 'not started';
    return { ...counts, zygote: state };
  }

  /** Lets go of the zygote; the last runner holding it closes it. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const entry = this.#entry;
    if (!entry) return;
    entry.idles.delete(this.#idle);
    if (--entry.users > 0) return;
    if (zygoteless(entry)) {
      // No zygote to close: the setting is kept, so its next runner's starts count
      // on from this one's trees, and one that is off stays off (see `keepUnheld`).
      keepUnheld(entry);
      return;
    }
    const ms = idleMs();
    if (ms > 0 && !entry.off) {
      entry.idle = setTimeout(() => void closeEntry(entry), ms);
      entry.idle.unref();
      return;
    }
    await closeEntry(entry);
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
    if (entry?.idle) {
      clearTimeout(entry.idle);
      entry.idle = undefined;
    }
    if (!entry) {
      entry = {
        key,
        users: 0,
        zygote: undefined,
        booting: undefined,
        proven: false,
        deaths: 0,
        off: zygoteCannotServe(sandbox.command, sandbox.readOnlyPaths ?? []),
        trees: 0,
        idle: undefined,
        spares: undefined,
        idles: new Set(),
      };
      entries.set(key, entry);
    }
    entry.users++;
    entry.idles.add(this.#idle);
    this.#entry = entry;
    return entry;
  }

  /** `trees`: the booting runner's starts under way (trees), counted in its spares' first burst. */
  async #boot(entry: Entry, setting: ZygoteSetting, trees: number): Promise<void> {
    const { sandbox } = setting;
    const spares = spareCap();
    try {
      // no await before Zygote.start: its tree is spawned within this call
      const zygote = await Zygote.start({
        command: sandbox.command,
        args: sandbox.args,
        env: sandbox.env,
        readOnlyPaths: sandbox.readOnlyPaths,
        bwrapPath: sandbox.bwrapPath,
        limits: sandbox.limits,
        program: setting.program(),
        maxWorkers: setting.maxWorkers + spares, // its process limit counts its spares too
        functionName: sandbox.functionName ?? 'zygote',
        startupMs: setting.startupMs,
      });
      if (entries.get(entry.key) !== entry) {
        await zygote.close(); // closed while it booted
        return;
      }
      entry.zygote = zygote;
      if (spares > 0) {
        const idle = () => [...entry.idles].every((runnerIdle) => runnerIdle());
        entry.spares = new SpareWorkers(spares, idle, trees);
      }
    } catch (error) {
      entry.off = `it could not start: ${(error as Error).message}`;
    } finally {
      entry.booting = undefined;
    }
  }
}

/** The values of IMPROV_EXTFN_ZYGOTE_IDLE_MS already warned about (once each per process). */
const warnedIdle = new Set<string>();

/**
 * IMPROV_EXTFN_ZYGOTE_IDLE_MS, read when a zygote's last runner lets go. A
 * value that is not a number of milliseconds (`5s`, `-1`) gets the default,
 * with a process warning that says so once.
 */
function idleMs(): number {
  const raw = process.env.IMPROV_EXTFN_ZYGOTE_IDLE_MS;
  if (raw === undefined || raw.trim() === '') return IDLE_MS;
  const ms = Number(raw);
  if (Number.isFinite(ms) && ms >= 0) return ms;
  if (!warnedIdle.has(raw)) {
    warnedIdle.add(raw);
    process.emitWarning(
      `IMPROV_EXTFN_ZYGOTE_IDLE_MS=${JSON.stringify(raw)} is not a number of milliseconds: ` +
        `an idle zygote stays ${IDLE_MS} ms. Set it to e.g. 5000, or 0 to close a zygote with its last runner.`,
      { code: 'IMPROV_EXTFN_ZYGOTE_IDLE_MS' },
    );
  }
  return IDLE_MS;
}

/** Whether no zygote runs or boots for `entry`. */
const zygoteless = (entry: Entry) => !entry.booting && !entry.zygote?.alive;

/** Settings without a zygote kept for their next runner, at most (the oldest go first). */
const KEPT = 64;

/**
 * Keeps `entry` (no runner holds it, no zygote runs for it) among the
 * settings remembered without a zygote, dropping the oldest past KEPT.
 */
function keepUnheld(entry: Entry): void {
  entries.delete(entry.key);
  entries.set(entry.key, entry); // most recent last
  let unheld = 0;
  for (const other of [...entries.values()].reverse()) {
    if (other.users === 0 && zygoteless(other) && ++unheld > KEPT) entries.delete(other.key);
  }
}

/** Closes a zygote no runner holds (its idle time is up, or it is not to stay). */
async function closeEntry(entry: Entry): Promise<void> {
  if (entry.users > 0 || entries.get(entry.key) !== entry) return;
  clearTimeout(entry.idle);
  entries.delete(entry.key);
  await entry.booting?.catch(() => {});
  await entry.spares?.close();
  await entry.zygote?.close();
}

/**
 * Closes at once every zygote no runner holds, which would otherwise stay
 * idle for IMPROV_EXTFN_ZYGOTE_IDLE_MS after its last runner closed: for a
 * host that wants no subprocess left once its runners are closed.
 */
export async function closeIdleZygotes(): Promise<void> {
  await Promise.all([...entries.values()].map(closeEntry));
}
