// Adds up the vitest JSON reports of every package into one closing line, so
// a reader (and CI) sees the whole run's count: "Tests: N passed, N failed, N skipped",
// preceded by one "FAILED" line per failed test (package, file, name, first line
// of the message), so a log's tail alone says what failed. Errors outside any
// test (scripts/vitest-run-errors.mjs writes them to test-errors.json) fail the
// run too, and get a "FAILED" line each: vitest exits 1 on them with every test passed.
// Arguments, when given, name the package directories to count (a partial run).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const only = process.argv.slice(2).map((dir) => dir.replace(/\/+$/, ''));
const roots = ['packages', 'examples'];
let passed = 0;
let failed = 0;
let skipped = 0;
let errored = 0;
const missing = [];
const failures = [];
/** A failure message's first line, cut to 300 characters. */
const firstLine = (text) => (text ?? '').split('\n')[0].slice(0, 300);
for (const root of roots) {
  for (const name of readdirSync(root)) {
    const dir = join(root, name);
    if (!existsSync(join(dir, 'vitest.config.ts'))) continue;
    if (only.length > 0 && !only.includes(dir)) continue;
    const errorsFile = join(dir, 'test-errors.json');
    if (existsSync(errorsFile)) {
      const { reason, errors } = JSON.parse(readFileSync(errorsFile, 'utf8'));
      if (reason === 'interrupted') failures.push(`FAILED ${dir}: the run was interrupted`);
      for (const error of errors) {
        const test = error.test ? ` > ${error.test}` : '';
        const where = error.file ? ` (${relative(process.cwd(), error.file)}${test})` : '';
        failures.push(
          `FAILED ${dir}: error outside a test${where}: ${error.name}: ${firstLine(error.message)}`,
        );
      }
      errored += errors.length + (reason === 'interrupted' ? 1 : 0);
    }
    const report = join(dir, 'test-results.json');
    if (!existsSync(report)) {
      missing.push(dir);
      continue;
    }
    const json = JSON.parse(readFileSync(report, 'utf8'));
    passed += json.numPassedTests;
    failed += json.numFailedTests;
    skipped += json.numPendingTests + json.numTodoTests;
    for (const file of json.testResults) {
      const where = relative(process.cwd(), file.name);
      for (const test of file.assertionResults) {
        if (test.status !== 'failed') continue;
        failures.push(`FAILED ${where} > ${test.fullName}: ${firstLine(test.failureMessages[0])}`);
      }
      // a file that failed before its tests ran (an import, a hook) has no failed test
      if (file.status === 'failed' && !file.assertionResults.some((t) => t.status === 'failed'))
        failures.push(`FAILED ${where}: ${firstLine(file.message)}`);
    }
  }
}
for (const line of failures) console.log(line);
if (missing.length) console.log(`no test report from: ${missing.join(', ')}`);
if (errored) console.log(`errors outside tests: ${errored}`);
console.log(`Tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exitCode = failed > 0 || errored > 0 || missing.length > 0 ? 1 : 0;
