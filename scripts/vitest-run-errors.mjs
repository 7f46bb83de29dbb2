// A vitest reporter that writes what the JSON report leaves out: errors
// outside any test (an unhandled rejection or exception, a test worker that
// exited unexpectedly) and a run cut short. Any of these makes vitest exit 1
// with every test passed; scripts/test-summary.mjs reads this file so the
// summary names them.
// Written to test-errors.json only when there is something to say.
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export default class RunErrorsReporter {
  onInit(vitest) {
    this.file = join(vitest.config.root, 'test-errors.json');
    rmSync(this.file, { force: true });
  }

  onTestRunEnd(_modules, unhandledErrors, reason) {
    const errors = unhandledErrors.map((error) => ({
      name: error?.name ?? 'Error',
      message: String(error?.message ?? error),
      // vitest tags an error with the test file (and test) it came from, when known
      file: error?.VITEST_TEST_PATH,
      test: error?.VITEST_TEST_NAME,
    }));
    if (errors.length === 0 && reason !== 'interrupted') return;
    writeFileSync(this.file, `${JSON.stringify({ reason, errors }, null, 2)}\n`);
  }
}
