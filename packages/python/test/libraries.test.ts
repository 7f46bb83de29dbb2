/**
 * Libraries bodies may import (`python({ packages })`): the standard library
 * only by default; the system's site packages, a virtual environment or
 * explicit directories when the host says so, bound read-only; unreadable
 * directories refused at start; versions in probe() and in the cache salt;
 * numpy's global generator reseeded per row like `random`.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type CallOptions,
  type LanguageRunner,
  Registry,
  type RowResult,
  Value,
} from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { allowedLibraries } from '../src/index.js';
import {
  failure,
  hasNumpy,
  hasPython,
  noNumpy,
  noRestricted,
  PYTHON,
  type registryWith,
  restrictedOk,
  runner,
  scopedRegistry,
} from './helpers.js';

const restricted = (
  fns: Parameters<typeof registryWith>[1],
  options: Parameters<typeof registryWith>[2] = {},
) => scopedRegistry('restricted', fns, options);

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) {
    chmodSync(dir, 0o755);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A directory the sandbox's uid can read (mkdtemp makes 0700 ones). */
function scratch(mode = 0o755, parent = tmpdir()): string {
  const dir = mkdtempSync(join(parent, 'extfn-libs-'));
  chmodSync(dir, mode);
  dirs.push(dir);
  return dir;
}

/** A directory holding one tiny package `tinypkg` that says its version. */
function tinyPackage(version: string, dir = scratch()): string {
  mkdirSync(join(dir, 'tinypkg'), { recursive: true, mode: 0o755 });
  writeFileSync(join(dir, 'tinypkg', '__init__.py'), `__version__ = '${version}'\n`, {
    mode: 0o644,
  });
  return dir;
}

const n = (x: number) => Value.number(x);

