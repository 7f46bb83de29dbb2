/** `improv-extfn run FN.json ROWS.(csv|jsonl) [-o OUT]`: one function over a table, through the batch path. */
import { type FileHandle, open } from 'node:fs/promises';
import { resolve } from 'node:path';
import { type ExternalFn, ExtFnError } from '@improv/extfn-core';
import { badInput, usage } from '../cli-error.js';
import { fileErrorReason, readDescriptor, readTextFile } from '../descriptor-file.js';
import { EXIT_CODES_HELP, ExitCode } from '../exit-codes.js';
import type { CliIo } from '../io.js';
import { parseColumns, parseCommandLine, parseTimeout, wantsJson } from '../options.js';
import { ProgressBar } from '../progress.js';
import { exitCodeForKind, reportFailure } from '../report.js';
import { openRegistry } from '../session.js';
import {
  errorText,
  formatFromPath,
  isFailure,
  MALFORMED,
  type RowOutcome,
  readCsvTable,
  readJsonLinesTable,
  type Table,
  type TableFormat,
  type TableOptions,
  writeTable,
} from '../table.js';

export const RUN_HELP = `Usage: improv-extfn run FN.json ROWS.csv|ROWS.jsonl [options]

Evaluates the function in FN.json on every row of a table and writes each row
back with its result, or its error, beside it, in the table's own format:
  CSV          the row's cells, then a "result" and an "error" column
  JSON lines   {"args":[...],"result":...} for an array row, the row's own keys
               plus "result" or "error" for an object row
A row that cannot be read (bad CSV quoting, wrong cell count, a cell that is not
of its declared type) is reported with its line number; the other rows are
still evaluated. A summary goes to stderr; a progress bar too, on a terminal.

Rows:
  CSV          RFC 4180: commas, "quoted cells" with "" for a quote and line
               breaks inside. Cells are read as in eval (see improv-extfn eval --help).
               Blank lines are skipped; write "" for one empty cell.
               Without --header each row holds exactly the arguments, in order.
  JSON lines   one row per line: an array of arguments ([3, 4]), or an object
               ({"x": 3, "y": 4}) with --columns naming the keys. Values as JSON:
               numbers (or "NaN", "Infinity"), true/false, strings, ISO strings
               for datetimes, integers for enums.

Options:
  -o, --output FILE    write the rows there instead of stdout
      --header         the first CSV line names the columns (it is never guessed)
      --columns LIST   which columns hold the arguments, in declared order:
                       header names or JSON keys, or 1-based numbers (rate,years or 2,3);
                       other columns are kept in the output
      --format FMT     csv or jsonl, when ROWS has another extension or is - (stdin)
  -n, --name NAME      the function to use when FN.json holds several
      --timeout TIME   wall-clock limit per row: milliseconds, or seconds with s (default 5s)
      --json           print the summary as one JSON object (on stderr)
      --no-progress    never draw the progress bar
  -h, --help           show this help

Example:
  improv-extfn run examples/model/growth.json examples/model/rows.csv --header \\
    --columns principal,rate,years -o growth.csv

${EXIT_CODES_HELP}
`;

interface Summary {
  rows: number;
  ok: number;
  failed: number;
  errors: Record<string, number>;
  seconds: number;
  rowsPerSecond: number;
  output: string | null;
}

/** Problems listed on stderr before the summary; the output file has them all. */
const LISTED_PROBLEMS = 10;

function readTable(
  text: string,
  format: TableFormat,
  fn: ExternalFn,
  options: TableOptions,
): Table {
  return format === 'csv' ? readCsvTable(text, fn, options) : readJsonLinesTable(text, fn, options);
}

