/**
 * One R function's body (A) against another R function's worker (B), both
 * alive at once (A holds its ground while B's worker starts and its row
 * runs), under the default `restricted` policy. A sets up every meeting point
 * base R, utils, tools and parallel can make: files and a FIFO under a random
 * marker in /tmp and /dev/shm (and /var/tmp and /, which it cannot write), a
 * TCP listener (serverSocket: every address of its network, 127.0.0.1
 * among them), a forked child
 * (parallel::mcparallel), and, since system() runs programs in the sandbox,
 * an exclusive flock(1) on a read-only file both workers map (R's base
 * package); it counts the interrupts (SIGINT) that reach it, and a SIGUSR1 or
 * SIGTERM that reached it would end its row. B signals every pid it can name
 * (tools::pskill, and kill -1 through system()) and A's host pids (its
 * worker's and its R's, by tools::pskill and kill(1)), looks for A
 * in /proc, for each of A's files and its port, and for other workers'
 * descriptors, and must start and answer despite A's lock. What still meets:
 * advisory locks on the shared read-only files (a covert channel between
 * bodies, not a harm: nothing of ours takes a lock), as for Python. Base R
 * has no unix sockets, SysV or POSIX IPC, locks or inotify of its own; what
 * system() can run (python3 included) is the Python test's ground.
 * Restricted sandbox, Debian's R.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { Value } from '@improv/extfn-core';
import { waitFor } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import {
  hasR,
  RSCRIPT,
  restrictedOk,
  type Signature,
  scopedRegistry,
  skipReason,
} from './helpers.js';

/** Shared by both bodies: the arguments, a JSON writer, what an attempt gave, the places. */
const PRELUDE = `
marker <- args[[1L]]
port <- as.integer(args[[2L]])
json <- function(x) {
  if (is.list(x)) {
    inner <- vapply(x, json, "")
    if (is.null(names(x))) return(paste0("[", paste(inner, collapse = ","), "]"))
    return(paste0("{", paste0(vapply(names(x), json, ""), ":", inner, collapse = ","), "}"))
  }
  if (length(x) != 1L) return(json(as.list(x)))
  if (is.logical(x)) return(if (isTRUE(x)) "true" else "false")
  if (is.numeric(x)) return(format(x))
  encodeString(x, quote = '"')
}
# "ok", or the attempt's first warning or error, with the marker and the port taken out
tried <- function(expr) {
  said <- tryCatch({ force(expr); "ok" }, warning = conditionMessage, error = conditionMessage)
  # the marker first: its hex digits may hold the port's
  gsub(as.character(port), "<port>", gsub(marker, "<marker>", said, fixed = TRUE), fixed = TRUE)
}
# what a command run through system() printed, with its status
run <- function(command) {
  said <- suppressWarnings(system(paste(command, "2>&1"), intern = TRUE))
  c(gsub(marker, "<marker>", said[nzchar(said)], fixed = TRUE), paste("status", if (is.null(attr(said, "status"))) 0L else attr(said, "status")))
}
# every place a body might write, its home and working directory among them
places <- unique(c("/tmp", "/dev/shm", "/var/tmp", "/", Sys.getenv("HOME"), getwd(), dirname(tempdir())))
# a read-only file every R worker maps: the same inode in both sandboxes
shared <- file.path(R.home(), "library", "base", "R", "base.rdb")
# its own descriptors (the one being listed is gone by the time it is read)
links <- function() { l <- Sys.readlink(list.files("/proc/self/fd", full.names = TRUE)); as.list(l[!is.na(l) & nzchar(l)]) }
# what is in a directory besides R's own session directory
entries <- function(where) as.list(setdiff(list.files(where, all.files = TRUE, no.. = TRUE), basename(tempdir())))
`;

/** A: every meeting point it can set up, then a wait while B's row runs, then what reached it. */
const HOLDER: Signature = [
  `${PRELUDE}
secs <- args[[3L]]
out <- list(places = as.list(places))
out$files <- lapply(setNames(nm = places), function(where) tried(writeLines("from A", file.path(where, marker))))
pipe <- NULL
out$fifo <- tried(pipe <- fifo(file.path("/tmp", paste0(marker, ".fifo")), "w+"))
tcp <- NULL
out$tcp <- tried(tcp <- serverSocket(port))
# a forked child that holds an exclusive lock on the shared file for the wait (flock(1) runs
# sleep with it), then ends on its own: nothing is left behind to count as the worker's work
job <- NULL
out$fork <- tried(job <- parallel::mcparallel(system(sprintf("flock -x %s sleep %d", shared, as.integer(secs)))))
for (i in 1:200) if (system(paste("flock -n -s", shared, "true")) != 0L) break else Sys.sleep(0.05)
out$lock <- if (system(paste("flock -n -s", shared, "true")) != 0L) "held" else "not taken"
out$fds <- links()
# ready: the host sees this name in /proc and runs B's row now
out$comm <- tried(writeLines(marker, "/proc/self/comm"))
got <- 0L
deadline <- Sys.time() + secs
while (Sys.time() < deadline) tryCatch(Sys.sleep(0.05), interrupt = function(i) got <<- got + 1L)
out$interrupts <- got
out$after <- list(
  tmp = readLines(file.path("/tmp", marker)),
  shm = readLines(file.path("/dev/shm", marker)),
  tcp = if (is.null(tcp)) "none" else tried(socketAccept(tcp, timeout = 1)),
  tmp_entries = entries("/tmp"),
  shm_entries = entries("/dev/shm")
)
if (!is.null(job)) parallel::mccollect(job)
if (!is.null(tcp)) close(tcp)
if (!is.null(pipe)) close(pipe)
result <- json(out)
`,
  ['text', 'number', 'number'],
  'text',
];