describe.skipIf(!restrictedOk)(
  `python packages (${restrictedOk ? 'Restricted' : noRestricted})`,
  () => {
    test.skipIf(!hasNumpy)(
      `numpy is refused by default and imported with packages: "system" ${hasNumpy ? '' : noNumpy}`,
      async () => {
        const body = 'import numpy as np\nresult = float(np.hypot(args[0], args[1]))';
        const plain = restricted({ h: [body, ['number', 'number'], 'number'] });
        const refused = await failure(plain.registry.eval('h', [n(3), n(4)]));
        expect(refused.message).toMatch(/ModuleNotFoundError: No module named 'numpy'/);
        const system = restricted(
          { h: [body, ['number', 'number'], 'number'] },
          { packages: 'system' },
        );
        expect(await system.registry.eval('h', [n(3), n(4)])).toEqual(n(5));
      },
    );

    test('explicit directories: importable, listed with versions in probe(), bound read-only', async () => {
      const dir = tinyPackage('1.2.3', scratch(0o777));
      const write = [
        'import os',
        'try:',
        '    open(os.path.join(args[0], "written.py"), "w").write("x = 1")',
        '    result = "wrote"',
        'except OSError as e:',
        '    result = "refused: " + type(e).__name__',
      ].join('\n');
      const { registry, runner: r } = restricted(
        {
          write: [write, ['text'], 'text'],
          version: ['import tinypkg\nresult = tinypkg.__version__', [], 'text'],
        },
        { packages: [dir] },
      );
      expect(await registry.eval('version', [])).toEqual(Value.text('1.2.3'));
      // The directory is writable by anyone on the host (0777): only the read-only bind stops the body.
      expect(await registry.eval('write', [Value.text(dir)])).toEqual(
        Value.text('refused: OSError'),
      );
      expect(await registry.eval('write', [Value.text(join(dir, 'tinypkg'))])).toEqual(
        Value.text('refused: OSError'),
      );
      // Control: the same body writes where the sandbox allows it (its private /tmp).
      expect(await registry.eval('write', [Value.text('/tmp')])).toEqual(Value.text('wrote'));
      const probe = await r.probe();
      expect(probe.available).toBe(true);
      expect(probe.libraries).toEqual([{ name: 'tinypkg', version: '1.2.3', path: dir }]);
      expect(probe.detail).toContain('tinypkg 1.2.3');
    });

    test('packages under /tmp: several functions refreshed at once import them (trees: a cloned worker would cover /tmp)', async () => {
      const dir = tinyPackage('4.5.6', scratch(0o755, '/tmp'));
      const names = ['a', 'b', 'c', 'd'];
      const fns = Object.fromEntries(
        names.map((name) => [
          name,
          [`import tinypkg\nresult = tinypkg.__version__ + "${name}"`, [], 'text'],
        ]),
      );
      const { registry, runner: r } = restricted(fns as never, { packages: [dir], maxWorkers: 2 });
      const results = await Promise.all(names.map((name) => registry.evalBatch(name, [[], []])));
      expect(results).toEqual(names.map((name) => [0, 1].map(() => Value.text(`4.5.6${name}`))));
      expect(r.stats()).toMatchObject({ started: 4, zygoteStarts: 0 });
      expect(r.stats().zygote).toMatch(
        /^off: \/tmp\/extfn-libs-\w+ is bound under \/tmp, which each of its workers mounts anew$/,
      );
    });

    test('an allowed directory comes after the standard library (it cannot shadow it) and its .pth files are not run', async () => {
      const dir = scratch();
      writeFileSync(join(dir, 'colorsys.py'), 'SHADOW = True\n', { mode: 0o644 });
      writeFileSync(join(dir, 'onlyhere.py'), 'X = 1\n', { mode: 0o644 });
      writeFileSync(join(dir, 'evil.pth'), "import os; os.environ['EXTFN_PTH_RAN'] = '1'\n", {
        mode: 0o644,
      });
      const body = [
        'import colorsys, os, onlyhere',
        "seen = '%s %s %s' % (getattr(colorsys, 'SHADOW', False), os.environ.get('EXTFN_PTH_RAN', 'no'), onlyhere.X)",
        '# control: the same .pth does run once the directory is added as a site directory',
        'import site',
        'site.addsitedir(args[0])',
        "result = seen + ' | ' + os.environ.get('EXTFN_PTH_RAN', 'no')",
      ].join('\n');
      const { registry } = restricted({ f: [body, ['text'], 'text'] }, { packages: [dir] });
      expect(await registry.eval('f', [Value.text(dir)])).toEqual(Value.text('False no 1 | 1'));
    });

    test('a body cannot add a directory of its own: sys.path changes do not outlive the row', async () => {
      const dir = tinyPackage('1.0');
      const body = [
        'import sys',
        'if args[0]:',
        `    sys.path.append(${JSON.stringify(dir)})`,
        'try:',
        '    import tinypkg',
        '    result = "imported"',
        'except ImportError:',
        '    result = "refused"',
      ].join('\n');
      const { registry } = restricted({ f: [body, ['boolean'], 'text'] });
      // Not bound: even on sys.path, the host directory does not exist inside the sandbox.
      expect(await registry.eval('f', [Value.boolean(true)])).toEqual(Value.text('refused'));
      expect(await registry.eval('f', [Value.boolean(false)])).toEqual(Value.text('refused'));
    });

    test('a directory the sandbox uid cannot read is a clear error at start, not per row', async () => {
      const root = process.getuid?.() === 0;
      // As root the sandbox runs as a uid of its own (0700 shuts it out); otherwise as this user (0000 does).
      const dir = tinyPackage('1.0', scratch(root ? 0o700 : 0o755));
      if (!root) chmodSync(dir, 0o000);
      const { registry, runner: r } = restricted(
        { f: ['import tinypkg\nresult = 1.0', [], 'number'] },
        { packages: [dir] },
      );
      const error = await failure(registry.eval('f', []));
      expect(error.kind).toBe('LanguageUnavailable');
      expect(error.message).toContain(`cannot read ${dir}`);
      expect(error.fix).toMatch(/chmod o\+rx/);
      const probe = await r.probe();
      expect(probe.available).toBe(false);
      expect(probe.detail).toContain(dir);
      // Fixed on the host: the next call works (the failure was not remembered).
      chmodSync(dir, 0o755);
      expect(await registry.eval('f', [])).toEqual(n(1));
    });

    test('a missing or relative directory, and a path that is not a venv, are refused with the reason', async () => {
      for (const [packages, reason] of [
        [['/nonexistent/extfn-libs'], /does not exist/],
        [['relative/dir'], /not an absolute directory/],
        [{ venv: scratch() }, /not a virtual environment/],
      ] as const) {
        const { registry } = restricted({ f: ['result = 1.0', [], 'number'] }, { packages });
        const error = await failure(registry.eval('f', []));
        expect(error.kind).toBe('LanguageUnavailable');
        expect(error.message).toMatch(reason);
      }
    });

    test(`virtual environments built here: a plain one serves its own packages only, --system-site-packages adds the system${hasNumpy ? '' : ' (that half skipped: no numpy to see through it)'}`, async () => {
      const plain = join(scratch(), 'venv');
      execFileSync(PYTHON, ['-m', 'venv', '--without-pip', plain]);
      const version = execFileSync(PYTHON, [
        '-c',
        'import sys; print("%d.%d" % sys.version_info[:2])',
      ])
        .toString()
        .trim();
      tinyPackage('4.5', join(plain, 'lib', `python${version}`, 'site-packages'));
      const body = [
        'import tinypkg',
        'try:',
        '    import numpy',
        '    has = "numpy"',
        'except ImportError:',
        '    has = "no numpy"',
        'result = tinypkg.__version__ + " " + has',
      ].join('\n');
      const a = restricted({ f: [body, [], 'text'] }, { packages: { venv: plain } });
      expect(await a.registry.eval('f', [])).toEqual(Value.text('4.5 no numpy'));

      if (!hasNumpy) return;
      const withSystem = join(scratch(), 'venv');
      execFileSync(PYTHON, ['-m', 'venv', '--without-pip', '--system-site-packages', withSystem]);
      tinyPackage('4.6', join(withSystem, 'lib', `python${version}`, 'site-packages'));
      const b = restricted({ f: [body, [], 'text'] }, { packages: { venv: withSystem } });
      expect(await b.registry.eval('f', [])).toEqual(Value.text('4.6 numpy'));
    });

    test.skipIf(!hasNumpy)(
      `numpy's global generator is reseeded per row, across batches and processes ${hasNumpy ? '' : noNumpy}`,
      async () => {
        const body = [
          'import numpy as np',
          'result = float(np.random.rand()) + float(np.random.randint(0, 1000)) + args[0]',
        ].join('\n');
        const rows = [0, 10, 20, 30, 40].map((x) => [n(x)]);
        const draws = async () => {
          const { registry } = restricted(
            { f: [body, ['number'], 'number'] },
            { packages: 'system' },
          );
          const first = await registry.evalBatch('f', rows);
          const second = await registry.evalBatch('f', rows);
          const single = await registry.eval('f', [n(20)]);
          return { first, second, single };
        };
        const a = await draws();
        const b = await draws(); // another registry: other processes
        const offsets = (results: RowResult[]) =>
          results.map((r, i) => (r as { value: number }).value - i * 10);
        // Every row draws the same numbers: seed 0 before each row, whatever ran before it.
        expect(new Set(offsets(a.first)).size).toBe(1);
        expect(a.second).toEqual(a.first);
        expect(b.first).toEqual(a.first);
        expect(a.single).toEqual(a.first[2]);
        // numpy.random.seed(0): rand() 0.5488135039273248, then randint(0, 1000) 629.
        expect(offsets(a.first)[0]).toBeCloseTo(0.5488135039273248 + 629, 9);
      },
    );
  },
);

