/**
 * CSV formula neutralisation. A spreadsheet program opening a CSV file takes
 * a cell that starts with =, +, -, @ (or a tab or CR) as a formula, and a
 * formula can run commands or send data away. Results are model text, so by
 * default such a cell is written with a leading apostrophe, which spreadsheet
 * programs show as text. A cell that is a number (-5, +1e3, -Infinity, as
 * `eval` reads numbers) is not text and stays as it is: it can hold no formula.
 */
import { parseCell } from './cells.js';

const FORMULA_START = /^[=+\-@\t\r]/;

export function neutraliseFormula(cell: string): string {
  if (!FORMULA_START.test(cell)) return cell;
  return parseCell(cell, 'number').ok ? cell : `'${cell}`;
}
