/**
 * What a newcomer gets wrong first: limits out of range (--timeout, --memory),
 * a table whose header or extra columns were not declared, a --runner path
 * that is not there, an interpreter variable that names nothing, a host
 * without a cgroup per tree, output past the per-row cap. Each is a clear
 * message with its fix.
 */
import { existsSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { type DoctorReport, formatReport } from '../src/commands/doctor.js';
import { ExitCode } from '../src/exit-codes.js';
import { main } from '../src/main.js';
import { cli, EXAMPLES, fakeIo, fakeRunner, PYTHON3, scratch } from './helpers.js';

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeEach(async () => {
  tmp = await scratch();
});
afterEach(async () => {
  await tmp.cleanup();
});

const add = {
  name: 'add',
  language: 'wasm',
  body: 'args[0] + args[1]',
  argTypes: ['number', 'number'],
  returnType: 'number',
};

function withRunner(runner = fakeRunner()) {
  return { '@improv/extfn-wasm': { wasm: () => runner } };
}

async function evalWith(...flags: string[]) {
  const fn = await tmp.file('add.json', JSON.stringify(add));
  const io = fakeIo(withRunner());
  const code = await main(['eval', fn, '1', '2', ...flags], io);
  return { code, err: io.err(), out: io.out() };
}

describe('--timeout', () => {
  test('above the longest limit (about 24.9 days) is a usage error naming it, not an internal error', async () => {
    for (const text of ['3000000s', '999999999999', '2147483648', '2147484s']) {
      const { code, err } = await evalWith('--timeout', text);
      expect(code, text).toBe(ExitCode.BadInput);
      expect(err).toContain(
        `improv-extfn: --timeout "${text}" is more than the longest limit, 2147483647 ms (about 24.9 days)\n`,
      );
      expect(err).toContain('  fix: write at most --timeout 2147483s');
      expect(err).not.toContain('internal error');
    }
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--timeout', '2147483648'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('is more than the longest limit');
  });

  test('the longest limit itself is accepted, and what was the longest before (2^30 - 1 ms) is far below it', async () => {
    for (const text of ['2147483647', '2147483s', '1073741824']) {
      expect(await evalWith('--timeout', text), text).toMatchObject({
        code: ExitCode.Ok,
        out: '3\n',
      });
    }
  });

  test('the longest limit with the real runner: the answer, and no timer overflow warning', async () => {
    const result = await cli(['eval', 'distance.json', '3', '4', '--timeout', '2147483647']);
    expect(result).toMatchObject({ exitCode: ExitCode.Ok, stdout: '5\n' });
    expect(result.stderr).not.toContain('TimeoutOverflowWarning');
  });

  test('0 and negative values say the limit must be more than 0', async () => {
    const cases: Array<[string[], string]> = [
      [['--timeout', '0'], '0'],
      [['--timeout', '0s'], '0s'],
      [['--timeout', '-1'], '-1'],
      [['--timeout=-1'], '-1'],
    ];
    for (const [flags, text] of cases) {
      const { code, err } = await evalWith(...flags);
      expect(code, flags.join(' ')).toBe(ExitCode.BadInput);
      expect(err).toContain(
        `improv-extfn: --timeout "${text}": the time limit must be more than 0\n`,
      );
      expect(err).not.toContain('ambiguous');
    }
  });

  test('a number without a unit below 1000 is refused: 10 would be 10 ms, likelier meant as 10s', async () => {
    for (const flags of [['--timeout', '10'], ['--timeout=999'], ['--timeout', '0.5']]) {
      const { code, err, out } = await evalWith(...flags);
      const number = flags.at(-1)!.replace('--timeout=', '');
      expect(code, flags.join(' ')).toBe(ExitCode.BadInput);
      expect(err).toContain(
        `improv-extfn: --timeout "${number}" has no unit, so it would be ${number} ms; did you mean ${number}s?\n`,
      );
      expect(err).toContain(
        `  fix: write --timeout ${number}s for seconds, or --timeout ${number}ms to mean milliseconds (a number without a unit must be at least 1000)\n`,
      );
      expect(out).toBe('');
    }
    const json = fakeIo(withRunner());
    const fn = await tmp.file('add.json', JSON.stringify(add));
    expect(await main(['eval', fn, '1', '2', '--timeout', '30', '--json'], json)).toBe(
      ExitCode.BadInput,
    );
    expect(JSON.parse(json.out()).error).toMatchObject({ kind: 'Usage' });
    // With a unit, any size; without one, milliseconds from 1000 as the README has it (2000).
    for (const text of ['10s', '10ms', '1ms', '1000', '2000', '1500.5']) {
      expect(await evalWith('--timeout', text), text).toMatchObject({ code: ExitCode.Ok });
    }
  });

  test('a flag value that starts with "-" and is not a number says how to write it', async () => {
    const { code, err } = await evalWith('--name', '-x');
    expect(code).toBe(ExitCode.BadInput);
    expect(err).toContain('eval: --name needs a value, and "-x" after it reads as a flag');
    expect(err).toContain('fix: write --name=-x if that is the value');
  });
});

describe('--memory', () => {
  test('above 4GiB for a wasm function is a usage error saying the wasm limit', async () => {
    const { code, err } = await evalWith('--memory', '5GiB');
    expect(code).toBe(ExitCode.BadInput);
    expect(err).toContain(
      `--memory "5GiB" is more than 4GiB, the most a wasm function's memory can be`,
    );
    expect(err).toContain('fix: write at most --memory 4GiB for function add (wasm');
    expect(err).not.toContain('install a version');
    expect(await evalWith('--memory', '4GiB')).toMatchObject({ code: ExitCode.Ok });
  });

  test('5GiB is fine for a function that runs in a process (python)', async () => {
    const fn = await tmp.file('py.json', JSON.stringify({ ...add, language: 'python' }));
    const io = fakeIo({ '@improv/extfn-python': { python: () => fakeRunner('python') } });
    expect(await main(['eval', fn, '1', '2', '--memory', '5GiB'], io)).toBe(ExitCode.Ok);
  });

  test('KB, MB and GB are refused as ambiguous (10^6 or 2^20 bytes), naming the binary spellings', async () => {
    const cases: Array<[string, string, string]> = [
      [
        '512MB',
        '"MB" is 10^6 bytes to some programs and 2^20 to others',
        '512MiB (or 512M), where 1MiB = 1048576 bytes',
      ],
      [
        '2gb',
        '"gb" is 10^9 bytes to some programs and 2^30 to others',
        '2GiB (or 2G), where 1GiB = 1073741824 bytes',
      ],
      [
        '4096KB',
        '"KB" is 10^3 bytes to some programs and 2^10 to others',
        '4096KiB (or 4096K), where 1KiB = 1024 bytes',
      ],
    ];
    for (const [text, problem, spelling] of cases) {
      const { code, err } = await evalWith('--memory', text);
      expect(code, text).toBe(ExitCode.BadInput);
      expect(err).toContain(`improv-extfn: --memory "${text}": ${problem}\n`);
      expect(err).toContain(`  fix: sizes here are binary: write --memory ${spelling}\n`);
    }
    for (const text of ['512MiB', '512M', '512m', '1GiB', '1g']) {
      expect(await evalWith('--memory', text), text).toMatchObject({ code: ExitCode.Ok });
    }
  });

  test('an unknown unit, or a size out of range, says which, with the units and the range', async () => {
    const cases: Array<[string, string]> = [
      ['1TiB', '--memory "1TiB": unknown unit "TiB"'],
      ['1T', '--memory "1T": unknown unit "T"'],
      ['99999999GiB', '--memory "99999999GiB" is more than 1024GiB, the largest limit'],
      ['512K', '--memory "512K" is less than 1MiB, the smallest limit'],
      ['lots', '--memory "lots" is not a size'],
    ];
    for (const [text, message] of cases) {
      const { code, err } = await evalWith('--memory', text);
      expect(code, text).toBe(ExitCode.BadInput);
      expect(err).toContain(`improv-extfn: ${message}\n`);
      expect(err).toContain('fix: write a number with a unit, B, K/KiB, M/MiB or G/GiB');
      expect(err).toContain('from 1MiB to 1024GiB');
      expect(err).not.toContain('is not a size of at least 1MiB');
    }
  });
});

describe('run: a header or extra columns that were not declared', () => {
  async function run(csv: string, ...flags: string[]) {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', csv);
    const io = fakeIo(withRunner());
    const code = await main(['run', fn, rows, ...flags], io);
    return { code, out: io.out(), err: io.err() };
  }

  test('a header row wider than the arguments gets a hint naming --header and --columns', async () => {
    const { code, out, err } = await run(
      'account,principal,rate,years,income,x_km,y_km\nnorth,1000,0.05,10,32000,3,4\n',
    );
    expect(code).toBe(ExitCode.FunctionError);
    expect(out).toContain(
      "(is line 1 a header? pass --header, and --columns with add's 2 argument column(s))",
    );
    expect(err).toContain(
      "  fix: line 1 looks like a header (account, principal, rate, years, income, x_km, y_km): pass --header, and --columns with the names of add's 2 argument column(s) in declared order\n",
    );
    // Said once, in the summary; the other rows keep their own message.
    expect(err.match(/fix: line 1 looks like a header/g)).toHaveLength(1);
  });

  test('rows wider than the arguments, with no header, get a hint naming --columns', async () => {
    const { out, err } = await run('9,1,2\n8,3,4\n');
    expect(out).toContain("(pick add's 2 argument column(s) with --columns)");
    expect(err).toContain(
      'fix: the rows have 3 cells and add takes 2 argument(s): pick the argument columns with --columns, by 1-based number (--columns 1,2), or by name with --header when line 1 names them',
    );
  });

  test('--header without --columns on a wider table names --columns', async () => {
    const { out, err } = await run('label,x,y\nfirst,1,2\n', '--header');
    expect(out).toContain("(the header has 3 columns: name add's 2 with --columns)");
    expect(err).toContain(
      'fix: name the 2 argument column(s) of add in declared order with --columns (the header has label, x, y)',
    );
  });

  test('a first row of values gets no hint; a header of the right width still gets its own', async () => {
    const values = await run('1,x\n');
    expect(values.out).not.toContain('header');
    expect(values.err).not.toContain('fix:');
    const names = await run('a,b\n1,2\n');
    expect(names.out).toContain('(is line 1 a header? pass --header)');
    expect(names.err).toContain('fix: line 1 looks like a header (a, b): pass --header');
  });
});

describe('--runner PATH that does not exist', () => {
  test('says the file does not exist, with its resolved path, and to check the path', async () => {
    const result = await cli(['eval', 'distance.json', '3', '4', '--runner', './nope.mjs'], {
      cwd: tmp.dir,
    });
    expect(result.exitCode).toBe(ExitCode.Unavailable);
    expect(result.stderr).toContain(
      `improv-extfn: runner ./nope.mjs: the runner file ${tmp.dir}/nope.mjs does not exist\n`,
    );
    expect(result.stderr).toContain(`  fix: check the path (a relative one is from ${tmp.dir})`);
    expect(result.stderr).not.toContain('reinstall');
  });
});

describe('an interpreter variable that names nothing', () => {
  const FIX =
    'set IMPROV_EXTFN_PYTHON to a Python 3 executable, or unset it to use python3 from PATH';

  test('IMPROV_EXTFN_PYTHON=/nope/python3: the runner error names the variable, its value and the fix', async () => {
    const result = await cli(['eval', 'growth.json', '1000', '0.05', '10'], {
      env: { IMPROV_EXTFN_PYTHON: '/nope/python3' },
    });
    expect(result.exitCode).toBe(ExitCode.Unavailable);
    // The runner's message as it is, once; its fix ends it, so no second fix line.
    expect(result.stderr).toBe(
      `improv-extfn: LanguageUnavailable: function growth: no python interpreter for @improv/extfn-python: IMPROV_EXTFN_PYTHON is set to /nope/python3, which does not exist; ${FIX}\n`,
    );
  });

  test('--json: the same message, and the fix as its own field', async () => {
    const directory = EXAMPLES.replace(/\/$/, '');
    const result = await cli(['eval', 'growth.json', '1000', '0.05', '10', '--json'], {
      env: { IMPROV_EXTFN_PYTHON: directory },
    });
    expect(result.exitCode).toBe(ExitCode.Unavailable);
    const { ok, error } = JSON.parse(result.stdout);
    expect(ok).toBe(false);
    expect(error).toEqual({
      kind: 'LanguageUnavailable',
      message: `function growth: no python interpreter for @improv/extfn-python: IMPROV_EXTFN_PYTHON is set to ${directory}, which is a directory; ${FIX}`,
      functionName: 'growth',
      language: 'python',
      fix: FIX,
    });
  });

  test('doctor prints what the runner says, the fix once on its own line', async () => {
    const detail = `IMPROV_EXTFN_PYTHON is set to /nope/python3, which does not exist; ${FIX}`;
    const missing = {
      ...fakeRunner('python'),
      async probe() {
        return { language: 'python', available: false, detail, fix: FIX };
      },
    };
    const io = fakeIo({ ...withRunner(), '@improv/extfn-python': { python: () => missing } });
    expect(await main(['doctor'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toMatch(
      /\n +IMPROV_EXTFN_PYTHON is set to \/nope\/python3, which does not exist\n +fix: set IMPROV_EXTFN_PYTHON to a Python 3 executable, or unset it to use python3 from PATH\n/,
    );
    expect(io.out().split(FIX)).toHaveLength(2);
  });

  test('doctor, with the real runner', async () => {
    const result = await cli(['doctor'], { env: { IMPROV_EXTFN_PYTHON: '/nope/python3' } });
    expect(result.stdout).toMatch(
      /python +unavailable +\(@improv\/extfn-python\)\n +IMPROV_EXTFN_PYTHON is set to \/nope\/python3, which does not exist\n +fix: set IMPROV_EXTFN_PYTHON to a Python 3 executable, or unset it to use python3 from PATH\n/,
    );
  });
});

describe('doctor: each interpreter once', () => {
  function report(detail: string, language = 'python'): DoctorReport {
    return {
      node: 'v20',
      platform: 'linux x64',
      sandbox: { probed: true, policy: 'restricted', ok: true, summary: 'restricted: bubblewrap' },
      languages: [
        {
          language,
          packageName: `@improv/extfn-${language}`,
          installed: true,
          loaded: true,
          available: true,
          detail,
          interpreter: { path: '/usr/bin/python3.11', version: '3.11.2' },
        },
      ],
      ok: true,
    };
  }

  test('the runner\'s "python 3.11.2 at …" is not said again under the interpreter line', () => {
    const text = formatReport(report('python 3.11.2 at /usr/bin/python3.11'));
    expect(text).toContain(
      'python  ok  (@improv/extfn-python)\n        interpreter: /usr/bin/python3.11 (3.11.2)\n',
    );
    expect(text.split('/usr/bin/python3.11')).toHaveLength(2);
  });

  test('what the detail adds to it (the libraries) is kept', () => {
    const text = formatReport(
      report(
        'python 3.11.2 at /usr/bin/python3.11; libraries: numpy 1.24.2 (/usr/lib/python3/dist-packages)',
      ),
    );
    expect(text).toContain(
      '        interpreter: /usr/bin/python3.11 (3.11.2)\n        libraries: numpy 1.24.2 (/usr/lib/python3/dist-packages)\n',
    );
    expect(text.split('/usr/bin/python3.11')).toHaveLength(2);
  });
});

describe('a sandbox variable set to a value that does not turn it on', () => {
  test('IMPROV_EXTFN_TRUSTED=yes: warned once, naming the value and the accepted one; still restricted', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const io = fakeIo(withRunner(), { env: { IMPROV_EXTFN_TRUSTED: 'yes' } });
    expect(await main(['eval', fn, '1', '2'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('3\n');
    expect(io.err()).toBe(
      'improv-extfn: warning: IMPROV_EXTFN_TRUSTED is "yes", which is ignored: only 1 turns it on, so the sandbox stays restricted\n' +
        "  fix: set IMPROV_EXTFN_TRUSTED=1 to run bodies with this host's privileges (trusted models only), or unset it\n",
    );
    const doctor = fakeIo(withRunner(), { env: { IMPROV_EXTFN_ALLOW_UNSANDBOXED: 'true' } });
    await main(['doctor', '--json'], doctor);
    expect(doctor.err()).toContain(
      'warning: IMPROV_EXTFN_ALLOW_UNSANDBOXED is "true", which is ignored: only 1 turns it on',
    );
    expect(JSON.parse(doctor.out()).languages).toBeDefined();
  });

  test('1, 0, empty or unset: no warning', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    for (const value of ['1', '0', '', undefined]) {
      const io = fakeIo(withRunner(), {
        env:
          value === undefined
            ? {}
            : { IMPROV_EXTFN_TRUSTED: value, IMPROV_EXTFN_ALLOW_UNSANDBOXED: value },
      });
      expect(await main(['eval', fn, '1', '2'], io)).toBe(ExitCode.Ok);
      expect(io.err(), String(value)).toBe('');
    }
  });
});

describe('doctor: no cgroup per tree', () => {
  function report(cgroupReason: string): DoctorReport {
    return {
      node: 'v20',
      platform: 'linux x64',
      sandbox: {
        probed: true,
        policy: 'restricted',
        ok: true,
        layers: { namespaces: true, rlimits: true, cgroup: false },
        cgroupReason,
        summary: 'restricted: bubblewrap',
      },
      languages: [],
      ok: true,
    };
  }

  test('the reason comes with a fix line', () => {
    const v1 = formatReport(report('no cgroup v2 hierarchy; cgroup v1 needs root'));
    expect(v1).toContain('  no cgroup: no cgroup v2 hierarchy; cgroup v1 needs root\n  fix: ');
    expect(v1).toContain('run improv-extfn as root');
    expect(v1).not.toContain('cgroup v2 group');
    const v2 = formatReport(
      report(
        'the memory and pids controllers are not delegated to /sys/fs/cgroup/user.slice; cgroup v1 needs root',
      ),
    );
    expect(v2).toMatch(
      /no cgroup: .*\n {2}fix: for one memory and process budget per tree, run improv-extfn in a cgroup v2 group with the memory and pids controllers delegated to it .*, or run improv-extfn as root/,
    );
    expect(v2).toContain(
      'optional: each process is still held by its rlimits, and each tree by the host summing its memory',
    );
  });
});

describe('output too large', () => {
  test.skipIf(!existsSync(PYTHON3))(
    `eval of a body that prints 5 MB: the fix names the cap, not a runner option the command has no flag for${existsSync(PYTHON3) ? '' : ' (skipped: no /usr/bin/python3)'}`,
    async () => {
      const flood = await tmp.file(
        'flood.json',
        JSON.stringify({
          name: 'flood',
          language: 'python',
          body: "for i in range(50000):\n    print('y' * 99)\nresult = 1",
          argTypes: [],
          returnType: 'number',
        }),
      );
      const { exitCode, stderr } = await cli(['eval', flood]);
      expect(exitCode).toBe(ExitCode.FunctionError);
      expect(stderr).toContain('Runtime: function flood: output too large');
      expect(stderr).toContain(
        'fix: a row may print and return at most 1 MiB: print less or return a smaller result\n',
      );
      expect(stderr).not.toContain('maxOutputBytes');
    },
  );
});
