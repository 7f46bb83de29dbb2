/**
 * A one-line progress bar on stderr, for interactive terminals only, and only
 * once a run has lasted long enough to be worth watching. Rows are read as
 * they are evaluated, so the total is not known: the bar shows how much of
 * the file the finished rows cover (stdin: a count only).
 */
import type { CliStream } from './io.js';

export interface ProgressOptions {
  /** Show nothing before this many milliseconds (default 1 000). */
  readonly delayMs?: number;
  /** Redraw at most this often (default 100 ms). */
  readonly intervalMs?: number;
  readonly now?: () => number;
}

export class ProgressBar {
  readonly #stream: CliStream;
  readonly #delayMs: number;
  readonly #now: () => number;
  readonly #started: number;
  #rows = 0;
  #fraction: number | undefined;
  #drawn = false;
  #timer: NodeJS.Timeout | undefined;

  constructor(stream: CliStream, options: ProgressOptions = {}) {
    this.#stream = stream;
    this.#delayMs = options.delayMs ?? 1_000;
    this.#now = options.now ?? Date.now;
    this.#started = this.#now();
    this.#timer = setInterval(() => this.draw(), options.intervalMs ?? 100);
    this.#timer.unref();
  }

  /** `rows` finished so far; `fraction` of the input they cover, when the input's size is known. */
  update(rows: number, fraction: number | undefined): void {
    this.#rows = rows;
    this.#fraction = fraction === undefined ? undefined : Math.min(1, Math.max(0, fraction));
  }

  /** The line as it would be drawn now. */
  render(): string {
    const elapsed = (this.#now() - this.#started) / 1000;
    const rate = elapsed > 0 ? this.#rows / elapsed : 0;
    const counts =
      `${this.#rows.toLocaleString('en-US')} rows` +
      ` · ${Math.round(rate).toLocaleString('en-US')} rows/s`;
    const fraction = this.#fraction;
    if (fraction === undefined) return `${counts} · ${Math.floor(elapsed)} s`;
    const width = Math.max(10, Math.min(30, (this.#stream.columns ?? 80) - 60));
    const filled = Math.round(fraction * width);
    const eta = fraction > 0 ? (elapsed * (1 - fraction)) / fraction : Number.NaN;
    return (
      `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${Math.floor(fraction * 100)
        .toString()
        .padStart(3)}% ${counts}` + (Number.isFinite(eta) ? ` · ${Math.ceil(eta)} s left` : '')
    );
  }

  draw(): void {
    if (this.#timer === undefined || this.#now() - this.#started < this.#delayMs) return;
    this.#stream.write(`\r${this.render()}\u001b[K`);
    this.#drawn = true;
  }

  /** Stops redrawing and clears the line, so what follows starts clean. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#drawn) this.#stream.write('\r\u001b[K');
  }
}
