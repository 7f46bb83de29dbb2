/** The commands examples/model/README.md prints, run for real and compared with the expected files. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { cli, EXAMPLES, languageStatus, skipNote } from './helpers.js';

const cases = [
  {
    fn: 'distance.json',
    language: 'wasm',
    columns: 'x_km,y_km',
    expected: 'expected/distance.csv',
  },
  {
    fn: 'growth.json',
    language: 'python',
    columns: 'principal,rate,years',
    expected: 'expected/growth.csv',
  },
  { fn: 'tax.json', language: 'r', columns: 'income', expected: 'expected/tax.csv' },
];

describe('examples/model', async () => {
  for (const c of cases) {
    const status = await languageStatus(c.language);
    test.skipIf(!status.ready)(
      `${c.fn} over rows.csv gives ${c.expected}${skipNote(status)}`,
      async () => {
        const result = await cli(['run', c.fn, 'rows.csv', '--header', '--columns', c.columns]);
        expect(result.stderr).toMatch(/^improv-extfn: 6 row\(s\): 6 ok, 0 failed/);
        expect(result.exitCode).toBe(0);
        expect(result.stdout).toBe(await readFile(join(EXAMPLES, c.expected), 'utf8'));
      },
    );
  }

  const wasm = await languageStatus('wasm');
  test.skipIf(!wasm.ready)(
    `the examples printed by --help work from the repository root${skipNote(wasm)}`,
    async () => {
      const root = join(EXAMPLES, '..', '..');
      expect(await cli(['eval', 'examples/model/distance.json', '3', '4'], { cwd: root })).toEqual({
        exitCode: 0,
        stdout: '5\n',
        stderr: '',
      });
      const run = await cli(
        [
          'run',
          'examples/model/distance.json',
          'examples/model/rows.csv',
          '--header',
          '--columns',
          'x_km,y_km',
        ],
        { cwd: root },
      );
      expect(run.exitCode).toBe(0);
      expect(run.stdout).toBe(await readFile(join(EXAMPLES, 'expected/distance.csv'), 'utf8'));
    },
  );

  test('the package ships the files its --help examples use, the same as examples/model', async () => {
    const shipped = fileURLToPath(new URL('../examples/', import.meta.url));
    const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
    expect(pkg.files).toContain('examples');
    for (const name of ['distance.json', 'growth.json', 'rows.csv']) {
      expect(await readFile(join(shipped, name), 'utf8'), name).toBe(
        await readFile(join(EXAMPLES, name), 'utf8'),
      );
    }
  });

  const readme = await readFile(join(EXAMPLES, 'README.md'), 'utf8');
  test('the README shows each of these commands', () => {
    for (const c of cases) {
      expect(readme).toContain(`improv-extfn run ${c.fn} rows.csv --header --columns ${c.columns}`);
    }
  });
});