/** B: every pid it can name and A's host pid, A in /proc, each of A's meeting points. */
const PROBER: Signature = [
  `${PRELUDE}
# A's worker (the pool's pid) and A's R, as the host knows them
hosts <- as.integer(c(args[[3L]], args[[4L]]))
t0 <- Sys.time()
out <- list()
me <- Sys.getpid()
self <- function(pids) as.list(ifelse(pids == me, "self", as.character(pids)))
# tools::pskill skips pids below 1: kill -1 through the shell (which spares the caller's init)
out$kill_all <- list(
  pskill = tools::pskill(-1L, tools::SIGINT),
  shell = lapply(c("INT", "USR1", "TERM"), function(s) run(paste0("kill -", s, " -1")))
)
alive <- which(tools::pskill(seq_len(32768L), 0L))
out$pids_alive <- self(alive)
for (p in setdiff(alive, me)) for (s in c(tools::SIGINT, tools::SIGUSR1, tools::SIGTERM)) tools::pskill(p, s)
out$kill_host_pids <- list(
  pskill = tools::pskill(hosts, tools::SIGUSR1),
  shell = lapply(hosts, function(p) run(paste("kill -USR1", p)))
)
procs <- as.integer(list.files("/proc", pattern = "^[0-9]+$"))
out$proc <- self(sort(procs))
comms <- vapply(procs, function(p) tryCatch(readLines(sprintf("/proc/%d/comm", p)), error = function(e) ""), "")
out$marker_in_proc <- marker %in% comms
out$host_pids_in_proc <- file.exists(file.path("/proc", hosts))
out$files <- lapply(setNames(nm = places), function(where) file.exists(file.path(where, marker)))
out$fifo <- file.exists(file.path("/tmp", paste0(marker, ".fifo")))
out$entries <- lapply(setNames(nm = c("/tmp", "/dev/shm", "/var/tmp")), entries)
# its own files under A's names: its own to see (A's stay "from A")
for (where in c("/tmp", "/dev/shm")) writeLines("from B", file.path(where, marker))
out$own_files <- vapply(c("/tmp", "/dev/shm"), function(where) readLines(file.path(where, marker)), "")
out$tcp <- tried(close(socketConnection("127.0.0.1", port, open = "r+b", timeout = 2)))
# its own listener answers: the refusal above is A's port not being there
mine <- serverSocket(port + 1L)
out$tcp_own <- tried(close(socketConnection("127.0.0.1", port + 1L, open = "r+b", timeout = 2)))
close(mine)
# other workers' descriptors, through any /proc entry not its own
out$others_fds <- sum(vapply(setdiff(procs, me), function(p) length(list.files(sprintf("/proc/%d/fd", p))), 0L))
out$fds <- links()
# A's lock is there (the same file: a covert channel), and B started and ran beside it
out$lock <- if (system(paste("flock -n -s", shared, "true")) != 0L) "seen" else "free"
out$seconds <- round(as.numeric(Sys.time() - t0, units = "secs"), 1)
result <- json(out)
`,
  ['text', 'number', 'number', 'number'],
  'text',
];

/** The host process that has `name` as its comm (A's R, once it is ready), or 0. */
function named(name: string): number {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === name) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  return 0;
}

const parsed = (value: Value) => JSON.parse((value as { type: string; value: string }).value);
const failed = (error: unknown) => Value.text(JSON.stringify({ error: String(error) }));
/** A worker's shared file (docs/protocol.md, "Shared file"): the host names it extfn-<pid>-<hex>. */
const sharedFiles = (fds: string[]) => [
  ...new Set(fds.filter((link) => /\/extfn-\d+-[0-9a-f]+ /.test(link))),
];

