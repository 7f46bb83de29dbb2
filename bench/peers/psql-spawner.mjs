// A helper process that runs psql for the peers benchmark, so the benchmark's
// own process never forks while it times ours. A fork (child_process.spawn)
// write-protects every page of the forking process for copy-on-write; the
// next write to each page then faults, ~10-40 us a page on a VM. An
// evalColumns result column written after every PostgreSQL run would pay
// ~1,000 such faults per 4 MB, a cost of the harness, not of ours (an engine
// refreshing a measure does not fork between refreshes). See README.md,
// "What is timed". Messages (IPC): { id, argv } in; { id, code,
// stdout, stderr, ms, error } out, `ms` from spawning psql to its exit.
import { spawn } from 'node:child_process';

process.on('disconnect', () => process.exit(0));
process.on('message', ({ id, argv }) => {
  const [cmd, ...args] = argv;
  const t0 = performance.now();
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout = [];
  const stderr = [];
  child.stdout.on('data', (d) => stdout.push(d));
  child.stderr.on('data', (d) => stderr.push(d));
  child.on('error', (error) => process.send({ id, error: error.message }));
  child.on('close', (code) => {
    const ms = performance.now() - t0;
    const text = (parts) => Buffer.concat(parts).toString('utf8');
    process.send({ id, code, ms, stdout: text(stdout), stderr: text(stderr) });
  });
});
