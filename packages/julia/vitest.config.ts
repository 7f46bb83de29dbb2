import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The JSON report, and the errors outside tests it leaves out, feed the
    // repo-wide summary line printed by `pnpm test` (scripts/test-summary.mjs).
    reporters: [
      'default',
      ['json', { outputFile: 'test-results.json' }],
      '../../scripts/vitest-run-errors.mjs',
    ],
  },
});
