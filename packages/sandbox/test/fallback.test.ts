/**
 * When bubblewrap cannot start: the fallback IMPROV_EXTFN_ALLOW_UNSANDBOXED
 * permits applies only then (a working bwrap stays restricted), Ubuntu's
 * AppArmor restriction is named with its narrow fix, and no fix text ever
 * advises weakening the sandbox. Failing hosts are played by stand-in
 * bubblewraps that fail the way the real one does there.
 */
import {
  chmodSync,
  copyFileSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import * as fixes from '../src/fixes.js';
import { APPARMOR_PROFILE, probeSandbox } from '../src/index.js';
import { hasBwrap, hasPython, linux, python } from './helpers.js';

const WEAKENING = /IMPROV_EXTFN_(ALLOW_UNSANDBOXED|TRUSTED)/;
const dir = mkdtempSync(join(tmpdir(), 'extfn-standin-'));
chmodSync(dir, 0o755);
const stand = (name: string) => {
  const path = join(dir, name);
  copyFileSync(new URL(`./fixtures/${name}`, import.meta.url), path);
  return path;
};
// copied where a leased sandbox uid can run them (the checkout may be private)
const APPARMOR_BWRAP = stand('bwrap-apparmor.sh');
const NO_USERNS_BWRAP = stand('bwrap-no-userns.sh');
const marker = join('/tmp', `extfn-fallback-${process.pid}`);
writeFileSync(marker, 'host-tmp', { mode: 0o644 });
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(marker, { force: true });
  delete process.env.IMPROV_EXTFN_ALLOW_UNSANDBOXED;
});

const READ_MARKER = `print(json.dumps(attempt(lambda: read(${JSON.stringify(marker)}))))`;
const canRun = linux && hasPython;

async function withFallbackAllowed<T>(run: () => Promise<T>): Promise<T> {
  process.env.IMPROV_EXTFN_ALLOW_UNSANDBOXED = '1';
  try {
    return await run();
  } finally {
    delete process.env.IMPROV_EXTFN_ALLOW_UNSANDBOXED;
  }
}

describe('IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 is a fallback, not an override', () => {
  test.skipIf(!canRun || !hasBwrap)(
    'with a working bwrap, restricted stays restricted',
    async () => {
      const probe = await probeSandbox({ policy: 'restricted', allowFallback: true });
      expect(probe).toMatchObject({ policy: 'restricted', ok: true });
      expect(probe.fallbackFrom).toBeUndefined();
      const result = await withFallbackAllowed(() => python(READ_MARKER, { policy: 'restricted' }));
      expect(JSON.parse(result.stdout.toString())).toEqual({ errno: 'ENOENT' });
    },
  );

  test.skipIf(!canRun)(
    'where bwrap cannot start, it falls back (and only when allowed)',
    async () => {
      const refused = await python(READ_MARKER, {
        policy: 'restricted',
        bwrapPath: NO_USERNS_BWRAP,
      }).catch((e: unknown) => e);
      expect(ExtFnError.isInstance(refused) && refused.kind).toBe('Sandbox');
      expect((refused as ExtFnError).fix).not.toMatch(WEAKENING);

      const probe = await probeSandbox({
        policy: 'restricted',
        bwrapPath: NO_USERNS_BWRAP,
        allowFallback: true,
      });
      expect(probe).toMatchObject({ policy: 'unsandboxed', ok: true });
      expect(probe.fallbackFrom?.problem).toMatch(/non-privileged user namespaces/);
      expect(probe.summary).toMatch(/^restricted cannot start here/);
      const result = await withFallbackAllowed(() =>
        python(READ_MARKER, { policy: 'restricted', bwrapPath: NO_USERNS_BWRAP }),
      );
      // the host's /tmp is visible: the fallback really runs without namespaces
      expect(JSON.parse(result.stdout.toString())).toEqual({ ok: 'host-tmp' });
    },
  );
});

