/**
 * Splits text that comes in pieces into lines, for JSON lines input. A line
 * longer than the limit is reported instead of held, so memory stays bounded.
 */

/** One line of input, or the note that it was too long to keep. */
export type Line =
  | { readonly line: number; readonly text: string }
  | { readonly line: number; readonly tooLong: true; readonly start: string };

export const MAX_LINE_CHARS = 8 * 1024 * 1024;

export class LineSplitter {
  readonly #max: number;
  #rest = '';
  #line = 1;
  #skipping = false;
  #started = false;

  constructor(options: { maxLineChars?: number } = {}) {
    this.#max = options.maxLineChars ?? MAX_LINE_CHARS;
  }

  push(text: string): Line[] {
    if (!this.#started && text.length > 0) {
      this.#started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1); // a byte-order mark is not data
    }
    const out: Line[] = [];
    let from = 0;
    for (let lf = text.indexOf('\n'); lf !== -1; lf = text.indexOf('\n', from)) {
      if (this.#skipping) this.#skipping = false;
      else this.#emit(out, this.#rest + text.slice(from, lf));
      this.#rest = '';
      this.#line++;
      from = lf + 1;
    }
    if (!this.#skipping) {
      this.#rest += text.slice(from);
      if (this.#rest.length > this.#max) {
        out.push({ line: this.#line, tooLong: true, start: this.#rest.slice(0, 200) });
        this.#rest = '';
        this.#skipping = true;
      }
    }
    return out;
  }

  end(): Line[] {
    const out: Line[] = [];
    if (!this.#skipping && this.#rest !== '') this.#emit(out, this.#rest);
    this.#rest = '';
    return out;
  }

  #emit(out: Line[], text: string): void {
    if (text.length > this.#max) {
      out.push({ line: this.#line, tooLong: true, start: text.slice(0, 200) });
    } else {
      out.push({ line: this.#line, text: text.endsWith('\r') ? text.slice(0, -1) : text });
    }
  }
}
