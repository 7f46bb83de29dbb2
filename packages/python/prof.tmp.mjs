import { Registry, Value } from '@improv/extfn-core';
import { python } from '@improv/extfn-python';

const runner = python({ interpreter: '/usr/bin/python3', policy: 'restricted' });
const reg = new Registry({ runners: [runner], cache: false });
reg.register({
  name: 'add',
  language: 'python',
  body: 'result = args[0] + args[1]',
  argTypes: ['number', 'number'],
  returnType: 'number',
});
const rows = Array.from({ length: 100000 }, (_, i) => [Value.number(i), Value.number(0.5)]);
for (let k = 0; k < 8; k++) {
  let t = performance.now();
  await reg.evalBatch('add', rows);
  const a = performance.now() - t;
  t = performance.now();
  await runner.callBatch(reg.get('add'), rows, { timeoutMs: 5000 });
  console.log('registry', a.toFixed(1), 'runner', (performance.now() - t).toFixed(1));
}
await reg.close();
