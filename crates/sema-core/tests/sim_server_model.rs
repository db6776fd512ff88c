//! The simulator's dflockd server model agrees with the real Go server: recorded command
//! scripts (several clients; locks and semaphores with limits and mismatches; FIFO grants;
//! releases, by the holder's connection and by another; unknown tokens; renews; lease expiry;
//! waiter timeouts; disconnects of holders and of waiters; malformed requests) are played on
//! both, and the lines each connection reads after every step are compared (tokens numbered
//! by first appearance, since each server draws its own).
//!
//! The model file is included as a module (it needs nothing but std), so this test runs in
//! the default `cargo test` without the `sim` feature.

mod common;

#[allow(dead_code)]
#[path = "../src/sim/dflockd/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::dflockd::{skip_unless_go, TestServer};
use server::{Answer, ServerConfig, ServerModel};

/// One step of a script: client `c` sends `cmd key arg` (in `arg`, `{c}` is the token client
/// `c` was granted last on that server, `{x}` an unknown token); a client closes its
/// connection; or the script waits.
#[derive(Clone, Copy, Debug)]
enum Step {
    Send(usize, &'static str, &'static str, &'static str),
    Close(usize),
    Sleep(u64),
}
use Step::*;

/// The scripts (keys are per script: `{p}` is replaced by a prefix unique to the run).
fn scripts() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            "lock: grant, contention, FIFO, release hands over in order",
            vec![
                Send(0, "l", "a", "0 10"),
                Send(1, "l", "a", "0 10"),
                Send(1, "l", "a", "5 10"),
                Send(2, "l", "a", "5 10"),
                Send(0, "r", "a", "{0}"),
                Send(1, "r", "a", "{1}"),
                Send(2, "r", "a", "{2}"),
                Send(2, "r", "a", "{2}"),
            ],
        ),
        (
            "semaphore: limit 2, a third waits, a release grants it; mismatches both ways",
            vec![
                Send(0, "sl", "s", "0 2 10"),
                Send(1, "sl", "s", "0 2 10"),
                Send(3, "sl", "s", "0 3 10"),
                Send(3, "l", "s", "0 10"),
                Send(2, "sl", "s", "5 2 10"),
                Send(0, "sr", "s", "{0}"),
                Send(1, "r", "s", "{1}"),
                Send(2, "sr", "s", "{2}"),
                Send(3, "sl", "a2", "0 1 10"),
                Send(0, "sl", "a2", "0 2 10"),
                Send(3, "r", "a2", "{3}"),
            ],
        ),
        (
            "unknown tokens, unknown keys, a token released from another connection",
            vec![
                Send(0, "r", "nokey", "{x}"),
                Send(0, "n", "nokey", "{x} 5"),
                Send(0, "l", "b", "0 10"),
                Send(1, "r", "b", "{x}"),
                Send(1, "n", "b", "{x}"),
                Send(1, "n", "b", "{0} 7"),
                Send(2, "l", "b", "5 10"),
                Send(1, "r", "b", "{0}"),
                Send(0, "r", "b", "{0}"),
                Send(2, "r", "b", "{2}"),
            ],
        ),
        (
            "disconnects: a holder's grants the next waiter, a waiter's leaves the queue",
            vec![
                Send(0, "l", "c", "0 10"),
                Send(1, "l", "c", "5 10"),
                Send(2, "l", "c", "5 10"),
                Close(0),
                Sleep(200),
                Send(3, "sl", "d", "0 2 10"),
                Send(0, "sl", "d", "0 2 10"),
                Send(2, "sl", "d", "5 2 10"),
                Close(3),
                Sleep(200),
                Send(1, "r", "c", "{1}"),
                Send(2, "r", "c", "{2}"),
                Send(0, "sr", "d", "{0}"),
            ],
        ),
        (
            "leases: a lease ends by itself, renew never resurrects, a waiter times out",
            vec![
                Send(0, "l", "e", "0 1"),
                Send(1, "l", "e", "5 10"),
                Sleep(2_600),
                Send(2, "l", "f", "0 1"),
                Sleep(2_600),
                Send(2, "n", "f", "{2} 5"),
                Send(0, "n", "e", "{0}"),
                Send(1, "n", "e", "{1} 3"),
                Send(3, "l", "h", "0 10"),
                Send(0, "l", "h", "1 10"),
                Sleep(1_600),
                Send(1, "r", "e", "{1}"),
                Send(3, "r", "h", "{3}"),
            ],
        ),
        (
            "malformed requests are answered error and the connection goes on",
            vec![
                Send(0, "l", "g", "x"),
                Send(0, "l", "g", "-1"),
                Send(0, "l", "g", "0 0"),
                Send(0, "sl", "g", "0 0"),
                Send(0, "sl", "g", "0"),
                Send(0, "zz", "g", "0"),
                Send(0, "l", "g", "0 1 2"),
                Send(0, "n", "g", ""),
                Send(0, "r", "g", ""),
                Send(0, "l", "g", "+0 5"),
                Send(0, "r", "g", "{0}"),
            ],
        ),
    ]
}

