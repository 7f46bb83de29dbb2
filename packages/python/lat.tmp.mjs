import { Registry, Value } from '@improv/extfn-core';
import { python } from '@improv/extfn-python';

const runner = python({
  interpreter: '/usr/bin/python3',
  policy: process.argv[2] ?? 'restricted',
  maxWorkers: 1,
});
const reg = new Registry({ runners: [runner], cache: false });
reg.register({
  name: 'add',
  language: 'python',
  body: 'result = args[0] + args[1]',
  argTypes: ['number', 'number'],
  returnType: 'number',
});
const args = [Value.number(1), Value.number(2)];
for (let i = 0; i < 500; i++) await reg.eval('add', args);
const times = [];
for (let i = 0; i < 5000; i++) {
  const t = performance.now();
  await reg.eval('add', args);
  times.push(performance.now() - t);
}
times.sort((a, b) => a - b);
const q = (p) => (times[Math.floor(times.length * p)] * 1000).toFixed(0);
console.log(
  'p50',
  q(0.5),
  'p90',
  q(0.9),
  'p99',
  q(0.99),
  'max',
  (times.at(-1) * 1000).toFixed(0),
  'µs; mean',
  ((times.reduce((a, b) => a + b) / times.length) * 1000).toFixed(0),
);
await reg.close();
