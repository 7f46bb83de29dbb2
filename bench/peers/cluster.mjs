// A throwaway PostgreSQL cluster for the peers benchmark: initdb into a fresh
// temporary directory, a server listening only on a unix socket in that
// directory (no TCP), psql helpers, and a synchronous stop-and-delete that is
// safe to call from finally, signal and exit handlers alike.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const { env } = process;

const run = promisify(execFile);
/** The socket directory is private, so the port only names the socket file. */
const PORT = '5432';

/** PostgreSQL cannot run here; `message` says why, and what to install or set. */
export class ClusterUnavailable extends Error {}

/** The server binaries and psql, or the reason they are missing. */
function findBinaries() {
  const bin = env.PEERS_PG_BIN ?? '/usr/lib/postgresql/15/bin';
  const needed = ['initdb', 'pg_ctl', 'postgres', 'psql'];
  const missing = needed.filter((name) => !existsSync(join(bin, name)));
  if (missing.length > 0) {
    throw new ClusterUnavailable(
      `PostgreSQL not found: ${missing.join(', ')} missing in ${bin} ` +
        '(apt-get install postgresql-15 postgresql-plpython3-15 postgresql-15-plr, or set PEERS_PG_BIN)',
    );
  }
  return Object.fromEntries(needed.map((name) => [name, join(bin, name)]));
}

/**
 * initdb refuses to run as root, so as root the server runs as an unprivileged
 * user (PEERS_PG_USER, default nobody) that owns the temporary directory.
 */
function serverIdentity(dir) {
  if (process.getuid?.() !== 0) return { user: undefined, wrap: (argv) => argv };
  const user = env.PEERS_PG_USER ?? 'nobody';
  const id = (flag) => spawnSync('id', [flag, user], { encoding: 'utf8' });
  const uid = id('-u');
  const gid = id('-g');
  if (uid.status !== 0 || gid.status !== 0) {
    throw new ClusterUnavailable(
      `running as root and user ${user} does not exist: PostgreSQL refuses to run as root (set PEERS_PG_USER to an unprivileged user)`,
    );
  }
  chownSync(dir, Number(uid.stdout), Number(gid.stdout));
  const wrap = (argv) => ['runuser', '-u', user, '--', ...argv];
  const [cmd, ...args] = wrap(['test', '-w', dir]);
  if (spawnSync(cmd, args).status !== 0) {
    throw new ClusterUnavailable(
      `running as root and user ${user} cannot write ${dir} (set PEERS_PG_USER to an unprivileged user that can)`,
    );
  }
  return { user, wrap };
}

function runSync(argv, what) {
  const [cmd, ...args] = argv;
  const out = spawnSync(cmd, args, { encoding: 'utf8' });
  if (out.status !== 0) {
    throw new Error(
      `${what} failed (${out.error?.message ?? `exit ${out.status}`}):\n${out.stderr}`,
    );
  }
}

/**
 * Starts a cluster and returns its handle. Throws ClusterUnavailable when
 * PostgreSQL is missing. Synchronous, so no signal handler can run between
 * creating the directory and the caller holding the handle; the caller must
 * call `stop()` (idempotent and synchronous, for finally, signal and exit handlers).
 */
export function startCluster() {
  const bin = findBinaries();
  const dir = mkdtempSync(join(tmpdir(), 'improv-peers-'));
  let stopped = false;
  let started = false;
  const data = join(dir, 'data');
  let identity = { user: undefined, wrap: (argv) => argv };
  const stop = () => {
    if (stopped) return;
    stopped = true;
    if (started) {
      // immediate: nothing in a throwaway cluster is worth a checkpoint.
      const stopArgv = [bin.pg_ctl, '-D', data, ...'-m immediate -w stop'.split(' ')];
      const [cmd, ...args] = identity.wrap(stopArgv);
      spawnSync(cmd, args, { stdio: 'ignore', timeout: 30_000 });
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    identity = serverIdentity(dir);
    const initdbFlags =
      '-U postgres --auth=trust --no-sync --no-instructions -E UTF8 --locale=C.UTF-8';
    runSync(identity.wrap([bin.initdb, '-D', data, ...initdbFlags.split(' ')]), 'initdb');
    // Unix socket only; fsync off and JIT off: a throwaway cluster, and JIT
    // compilation would only add start-up cost to queries that call PL functions.
    const options = `-c listen_addresses='' -k '${dir}' -p ${PORT} -c fsync=off -c jit=off -c timezone=UTC`;
    started = true;
    const log = join(dir, 'server.log');
    const startArgv = [bin.pg_ctl, '-D', data, '-l', log, '-w', '-t', '60', '-o', options, 'start'];
    runSync(identity.wrap(startArgv), 'pg_ctl start');
  } catch (error) {
    stop();
    throw error;
  }
  const base = ['-h', dir, '-p', PORT, '-U', 'postgres', '-d', 'postgres', '-X', '-q', '-A', '-t'];
  const argvFor = (statements) => [
    ...base,
    '-v',
    'ON_ERROR_STOP=1',
    ...statements.flatMap((sql) => ['-c', sql]),
  ];
  return {
    dir,
    user: identity.user ?? env.USER ?? `uid ${process.getuid?.()}`,
    /** Runs statements in one new session; resolves to the non-empty output lines. */
    async psql(statements) {
      try {
        const { stdout } = await run(bin.psql, argvFor(statements), { maxBuffer: 64 << 20 });
        return stdout.split('\n').filter((line) => line !== '');
      } catch (error) {
        throw new Error(`psql failed: ${error.stderr || error.message}`);
      }
    },
    /** Same, timed from spawning psql to its exit: a fresh session from the client's view. */
    timedPsql(statements) {
      return new Promise((resolve, reject) => {
        const t0 = performance.now();
        const child = spawn(bin.psql, argvFor(statements), { stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => {
          stdout += d;
        });
        child.stderr.on('data', (d) => {
          stderr += d;
        });
        child.on('error', reject);
        child.on('close', (code) => {
          const ms = performance.now() - t0;
          if (code !== 0) reject(new Error(`psql failed (exit ${code}): ${stderr}`));
          else resolve({ ms, lines: stdout.split('\n').filter((line) => line !== '') });
        });
      });
    },
    stop,
  };
}
