import { afterAll, describe, expect, test } from 'vitest';
import { failure, noRestricted, registryWith, restrictedOk } from './helpers.js';

// A body that finds the protocol channel and writes a frame of its own: it can
// spoil only its own call, and it does so the same way in both modes.
const FORGE = [
  'import os',
  'for fd in range(3, 64):',
  '    try:',
  '        os.write(fd, b\'{"id":99,"forged":1}\\n\')',
  '    except OSError:',
  '        pass',
  'result = 1.0',
].join('\n');

describe.skipIf(!restrictedOk)(
  `a body writing to the protocol channel${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    const { registry } = registryWith('restricted', {
      forge: [FORGE, [], 'number'],
      ok: ['result = 2.0', [], 'number'],
    });
    afterAll(() => registry.close());

    test.each(['warm', 'oneShot'] as const)(
      'fails its own call in %s mode, and the next call is unaffected',
      async (mode) => {
        const error = await failure(registry.eval('forge', [], { mode }));
        expect(error.kind).toBe('Runtime');
        expect(error.message).toMatch(
          /^function forge: unexpected frame from the driver: \{"id":99,"forged":1\}/,
        );
        expect(await registry.eval('ok', [], { mode })).toEqual({ type: 'number', value: 2 });
      },
    );
  },
);

describe.skipIf(!restrictedOk)(`a fork bomb${restrictedOk ? '' : ` (${noRestricted})`}`, () => {
  test('is bounded by the process limit and reported as such', async () => {
    const body = [
      'import os, time',
      'while True:',
      '    if os.fork() == 0:',
      '        time.sleep(30)',
      '        os._exit(0)',
    ].join('\n');
    const { registry } = registryWith('restricted', { bomb: [body, [], 'number'] });
    try {
      const error = await failure(
        registry.eval('bomb', [], { mode: 'oneShot', timeoutMs: 10_000 }),
      );
      expect(error.kind).toBe('Runtime');
      expect(error.message).toMatch(/BlockingIOError/);
      expect(error.limit).toBe('processes');
    } finally {
      await registry.close();
    }
  });
});
