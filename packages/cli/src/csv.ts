/**
 * A small RFC 4180 CSV reader and writer. The reader takes text as it comes
 * (`push`, then `end`), so a table of any length is read in bounded memory.
 * It never gives up on the whole file: a malformed record is returned with
 * its line number and a reason, and reading goes on with the next line.
 */

export interface CsvRecord {
  /** 1-based line on which the record starts. */
  readonly line: number;
  readonly cells: string[];
  /** Why the record is malformed; `cells` then holds what could be read. */
  readonly problem?: string;
}

export interface CsvTable {
  readonly records: CsvRecord[];
  /** The line ending the file uses, kept for the output. */
  readonly newline: '\n' | '\r\n';
}

const COMMA = 44;
const LF = 10;
const CR = 13;
const QUOTE = 34;

/** A record longer than this is malformed (most likely an unclosed quote): it bounds the memory one record takes. */
export const MAX_RECORD_CHARS = 8 * 1024 * 1024;

/** Text with CRs and no LF this long has lines that end with a CR alone. */
const LONE_CR_AFTER = 64 * 1024;

/**
 * Reads CSV incrementally. Blank lines are skipped (write `""` for a record
 * with one empty cell). A quoted cell may hold commas, quotes written `""` and
 * line breaks. A malformed record that spans lines (an unterminated or stray
 * quote) costs only the line it starts on: reading resumes on the next line.
 */
export class CsvReader {
  readonly #maxRecordChars: number;
  #buf = '';
  #pos = 0;
  #line = 1;
  #started = false;
  #bom = false;
  /** After an over-long record with no line end yet: drop text up to the next one. */
  #skipping = false;
  #newline: '\n' | '\r\n' | undefined;
  /** Lines end with a CR alone (classic Mac files): a CR not before a LF ends a record too. */
  #loneCr = false;

  constructor(options: { maxRecordChars?: number } = {}) {
    this.#maxRecordChars = options.maxRecordChars ?? MAX_RECORD_CHARS;
  }

  /** The text began with a UTF-8 byte-order mark (a spreadsheet program's "CSV UTF-8"): the output gets one too. */
  get bom(): boolean {
    return this.#bom;
  }

  /** The line ending of the first line (`\n` until one is seen, and for lines that end with a CR alone). */
  get newline(): '\n' | '\r\n' {
    return this.#newline ?? '\n';
  }

