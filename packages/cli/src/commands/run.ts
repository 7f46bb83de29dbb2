/** `improv-extfn run FN.json ROWS.(csv|jsonl) [-o OUT]`: one function over a table, streamed through the batch path. */
import { usage } from '../cli-error.js';
import { CsvReader } from '../csv.js';
import { CsvRows } from '../csv-rows.js';
import { readDescriptor } from '../descriptor-file.js';
import { examplePath } from '../examples.js';
import { EXIT_CODES_HELP, ExitCode } from '../exit-codes.js';
import { openRows, type TextSource } from '../input.js';
import { type CliIo, interruptedBy, interruptedExitCode } from '../io.js';
import { checkLibrariesFlag, parseLibraries } from '../libraries-flag.js';
import {
  parseColumns,
  parseCommandLine,
  parseSize,
  parseTimeout,
  rejectNotUtf8,
  wantsJson,
} from '../options.js';
import { fileSink, type RowSink, streamSink } from '../output.js';
import { ProgressBar } from '../progress.js';
import { reportFailure } from '../report.js';
import { HOST_KINDS, HostFailure, runPipeline } from '../row-pipeline.js';
import { readPieces } from '../row-reader.js';
import { csvRowWriter, jsonRowWriter } from '../row-writer.js';
import { formatSummary, Tally } from '../run-summary.js';
import { checkMemoryFlag, loadRunners, openRegistry } from '../session.js';
import type { TableFormat, TableOptions } from '../table.js';
import { formatFromPath } from '../table.js';
import { isInteractive, rawStream } from '../terminal.js';

export function runHelp(cwd: string): string {
  const fn = examplePath('distance.json', cwd);
  const rows = examplePath('rows.csv', cwd);
  return `Usage: improv-extfn run FN.json ROWS.csv|ROWS.jsonl [options]

Evaluates the function in FN.json on every row of a table and writes each row
back with its result, or its error, beside it, in the table's own format:
  CSV          the row's cells, then a "result" and an "error" column
  JSON lines   {"args":[...],"result":...} for an array row, the row's own keys
               plus "result" or "error" for an object row
Rows are read, evaluated in batches and written as they go: a table of any
length runs in bounded memory. A row that cannot be read (bad CSV quoting, a
cell count other than the header's, a cell that is not of its declared type)
is reported with its line number; the other rows are still evaluated. A
summary goes to stderr; a progress bar too, on an interactive terminal.

Rows:
  CSV          RFC 4180: commas, "quoted cells" with "" for a quote and line
               breaks inside. Cells are read as in eval (see improv-extfn eval --help).
               Blank lines are skipped; write "" for one empty cell. Every output
               row has the header's width (without --header: the first row's).
               Without --header each row holds exactly the arguments, in order.
  JSON lines   one row per line: an array of arguments ([3, 4]), or an object
               ({"x": 3, "y": 4}) with --columns naming the keys; the first row
               decides which, a row of the other shape is that row's error. Values
               as JSON: numbers (or "NaN", "Infinity"), true/false, strings, ISO
               strings for datetimes, integers for enums. A key written twice in
               one object is that row's error (JSON would keep only the last).
  Encoding     UTF-8: a row with a byte that is not is that row's error (line,
               column, the byte), never run with U+FFFD in its place.

Options:
  -o, --output FILE      write the rows there (through a temporary file renamed at
                         the end: an interrupted or failed run leaves FILE as it was)
      --header           the first CSV line names the columns (it is never guessed)
      --columns LIST     which columns hold the arguments, in declared order:
                         header names or JSON keys, or 1-based numbers (rate,years or 2,3);
                         other columns are kept in the output
      --format FMT       csv or jsonl, when ROWS has another extension or is - (stdin)
  -n, --name NAME        the function to use when FN.json holds several
      --timeout TIME     wall-clock limit per row: 30s or 500ms (default 5s); a number
                         without a unit is milliseconds, from 1000
      --memory SIZE      memory limit of a call: 512MiB, 2GiB (default 1GiB; Wasm 16MiB)
      --libraries WHAT   what a Python or R body may import besides the standard library:
                         system (the interpreter's own packages; R's default), none,
                         venv:PATH (a Python virtual environment) or DIR[:DIR...]
                         (Python: the standard library only unless given)
      --runner PACKAGE   load a third-party runner package (repeatable; see improv-extfn --help)
      --keep-formulas    write CSV cells that start with = + - @ as they are (by default
                         a text cell starting so gets a leading ' so that spreadsheet
                         programs do not run it as a formula; numbers such as -5 never do)
      --json             print the summary as one JSON object (on stderr)
      --no-progress      never draw the progress bar
  -h, --help             show this help

FN.json may be - (standard input) when ROWS is a file.

Example:
  improv-extfn run ${fn} ${rows} \\
    --header --columns x_km,y_km -o distance.csv

A row that fails for a reason of the machine's (no bubblewrap, interpreter
missing) stops the run at once with that reason and its fix (exit 3): every
other row would fail the same way.

${EXIT_CODES_HELP}
`;
}

