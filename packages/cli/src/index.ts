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
export { type CsvRecord, type CsvTable, formatCsvRecord, parseCsv } from './csv.js';
export { parseDescriptorText } from './descriptor-file.js';
export { EXIT_CODES_HELP, ExitCode } from './exit-codes.js';
export type { CliIo, CliStream } from './io.js';
export { processIo } from './io.js';
export { HELP, main } from './main.js';
export { loadRunner, RUNNER_PACKAGES, type RunnerLoad, type RunnerPackage } from './runners.js';
