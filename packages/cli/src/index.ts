/**
 * `@improv/extfn-cli`: the `improv-extfn` command, and the pieces it is made
 * of for tools that want them (the CSV reader, the doctor report).
 */

export { type CellResult, formatCell, jsonCell, parseCell } from './cells.js';
export { CliError, type CliErrorKind } from './cli-error.js';
export {
  collectReport,
  type DoctorReport,
  formatReport,
  type LanguageReport,
  type SandboxReport,
} from './commands/doctor.js';
export { CsvReader, type CsvRecord, type CsvTable, formatCsvRecord, parseCsv } from './csv.js';
export { parseDescriptorText } from './descriptor-file.js';
export { EXIT_CODES_HELP, ExitCode } from './exit-codes.js';
export { neutraliseFormula } from './formula.js';
export type { CliIo, CliStream } from './io.js';
export { Interrupted, processIo } from './io.js';
export { helpText, main } from './main.js';
export {
  loadExternalRunner,
  loadRunner,
  RUNNER_PACKAGES,
  RUNNERS_ENV,
  type RunnerLoad,
  type RunnerPackage,
} from './runners.js';
export { escapeForTerminal } from './terminal.js';
