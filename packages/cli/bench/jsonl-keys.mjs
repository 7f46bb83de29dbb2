// What the checks on JSON lines rows cost: 100,000 rows through JSON.parse
// alone, then with the duplicate-key check (json-keys.ts) and the UTF-8 check
// (utf8.ts) a row gets before it runs, and through the whole row reader
// (jsonl-rows.ts); best of 21 rounds, interleaved. Run: node bench/jsonl-keys.mjs
import { duplicateKey } from '../dist/json-keys.js';
import { JsonLinesRows } from '../dist/jsonl-rows.js';
import { firstBadCharacter } from '../dist/utf8.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000);
const ROUNDS = 21;
const sets = {
  'objects of 5 keys, 3 strings': Array.from(
    { length: ROWS },
    (_, i) =>
      `{"id":"row-${i}","x":${i},"y":${i % 7},"label":"a \\"quoted\\" text: ${i}","at":"2025-03-31T12:00:00Z"}`,
  ),
  'objects {"x","y"}': Array.from({ length: ROWS }, (_, i) => `{"x":${i},"y":${i % 7}}`),
  'arrays [x, y]': Array.from({ length: ROWS }, (_, i) => `[${i},${i % 7}]`),
};
const fn = {
  name: 'distance',
  language: 'wasm',
  body: 'wat:',
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: true,
};
let sink = 0;
const cases = {
  'JSON.parse': (lines) => {
    for (const line of lines) sink += JSON.parse(line) ? 1 : 0;
  },
  '+ checks': (lines) => {
    for (const line of lines) {
      if (firstBadCharacter(line) !== -1) sink++;
      if (duplicateKey(line, JSON.parse(line))) sink++;
    }
  },
  'row reader': (lines) => {
    const reader = new JsonLinesRows(fn, lines[0].startsWith('{') ? { columns: ['x', 'y'] } : {});
    for (let i = 0; i < lines.length; i++)
      sink += reader.read({ line: i + 1, text: lines[i] }) ? 1 : 0;
  },
};
for (const [name, lines] of Object.entries(sets)) {
  const best = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [label, run] of Object.entries(cases)) {
      const started = performance.now();
      run(lines);
      best[label] = Math.min(best[label] ?? Number.POSITIVE_INFINITY, performance.now() - started);
    }
  }
  const extra = best['+ checks'] - best['JSON.parse'];
  console.log(
    `${ROWS} ${name}: ${Object.entries(best)
      .map(([label, ms]) => `${label} ${ms.toFixed(1)} ms`)
      .join(
        ', ',
      )}; the checks add ${extra.toFixed(1)} ms (${((extra / ROWS) * 1e6).toFixed(0)} ns a row)`,
  );
}
if (sink < 0) console.log(sink);
