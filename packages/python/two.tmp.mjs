import { Registry, Value } from '@improv/extfn-core';
import { python } from '@improv/extfn-python';

const runner = python({ interpreter: '/usr/bin/python3', policy: 'restricted', maxWorkers: 2 });
const reg = new Registry({ runners: [runner], cache: false });
reg.register({
  name: 'inc',
  language: 'python',
  body: 'result = args[0] + 1',
  argTypes: ['number'],
  returnType: 'number',
});
reg.register({
  name: 'neg',
  language: 'python',
  body: 'result = -args[0]',
  argTypes: ['number'],
  returnType: 'number',
});
const rows = Array.from({ length: 200_000 }, (_, i) => [Value.number(i)]);
const t = performance.now();
await Promise.all([reg.evalBatch('inc', rows), reg.evalBatch('neg', rows)]);
console.log(performance.now() - t, runner.stats());
await reg.close();
