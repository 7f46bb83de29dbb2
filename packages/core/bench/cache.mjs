// Cache-hit latency of Registry.eval for a pure function, next to the same
// lookup done by hand on a plain Map (the floor any cache can reach).
import { Registry, Value } from '../dist/index.js';

const runner = {
  specificationVersion: 'v1',
  language: 'fake',
  packageName: 'bench',
  capabilities: { isolated: false, warmWorkers: false, batch: false },
  probe: async () => ({ language: 'fake', available: true, detail: 'bench' }),
  call: async (_fn, args) => Value.number(args[0].value + args[1].value),
};

const registry = new Registry({ runners: [runner] });
registry.register({
  name: 'add',
  language: 'fake',
  body: 'add',
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: true,
});
const keys = 1000;
const rows = Array.from({ length: keys }, (_, i) => [Value.number(i), Value.number(0.5)]);
for (const row of rows) await registry.eval('add', row); // fill

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

async function measure(label, fn, rounds = 200) {
  const perCall = [];
  for (let r = 0; r < rounds; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < keys; i++) await fn(rows[i]);
    perCall.push(Number(process.hrtime.bigint() - start) / keys);
  }
  perCall.sort((a, b) => a - b);
  return { label, median: percentile(perCall, 0.5), p99: percentile(perCall, 0.99) };
}

const map = new Map(
  rows.map((row) => [`${row[0].value};${row[1].value}`, Value.number(row[0].value + 0.5)]),
);
const baseline = await measure('plain Map.get + await (baseline)', async (row) =>
  map.get(`${row[0].value};${row[1].value}`),
);
const hit = await measure('Registry.eval, pure cache hit', (row) => registry.eval('add', row));
const batchStart = process.hrtime.bigint();
for (let r = 0; r < 200; r++) await registry.evalBatch('add', rows);
const batchNs = Number(process.hrtime.bigint() - batchStart) / (200 * keys);

console.log('\ncore: pure-result cache (per call, ns; averages over 1 000-call rounds)');
console.log('| path | median ns | p99 ns | ratio to baseline |');
console.log('| --- | ---: | ---: | ---: |');
for (const m of [baseline, hit]) {
  console.log(
    `| ${m.label} | ${m.median.toFixed(0)} | ${m.p99.toFixed(0)} | ${(m.median / baseline.median).toFixed(1)}x |`,
  );
}
console.log(
  `| Registry.evalBatch, all rows cached | ${batchNs.toFixed(0)} | — | ${(batchNs / baseline.median).toFixed(1)}x |`,
);
console.log(
  `hits ${registry.cache.hits}, misses ${registry.cache.misses}; target: a hit under 2 000 ns`,
);
await registry.close();