export async function runCommand(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const json = wantsJson(argv);
  let out: FileHandle | undefined;
  try {
    const { values, positionals } = parseCommandLine('run', argv, {
      output: { type: 'string', short: 'o' },
      header: { type: 'boolean' },
      columns: { type: 'string' },
      format: { type: 'string' },
      name: { type: 'string', short: 'n' },
      timeout: { type: 'string' },
      json: { type: 'boolean' },
      'no-progress': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    });
    if (values.help) {
      io.stdout.write(RUN_HELP);
      return ExitCode.Ok;
    }
    if (positionals.length !== 2) {
      throw usage(
        `run needs a descriptor file and a rows file, got ${positionals.length} argument(s)`,
        'improv-extfn run FN.json ROWS.csv [-o OUT]; see --help',
      );
    }
    const [fnFile, rowsFile] = positionals as [string, string];
    const timeoutMs = parseTimeout(values.timeout as string | undefined);
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
    const fn = await readDescriptor(fnFile, io.cwd, values.name as string | undefined);
    let text: string;
    if (rowsFile === '-') {
      if (!io.readStdin) throw usage('this environment has no standard input to read rows from');
      text = await io.readStdin();
    } else {
      text = await readTextFile(rowsFile, io.cwd, 'rows file');
    }
    const table = readTable(text, format, fn, {
      header: Boolean(values.header),
      ...(columns ? { columns } : {}),
    });

    const outFile = values.output as string | undefined;
    // Opened before the run, so an unwritable path fails before any work is done.
    if (outFile !== undefined) out = await openOutput(outFile, io.cwd);
    const registry = await openRegistry(fn, io, timeoutMs);
    const started = performance.now();
    const wellFormed = table.rows.filter((row) => row.args !== undefined);
    const progress =
      io.stderr.isTTY && !values['no-progress'] && !json
        ? new ProgressBar(
            io.stderr,
            io.progressDelayMs === undefined ? {} : { delayMs: io.progressDelayMs },
          )
        : undefined;
    let results: Awaited<ReturnType<typeof registry.evalBatch>>;
    try {
      results = await registry.evalBatch(
        fn.name,
        wellFormed.map((row) => row.args!),
        {
          ...(io.signal ? { signal: io.signal } : {}),
          ...(progress
            ? { onProgress: (done: number, total: number) => progress.update(done, total) }
            : {}),
        },
      );
    } finally {
      progress?.stop();
      await registry.close();
    }
    if (io.signal?.aborted) return ExitCode.Interrupted;
    const seconds = (performance.now() - started) / 1000;

    // Results come back in the order of the well-formed rows; malformed rows keep their problem.
    let next = 0;
    const outcomes: RowOutcome[] = table.rows.map((row) =>
      row.problem !== undefined ? { kind: MALFORMED, message: row.problem } : results[next++]!,
    );
    const output = writeTable(table, outcomes, fn);
    if (out) {
      await out.writeFile(output);
      await out.close();
      out = undefined;
    } else {
      io.stdout.write(output);
    }

    const errors: Record<string, number> = {};
    const problems: string[] = [];
    outcomes.forEach((outcome, i) => {
      if (!isFailure(outcome)) return;
      errors[outcome.kind] = (errors[outcome.kind] ?? 0) + 1;
      if (problems.length < LISTED_PROBLEMS) {
        const text = errorText(outcome, fn);
        problems.push(outcome.kind === MALFORMED ? text : `line ${table.rows[i]!.line}: ${text}`);
      }
    });
    const failed = Object.values(errors).reduce((a, b) => a + b, 0);
    const summary: Summary = {
      rows: table.rows.length,
      ok: table.rows.length - failed,
      failed,
      errors,
      seconds: Number(seconds.toFixed(3)),
      rowsPerSecond: seconds > 0 ? Math.round(table.rows.length / seconds) : 0,
      output: outFile ?? null,
    };
    io.stderr.write(json ? `${JSON.stringify(summary)}\n` : formatSummary(summary, problems));

    if (failed === 0) return ExitCode.Ok;
    const environmental = outcomes.find(
      (o) => ExtFnError.isInstance(o) && exitCodeForKind(o.kind) === ExitCode.Unavailable,
    );
    return environmental ? ExitCode.Unavailable : ExitCode.FunctionError;
  } catch (error) {
    if (io.signal?.aborted) return ExitCode.Interrupted;
    return reportFailure(error, io, json);
  } finally {
    await out?.close();
  }
}

async function openOutput(path: string, cwd: string): Promise<FileHandle> {
  try {
    return await open(resolve(cwd, path), 'w');
  } catch (error) {
    throw badInput(
      `cannot write ${path}: ${fileErrorReason(error, 'its directory does not exist')}`,
      'pick a path in a directory that exists and that you can write to',
    );
  }
}

function formatSummary(summary: Summary, problems: readonly string[]): string {
  const n = (x: number) => x.toLocaleString('en-US');
  const kinds = Object.entries(summary.errors)
    .map(([kind, count]) => `${kind} ${n(count)}`)
    .join(', ');
  let text = '';
  for (const problem of problems) text += `  ${problem.split('\n')[0]}\n`;
  if (summary.failed > problems.length) {
    text += `  … and ${n(summary.failed - problems.length)} more (see the output)\n`;
  }
  text +=
    `improv-extfn: ${n(summary.rows)} row(s): ${n(summary.ok)} ok, ${n(summary.failed)} failed` +
    (kinds ? ` (${kinds})` : '') +
    ` in ${summary.seconds.toFixed(2)} s, ${n(summary.rowsPerSecond)} rows/s` +
    (summary.output ? `; written to ${summary.output}` : '') +
    '\n';
  return text;
}
