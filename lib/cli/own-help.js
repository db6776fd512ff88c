'use strict'
// The --help texts of sema-native's own commands (lib/cli/own.js). docs/cli.md is the longer description; keep the
// two in step.

const path = require('node:path')

const PROG = 'sema-native'

// Where the docs are for whoever reads --help: the copy installed with the package (package.json "files" has docs/),
// an absolute path that opens wherever the package is, and the repository's page.
const CLI_DOCS = path.join(__dirname, '..', '..', 'docs', 'cli.md')
const HOMEPAGE = require('../../package.json').homepage

const OVERVIEW = `Usage: ${PROG} <command> <target> [options]
       ${PROG} run <target> [options] -- <command> [args...]
       ${PROG} semats <args...>     the semats CLI, byte for byte
       ${PROG} sema <args...>       the Rust sema CLI, byte for byte

Cross-process and cross-machine locks. <target> is a lock file path (or file:// URL)
or dflockd://[token@]host[:port][,host2[:port]...]/key[?limit=N&leaseTtl=S&tls=1]
(several servers: each key goes to the one stableHashShard picks).

Commands:
  acquire <target>       Wait for the lock and keep it after this command exits
                         (owner: --pid, else the calling shell); file targets only
  try-acquire <target>   Like acquire, one attempt, no waiting
  release <target>       Release a lock taken by acquire (same owner), or --force
  status <target>        Show who holds the lock (exit 0 whether held or free)
  clean <target>         Remove the lock if its holder is dead or it is stale
  wait <target>          Wait until the lock is free, without taking it
  run <target> -- <cmd>  Hold the lock while <cmd> runs; exit with its status
  ls <dir>               List every lock file in <dir>: state, holder, age, waiters
  top <dir>              ls as a live view (q to quit)

Options:
  --timeout <time>   How long acquire/wait/run wait (default: forever; 0 = one try)
  --tag <text>       Tag written into the lock file
  --pid <pid>        Owner pid recorded by acquire/try-acquire and checked by release
                     (default: the parent process, i.e. the calling shell; pass --pid $$
                     in scripts; under npx or npm scripts use run: see acquire --help)
  --stale <time>     Locks of other tools older than this whose pid is gone may be
                     broken (default 1h; 0 or off: never by age)
  --limit <n>        A counting semaphore of n slots (acquire, try-acquire, run, status,
                     release); files: slot files <path>.slot-<i>-of-<n> beside <path>
  --mode <mode>      run: shared (any number of shared holders at once) or exclusive
  --force            release: remove the lock whoever holds it
  --ca <file>        dflockd: PEM CA for TLS (implies TLS)
  --json             One line of JSON on stdout, also for failures
  -v, --verbose      acquire/run: say on stderr when the lock is busy and we wait
  -q, --quiet        No output on success
  -h, --help         Help (also: ${PROG} <command> --help)
  -V, --version      Print the version

Times take a unit: 500ms, 2s, 1.5s, 1m, 1h. A bare number other than 0 is refused
(seconds to flock and sema, milliseconds to semats: write which you mean).

Exit codes:
  0  success (status and clean: the query answered)
  1  lock busy, timed out, release refused or nothing to release
  2  usage error
  3  I/O, connection or other error (the OS refusing access too)
  run: the command's own exit status, 128+N if it died of signal N,
       126/127 if it could not be started, 1/2/3 as above before it started

Docs: ${CLI_DOCS}
      ${HOMEPAGE}
`

