/**
 * The driver workers are sent (src/driver-program.ts): the build's
 * byte-compiled hot functions only when they were compiled from this very
 * source, and then answering exactly as the source does, frame for frame
 * and byte for byte; on another R version the same program runs the source.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, test } from 'vitest';
import { driverProgram } from '../src/driver-program.js';
import { DRIVER_PROGRAM, DRIVER_SOURCE } from '../src/index.js';
import { driverRun, line, restrictedOk, skipReason } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'extfn-r-program-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function bytecodeFile(header: object, literal = '"A\\n3\\n"') {
  const path = join(dir, `${Math.random().toString(36).slice(2)}.bytecode`);
  writeFileSync(path, `${JSON.stringify(header)}\n${literal}\n`);
  return pathToFileURL(path);
}

describe('which driver is sent', () => {
  test('the source when the build left no compiled driver, or one compiled from another source', () => {
    expect(driverProgram('function(con) 1', pathToFileURL(join(dir, 'absent')))).toBe(
      'function(con) 1',
    );
    const other = bytecodeFile({ r: 'R version 4.2.2', bytecode: 12, sha256: '0'.repeat(64) });
    expect(driverProgram('function(con) 1', other)).toBe('function(con) 1');
  });

  test('a compiled driver of this source is chosen by the worker R version, the source kept as the fallback', () => {
    const source = 'function(con) 1';
    const sha256 = createHash('sha256').update(source).digest('hex');
    const program = driverProgram(
      source,
      bytecodeFile({ r: 'R version 4.2.2', bytecode: 12, sha256 }),
    );
    expect(
      program.startsWith(
        '(function(driver) if (identical(R.version.string, "R version 4.2.2") && ',
      ),
    ).toBe(true);
    expect(program).toContain('identical(.Internal(bcVersion()), 12L)');
    expect(program).toContain('function(con) driver(con, unserialize(charToRaw("A\\n3\\n")))');
    expect(program.endsWith(`else driver)(\n${source})`)).toBe(true);
  });
});

/** A stream that crosses every per-row path: errors, NA, printing, RNG, globals, JSON and f64 calls, 3000 rows. */
function requests(program: string): Buffer {
  const source = Buffer.from(program);
  const n = 3000;
  const x = Float64Array.from({ length: n }, (_, i) => i * 0.25);
  const y = Float64Array.from({ length: n }, (_, i) => (i % 50) * 0.5);
  const body = [
    'if (args[[1]] == 3) stop("three")',
    'if (args[[1]] == 4) cat("four\\n")',
    'if (args[[1]] == 5) leaked <<- 1',
    'result <- if (args[[1]] == 6) NA_real_ else args[[1]] + runif(1) * (args[[1]] > 7)',
  ].join('\n');
  return Buffer.concat([
    Buffer.from(`${source.length}\n`),
    source,
    line({
      op: 'load',
      id: 1,
      fn: { name: 'f', body, argTypes: ['number'], returnType: 'number' },
    }),
    line({ op: 'call', id: 2, rows: Array.from({ length: 12 }, (_, i) => [i]) }),
    line({
      op: 'load',
      id: 3,
      fn: {
        name: 'g',
        body: 'result <- args[[1]] * 1.05^args[[2]]',
        argTypes: ['number', 'number'],
        returnType: 'number',
      },
    }),
    line({ op: 'callf64', id: 4, rows: n, bytes: 16 * n }),
    Buffer.from(x.buffer),
    Buffer.from(y.buffer),
    line({ op: 'callf64', id: 5, rows: n, bytes: 16 * n }),
    Buffer.from(x.buffer),
    Buffer.from(y.buffer),
    line({ op: 'exit' }),
  ]);
}

/** A driver's output with its timings (`workMs`, a figure per answer) set to 0: what must match byte for byte. */
function steady(stdout: Buffer): string {
  const text = stdout.toString('latin1');
  expect(text).toMatch(/"workMs":[0-9.]+/); // the answers carry them
  return text.replace(/"workMs":[0-9.]+/g, '"workMs":0');
}

/** Whether this build byte-compiled the driver (R at build time, this very source). */
const compiled = DRIVER_PROGRAM !== DRIVER_SOURCE;
const why = !restrictedOk
  ? skipReason
  : 'skipped: the build did not byte-compile this driver (no R at build time, or driver.R changed since: pnpm build)';

describe.skipIf(!restrictedOk || !compiled)(
  `the compiled driver in a worker ${restrictedOk && compiled ? '' : why}`,
  () => {
    test('answers byte for byte as the source does (timings aside), and so does its fallback on another R', async () => {
      const fromSource = await driverRun(true, requests(DRIVER_SOURCE));
      expect(fromSource.exit.exitCode, fromSource.stderr).toBe(0);
      const fromProgram = await driverRun(true, requests(DRIVER_PROGRAM));
      expect(steady(fromProgram.stdout)).toBe(steady(fromSource.stdout));
      const otherR = DRIVER_PROGRAM.replace(
        /^if \(identical\(R\.version\.string, "[^"]*"\)/,
        'if (identical(R.version.string, "R version 0.0.0")',
      );
      const fallback = await driverRun(true, requests(otherR));
      expect(steady(fallback.stdout)).toBe(steady(fromSource.stdout));
      // the stream really crossed the paths it is meant to
      const text = fromSource.stdout.toString('latin1');
      expect(text).toContain('Error: three');
      expect(text).toContain("NA (double, R's missing value)");
    });
  },
);
