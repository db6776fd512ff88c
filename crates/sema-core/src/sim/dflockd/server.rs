//! A model of the Go dflockd server v1.10.0 (`internal/lock/lock.go`, `internal/server`), sans-IO
//! and on a simulated clock: the unified resource model (a lock is a semaphore of limit 1; the
//! first request fixes a key's limit, a different one is `error_limit_mismatch`), strict FIFO
//! with no barging, single-phase `l`/`sl` waiters blocking their connection, the lease clock
//! started at the grant, renew that never resurrects (an expired lease is evicted and answered
//! `error`), bearer tokens (`r`/`n` from any connection), the lease sweep every second plus the
//! eviction at the start of every acquire, release of everything a connection holds or waits
//! for on disconnect, and the per-request idle limit (`--read-timeout`, 23 s) that drops a
//! silent connection with `error`. Requests are given as the bytes the client encoded, parsed
//! as the server parses them (`internal/protocol`). The two-phase `e`/`w`, `stats`, `auth`,
//! `max-locks`/`max-waiters` and the key GC are not modelled (answered `error`, or not
//! reached by the simulated clients); `sim_server_model.rs` compares this model with the real
//! server on recorded scripts.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A connection's id on the server (the per-accept sequence).
pub type ConnId = u64;

/// The server's settings that the model reads (the Go server's defaults).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `--default-lease-ttl` (33 s).
    pub default_ttl_s: u64,
    /// `--read-timeout` (23 s): a connection silent that long between requests is dropped.
    pub read_timeout: Duration,
    /// `--lease-sweep-interval` (1 s).
    pub sweep: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            default_ttl_s: 33,
            read_timeout: Duration::from_secs(23),
            sweep: Duration::from_secs(1),
        }
    }
}

#[derive(Clone, Debug)]
struct Holder {
    conn: ConnId,
    expires: Duration,
}

#[derive(Clone, Debug)]
struct Waiter {
    conn: ConnId,
    ttl_s: u64,
    deadline: Duration,
}

#[derive(Clone, Debug)]
struct Resource {
    limit: u64,
    /// token → holder (a BTreeMap: iteration order is deterministic).
    holders: BTreeMap<String, Holder>,
    waiters: VecDeque<Waiter>,
}

/// What the server does with a request it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Write this line (without `\n`).
    Reply(String),
    /// A blocking `l`/`sl` waits in the queue: the connection reads nothing more until it is
    /// answered (by [`ServerModel::tick`] or a grant: see [`ServerModel::take_replies`]).
    Blocked,
}

/// The lock table of one server process (a restart is a new model).
#[derive(Clone, Debug)]
pub struct ServerModel {
    pub cfg: ServerConfig,
    resources: BTreeMap<String, Resource>,
    next_token: u64,
    /// Replies to blocked connections made by grants and timeouts, for the I/O to write.
    replies: Vec<(ConnId, String)>,
    /// A salt for the tokens, so two server lifetimes never hand out the same token.
    salt: u64,
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Go's `strconv.Atoi` on one field: an optional sign and decimal digits, within i64.
fn atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

fn key_ok(key: &str) -> bool {
    !key.is_empty() && !key.contains([' ', '\t', '\r', '\n'])
}

impl ServerModel {
    pub fn new(cfg: ServerConfig, salt: u64) -> Self {
        ServerModel {
            cfg,
            resources: BTreeMap::new(),
            next_token: 0,
            replies: Vec::new(),
            salt,
        }
    }

    fn token(&mut self) -> String {
        self.next_token += 1;
        // 32 lowercase hex characters, as the real server's.
        format!("{:016x}{:016x}", self.salt, self.next_token)
    }

    /// Holders and waiters per key: `(key, limit, holders, waiters)`.
    pub fn keys(&self) -> Vec<(String, u64, usize, usize)> {
        self.resources
            .iter()
            .map(|(k, r)| (k.clone(), r.limit, r.holders.len(), r.waiters.len()))
            .collect()
    }

    /// The holders of `key`: `(token, connection)`, in token order.
    pub fn holders_of(&self, key: &str) -> Vec<(String, ConnId)> {
        self.resources.get(key).map_or_else(Vec::new, |r| {
            r.holders.iter().map(|(t, h)| (t.clone(), h.conn)).collect()
        })
    }

