// Adds up the vitest JSON reports of every package into one closing line, so
// a reader (and CI) sees the whole run's count: "Tests: N passed, N failed, N skipped".
// Arguments, when given, name the package directories to count (a partial run).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const only = process.argv.slice(2).map((dir) => dir.replace(/\/+$/, ''));
const roots = ['packages', 'examples'];
let passed = 0;
let failed = 0;
let skipped = 0;
const missing = [];
for (const root of roots) {
  for (const name of readdirSync(root)) {
    const dir = join(root, name);
    if (!existsSync(join(dir, 'vitest.config.ts'))) continue;
    if (only.length > 0 && !only.includes(dir)) continue;
    const report = join(dir, 'test-results.json');
    if (!existsSync(report)) {
      missing.push(dir);
      continue;
    }
    const json = JSON.parse(readFileSync(report, 'utf8'));
    passed += json.numPassedTests;
    failed += json.numFailedTests;
    skipped += json.numPendingTests + json.numTodoTests;
  }
}
if (missing.length) console.log(`no test report from: ${missing.join(', ')}`);
console.log(`Tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exitCode = failed > 0 || missing.length > 0 ? 1 : 0;