const COMMAND_HELP = {
  acquire: `Usage: ${PROG} acquire <target> [--timeout <time>] [--tag <text>] [--pid <pid>] [--stale <time>] [--limit <n>] [-v] [--json] [-q]

Waits for the lock and leaves it in place when this command exits. The lock is recorded
for --pid, or else for this command's parent process (the shell that ran it), and lasts
as long as that process lives or until \`${PROG} release\`. From a script:

  ${PROG} acquire /tmp/job.lock --pid $$ --timeout 30s || exit 1
  ...
  ${PROG} release /tmp/job.lock --pid $$

Inside $( ... ), ( ... ) or a pipeline (a subshell that exits at once) the lock is recorded
for the shell the subshell was forked from, as $$ names it. Pass --pid $$ when release runs
from another process. Under npx,
npm exec or a one-command npm script the parent is npm's own short-lived process: acquire
refuses that (exit 2); use \`${PROG} run\` there. In a Makefile each recipe line is its own
shell: use \`${PROG} run build.lock -- $(MAKE) real-build\`.

dflockd:// targets cannot be acquired this way: the server releases a lock when the
connection that holds it closes, which is when this command exits. Use \`${PROG} run\`.

Exit: 0 acquired, 1 timed out, 2 usage, 3 error.
`,
  'try-acquire': `Usage: ${PROG} try-acquire <target> [--tag <text>] [--pid <pid>] [--stale <time>] [--limit <n>] [--json] [-q]

One attempt at the lock, without waiting; otherwise as \`${PROG} acquire\`.

Exit: 0 acquired, 1 held by someone else, 2 usage, 3 error.
`,
  release: `Usage: ${PROG} release <target> [--pid <pid>] [--force] [--limit <n>] [--json] [-q]

Releases the lock if it is recorded for --pid (default: this command's parent process,
the shell that ran it, as for acquire). --force removes it whoever holds it. With
--limit n: the first of the n slots that is released.

Exit: 0 released, 1 held by another owner or not locked, 2 usage, 3 error.
`,
  status: `Usage: ${PROG} status <target> [--stale <time>] [--ca <file>] [--limit <n>] [--json]

Shows whether the lock is held, by whom, since when and whether it is stale. With
--limit n: also how many of the n slots are held.

Exit: 0 the status was read (held or free), 2 usage, 3 error.
`,
  clean: `Usage: ${PROG} clean <target> [--stale <time>] [--json] [-q]

Removes the lock file if its holder is gone: at once when the holder was a process on
this host that no longer runs, or by --stale age for locks of other tools whose pid is
not running. A live holder's lock is never removed. File targets only.

Exit: 0 done (cleaned or nothing to clean), 2 usage, 3 error.
`,
  wait: `Usage: ${PROG} wait <target> [--timeout <time>] [--ca <file>] [--json] [-q]

Waits until nobody holds the lock (a lock whose holder is gone counts as free), without
taking it.

Exit: 0 free, 1 timed out, 2 usage, 3 error.
`,
  ls: `Usage: ${PROG} ls <dir> [--stale <time>] [--json]

Lists every lock in <dir>, written by any tool (${PROG}, sema, semats): whether it is
held, stale (its holder is gone: the next acquire breaks it) or free, the holder's pid
and command line (where the system tells it), host, tag, how long it has been held and
how many processes of this machine wait in its line. Reads only: symbolic links are
shown, never followed; other users' locks as far as the permissions allow.

Exit: 0 listed, 2 usage, 3 the directory cannot be read.
`,
  top: `Usage: ${PROG} top <dir> [--stale <time>]

${PROG} ls as a live view: redrawn when something happens in <dir> (file events) and
once a second for the clocks and the waiter counts, with each lock's hand-offs per second
(over the last 10 s) and how long its line has had waiters. q or Ctrl-C quits. When stdout
is not a terminal: the table under a time line each time a lock changes (not the clocks),
until the process is ended.

Exit: 0 quit, 2 usage, 3 the directory cannot be read.
`,
  run: `Usage: ${PROG} run <target> [--timeout <time>] [--tag <text>] [--stale <time>] [--ca <file>] [--limit <n>] [--mode shared|exclusive] [-v] -- <command> [args...]

Acquires the lock, runs <command> with this terminal's stdin/stdout/stderr, holds the
lock (renewed automatically) for the command's whole life, releases it, and exits with
the command's exit status. SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to the
command (on Windows, Ctrl-C and Ctrl-Break reach it through the console, and run waits
for it). Works for files and dflockd:// alike.

  ${PROG} run /tmp/build.lock --timeout 10m -- make build

Exit: the command's status; 128+N if it died of signal N; 126 cannot execute, 127 not
found; before the command starts: 1 timed out, 2 usage, 3 error.
`,
}

module.exports = { OVERVIEW, COMMAND_HELP }
