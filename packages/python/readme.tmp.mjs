import { Registry, Value } from '@improv/extfn-core';
import { python } from '@improv/extfn-python';

const registry = new Registry({ runners: [python()], timeoutMs: 5_000 });
registry.register({
  name: 'hypot',
  language: 'python',
  pure: true,
  body: 'result = (args[0]**2 + args[1]**2) ** 0.5',
  argTypes: ['number', 'number'],
  returnType: 'number',
});
console.log(await registry.eval('hypot', [Value.number(3), Value.number(4)])); // → { type: 'number', value: 5 }
const cells = await registry.evalBatch('hypot', [
  [Value.number(5), Value.number(12)],
  [Value.number(8), Value.number(15)],
]); // → [{ type: 'number', value: 13 }, { type: 'number', value: 17 }]
console.log(cells, await registry.probe());
await registry.close(); // ends every worker