describe.skipIf(!restrictedOk)(
  `one R function against another (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('A meets B nowhere: no signal, pid, /proc entry, file, FIFO, socket or descriptor; its lock stalls nothing', async () => {
      const { registry, runner } = scopedRegistry(
        { holder: HOLDER, prober: PROBER },
        { maxWorkers: 2 },
      );
      const marker = `xf${randomBytes(5).toString('hex')}`; // 12 characters: fits a comm
      const port = 20_000 + (randomBytes(2).readUInt16BE() % 40_000);
      // long enough for B's start and row on a loaded host: the lock below shows B ran inside it
      const holding = registry
        .eval('holder', [Value.text(marker), Value.number(port), Value.number(8)], {
          timeoutMs: 60_000,
        })
        .catch(failed);
      // A has set everything up (it names itself last), and waits while B starts and runs
      expect(await waitFor(() => named(marker) > 0, 20_000)).toBe(true);
      const [aPid] = runner.workerPids();
      const aR = named(marker);
      expect(aPid).toBeGreaterThan(0);
      expect(aR).toBeGreaterThan(0);
      const b = parsed(
        await registry
          .eval(
            'prober',
            [Value.text(marker), Value.number(port), Value.number(aPid ?? 0), Value.number(aR)],
            {
              timeoutMs: 60_000,
            },
          )
          .catch(failed),
      );
      const a = parsed(await holding);
      // A's side: each meeting point was really there, and nothing of B's reached it
      expect(a).toEqual({
        // HOME and the working directory are /tmp, R's session directory is under it
        places: ['/tmp', '/dev/shm', '/var/tmp', '/'],
        files: {
          '/tmp': 'ok',
          '/dev/shm': 'ok',
          '/var/tmp': "cannot open file '/var/tmp/<marker>': No such file or directory",
          '/': "cannot open file '//<marker>': Read-only file system",
        },
        fifo: 'ok',
        tcp: 'ok',
        fork: 'ok',
        lock: 'held',
        fds: expect.any(Array),
        comm: 'ok',
        // what reached A while B ran: nothing (a SIGUSR1 or SIGTERM would have ended its row)
        interrupts: 0,
        after: {
          tmp: 'from A',
          shm: 'from A',
          tcp: 'problem in accepting connections on this socket',
          tmp_entries: [marker, `${marker}.fifo`],
          // its own /dev/shm: neither B's file nor the host's shared files
          shm_entries: [marker],
        },
      });
      // B's side: only itself, and none of A's meeting points
      const noSuchProcess = ['sh: 1: kill: No such process', 'status 1'];
      expect(b).toEqual({
        kill_all: { pskill: false, shell: [noSuchProcess, noSuchProcess, noSuchProcess] },
        pids_alive: ['self'],
        kill_host_pids: { pskill: [false, false], shell: [noSuchProcess, noSuchProcess] },
        proc: ['self'],
        marker_in_proc: false,
        host_pids_in_proc: [false, false],
        files: { '/tmp': false, '/dev/shm': false, '/var/tmp': false, '/': false },
        fifo: false,
        entries: { '/tmp': [], '/dev/shm': [], '/var/tmp': [] },
        own_files: { '/tmp': 'from B', '/dev/shm': 'from B' },
        tcp: '127.0.0.1:<port> cannot be opened',
        tcp_own: 'ok',
        others_fds: 0,
        fds: expect.any(Array),
        // A's lock is there (the same file: a covert channel), and B started and ran beside it:
        // had anything of ours waited on it, B would have answered only after A let go
        lock: 'seen',
        seconds: expect.any(Number),
      });
      // each has a shared file of its own (at two descriptors), and no descriptor of the other's
      expect(sharedFiles(a.fds)).toHaveLength(1);
      expect(sharedFiles(b.fds)).toHaveLength(1);
      expect(b.fds.filter((link: string) => a.fds.includes(link))).toEqual([]);
      // two workers, alive at once
      expect(runner.stats()).toMatchObject({ started: 2, peak: 2, killed: 0 });
    }, 90_000);
  },
);

// What the assertions above rest on, checkable wherever R is (no sandbox needed).
describe.skipIf(!hasR)(`the bodies' helpers, in plain R${hasR ? '' : ` (${skipReason})`}`, () => {
  test('json() writes what JSON.parse reads; tried() and run() report an attempt without the marker or port', () => {
    const program = `args <- list("xf0123456789", 23456, 1, 0)
${PRELUDE}
cat(json(list(
  s = 'say "hi"', n = 1.5, t = TRUE, f = FALSE, empty = list(), one = list("x"), v = c(1, 2),
  nested = list(k = list()), ok = tried(1), w = tried(warning("at xf0123456789:23456")),
  e = tried(stop("no")), run = run("echo xf0123456789; exit 3")
)))`;
    const out = execFileSync(RSCRIPT, ['--vanilla', '-e', program], { encoding: 'utf8' });
    expect(JSON.parse(out)).toEqual({
      s: 'say "hi"',
      n: 1.5,
      t: true,
      f: false,
      empty: [],
      one: ['x'],
      v: [1, 2],
      nested: { k: [] },
      ok: 'ok',
      w: 'at <marker>:<port>',
      e: 'no',
      run: ['<marker>', 'status 3'],
    });
  });
});