export async function runCommand(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const started = performance.now();
  const json = wantsJson(argv);
  let sink: RowSink | undefined;
  let outFile: string | undefined;
  let source: TextSource | undefined;
  let tally: Tally | undefined;
  try {
    const line = parseCommandLine(
      'run',
      argv,
      {
        output: { type: 'string', short: 'o' },
        header: { type: 'boolean' },
        columns: { type: 'string' },
        format: { type: 'string' },
        name: { type: 'string', short: 'n' },
        timeout: { type: 'string' },
        memory: { type: 'string' },
        libraries: { type: 'string' },
        runner: { type: 'string', multiple: true },
        'keep-formulas': { type: 'boolean' },
        json: { type: 'boolean' },
        'no-progress': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      io.argvBytes,
    );
    const { values, positionals } = line;
    if (values.help) {
      io.stdout.write(runHelp(io.cwd));
      return ExitCode.Ok;
    }
    if (positionals.length !== 2) {
      throw usage(
        `run needs a descriptor file and a rows file, got ${positionals.length} argument(s)`,
        'improv-extfn run FN.json ROWS.csv [-o OUT]; see --help',
      );
    }
    rejectNotUtf8('run', line, (i) =>
      i === 0 ? 'the descriptor file name' : 'the rows file name',
    );
    const [fnFile, rowsFile] = positionals as [string, string];
    if (fnFile === '-' && rowsFile === '-') {
      throw usage(
        'the descriptor and the rows cannot both come from standard input',
        'put one of them in a file',
      );
    }
    const timeoutMs = parseTimeout(values.timeout as string | undefined);
    const memoryBytes = parseSize(values.memory as string | undefined, '--memory');
    const columns = parseColumns(values.columns as string | undefined);
    const formatFlag = values.format as string | undefined;
    if (formatFlag !== undefined && formatFlag !== 'csv' && formatFlag !== 'jsonl') {
      throw usage(
        `--format ${JSON.stringify(formatFlag)} is not a table format`,
        'use --format csv or --format jsonl',
      );
    }
    const format = (formatFlag as TableFormat | undefined) ?? formatFromPath(rowsFile);
    if (!format) {
      throw usage(
        `cannot tell the format of ${rowsFile} from its name`,
        'name it .csv, .jsonl or .ndjson, or pass --format csv|jsonl',
      );
    }
    if (values.header && format !== 'csv') {
      throw usage(
        '--header is for CSV; JSON lines rows name their keys themselves',
        'drop --header',
      );
    }
    const libraries = parseLibraries(values.libraries as string | undefined, io.cwd);
    const runners = await loadRunners((values.runner as string[] | undefined) ?? [], io, {
      ...(memoryBytes !== undefined ? { memoryBytes } : {}),
      ...(libraries ? { libraries } : {}),
    });
    const fn = await readDescriptor(
      fnFile,
      io,
      values.name as string | undefined,
      runners.languages,
    );
    checkMemoryFlag(fn, runners, values.memory as string | undefined);
    checkLibrariesFlag(fn, runners);
    const tableOptions: TableOptions = {
      header: Boolean(values.header),
      file: rowsFile,
      ...(columns ? { columns } : {}),
    };
    // Checked before anything runs: --columns against the function, the rows file readable.
    const csv =
      format === 'csv'
        ? { reader: new CsvReader(), rows: new CsvRows(fn, tableOptions) }
        : undefined;
    source = await openRows(rowsFile, io);
    outFile = values.output as string | undefined;
    // Opened before the run, so an unwritable path fails before any work is done.
    sink = outFile !== undefined ? await fileSink(outFile, io.cwd) : streamSink(io.stdout);

    const registry = await openRegistry(fn, io, runners, {
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      // Repeated rows of a pure function are computed once, within a bounded cache.
      cache: { maxEntries: 10_000, maxBytes: 8 * 1024 * 1024 },
    });
    // Rows written to the terminal show progress themselves; the bar would tear them.
    const rowsOnTerminal = outFile === undefined && io.stdout.isTTY;
    const progress =
      isInteractive(io) && !values['no-progress'] && !json && !rowsOnTerminal
        ? new ProgressBar(
            rawStream(io.stderr),
            io.progressDelayMs === undefined ? {} : { delayMs: io.progressDelayMs },
          )
        : undefined;
    const size = source.size;
    const stop = new AbortController();
    sink.onClosed(() => stop.abort(new Error('the output was closed')));
    const signal = io.signal ? AbortSignal.any([io.signal, stop.signal]) : stop.signal;
    // The function's worker starts while the first rows are read (a slow pipe, a
    // large file's first batch); what it meets, the rows meet too.
    void registry.warmUp([fn.name], { signal }).catch(() => {});
    tally = new Tally(fn);
    const writer =
      format === 'csv'
        ? csvRowWriter(fn, {
            newline: () => csv!.reader.newline,
            bom: () => csv!.reader.bom,
            keepFormulas: Boolean(values['keep-formulas']),
          })
        : jsonRowWriter(fn);
    try {
      await runPipeline(readPieces(source, format, fn, tableOptions, csv, signal), {
        registry,
        fn,
        sink,
        writer,
        tally,
        signal,
        cancel: () => stop.abort(new Error('the run failed')),
        header: () => writer.header(csv?.rows.header),
        ...(progress
          ? {
              onProgress: (rows: number, bytes: number) =>
                progress.update(rows, size ? bytes / size : undefined),
            }
          : {}),
      });
    } finally {
      progress?.stop();
      await source.close();
      await registry.close();
    }
    if (io.signal?.aborted) return await interrupted(io, sink, outFile, tally.rows, json);
    // The destination stopped taking rows (a full disk, an I/O error): the run stopped there.
    if (sink.error) throw sink.error;
    if (sink.closed) {
      // The reader went away (`| head`): what it wanted it got.
      await sink.discard();
      return ExitCode.Ok;
    }
    await sink.commit();
    sink = undefined;

    const seconds = (performance.now() - started) / 1000;
    const summary = tally.summary(seconds, outFile ?? null);
    io.stderr.write(json ? `${JSON.stringify(summary)}\n` : formatSummary(summary, tally));
    return tally.failed === 0 ? ExitCode.Ok : ExitCode.FunctionError;
  } catch (error) {
    await source?.close();
    if (io.signal?.aborted && sink) {
      return await interrupted(io, sink, outFile, tally?.rows ?? 0, json);
    }
    if (io.signal?.aborted) return interruptedExitCode(io.signal);
    const code =
      error instanceof HostFailure
        ? reportFailure(error.error, io, json)
        : reportFailure(error, io, json);
    if (sink) {
      await sink.discard();
      const where =
        error instanceof HostFailure
          ? `stopped at line ${error.line}: ${HOST_KINDS.has(error.error.kind) ? 'every row needs this' : 'the function cannot load, so every row would fail the same way'}`
          : '';
      const output =
        outFile !== undefined || tally?.rows
          ? unchanged(outFile, tally?.rows ?? 0, sink.direct)
          : '';
      const text = [where, output].filter(Boolean).join('; ');
      if (text && !json) io.stderr.write(`improv-extfn: ${text}\n`);
    }
    return code;
  }
}

function unchanged(outFile: string | undefined, rows: number, direct?: boolean): string {
  if (outFile !== undefined && !direct) return `${outFile} was not changed`;
  if (rows === 0) return 'no rows were written';
  return outFile !== undefined
    ? `the rows written to ${outFile} are not all of them`
    : 'the rows written above are not all of them';
}

async function interrupted(
  io: CliIo,
  sink: RowSink,
  outFile: string | undefined,
  rows: number,
  json: boolean,
): Promise<ExitCode> {
  await sink.discard();
  const by = interruptedBy(io.signal);
  io.stderr.write(
    json
      ? `${JSON.stringify({ interrupted: by, rows, output: outFile ?? null, outputChanged: Boolean(sink.direct && outFile !== undefined && rows > 0) })}\n`
      : `improv-extfn: interrupted (${by}) after ${rows.toLocaleString('en-US')} row(s); ${unchanged(outFile, rows, sink.direct)}\n`,
  );
  return interruptedExitCode(io.signal);
}