    /// Whether nothing is held or waited for.
    pub fn is_empty(&self) -> bool {
        self.resources
            .values()
            .all(|r| r.holders.is_empty() && r.waiters.is_empty())
    }

    /// The replies that grants and timeouts produced for blocked connections, in order.
    pub fn take_replies(&mut self) -> Vec<(ConnId, String)> {
        std::mem::take(&mut self.replies)
    }

    /// Grant waiters in FIFO order while capacity allows (`grantNextWaiterLocked`).
    fn grant_next(&mut self, key: &str, now: Duration) {
        let mut grants = Vec::new();
        if let Some(r) = self.resources.get(key) {
            let free = (r.limit as usize).saturating_sub(r.holders.len());
            grants = r.waiters.iter().take(free).cloned().collect::<Vec<_>>();
        }
        for w in grants {
            let token = self.token();
            if let Some(r) = self.resources.get_mut(key) {
                r.waiters.pop_front();
                r.holders.insert(
                    token.clone(),
                    Holder {
                        conn: w.conn,
                        expires: now + secs(w.ttl_s),
                    },
                );
            }
            self.replies
                .push((w.conn, format!("ok {token} {}", w.ttl_s)));
        }
    }

    /// The sweep tick at or after `t` (the sweep runs every `cfg.sweep`).
    fn sweep_tick(&self, t: Duration) -> Duration {
        let sweep = self.cfg.sweep.as_nanos().max(1);
        Duration::from_nanos((t.as_nanos().div_ceil(sweep) * sweep) as u64)
    }

    /// Evict the holders of `key` whose lease ended by `now` (`swept`: only those a sweep tick
    /// at or before `now` saw expired; else the eviction at the start of an acquire).
    fn evict(&mut self, key: &str, now: Duration, swept: bool) {
        let Some(r) = self.resources.get(key) else {
            return;
        };
        let gone: Vec<String> = r
            .holders
            .iter()
            .filter(|(_, h)| match swept {
                true => self.sweep_tick(h.expires) <= now,
                false => now >= h.expires,
            })
            .map(|(t, _)| t.clone())
            .collect();
        let Some(r) = self.resources.get_mut(key) else {
            return;
        };
        let before = r.holders.len();
        r.holders.retain(|t, _| !gone.contains(t));
        if r.holders.len() != before {
            self.grant_next(key, now);
        }
    }

    /// The next instant [`Self::tick`] has something to do: the first sweep tick at or after a
    /// lease's end, or a waiter's deadline.
    pub fn next_event(&self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut at = |t: Duration| next = Some(next.map_or(t, |n: Duration| n.min(t)));
        for r in self.resources.values() {
            for h in r.holders.values() {
                at(self.sweep_tick(h.expires));
            }
            for w in &r.waiters {
                at(w.deadline);
            }
        }
        next
    }

    /// The clock reached `now`: the sweep (of the ticks up to `now`) and the waiters' timeouts.
    pub fn tick(&mut self, now: Duration) {
        let keys: Vec<String> = self.resources.keys().cloned().collect();
        for key in keys {
            if let Some(r) = self.resources.get_mut(&key) {
                let mut timed_out = Vec::new();
                r.waiters.retain(|w| {
                    let out = now >= w.deadline;
                    if out {
                        timed_out.push(w.conn);
                    }
                    !out
                });
                self.replies
                    .extend(timed_out.into_iter().map(|c| (c, "timeout".to_string())));
            }
            self.evict(&key, now, true);
        }
    }

    /// Whether [`Self::tick`] has something due at `now`.
    pub fn due(&self, now: Duration) -> bool {
        self.next_event().is_some_and(|t| t <= now)
    }

    /// The connection is gone (EOF, a reset, the idle limit): its waiters leave the queues and
    /// everything it holds is released (`CleanupConnection`), then waiters are granted.
    pub fn disconnect(&mut self, conn: ConnId, now: Duration) {
        let keys: Vec<String> = self.resources.keys().cloned().collect();
        for key in keys {
            if let Some(r) = self.resources.get_mut(&key) {
                r.waiters.retain(|w| w.conn != conn);
                let before = r.holders.len();
                r.holders.retain(|_, h| h.conn != conn);
                if r.holders.len() != before {
                    self.grant_next(&key, now);
                }
            }
        }
    }

