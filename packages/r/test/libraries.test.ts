/**
 * Libraries R bodies may load (`r({ libraries })`): R's site libraries by
 * default (digest, from Debian's r-cran-digest, is a real one), base R only
 * with `[]`, explicit directories bound read-only; unreadable directories
 * refused at start; package versions in probe() and in the cache salt.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { allowedRLibraries } from '../src/index.js';
import {
  failure,
  hasR,
  RSCRIPT,
  restrictedOk,
  runner,
  scopedRegistry,
  skipReason,
} from './helpers.js';

const hasDigest = existsSync('/usr/lib/R/site-library/digest/DESCRIPTION');
const noDigest = 'skipped: r-cran-digest is not installed';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) {
    chmodSync(dir, 0o755);
    rmSync(dir, { recursive: true, force: true });
  }
});

function scratch(mode = 0o755): string {
  const dir = mkdtempSync(join(tmpdir(), 'extfn-rlibs-'));
  chmodSync(dir, mode);
  dirs.push(dir);
  return dir;
}

/** A library directory with a DESCRIPTION-only package `tinypkg` (enough for versions, not for library()). */
function describedPackage(version: string, dir = scratch()): string {
  mkdirSync(join(dir, 'tinypkg'), { recursive: true });
  writeFileSync(join(dir, 'tinypkg', 'DESCRIPTION'), `Package: tinypkg\nVersion: ${version}\n`);
  return dir;
}

const DIGEST = 'library(digest)\nresult <- digest(args[[1]], algo = "md5", serialize = FALSE)';

describe.skipIf(!restrictedOk)(`r libraries (${restrictedOk ? 'Restricted' : skipReason})`, () => {
  test.skipIf(!hasDigest)(
    `site libraries by default (digest loads, listed in probe); [] is base R only ${hasDigest ? '' : noDigest}`,
    async () => {
      const system = scopedRegistry({ md5: [DIGEST, ['text'], 'text'] });
      expect(await system.registry.eval('md5', [Value.text('a')])).toEqual(
        Value.text('0cc175b9c0f1b6a831c399e269772661'),
      );
      const probe = await system.runner.probe();
      expect(probe.available).toBe(true);
      expect(probe.libraries).toContainEqual({
        name: 'digest',
        version: expect.stringMatching(/^\d/),
        path: '/usr/lib/R/site-library',
      });
      const base = scopedRegistry({ md5: [DIGEST, ['text'], 'text'] }, { libraries: [] });
      const refused = await failure(base.registry.eval('md5', [Value.text('a')]));
      expect(refused.message).toMatch(/there is no package called .digest./);
      expect((await base.runner.probe()).detail).toMatch(/base R only/);
    },
  );

  test.skipIf(!hasDigest)(
    `an explicit directory is searched and bound read-only: a body cannot write into it ${hasDigest ? '' : noDigest}`,
    async () => {
      const dir = scratch(0o777);
      const write = [
        'ok <- tryCatch({ writeLines("x", file.path(args[[1]], "written")); "wrote" },',
        '  error = function(e) "refused", warning = function(w) "refused")',
        'result <- ok',
      ].join('\n');
      const { registry } = scopedRegistry(
        {
          write: [write, ['text'], 'text'],
          paths: ['result <- paste(.libPaths(), collapse = ":")', [], 'text'],
        },
        { libraries: [dir, '/usr/lib/R/site-library'] },
      );
      expect(await registry.eval('paths', [])).toEqual(
        Value.text(`${dir}:/usr/lib/R/site-library:/usr/lib/R/library`),
      );
      // 0777 on the host: only the read-only bind stops the body; /tmp is the control.
      expect(await registry.eval('write', [Value.text(dir)])).toEqual(Value.text('refused'));
      expect(await registry.eval('write', [Value.text('/tmp')])).toEqual(Value.text('wrote'));
    },
  );

  test('a directory the sandbox uid cannot read is a clear error at start', async () => {
    const root = process.getuid?.() === 0;
    const dir = scratch(root ? 0o700 : 0o755);
    if (!root) chmodSync(dir, 0o000);
    const { registry, runner: r } = scopedRegistry(
      { f: ['result <- 1', [], 'number'] },
      { libraries: [dir] },
    );
    const error = await failure(registry.eval('f', []));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toContain(`cannot read ${dir}`);
    expect((await r.probe()).available).toBe(false);
    chmodSync(dir, 0o755);
    expect(await registry.eval('f', [])).toEqual(Value.number(1));
  });
});

describe.skipIf(!hasR)(
  `r library versions and the cache salt${hasR ? '' : ` (${skipReason})`}`,
  () => {
    test('a package version change changes the digest; the same versions keep it', async () => {
      const dir = describedPackage('1.0');
      const before = await allowedRLibraries([dir], RSCRIPT);
      expect(before.libraries).toEqual([{ name: 'tinypkg', version: '1.0', path: dir }]);
      expect((await allowedRLibraries([dir], RSCRIPT)).digest).toBe(before.digest);
      describedPackage('1.0.1', dir);
      const after = await allowedRLibraries([dir], RSCRIPT);
      expect(after.digest).not.toBe(before.digest);
      const r = runner({ libraries: [dir] });
      expect(await r.cacheSalt?.()).toBe(after.digest);
      await r.close();
    });

    test('"system" is asked of R once per environment: a changed R_LIBS_SITE is seen, and so is a package upgrade in a known directory', async () => {
      const dir = describedPackage('2.0');
      const saved = process.env.R_LIBS_SITE;
      try {
        const before = await allowedRLibraries('system', RSCRIPT);
        expect(before.directories).not.toContain(dir);
        process.env.R_LIBS_SITE = dir;
        const moved = await allowedRLibraries('system', RSCRIPT);
        expect(moved.directories).toEqual([dir]);
        expect(moved.libraries).toEqual([{ name: 'tinypkg', version: '2.0', path: dir }]);
        describedPackage('2.1', dir); // the directories are remembered, their packages read afresh
        const upgraded = await allowedRLibraries('system', RSCRIPT);
        expect(upgraded.libraries).toEqual([{ name: 'tinypkg', version: '2.1', path: dir }]);
        expect(upgraded.digest).not.toBe(moved.digest);
      } finally {
        if (saved === undefined) delete process.env.R_LIBS_SITE;
        else process.env.R_LIBS_SITE = saved;
      }
      expect((await allowedRLibraries('system', RSCRIPT)).directories).not.toContain(dir);
    });
  },
);
