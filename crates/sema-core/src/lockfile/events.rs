//! Several file events waited on as one: the semaphore's slots and line, a shared lock's P and
//! members. Each notification is enabled as it is added, so a waiter that adds them *before* it
//! looks at the files they stand for misses no change made in between (tokio's `Notify` keeps
//! no permit for a `notify_waiters` that found no enabled waiter).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// Enabled notifications; [`Events::any`] completes when one of them has fired.
pub(super) struct Events<'a>(Vec<Pin<Box<Notified<'a>>>>);

impl<'a> Events<'a> {
    /// The notifications of `notifies`, each enabled now.
    pub(super) fn of(notifies: impl IntoIterator<Item = &'a Notify>) -> Events<'a> {
        let mut events = Events(Vec::new());
        for n in notifies {
            events.add(n.notified());
        }
        events
    }

    /// Adds `n`, enabled now.
    pub(super) fn add(&mut self, n: Notified<'a>) {
        let mut n = Box::pin(n);
        n.as_mut().enable();
        self.0.push(n);
    }

    /// Completes when any of them has fired (never when there are none).
    pub(super) async fn any(&mut self) {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        std::future::poll_fn(|cx| {
            for n in &mut self.0 {
                if n.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A notification made after `of` but before `any` is awaited is not lost (the waiter's
    /// look happens in between).
    #[tokio::test]
    async fn a_change_between_enabling_and_waiting_is_seen() {
        let (a, b) = (Notify::new(), Notify::new());
        let mut events = Events::of([&a, &b]);
        b.notify_waiters();
        tokio::time::timeout(std::time::Duration::from_secs(5), events.any())
            .await
            .expect("the change made before the wait completes it");
    }

    #[tokio::test]
    async fn none_never_completes() {
        let mut events = Events::of([] as [&Notify; 0]);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), events.any()).await;
        assert!(waited.is_err());
    }
}