const CLIENTS: usize = 4;
/// How long the real server's replies are collected after each step.
const SETTLE: Duration = Duration::from_millis(150);

/// Lines read after one step, per client, tokens numbered by first appearance.
type Seen = Vec<(usize, String)>;

/// Tokens of one server: numbered by first appearance; the last one granted to each client.
#[derive(Default)]
struct Tokens {
    ids: BTreeMap<String, usize>,
    last: BTreeMap<usize, String>,
}

impl Tokens {
    fn arg(&self, arg: &str) -> String {
        let mut out = arg.replace("{x}", "0123456789abcdef0123456789abcdef");
        for c in 0..CLIENTS {
            let t = self.last.get(&c).cloned().unwrap_or_else(|| "none".into());
            out = out.replace(&format!("{{{c}}}"), &t);
        }
        out
    }

    /// `ok <token> <ttl>` → `ok T<n> <ttl>`, remembering the client's token.
    fn normalise(&mut self, client: usize, line: &str) -> String {
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.len() == 3 && parts[0] == "ok" {
            let n = self.ids.len();
            let id = *self.ids.entry(parts[1].to_string()).or_insert(n);
            self.last.insert(client, parts[1].to_string());
            return format!("ok T{id} {}", parts[2]);
        }
        line.to_string()
    }
}

fn encode(cmd: &str, key: &str, arg: &str) -> Vec<u8> {
    format!("{cmd}\n{key}\n{arg}\n").into_bytes()
}

/// The script on the model; time moves only by the script's sleeps. A connection blocked in
/// `l`/`sl` reads its next request only once answered, as the server's.
fn on_model(steps: &[Step], prefix: &str) -> Vec<Seen> {
    let mut m = ServerModel::new(ServerConfig::default(), 1);
    let mut now = Duration::ZERO;
    let mut tokens = Tokens::default();
    let mut out = Vec::new();
    let mut blocked = [false; CLIENTS];
    let mut queued: Vec<Vec<Vec<u8>>> = vec![Vec::new(); CLIENTS];
    let conn = |c: usize| c as u64 + 1;
    for step in steps {
        let mut seen: Seen = Vec::new();
        match *step {
            Send(c, cmd, key, arg) => {
                let key = format!("{prefix}{key}");
                queued[c].push(encode(cmd, &key, &tokens.arg(arg)));
            }
            Close(c) => {
                m.disconnect(conn(c), now);
                (blocked[c], queued[c]) = (false, Vec::new());
            }
            Sleep(ms) => {
                let end = now + Duration::from_millis(ms);
                advance(&mut m, &mut now, end, &mut blocked, &mut seen);
            }
        }
        // Answer what each unblocked connection has to read, until nothing changes.
        loop {
            for (id, l) in m.take_replies() {
                blocked[id as usize - 1] = false;
                seen.push((id as usize - 1, l));
            }
            let Some(c) = (0..CLIENTS).find(|&c| !blocked[c] && !queued[c].is_empty()) else {
                break;
            };
            let bytes = queued[c].remove(0);
            match m.request(conn(c), &bytes, now) {
                Answer::Reply(line) => seen.push((c, line)),
                Answer::Blocked => blocked[c] = true,
            }
        }
        // The real script reads replies for SETTLE after each step: the clock runs as long.
        let end = now + SETTLE;
        advance(&mut m, &mut now, end, &mut blocked, &mut seen);
        seen.sort_by_key(|(c, _)| *c);
        let seen = seen
            .into_iter()
            .map(|(c, l)| (c, tokens.normalise(c, &l)))
            .collect();
        out.push(seen);
    }
    out
}

