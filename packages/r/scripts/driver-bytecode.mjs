/**
 * `pnpm build`'s second step: dist/driver.bytecode, the driver byte-compiled
 * by the R on this machine (scripts/driver-bytecode.R). Workers whose R is
 * that very version load it instead of parsing the source, and so never start
 * R's compiler for the driver (src/driver-program.ts). Without R here, or if
 * it fails, there is no file and workers use the source: nothing else changes.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const driver = here('../drivers/driver.R');
const output = here('../dist/driver.bytecode');
const rscript = process.env.IMPROV_EXTFN_R || 'Rscript';
const sha256 = createHash('sha256').update(readFileSync(driver)).digest('hex');

rmSync(output, { force: true });
try {
  execFileSync(rscript, ['--vanilla', here('./driver-bytecode.R'), driver, output, sha256], {
    env: { ...process.env, R_DEFAULT_PACKAGES: 'base', R_ENABLE_JIT: '0', LC_ALL: 'C.UTF-8' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
} catch (error) {
  rmSync(output, { force: true });
  const why =
    error.code === 'ENOENT' ? `no ${rscript}` : String(error.stderr ?? error.message).trim();
  console.warn(`@improv/extfn-r: driver not byte-compiled (${why}); workers parse its source`);
}
