import { test } from 'vitest';
import { python } from '/work/main/packages/sandbox/test/helpers.js';
test('spoof', async () => {
  for (const policy of ['restricted', 'unsandboxed'] as const) {
    for (const prog of ['sys.exit(152)', 'sys.exit(153)', 'time.sleep(1.2); sys.exit(137)', "sys.stderr.write('MemoryError\\n'); sys.exit(1)", 'os.kill(os.getpid(), signal.SIGXCPU); time.sleep(1)', 'os.kill(os.getpid(), signal.SIGTERM); time.sleep(1); print("alive")']) {
      const r = await python(prog, { policy, timeoutMs: 5000, limits: { cpuSeconds: 1 } });
      console.log(policy, prog, r.exitCode, r.signal, r.limit, r.stdout.toString());
    }
  }
}, 60000);