describe('Ubuntu’s AppArmor restriction of user namespaces', () => {
  test.skipIf(!linux)('probeSandbox names it and offers the shipped profile', async () => {
    const probe = await probeSandbox({ policy: 'restricted', bwrapPath: APPARMOR_BWRAP });
    expect(probe.ok).toBe(false);
    expect(probe.appArmorUserns).toBe(true);
    expect(probe.problem).toMatch(/AppArmor restricts unprivileged user namespaces/);
    expect(probe.problem).toMatch(/setting up uid map: Permission denied/);
    expect(probe.fix).toContain(`sudo install -m 0644 ${APPARMOR_PROFILE} /etc/apparmor.d/`);
    expect(probe.fix).toContain('sudo apparmor_parser -r /etc/apparmor.d/improv-extfn-bwrap');
    expect(probe.fix).not.toMatch(/unprivileged user can read/);
    expect(probe.fix).not.toMatch(WEAKENING);
    // the stand-in lives elsewhere, so the fix says to edit the profile's path
    expect(probe.fix).toContain(`replace it with ${APPARMOR_BWRAP}`);
  });

  test('the profile ships in the package and allows user namespaces to bwrap alone', () => {
    const profile = readFileSync(APPARMOR_PROFILE, 'utf8');
    expect(profile).toMatch(
      /^profile improv-extfn-bwrap \/usr\/bin\/bwrap flags=\(unconfined\) \{$/m,
    );
    expect(profile).toMatch(/^\s+userns,$/m);
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    expect(pkg.files).toContain('apparmor');
  });

  test('the sysctl and the message are both recognised; a missing interpreter is not AppArmor', () => {
    expect(fixes.isAppArmorUsernsBlock('bwrap: setting up uid map: Permission denied')).toBe(true);
    expect(
      fixes.isAppArmorUsernsBlock('bwrap: Creating new namespace failed: Permission denied', '1'),
    ).toBe(true);
    expect(
      fixes.isAppArmorUsernsBlock('bwrap: Creating new namespace failed: Permission denied', '0'),
    ).toBe(false);
    expect(fixes.fixForSetupFailure('bwrap: execvp /root/x/python3: Permission denied', '1')).toBe(
      fixes.FIX_INTERPRETER,
    );
    expect(fixes.fixForSetupFailure('bwrap: setting up uid map: Permission denied', '0')).toBe(
      fixes.fixAppArmor(),
    );
    expect(
      fixes.fixForSetupFailure(
        'bwrap: Creating new namespace failed: Resource temporarily unavailable',
        '0',
      ),
    ).toBe(fixes.FIX_PROCESS_LIMIT);
  });

  test('the chain shell’s own failures get their own fixes', () => {
    expect(
      fixes.fixForSetupFailure('extfn-chain: inherited descriptor /proc/self/fd/12 is still open'),
    ).toBe(fixes.FIX_DESCRIPTORS);
    expect(
      fixes.fixForSetupFailure(
        'extfn-chain: 6: ulimit: error setting limit (Operation not permitted)',
      ),
    ).toBe(fixes.FIX_HARD_LIMIT);
    expect(
      fixes.fixForSetupFailure(
        'prlimit: failed to set the NOFILE resource limit: Operation not permitted',
      ),
    ).toBe(fixes.FIX_HARD_LIMIT);
  });
});

describe('fix texts', () => {
  const texts = Object.entries(fixes).flatMap(([name, value]) => {
    if (typeof value === 'string') return [[name, value] as const];
    if (name === 'fixAppArmor') return [[name, fixes.fixAppArmor('/opt/bwrap')] as const];
    if (name === 'fixForSetupFailure') {
      return [
        'bwrap: setting up uid map: Permission denied',
        'fork: Resource temporarily unavailable',
        'bwrap: No permissions to creating new namespace',
        'execvp: No such file or directory',
      ].map((message) => [`${name}(${message})`, fixes.fixForSetupFailure(message, '1')] as const);
    }
    return [];
  });

  test('none advises weakening the sandbox, and none is cut off', () => {
    expect(texts.length).toBeGreaterThan(10);
    for (const [name, text] of texts) {
      if (name === 'APPARMOR_PROFILE' || name === 'APPARMOR_USERNS_SYSCTL') continue;
      expect(text, name).not.toMatch(WEAKENING);
      const opened = text.split('(').length;
      expect(text.split(')').length, `${name}: balanced parentheses`).toBe(opened);
    }
  });

  test('no source file offers the opt-out variables as advice', () => {
    const src = new URL('../src/', import.meta.url);
    for (const file of readdirSync(src)) {
      const text = readFileSync(new URL(file, src), 'utf8');
      for (const line of text.split('\n')) {
        if (!WEAKENING.test(line)) continue;
        // they may be read (policy.ts) and described, never recommended
        expect(line, `${file}: ${line}`).not.toMatch(/\b(set|export|or)\s+IMPROV_EXTFN_|fix/i);
      }
    }
  });
});
