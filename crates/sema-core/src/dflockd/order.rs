//! Call order of waiters in this process (design §4: "waiters started in order are granted in
//! order").
//!
//! The server's queue is strictly FIFO per key, but N acquisitions started in one tick each
//! open (or take from the pool) their own connection, and whichever connection's request
//! reaches the server first is queued first: nine locks started 0…8 were granted e.g.
//! `8,1,0,2,4,3,7,6,5`. So each blocking acquisition takes a [`Place`] in a per-(server, key)
//! chain when it is called (synchronously, on the caller's thread, so places follow call
//! order), connects in parallel with the others, and sends its `e`/`se` only once the previous
//! place's `e`/`se` has been answered (`acquired` or `queued`: the server has queued it). An
//! uncontended acquisition still takes one round trip (`e` answered `acquired`, like `l`).
//! A predecessor that fails, is cancelled or is dropped frees its successor at once; a
//! predecessor that hangs frees it after the socket timeout (order then yields to progress).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;

use super::connection::ConnectOptions;
use super::primitive::lock;

/// The newest place of each (server, key) chain: its id and the receiver its successor awaits.
type Chains = HashMap<String, (u64, oneshot::Receiver<()>)>;

fn chains() -> &'static Mutex<(u64, Chains)> {
    static CHAINS: OnceLock<Mutex<(u64, Chains)>> = OnceLock::new();
    CHAINS.get_or_init(|| Mutex::new((0, HashMap::new())))
}

fn chain_name(server: &ConnectOptions, key: &str) -> String {
    format!(
        "{}\n{}\n{}",
        server.host.to_ascii_lowercase(),
        server.port,
        key
    )
}

/// One acquisition's place in its (server, key) chain. Dropping it (or [`Place::queued`])
/// lets the next place send its request.
pub struct Place {
    chain: String,
    id: u64,
    prev: Option<oneshot::Receiver<()>>,
    /// Dropped when this place's request was answered: its successor's receiver then resolves.
    done: Option<oneshot::Sender<()>>,
}

impl Place {
    /// Takes the next place in the chain of `key` on `server` (call order = place order).
    pub fn take(server: &ConnectOptions, key: &str) -> Place {
        let chain = chain_name(server, key);
        let (tx, rx) = oneshot::channel();
        let mut g = lock(chains());
        g.0 += 1;
        let id = g.0;
        let prev = g.1.insert(chain.clone(), (id, rx)).map(|(_, rx)| rx);
        Place {
            chain,
            id,
            prev,
            done: Some(tx),
        }
    }

    /// The next place in the chain of `key` on `server` only when no earlier place still
    /// waits for its answer (the chain is empty): the "chain empty" query of a driver that
    /// cannot await [`Place::turn`] (the binding's event loop) and sends at once. `None`
    /// leaves the chain as it was (the caller takes its place with [`Place::take`]).
    pub fn take_if_first(server: &ConnectOptions, key: &str) -> Option<Place> {
        let chain = chain_name(server, key);
        let (tx, rx) = oneshot::channel();
        let mut g = lock(chains());
        if let Some((_, prev)) = g.1.get_mut(&chain) {
            if matches!(prev.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
                return None;
            }
        }
        g.0 += 1;
        let id = g.0;
        g.1.insert(chain.clone(), (id, rx));
        Some(Place {
            chain,
            id,
            prev: None,
            done: Some(tx),
        })
    }

    /// Waits until the previous place's request was answered (or it ended), at most `bound`.
    pub async fn turn(&mut self, bound: Duration) {
        if let Some(prev) = self.prev.take() {
            let _ = tokio::time::timeout(bound, prev).await;
        }
    }

    /// This place's request was answered: the next place may send its own.
    pub fn queued(&mut self) {
        self.done.take();
        let mut g = lock(chains());
        if matches!(g.1.get(&self.chain), Some((id, _)) if *id == self.id) {
            g.1.remove(&self.chain);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.done.is_some() {
            self.queued();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn places_follow_call_order_and_are_forgotten() {
        let s = ConnectOptions::new("Host", 1);
        let mut a = Place::take(&s, "k");
        let mut b = Place::take(&ConnectOptions::new("host", 1), "k");
        let mut other = Place::take(&s, "other");
        // The first place of a chain goes at once; another key is another chain.
        a.turn(Duration::from_secs(5)).await;
        other.turn(Duration::from_secs(5)).await;
        let waiting = tokio::spawn(async move {
            b.turn(Duration::from_secs(5)).await;
            b
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        a.queued();
        let b = waiting.await.unwrap_or_else(|e| panic!("{e}"));
        drop(b);
        drop(other);
        assert!(lock(chains())
            .1
            .keys()
            .all(|k| !k.ends_with("\nk") && !k.ends_with("\nother")));
    }

    #[tokio::test]
    async fn take_if_first_only_when_no_earlier_place_waits() {
        let s = ConnectOptions::new("h", 3);
        let a = Place::take_if_first(&s, "k3");
        assert!(a.is_some(), "an empty chain");
        assert!(
            Place::take_if_first(&s, "k3").is_none(),
            "the first place's request is not answered yet"
        );
        let mut b = Place::take(&s, "k3");
        drop(a);
        b.turn(Duration::from_secs(60)).await;
        assert!(
            Place::take_if_first(&s, "k3").is_none(),
            "b waits for its answer"
        );
        b.queued();
        assert!(
            Place::take_if_first(&s, "k3").is_some(),
            "answered: empty again"
        );
    }

    #[tokio::test]
    async fn a_dropped_predecessor_frees_its_successor() {
        let s = ConnectOptions::new("h", 2);
        let a = Place::take(&s, "k2");
        let mut b = Place::take(&s, "k2");
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), b.turn(Duration::from_secs(60)))
            .await
            .unwrap_or_else(|_| panic!("successor not freed"));
    }
}
