/**
 * Starting R's binary directly (src/direct.ts): the environment read from
 * R's own `R` script matches what the front end really sets up, and a body
 * sees the same R home, directories and libraries as under `Rscript --vanilla`.
 */
import { execFile } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, test } from 'vitest';
import { directR, frontEndOf } from '../src/direct.js';
import { hasR, RSCRIPT, restrictedOk, scopedRegistry, skipReason } from './helpers.js';

const run = promisify(execFile);

/** What R reports about itself, one line per item, through the front end. */
const REPORT =
  'cat(R.home(), Sys.getenv("R_SHARE_DIR"), Sys.getenv("R_INCLUDE_DIR"), Sys.getenv("R_DOC_DIR"), paste(.libPaths(), collapse = ":"), sep = "\\n")';

async function hostReport(): Promise<string[]> {
  const { stdout } = await run(RSCRIPT, ['--vanilla', '-e', REPORT], { encoding: 'utf8' });
  return stdout.trimEnd().split('\n');
}

describe('which R starts directly', () => {
  test('a front end outside /usr keeps its own start (its tree is bound whole)', () => {
    expect(directR('/opt/R/4.4.1/bin/Rscript')).toBeUndefined();
    expect(directR('/usr/nonexistent/bin/Rscript')).toBeUndefined();
    expect(frontEndOf('/opt/R/4.4.1/bin/Rscript')).toBe('/opt/R/4.4.1/bin/Rscript');
  });

  test.skipIf(!hasR)(
    `the environment read from R's script is the one Rscript sets up ${hasR ? '' : skipReason}`,
    async () => {
      const frontEnd = realpathSync(RSCRIPT);
      const direct = directR(frontEnd);
      if (!frontEnd.startsWith('/usr/')) {
        expect(direct).toBeUndefined();
        return;
      }
      expect(direct).toBeDefined();
      const [home, share, include, doc] = await hostReport();
      expect(direct?.binary).toBe(`${home}/bin/exec/R`);
      expect(direct?.env).toMatchObject({
        R_HOME: home,
        R_SHARE_DIR: share,
        R_INCLUDE_DIR: include,
        R_DOC_DIR: doc,
      });
      expect(frontEndOf(direct!.binary)).toBe(frontEnd);
    },
  );
});

describe.skipIf(!restrictedOk)(
  `a worker started directly ${restrictedOk ? '' : skipReason}`,
  () => {
    test('a body sees the R home, directories and libraries Rscript --vanilla gives', async () => {
      const { registry } = scopedRegistry({
        report: [`result <- paste(capture.output(${REPORT}), collapse = "\\n")`, [], 'text'],
      });
      const seen = await registry.eval('report', []);
      expect(seen.type === 'text' && seen.value.split('\n')).toEqual(await hostReport());
    });
  },
);
