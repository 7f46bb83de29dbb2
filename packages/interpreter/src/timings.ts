/**
 * What this host process has measured of one interpreter setting's workers,
 * kept across runners: each function's time per row (the scheduler sizes a
 * batch's chunks by it) and how long a worker start takes, forks from a
 * zygote and new trees apart (the pool judges by it whether a further
 * worker pays).
 *
 * A runner is made per Registry, and an engine may make a Registry each time
 * it opens a model. A runner's own figures died with it: the next one ramped
 * a known body's chunks up from one row again (seven round trips a function
 * before its chunks had their size), and judged a 5 ms fork by the 100 ms
 * a tree was taken to cost. They are hints only, for chunk sizes and starts:
 * no result depends on them. Shared by setting (language package,
 * interpreter, the library directories it may read, policy in force), since
 * a body's speed is its interpreter's.
 */

/** What a new tree is taken to cost before one has been measured: an interpreter's boot. */
export const DEFAULT_START_MS = 100;

/**
 * What a fork from a ready zygote is taken to cost before one has been
 * measured: the clone and the worker's own set-up, its body's load and, as
 * root, joining its cgroup (~20 ms here); a few ms otherwise.
 */
export const DEFAULT_FORK_MS = 25;

/** Most settings kept: a host process runs a few interpreters, not hundreds. */
const MOST_SETTINGS = 64;

/**
 * Worker start times: a moving average each for forks from a ready zygote
 * and for new trees, the first measurement taking the default's place.
 */
export class StartTimes {
  #fork: number | undefined;
  #tree: number | undefined;

  /** What a start takes: a fork from a zygote, or a new tree. */
  ms(fork: boolean): number {
    return fork ? (this.#fork ?? DEFAULT_FORK_MS) : (this.#tree ?? DEFAULT_START_MS);
  }

  /** A start took `ms`. */
  note(fork: boolean, ms: number): void {
    if (!(ms >= 0)) return;
    const average = (before: number | undefined) =>
      before === undefined ? ms : 0.7 * before + 0.3 * ms;
    if (fork) this.#fork = average(this.#fork);
    else this.#tree = average(this.#tree);
  }
}

/** One setting's figures (see the header). */
export class Timings {
  /** Milliseconds per row by function key, most recent last (the scheduler bounds it). */
  readonly perRowMs = new Map<string, number>();
  readonly starts = new StartTimes();
}

const bySetting = new Map<string, Timings>();

/** The figures of one setting, shared by every runner of it in this process. */
export function timingsFor(setting: string): Timings {
  let timings = bySetting.get(setting);
  if (timings) {
    bySetting.delete(setting); // most recently used last
  } else {
    timings = new Timings();
    if (bySetting.size >= MOST_SETTINGS) bySetting.delete(bySetting.keys().next().value!);
  }
  bySetting.set(setting, timings);
  return timings;
}

/** Forgets every setting's figures: for tests that need a runner as new as in a fresh process. */
export function forgetTimings(): void {
  bySetting.clear();
}
