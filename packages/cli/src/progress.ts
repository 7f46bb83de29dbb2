/**
 * A one-line progress bar on stderr, for terminals only, and only once a run
 * has lasted long enough to be worth watching.
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
  #done = 0;
  #total = 0;
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

  update(done: number, total: number): void {
    this.#done = done;
    this.#total = total;
  }

  /** The line as it would be drawn now. */
  render(): string {
    const elapsed = (this.#now() - this.#started) / 1000;
    const fraction = this.#total > 0 ? this.#done / this.#total : 0;
    const width = Math.max(10, Math.min(30, (this.#stream.columns ?? 80) - 60));
    const filled = Math.round(fraction * width);
    const rate = elapsed > 0 ? this.#done / elapsed : 0;
    const eta = rate > 0 ? (this.#total - this.#done) / rate : Number.NaN;
    return (
      `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${Math.floor(fraction * 100)
        .toString()
        .padStart(3)}% ` +
      `${this.#done.toLocaleString('en-US')}/${this.#total.toLocaleString('en-US')} rows` +
      ` · ${Math.round(rate).toLocaleString('en-US')} rows/s` +
      (Number.isFinite(eta) ? ` · ${Math.ceil(eta)} s left` : '')
    );
  }

  draw(): void {
    if (this.#now() - this.#started < this.#delayMs) return;
    this.#stream.write(`\r${this.render()}\u001b[K`);
    this.#drawn = true;
  }

  /** Stops redrawing and clears the line, so the summary starts clean. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#drawn) this.#stream.write('\r\u001b[K');
  }
}
