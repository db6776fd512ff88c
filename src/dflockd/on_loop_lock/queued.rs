//! A contended acquisition: its `e`/`se` answered `queued` on the loop, the socket is handed
//! to tokio (`Connection::from_nonblocking`), where the core waits (`w`/`sw`), rides out a
//! server restart and renews (`Primitive::external_queued_then`). A waiter gains nothing
//! from the event loop; the uncontended acquisition is the hot path.

use super::*;

impl LoopLock {
    pub(super) fn queued(&self, op: ExternalOp, started: Instant, sent: Instant) {
        let Some(c) = self.conn.borrow_mut().take() else {
            return;
        };
        c.watch.close();
        *self.stage.borrow_mut() = Stage::Queued {
            op,
            stream: c.stream,
            started,
            sent,
        };
        self.call(settle_queued(self.id));
    }

    /// The rest of a queued acquisition, on tokio (see the module comment).
    pub(in crate::dflockd) fn continue_queued(
        &self,
        done: impl FnOnce(core::Result<bool>) + Send + 'static,
    ) -> napi::Result<()> {
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        let Stage::Queued {
            op,
            stream,
            started,
            sent,
        } = stage
        else {
            *self.stage.borrow_mut() = stage;
            done(Err(DflockdError::aborted()));
            return Ok(());
        };
        let prim = self.prim.clone();
        let opts = prim.options().connect.clone();
        napi::bindgen_prelude::spawn(async move {
            match Connection::from_nonblocking(stream, &opts) {
                Some(conn) => {
                    prim.external_queued_then(op, conn, started, sent, done)
                        .await
                }
                None => {
                    let r = prim.external_end(op).and(Err(DflockdError::new(
                        core::ErrorCode::ConnectionError,
                        "the queued connection could not be handed over",
                    )));
                    done(r);
                }
            }
        });
        Ok(())
    }
}
