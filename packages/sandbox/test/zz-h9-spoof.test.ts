import { test } from 'vitest';
import { python } from './helpers.js';
test('spoof', async () => {
  for (const policy of ['restricted', 'unsandboxed', 'trusted'] as const) {
    for (const prog of ['ctypes.CDLL(None).abort()', 'ctypes.string_at(0)', 'os.kill(os.getpid(), signal.SIGXCPU); time.sleep(1)',
      'import threading\nts=[threading.Thread(target=time.sleep, args=(3,)) for i in range(40)]\n[t.start() for t in ts]',
      'while True: os.fork() and None']) {
      const r = await python(prog, { policy, timeoutMs: 5000, limits: { cpuSeconds: 1, processes: 16 } }).catch(e => ({exitCode: 'ERR', signal: String(e), limit: e.limit, stderr: ''}));
      console.log('@@', policy, JSON.stringify(prog), r.exitCode, r.signal, r.limit, JSON.stringify(r.stderr.slice(-150)));
    }
  }
}, 60000);
