/**
 * A zygote's spare workers (docs/architecture.md, "Spare workers"): blank
 * workers forked ahead while the setting is quiet, each past every sandbox
 * step and its ready frame but with no body loaded, so that a start in the
 * next refresh is a `load` request and not a fork. A spare serves the one
 * function it is then given and no other, as any worker does: it ran no
 * body before and holds no data.
 *
 * How many: as many as the setting has started between two quiet moments
 * (the most so far: a model whose refresh starts four workers gets four
 * spares), up to IMPROV_EXTFN_ZYGOTE_SPARES (4 by default; 0: none). They are
 * made one at a time, only while no runner of the setting has work under
 * way or queued and no start is in flight, so they never take CPU from a
 * refresh; a refresh that begins stops the making after the spare in hand.
 * Spares die with their zygote (closed with it, or killed when it dies) and
 * are made for the limits of the setting's last start: one whose limits no
 * longer fit is not taken but killed.
 */

/** What a spare is to this module: a worker that may die and can be killed. */
export interface SpareWorker {
  readonly alive: boolean;
  kill(): Promise<void>;
}

/** How to make a spare like the last start's worker, and what it fits (its limits). */
export interface SpareRecipe<W extends SpareWorker> {
  fit: string;
  make(): Promise<W>;
}

const DEFAULT_SPARES = 4;
const MAX_SPARES = 16;
/** How often a setting with spares to make looks again whether it is quiet. */
const QUIET_POLL_MS = 25;

/** The values of IMPROV_EXTFN_ZYGOTE_SPARES already warned about (once each per process). */
const warned = new Set<string>();

/**
 * IMPROV_EXTFN_ZYGOTE_SPARES, read when a zygote boots: a whole number from
 * 0 to 16; anything else gets the default, with a warning that says so once.
 */
export function spareCap(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.IMPROV_EXTFN_ZYGOTE_SPARES;
  if (raw === undefined || raw.trim() === '') return DEFAULT_SPARES;
  const n = Number(raw);
  if (Number.isInteger(n) && n >= 0 && n <= MAX_SPARES) return n;
  if (!warned.has(raw)) {
    warned.add(raw);
    process.emitWarning(
      `IMPROV_EXTFN_ZYGOTE_SPARES=${JSON.stringify(raw)} is not a whole number from 0 to ${MAX_SPARES}: ` +
        `a zygote keeps up to ${DEFAULT_SPARES} spare workers. Set it to e.g. 8, or 0 for none.`,
      { code: 'IMPROV_EXTFN_ZYGOTE_SPARES' },
    );
  }
  return DEFAULT_SPARES;
}

export class SpareWorkers<W extends SpareWorker> {
  readonly cap: number;
  #ready: { fit: string; worker: W }[] = [];
  #recipe: SpareRecipe<W> | undefined;
  /** Starts since the setting was last quiet. */
  #burst = 0;
  /** The most starts of one burst so far, up to the cap: how many spares to keep. */
  #want = 0;
  #inFlight = 0;
  #timer: NodeJS.Timeout | undefined;
  #making = false;
  /** Why no more are made (a spare failed to start, or closed). */
  #off: string | undefined;
  /** Whether every runner of the setting is idle (nothing under way, nothing queued). */
  readonly #idle: () => boolean;

  /** `started`: starts of the burst under way that came before these spares (a zygote's boot). */
  constructor(cap: number, idle: () => boolean, started = 0) {
    this.cap = cap;
    this.#idle = idle;
    this.#burst = started;
  }

  /** Spares ready now (alive). */
  get count(): number {
    this.#prune();
    return this.#ready.length;
  }

  /** Why none are made any more, if so. */
  get off(): string | undefined {
    return this.#off;
  }

  /** A start from the zygote begins (a spare taken or a fork); call what it returns when it ends. */
  begin(): () => void {
    this.#inFlight++;
    this.#burst++;
    this.#want = Math.min(this.cap, Math.max(this.#want, this.#burst));
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#inFlight--;
      this.#schedule();
    };
  }

  /** A spare whose limits are `fit`, if one is ready; dead ones and others' are killed on the way. */
  take(fit: string): W | undefined {
    while (this.#ready.length > 0) {
      const { fit: its, worker } = this.#ready.shift()!;
      if (its === fit && worker.alive) {
        this.#schedule(); // its replacement, once the setting is quiet
        return worker;
      }
      void worker.kill();
    }
    return undefined;
  }

  /** How spares are made from now on: like the start that just succeeded. */
  learn(recipe: SpareRecipe<W>): void {
    if (this.#off) return;
    this.#recipe = recipe;
    this.#schedule();
  }

  /** Kills every spare and makes no more. */
  async close(): Promise<void> {
    this.#off ??= 'closed';
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await Promise.all(this.#ready.splice(0).map(({ worker }) => worker.kill()));
  }

  #quiet(): boolean {
    return this.#inFlight === 0 && this.#idle();
  }

  /** Drops the spares that died (or failed) while they waited; kill() makes sure of it. */
  #prune(): void {
    this.#ready = this.#ready.filter(({ worker }) => worker.alive || void worker.kill());
  }

  #schedule(): void {
    if (this.#off || this.#timer || this.#making || !this.#recipe) return;
    this.#prune();
    if (this.#ready.length >= this.#want) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#make();
    }, QUIET_POLL_MS);
    this.#timer.unref(); // spares never keep the host alive
  }

  async #make(): Promise<void> {
    if (!this.#quiet()) {
      this.#schedule();
      return;
    }
    this.#burst = 0;
    this.#making = true;
    try {
      while (!this.#off && this.#recipe && this.#ready.length < this.#want && this.#quiet()) {
        const recipe = this.#recipe;
        let worker: W;
        try {
          worker = await recipe.make();
        } catch (error) {
          this.#off = `a spare did not start: ${(error as Error)?.message ?? String(error)}`;
          return;
        }
        // a later start may have brought limits of its own meanwhile
        if (this.#off || recipe.fit !== this.#recipe?.fit || !worker.alive) void worker.kill();
        else this.#ready.push({ fit: recipe.fit, worker });
      }
    } finally {
      this.#making = false;
    }
    this.#schedule(); // stopped for a refresh: again once it is quiet
  }
}