    /// Handle one request (the three lines the client wrote) from `conn` at `now`.
    pub fn request(&mut self, conn: ConnId, bytes: &[u8], now: Duration) -> Answer {
        let text = String::from_utf8_lossy(bytes);
        let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
        let (cmd, key, arg) = (
            lines.next().unwrap_or(""),
            lines.next().unwrap_or(""),
            lines.next().unwrap_or(""),
        );
        let fields: Vec<&str> = arg.split_whitespace().collect();
        let err = || Answer::Reply("error".to_string());
        let keyed = ["l", "r", "n", "e", "w", "sl", "sr", "sn", "se", "sw"];
        if keyed.contains(&cmd) && !key_ok(key) {
            return err();
        }
        let ttl = |f: Option<&&str>| -> Result<u64, ()> {
            match f {
                None => Ok(self.cfg.default_ttl_s),
                Some(s) => match atoi(s) {
                    Some(t) if t > 0 => Ok(t as u64),
                    _ => Err(()),
                },
            }
        };
        match cmd {
            "l" | "sl" => {
                let sem = cmd == "sl";
                let want = if sem { 2..=3 } else { 1..=2 };
                if !want.contains(&fields.len()) {
                    return err();
                }
                let Some(timeout) = atoi(fields[0]) else {
                    return err();
                };
                if timeout < 0 {
                    return err();
                }
                let limit = if sem {
                    match atoi(fields[1]) {
                        Some(l) if l > 0 => l as u64,
                        _ => return err(),
                    }
                } else {
                    1
                };
                let Ok(ttl_s) = ttl(fields.get(if sem { 2 } else { 1 })) else {
                    return err();
                };
                self.acquire(conn, key, timeout as u64, limit, ttl_s, now)
            }
            "r" | "sr" => {
                let token = arg.trim();
                if token.is_empty() {
                    return err();
                }
                let released = match self.resources.get_mut(key) {
                    Some(r) => r.holders.remove(token).is_some(),
                    None => false,
                };
                if released {
                    self.grant_next(key, now);
                    Answer::Reply("ok".into())
                } else {
                    err()
                }
            }
            "n" | "sn" => {
                if !(1..=2).contains(&fields.len()) {
                    return err();
                }
                let Ok(ttl_s) = ttl(fields.get(1)) else {
                    return err();
                };
                let token = fields[0];
                let Some(r) = self.resources.get_mut(key) else {
                    return err();
                };
                let Some(h) = r.holders.get_mut(token) else {
                    return err();
                };
                if now >= h.expires {
                    // Renew never resurrects: evicted, the next waiter granted, `error`.
                    r.holders.remove(token);
                    self.grant_next(key, now);
                    return err();
                }
                h.expires = now + secs(ttl_s);
                Answer::Reply(format!("ok {ttl_s}"))
            }
            _ => err(),
        }
    }

    fn acquire(
        &mut self,
        conn: ConnId,
        key: &str,
        timeout_s: u64,
        limit: u64,
        ttl_s: u64,
        now: Duration,
    ) -> Answer {
        let r = self
            .resources
            .entry(key.to_string())
            .or_insert_with(|| Resource {
                limit,
                holders: BTreeMap::new(),
                waiters: VecDeque::new(),
            });
        if r.limit != limit {
            return Answer::Reply("error_limit_mismatch".into());
        }
        self.evict(key, now, false);
        // A grant made by the eviction goes to a blocked connection, not to this request.
        let Some(r) = self.resources.get_mut(key) else {
            return Answer::Reply("error".into());
        };
        if (r.holders.len() as u64) < r.limit && r.waiters.is_empty() {
            let token = self.token();
            if let Some(r) = self.resources.get_mut(key) {
                r.holders.insert(
                    token.clone(),
                    Holder {
                        conn,
                        expires: now + secs(ttl_s),
                    },
                );
            }
            return Answer::Reply(format!("ok {token} {ttl_s}"));
        }
        if timeout_s == 0 {
            // The timer fires at once: queued and removed in the same instant.
            return Answer::Reply("timeout".into());
        }
        r.waiters.push_back(Waiter {
            conn,
            ttl_s,
            deadline: now + secs(timeout_s),
        });
        Answer::Blocked
    }
}
