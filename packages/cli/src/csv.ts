/**
 * A small RFC 4180 CSV reader and writer. Reading never gives up on the whole
 * file: a malformed record is returned with its line number and a reason, and
 * reading goes on with the next line.
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

/**
 * Parses CSV text. Blank lines are skipped (write `""` for a record with one
 * empty cell). A quoted cell may hold commas, quotes written `""` and line
 * breaks. A malformed record that spans lines (an unterminated or stray
 * quote) costs only the line it starts on: reading resumes on the next line.
 */
export function parseCsv(text: string): CsvTable {
  const records: CsvRecord[] = [];
  const newline = /\r\n/.test(text.slice(0, text.indexOf('\n') + 1)) ? '\r\n' : '\n';
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0; // a byte-order mark is not data
  let line = 1;
  const n = text.length;

  const endOfLine = (from: number): number => {
    const at = text.indexOf('\n', from);
    return at === -1 ? n : at;
  };
  const lineText = (from: number): string => text.slice(from, endOfLine(from)).replace(/\r$/, '');

  while (i < n) {
    const start = i;
    const startLine = line;
    // A blank line.
    if (text[i] === '\n' || (text[i] === '\r' && text[i + 1] === '\n')) {
      i += text[i] === '\n' ? 1 : 2;
      line++;
      continue;
    }
    const cells: string[] = [];
    let problem: string | undefined;
    let spanColumn = 0; // the first quoted cell that holds a line break
    let cell = '';
    let done = false;
    while (!done) {
      if (text[i] === '"') {
        // A quoted cell.
        i++;
        let closed = false;
        while (i < n) {
          const c = text[i]!;
          if (c === '"') {
            if (text[i + 1] === '"') {
              cell += '"';
              i += 2;
              continue;
            }
            i++;
            closed = true;
            break;
          }
          if (c === '\n') {
            line++;
            spanColumn ||= cells.length + 1;
          }
          cell += c;
          i++;
        }
        if (!closed) {
          // Only this record is lost: resume on the line after it began.
          const restart = endOfLine(start);
          records.push({
            line: startLine,
            cells: [lineText(start)],
            problem: `a quoted cell in column ${cells.length + 1} is never closed`,
          });
          i = restart + 1;
          line = startLine + 1;
          cell = '';
          done = true;
          problem = 'unterminated';
          break;
        }
        if (
          i < n &&
          text[i] !== ',' &&
          text[i] !== '\n' &&
          !(text[i] === '\r' && text[i + 1] === '\n')
        ) {
          problem = `text after the closing quote in column ${cells.length + 1}; quote the whole cell and write inner quotes as ""`;
        }
      }
      // An unquoted cell, or what follows a quoted one up to the separator.
      while (
        i < n &&
        text[i] !== ',' &&
        text[i] !== '\n' &&
        !(text[i] === '\r' && text[i + 1] === '\n')
      ) {
        if (text[i] === '"' && problem === undefined) {
          problem = `a quote inside unquoted column ${cells.length + 1}; quote the whole cell and write inner quotes as ""`;
        }
        cell += text[i];
        i++;
      }
      cells.push(cell);
      cell = '';
      if (i < n && text[i] === ',') {
        i++;
        continue;
      }
      // End of record.
      if (i < n) {
        i += text[i] === '\n' ? 1 : 2;
        line++;
      }
      done = true;
    }
    if (problem === 'unterminated') continue;
    if (problem !== undefined && line > startLine + 1) {
      // A stray quote swallowed line breaks: lose only the line it is on.
      records.push({
        line: startLine,
        cells: [lineText(start)],
        problem: `the quoted cell in column ${spanColumn} is not closed properly (its closing quote is not followed by a comma or a line end, read up to line ${line - 1})`,
      });
      i = endOfLine(start) + 1;
      line = startLine + 1;
      continue;
    }
    records.push(
      problem === undefined ? { line: startLine, cells } : { line: startLine, cells, problem },
    );
  }
  return { records, newline };
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
