/**
 * `run` on a slow producer: a row's result is written as soon as its line has
 * come in, while stdin stays open, not when more rows or the end arrive.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { CsvReader } from '../src/csv.js';
import { BIN, EXAMPLES, languageStatus, skipNote, TEST_ENV } from './helpers.js';

const wasm = await languageStatus('wasm');

function start(args: readonly string[]): ChildProcess {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [key, value] of Object.entries(TEST_ENV)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  return spawn(process.execPath, [BIN, ...args], {
    cwd: EXAMPLES,
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

/** Resolves with stdout once it holds `text`; rejects if the process ends first. */
function waitForOutput(child: ChildProcess, text: string): Promise<string> {
  let out = '';
  let err = '';
  child.stderr!.on('data', (chunk) => {
    err += chunk;
  });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (chunk) => {
      out += chunk;
      if (out.includes(text)) resolve(out);
    });
    child.on('close', (code) =>
      reject(new Error(`ended (exit ${code}) before ${JSON.stringify(text)}: ${out}${err}`)),
    );
  });
}

describe.skipIf(!wasm.ready)(`a slow producer on stdin${skipNote(wasm)}`, () => {
  for (const [format, lines, header, first] of [
    ['csv', 'x,y\n3,4\n', ['--header'], 'x,y,result,error\n3,4,5,\n'],
    ['jsonl', '[3,4]\n[5,12]\n', [], '{"args":[3,4],"result":5}\n{"args":[5,12],"result":13}\n'],
  ] as const) {
    test(`${format}: the rows sent so far are written while stdin is still open`, async () => {
      const child = start(['run', 'distance.json', '-', '--format', format, ...header]);
      try {
        const seen = waitForOutput(child, first);
        child.stdin!.write(lines);
        // stdin is not closed: before the fix the rows waited for more input or its end.
        expect(await seen).toBe(first);
        expect(child.exitCode).toBeNull();
        const exit = new Promise((resolve) => child.on('close', resolve));
        child.stdin!.end(format === 'csv' ? '6,8\n' : '[6,8]\n');
        expect(await exit).toBe(0);
      } finally {
        child.kill();
      }
    }, 60_000);
  }
});

describe('CsvReader', () => {
  test('a record whose line end has come is returned at once, not with the next text', () => {
    const reader = new CsvReader();
    expect(reader.push('x,y\n3,4\n').map((r) => r.cells)).toEqual([
      ['x', 'y'],
      ['3', '4'],
    ]);
    expect(reader.push('6,8\r\n').map((r) => r.cells)).toEqual([['6', '8']]);
    // A CR or a quote at the end still waits: the next character decides.
    expect(reader.push('"a""b"\r')).toEqual([]);
    expect(reader.push('\n"c\n').map((r) => r.cells)).toEqual([['a"b']]);
    expect(reader.push('d"\n').map((r) => r.cells)).toEqual([['c\nd']]);
    expect(reader.end()).toEqual([]);
  });
});
