/**
 * What workers are sent as the driver: drivers/driver.R, or, when the build
 * byte-compiled its hot functions (dist/driver.bytecode,
 * scripts/driver-bytecode.mjs) from this very source, an R expression that
 * hands the driver those compiled functions when the worker's R is the
 * version that compiled them, and runs the source alone otherwise.
 *
 * With the JIT off, the driver's closures run in R's slower tree-walking
 * interpreter unless compiled, and compiling the row loop in a worker costs
 * it about 150 ms of CPU (the compiler's first use, then the loop); the
 * compiled functions are read in about 4 ms and need no compiler.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

interface BytecodeHeader {
  r: string;
  bytecode: number;
  sha256: string;
}

/** The driver program for `source` (drivers/driver.R), compiled when dist/driver.bytecode matches it. */
export function driverProgram(source: string, bytecodeUrl: URL): string {
  let header: BytecodeHeader;
  let literal: string;
  try {
    const text = readFileSync(bytecodeUrl, 'utf8');
    const newline = text.indexOf('\n');
    header = JSON.parse(text.slice(0, newline));
    literal = text.slice(newline + 1).trimEnd();
  } catch {
    return source; // not built here (no R at build time): the source
  }
  const sha256 = createHash('sha256').update(source).digest('hex');
  const valid =
    header.sha256 === sha256 &&
    typeof header.r === 'string' &&
    Number.isInteger(header.bytecode) &&
    literal.startsWith('"') &&
    literal.endsWith('"');
  if (!valid) return source; // compiled from another version of the driver
  // One expression, as the bootstrap evaluates the first one: the driver
  // given the compiled functions on the R that compiled them, else alone.
  return (
    `(function(driver) if (identical(R.version.string, ${JSON.stringify(header.r)}) && ` +
    `identical(.Internal(bcVersion()), ${header.bytecode}L)) ` +
    `function(con) driver(con, unserialize(charToRaw(${literal}))) else driver)(\n${source})`
  );
}
