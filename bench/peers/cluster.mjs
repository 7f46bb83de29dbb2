// A throwaway PostgreSQL cluster for the peers benchmark: initdb into a fresh
// temporary directory, a server listening only on a unix socket in that
// directory (no TCP), psql helpers, and a synchronous stop-and-delete that is
// safe to call from finally, signal and exit handlers alike.
import { execFile, fork, spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
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
  let spawner;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    spawner?.kill();
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
    // psql runs from a helper forked now, before anything of ours is timed (psql-spawner.mjs).
    if (env.PEERS_PSQL !== 'inline') spawner = startSpawner();
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
      if (spawner) {
        const { code, stdout, stderr } = await spawner.run([bin.psql, ...argvFor(statements)]);
        if (code !== 0) throw new Error(`psql failed (exit ${code}): ${stderr}`);
        return lines(stdout);
      }
      try {
        const { stdout } = await run(bin.psql, argvFor(statements), { maxBuffer: 64 << 20 });
        return lines(stdout);
      } catch (error) {
        throw new Error(`psql failed: ${error.stderr || error.message}`);
      }
    },
    /** Same, timed from spawning psql to its exit: a fresh session from the client's view. */
    timedPsql(statements) {
      if (spawner) {
        return spawner
          .run([bin.psql, ...argvFor(statements)])
          .then(({ code, ms, stdout, stderr }) => {
            if (code !== 0) throw new Error(`psql failed (exit ${code}): ${stderr}`);
            return { ms, lines: lines(stdout) };
          });
      }
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
          else resolve({ ms, lines: lines(stdout) });
        });
      });
    },
    stop,
  };
}

const lines = (stdout) => stdout.split('\n').filter((line) => line !== '');

/**
 * The psql helper process (psql-spawner.mjs): `run(argv)` resolves to
 * psql's exit code, output and time from spawn to exit.
 */
function startSpawner() {
  const child = fork(join(dirname(fileURLToPath(import.meta.url)), 'psql-spawner.mjs'), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  child.unref();
  child.channel?.unref();
  const pending = new Map();
  let next = 0;
  child.on('message', ({ id, error, ...answer }) => {
    const { resolve, reject } = pending.get(id);
    pending.delete(id);
    if (pending.size === 0) child.channel?.unref();
    if (error) reject(new Error(`psql could not start: ${error}`));
    else resolve(answer);
  });
  child.on('exit', (code) => {
    for (const { reject } of pending.values())
      reject(new Error(`the psql helper exited (${code})`));
    pending.clear();
  });
  return {
    run(argv) {
      const id = next++;
      child.channel?.ref(); // an answer is awaited: keep the process alive for it
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        child.send({ id, argv });
      });
    },
    kill: () => child.kill(),
  };
}
