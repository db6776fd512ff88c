//! The simulated network: one TCP connection per client request stream, each direction an
//! ordered queue of messages with a delivery instant (a message never overtakes an earlier one
//! of its direction), and a connection's end seen by each side at its own instant.

use std::collections::VecDeque;
use std::time::Duration;

use super::super::SimRng;
use super::server::ConnId;

/// What travels to the server.
#[derive(Clone, Debug, PartialEq)]
pub enum ToServer {
    /// The three lines of a request, as the client's codec encoded them.
    Request(Vec<u8>),
    /// The client's side closed (FIN from `close()` or the kernel of a killed process, or a
    /// reset the server reads).
    Eof,
}

/// What travels to the client.
#[derive(Clone, Debug, PartialEq)]
pub enum ToClient {
    Line(String),
    Eof,
}

/// How long messages take: a few milliseconds, and with probability `long_num / 1000` a long
/// stall (a reply delayed past a deadline, a renew stuck in a retransmitting TCP stream).
#[derive(Clone, Debug)]
pub struct Delays {
    pub long_per_mille: u32,
    pub long_max: Duration,
}

impl Delays {
    pub fn draw(&self, rng: &mut SimRng) -> Duration {
        if rng.chance(self.long_per_mille, 1000) {
            let max = self.long_max.as_millis().max(1000) as usize;
            Duration::from_millis(1000 + rng.below(max - 999) as u64)
        } else {
            Duration::from_millis(1 + rng.below(20) as u64)
        }
    }
}

/// One connection between a client and the server process of `epoch`.
#[derive(Debug)]
pub struct Conn {
    pub client: usize,
    /// Its id on the server (unique over the run).
    pub id: ConnId,
    /// The server lifetime it was accepted by.
    pub epoch: u64,
    pub to_server: VecDeque<(Duration, ToServer)>,
    pub to_client: VecDeque<(Duration, ToClient)>,
    /// The client has not closed it.
    pub client_open: bool,
    /// The server has not closed it or seen its end.
    pub server_open: bool,
    /// The server is inside a blocking `l`/`sl` for it (it reads nothing meanwhile).
    pub blocked: bool,
    /// When the server last answered on it (its idle read deadline runs from there).
    pub last_reply: Duration,
    /// The path was reset (a [`Net::break_conn`] fault).
    pub reset: bool,
}

/// Every connection of the run, by index.
#[derive(Debug)]
pub struct Net {
    pub conns: Vec<Conn>,
    pub delays: Delays,
}

impl Net {
    /// Connect at `now`: accepted by the server of `epoch` when `server_up`, else refused (the
    /// client reads the refusal as the connection's end).
    pub fn open(
        &mut self,
        client: usize,
        epoch: u64,
        server_up: bool,
        now: Duration,
        rng: &mut SimRng,
    ) -> usize {
        let i = self.conns.len();
        let mut c = Conn {
            client,
            id: i as ConnId + 1,
            epoch,
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            client_open: true,
            server_open: server_up,
            blocked: false,
            last_reply: now,
            reset: false,
        };
        if !server_up {
            let at = now + self.delays.draw(rng);
            c.to_client.push_back((at, ToClient::Eof));
        }
        self.conns.push(c);
        i
    }

    fn push<T>(q: &mut VecDeque<(Duration, T)>, at: Duration, m: T) {
        // Ordered: never before the message ahead of it.
        let at = q.back().map_or(at, |(last, _)| at.max(*last));
        q.push_back((at, m));
    }

    /// The client writes on `conn` (nothing happens on a connection it closed).
    pub fn send(&mut self, conn: usize, bytes: Vec<u8>, now: Duration, rng: &mut SimRng) {
        let d = self.delays.draw(rng);
        if let Some(c) = self.conns.get_mut(conn) {
            if c.client_open {
                Self::push(&mut c.to_server, now + d, ToServer::Request(bytes));
            }
        }
    }

    /// The server writes a line on `conn` (lost when the client has closed its side).
    pub fn reply(&mut self, conn: usize, line: String, now: Duration, rng: &mut SimRng) {
        let d = self.delays.draw(rng);
        if let Some(c) = self.conns.get_mut(conn) {
            c.last_reply = now;
            c.blocked = false;
            Self::push(&mut c.to_client, now + d, ToClient::Line(line));
        }
    }

    /// The client closes `conn`: the server reads its end after what was sent before.
    pub fn close_client(&mut self, conn: usize, now: Duration, rng: &mut SimRng) {
        let d = self.delays.draw(rng);
        if let Some(c) = self.conns.get_mut(conn) {
            if c.client_open {
                c.client_open = false;
                Self::push(&mut c.to_server, now + d, ToServer::Eof);
            }
        }
    }

    /// The server closes `conn` (idle limit, its process gone): the client reads its end after
    /// what was sent before.
    pub fn close_server(&mut self, conn: usize, now: Duration, rng: &mut SimRng) {
        let d = self.delays.draw(rng);
        if let Some(c) = self.conns.get_mut(conn) {
            if c.server_open {
                c.server_open = false;
                c.blocked = false;
                Self::push(&mut c.to_client, now + d, ToClient::Eof);
            }
        }
    }

    /// The path breaks (a reset): what was in flight is lost, and each side reads the end at
    /// its own instant.
    pub fn break_conn(&mut self, conn: usize, now: Duration, rng: &mut SimRng) {
        let (d1, d2) = (self.delays.draw(rng), self.delays.draw(rng));
        if let Some(c) = self.conns.get_mut(conn) {
            c.reset = true;
            c.to_client.clear();
            c.to_server.clear();
            c.to_client.push_back((now + d1, ToClient::Eof));
            c.to_server.push_back((now + d2, ToServer::Eof));
        }
    }

    /// The connection with server id `id`.
    pub fn by_id(&self, id: ConnId) -> Option<usize> {
        let i = (id as usize).checked_sub(1)?;
        (i < self.conns.len()).then_some(i)
    }

    /// The earliest delivery instant still queued.
    pub fn next_delivery(&self) -> Option<Duration> {
        self.conns
            .iter()
            .flat_map(|c| c.to_server.front().into_iter().map(|(t, _)| *t))
            .chain(
                self.conns
                    .iter()
                    .flat_map(|c| c.to_client.front().into_iter().map(|(t, _)| *t)),
            )
            .min()
    }
}