/// The model's clock to `end`, through every sweep tick and waiter deadline on the way.
fn advance(
    m: &mut ServerModel,
    now: &mut Duration,
    end: Duration,
    blocked: &mut [bool; CLIENTS],
    seen: &mut Seen,
) {
    while let Some(t) = m.next_event().filter(|t| *t <= end) {
        *now = t.max(*now);
        m.tick(*now);
        for (id, l) in m.take_replies() {
            blocked[id as usize - 1] = false;
            seen.push((id as usize - 1, l));
        }
    }
    *now = end;
}

/// The script on the real server: one connection per client, replies read for [`SETTLE`].
fn on_server(steps: &[Step], prefix: &str, port: u16) -> Vec<Seen> {
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(10)))
            .expect("timeout");
        Some(BufReader::new(s))
    };
    let mut conns: Vec<Option<BufReader<TcpStream>>> = (0..CLIENTS).map(|_| connect()).collect();
    let mut tokens = Tokens::default();
    let mut out = Vec::new();
    for step in steps {
        match *step {
            Send(c, cmd, key, arg) => {
                let key = format!("{prefix}{key}");
                let bytes = encode(cmd, &key, &tokens.arg(arg));
                let s = conns[c].get_or_insert_with(|| connect().expect("reconnect"));
                s.get_mut().write_all(&bytes).expect("write");
            }
            Close(c) => {
                if let Some(s) = conns[c].take() {
                    let _ = s.get_ref().shutdown(std::net::Shutdown::Both);
                }
            }
            Sleep(ms) => std::thread::sleep(Duration::from_millis(ms)),
        }
        let mut seen: Seen = Vec::new();
        let until = Instant::now() + SETTLE;
        while Instant::now() < until {
            for (c, s) in conns.iter_mut().enumerate() {
                let Some(s) = s else { continue };
                let mut line = String::new();
                match s.read_line(&mut line) {
                    Ok(n) if n > 0 => seen.push((c, line.trim_end().to_string())),
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
        }
        seen.sort_by_key(|(c, _)| *c);
        let seen = seen
            .into_iter()
            .map(|(c, l)| (c, tokens.normalise(c, &l)))
            .collect();
        out.push(seen);
    }
    out
}

#[test]
fn dflockd_the_server_model_answers_as_the_go_server() {
    if skip_unless_go("sim_server_model", "the semaphore commands") {
        return;
    }
    let server = TestServer::start(&[]);
    for (i, (name, steps)) in scripts().into_iter().enumerate() {
        let prefix = format!("simmodel{}-{i}-", std::process::id());
        let model = on_model(&steps, &prefix);
        let real = on_server(&steps, &prefix, server.port);
        for (n, ((step, m), r)) in steps.iter().zip(&model).zip(&real).enumerate() {
            assert_eq!(
                m, r,
                "script '{name}', step {n} {step:?}: the model read {m:?}, the Go server {r:?}"
            );
        }
    }
}