  /** Adds text; returns the records it completed. */
  push(text: string): CsvRecord[] {
    if (!this.#started && text.length > 0) {
      this.#started = true;
      if (text.charCodeAt(0) === 0xfeff) {
        text = text.slice(1); // a byte-order mark is not data
        this.#bom = true;
      }
    }
    this.#buf = this.#pos === 0 ? this.#buf + text : this.#buf.slice(this.#pos) + text;
    this.#pos = 0;
    if (this.#newline === undefined) this.#detectNewline(false);
    return this.#drain(false);
  }

  /** The end of the text: returns the last records. */
  end(): CsvRecord[] {
    if (this.#newline === undefined) this.#detectNewline(true);
    return this.#drain(true);
  }

  /**
   * How lines end: LF or CR LF as soon as a LF is seen; a CR alone when the
   * text holds CRs and no LF by its end or by its first 64 KiB (so the answer
   * does not depend on how the text is cut into pieces).
   */
  #detectNewline(final: boolean): void {
    const buf = this.#buf;
    const lf = buf.indexOf('\n');
    if (lf === -1) {
      const enough = final || buf.length >= Math.min(LONE_CR_AFTER, this.#maxRecordChars);
      if (enough && buf.indexOf('\r') !== -1) {
        this.#newline = '\n';
        this.#loneCr = true;
      }
    } else {
      // Any LF: LF or CR LF lines, and a CR elsewhere is a cell's own character.
      this.#newline = buf.charCodeAt(lf - 1) === CR ? '\r\n' : '\n';
    }
  }

  /** Whether `c` (followed by `next`) ends a record: LF, CR LF, or a CR alone in a file of lone CRs. */
  #isBreak(c: number, next: number): boolean {
    return c === LF || (c === CR && (next === LF || this.#loneCr));
  }

  /** Where the line holding `from` ends (its LF, or its CR in a file of lone CRs), or -1. */
  #lineEnd(from: number): number {
    return this.#buf.indexOf(this.#loneCr ? '\r' : '\n', from);
  }

  #drain(final: boolean): CsvRecord[] {
    const out: CsvRecord[] = [];
    if (this.#skipping) {
      const lf = this.#lineEnd(0);
      if (lf === -1) {
        this.#buf = '';
        return out;
      }
      this.#skipping = false;
      this.#pos = lf + 1;
      if (this.#loneCr && this.#buf.charCodeAt(lf + 1) === LF) this.#pos++;
      this.#line++;
    }
    while (this.#pos < this.#buf.length && this.#next(out, final)) {}
    return out;
  }

  #lineText(start: number): string {
    const lf = this.#lineEnd(start);
    return this.#buf.slice(start, lf === -1 ? this.#buf.length : lf).replace(/\r$/, '');
  }

  /** Resumes on the line after `start` (or once one comes), after a record lost to a problem. */
  #resumeAfter(start: number, startLine: number): void {
    const lf = this.#lineEnd(start);
    if (lf === -1) {
      this.#pos = this.#buf.length;
      this.#skipping = true;
      this.#line = startLine;
    } else {
      this.#pos = lf + 1;
      this.#line = startLine + 1;
    }
  }

  /** More text is needed to finish the record at `start`, unless it is already too long. */
  #needMore(out: CsvRecord[], start: number, startLine: number): boolean {
    if (this.#buf.length - start <= this.#maxRecordChars) return false;
    const text = this.#lineText(start);
    out.push({
      line: startLine,
      cells: [text.length > 200 ? `${text.slice(0, 200)}…` : text],
      problem: `the record is longer than ${Math.round(this.#maxRecordChars / 1024 / 1024)} MiB (is a quote never closed?)`,
    });
    this.#resumeAfter(start, startLine);
    return true;
  }

  /**
   * Reads the record at #pos into `out`; false when more text is needed. Until
   * the end, the last character is never consumed, so a look-ahead (CR LF,
   * `""`) always has the next character to look at; except a last LF, which
   * needs none: a line that has come in whole is read now, not when the next
   * text comes (a slow producer on stdin).
   */
  #next(out: CsvRecord[], final: boolean): boolean {
    const text = this.#buf;
    const n = text.length;
    const end = final || text.charCodeAt(n - 1) === LF ? n : n - 1;
    const start = this.#pos;
    const startLine = this.#line;
    const loneCr = this.#loneCr;
    if (start >= end) return false;
    const first = text.charCodeAt(start);
    // A blank line.
    if (first === LF || (first === CR && (this.#loneCr || text.charCodeAt(start + 1) === LF))) {
      this.#pos = start + (first === CR && text.charCodeAt(start + 1) === LF ? 2 : 1);
      this.#line++;
      return true;
    }
    const cells: string[] = [];
    let problem: string | undefined;
    let spanColumn = 0; // the first quoted cell that holds a line break
    let line = startLine;
    let i = start;
    for (;;) {
      let cell = '';
      if (i < end && text.charCodeAt(i) === QUOTE) {
        // A quoted cell.
        i++;
        let closed = false;
        for (;;) {
          const q = text.indexOf('"', i);
          if (q === -1 || q >= end) break;
          for (
            let lf = text.indexOf('\n', i);
            lf !== -1 && lf < q;
            lf = text.indexOf('\n', lf + 1)
          ) {
            line++;
            spanColumn ||= cells.length + 1;
          }
          if (this.#loneCr) {
            for (
              let cr = text.indexOf('\r', i);
              cr !== -1 && cr < q;
              cr = text.indexOf('\r', cr + 1)
            ) {
              if (text.charCodeAt(cr + 1) === LF) continue;
              line++;
              spanColumn ||= cells.length + 1;
            }
          }
          cell += text.slice(i, q);
          if (text.charCodeAt(q + 1) === QUOTE) {
            cell += '"';
            i = q + 2;
            continue;
          }
          i = q + 1;
          closed = true;
          break;
        }
        if (!closed) {
          if (!final) return this.#needMore(out, start, startLine);
          // Only this record is lost: resume on the line after it began.
          out.push({
            line: startLine,
            cells: [this.#lineText(start)],
            problem: `a quoted cell in column ${cells.length + 1} is never closed`,
          });
          this.#resumeAfter(start, startLine);
          return true;
        }
        if (i >= end && !final) return this.#needMore(out, start, startLine);
        const c = text.charCodeAt(i);
        if (i < end && c !== COMMA && !this.#isBreak(c, text.charCodeAt(i + 1))) {
          problem = `text after the closing quote in column ${cells.length + 1}; quote the whole cell and write inner quotes as ""`;
        }
      }
      // An unquoted cell, or what follows a quoted one up to the separator.
      const from = i;
      while (i < end) {
        const c = text.charCodeAt(i);
        if (c === COMMA || c === LF) break;
        if (c === CR && (loneCr || text.charCodeAt(i + 1) === LF)) break;
        if (c === QUOTE && problem === undefined) {
          problem = `a quote inside unquoted column ${cells.length + 1}; quote the whole cell and write inner quotes as ""`;
        }
        i++;
      }
      if (i >= end && !final) return this.#needMore(out, start, startLine);
      cells.push(from === i ? cell : cell + text.slice(from, i));
      if (i < end && text.charCodeAt(i) === COMMA) {
        i++;
        continue;
      }
      // End of record.
      if (i < end) {
        i += text.charCodeAt(i) === CR && text.charCodeAt(i + 1) === LF ? 2 : 1;
        line++;
      }
      break;
    }
    if (problem !== undefined && line > startLine + 1) {
      // A stray quote swallowed line breaks: lose only the line it is on.
      out.push({
        line: startLine,
        cells: [this.#lineText(start)],
        problem: `the quoted cell in column ${spanColumn} is not closed properly (its closing quote is not followed by a comma or a line end, read up to line ${line - 1})`,
      });
      this.#resumeAfter(start, startLine);
      return true;
    }
    out.push(
      problem === undefined ? { line: startLine, cells } : { line: startLine, cells, problem },
    );
    this.#pos = i;
    this.#line = line;
    return true;
  }
}

/** Parses a whole CSV text at once (see CsvReader). */
export function parseCsv(text: string): CsvTable {
  const reader = new CsvReader({ maxRecordChars: Number.POSITIVE_INFINITY });
  const records = reader.push(text);
  records.push(...reader.end());
  return { records, newline: reader.newline };
}

const NEEDS_QUOTES = /[",\r\n]/;

export function formatCsvCell(cell: string): string {
  return NEEDS_QUOTES.test(cell) ? `"${cell.replaceAll('"', '""')}"` : cell;
}

export function formatCsvRecord(cells: readonly string[]): string {
  // One empty cell alone would read back as a blank line, which is skipped.
  if (cells.length === 1 && cells[0] === '') return '""';
  return cells.map(formatCsvCell).join(',');
}