describe.skipIf(!hasPython)('library versions and the cache salt', () => {
  test('a version change (a package with __version__) changes the digest; the same versions keep it', async () => {
    const dir = tinyPackage('1.0');
    const before = await allowedLibraries([dir], PYTHON);
    expect(before.libraries).toEqual([{ name: 'tinypkg', version: '1.0', path: dir }]);
    expect((await allowedLibraries([dir], PYTHON)).digest).toBe(before.digest);
    tinyPackage('1.1', dir);
    const after = await allowedLibraries([dir], PYTHON);
    expect(after.libraries[0]?.version).toBe('1.1');
    expect(after.digest).not.toBe(before.digest);
    // The runner's salt is that digest; without packages there is no salt to add.
    const r = runner({ packages: [dir] });
    expect(await r.cacheSalt?.()).toBe(after.digest);
    await r.close();
    expect(runner().cacheSalt).toBeUndefined();
  });

  test('dist-info and egg-info metadata give name and version', async () => {
    const dir = scratch();
    mkdirSync(join(dir, 'alpha-2.0.dist-info'));
    writeFileSync(join(dir, 'alpha-2.0.dist-info', 'METADATA'), 'Name: alpha\nVersion: 2.0\n');
    mkdirSync(join(dir, 'Beta_Lib-0.3.egg-info'));
    writeFileSync(join(dir, 'Beta_Lib-0.3.egg-info', 'PKG-INFO'), 'Name: Beta-Lib\nVersion: 0.3\n');
    writeFileSync(join(dir, 'Beta_Lib-0.3.egg-info', 'top_level.txt'), 'beta\n');
    mkdirSync(join(dir, 'beta'));
    writeFileSync(join(dir, 'beta', '__init__.py'), "__version__ = '9.9'\n");
    const { libraries } = await allowedLibraries([dir], PYTHON);
    expect(libraries.map((l) => `${l.name} ${l.version}`)).toEqual(['Beta-Lib 0.3', 'alpha 2.0']);
  });

  test('the registry keys pure results by the runner salt: a new salt misses, the same salt hits', async () => {
    let salt = 'v1';
    let calls = 0;
    const fake: LanguageRunner = {
      specificationVersion: 'v1',
      language: 'fake',
      packageName: 'fake',
      capabilities: { isolated: false, warmWorkers: false, batch: false },
      probe: async () => ({ language: 'fake', available: true, detail: 'fake' }),
      call: async (_fn, args, _options: CallOptions) => {
        calls++;
        return Value.text(`${salt}:${(args[0] as { value: number }).value}`);
      },
      cacheSalt: async () => salt,
    };
    const registry = new Registry({ runners: [fake] });
    registry.register({
      name: 'f',
      language: 'fake',
      body: '',
      argTypes: ['number'],
      returnType: 'text',
      pure: true,
    });
    expect(await registry.eval('f', [n(1)])).toEqual(Value.text('v1:1'));
    expect(await registry.eval('f', [n(1)])).toEqual(Value.text('v1:1'));
    expect(calls).toBe(1);
    salt = 'v2';
    expect(await registry.eval('f', [n(1)])).toEqual(Value.text('v2:1'));
    expect(await registry.evalBatch('f', [[n(1)], [n(2)]])).toEqual([
      Value.text('v2:1'),
      Value.text('v2:2'),
    ]);
    expect(calls).toBe(3);
    await registry.close();
  });
});
