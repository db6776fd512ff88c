//! The connections of the event-loop driver: one watched socket each, whose events go to its
//! lock or, idle after a clean release, to this thread's pool (at most 64 per server and
//! settings, closed after 2 s unused or when the server closes them; unref'd, so an idle
//! pooled connection never keeps the process alive), and the env teardown hook.

use super::*;

/// An open connection watched on the loop; its watch reports to whoever `route` names.
pub(super) struct LoopConn {
    pub(super) stream: NonBlockingStream,
    pub(super) watch: SocketWatch,
    pub(super) route: Rc<Route>,
    /// Its renew watchdog slot (dropped with it: the duplicate socket closes then).
    pub(super) wd: Slot,
}

impl LoopConn {
    pub(super) fn close(self) {
        self.watch.close();
    }
}

/// Where a connection's poll and timer events go: its lock, or (owner `None`) the pool.
pub(super) struct Route {
    pub(super) id: u64,
    pub(super) owner: RefCell<Option<Weak<LoopLock>>>,
}

impl WatchHandler for Route {
    fn ready(&self, readable: bool, writable: bool, error: Option<i32>) {
        let owner = self.owner.borrow().as_ref().and_then(Weak::upgrade);
        match owner {
            Some(l) => l.on_ready(readable, writable, error),
            // Pooled: the server never speaks first, so anything readable is its close.
            None => pool_drop(self.id),
        }
    }

    fn timeout(&self) {
        let owner = self.owner.borrow().as_ref().and_then(Weak::upgrade);
        match owner {
            Some(l) => l.on_timer(),
            None => pool_drop(self.id),
        }
    }
}

/// Idle connections per thread (one loop per JS thread): at most this many per settings.
const POOL_MAX: usize = sema_core::dflockd::pool::MAX_IDLE_PER_SERVER;
/// And closed after this long unused (the core pool's bound).
const POOL_TTL: Duration = sema_core::dflockd::pool::IDLE_TTL;

thread_local! {
    static POOL: RefCell<Vec<(ConnectOptions, LoopConn)>> = const { RefCell::new(Vec::new()) };
    pub(super) static NEXT_ROUTE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static HOOKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The live loop locks of this thread, stopped without JS at the env's teardown.
    pub(super) static LIVE: RefCell<Vec<Weak<LoopLock>>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn pool_drop(id: u64) {
    let conn = POOL.with(|p| {
        let mut p = p.borrow_mut();
        let i = p.iter().position(|(_, c)| c.route.id == id)?;
        Some(p.swap_remove(i).1)
    });
    if let Some(c) = conn {
        c.close();
    }
}

pub(super) fn pool_take(opts: &ConnectOptions, owner: Weak<LoopLock>) -> Option<LoopConn> {
    let conn = POOL.with(|p| {
        let mut p = p.borrow_mut();
        let i = p.iter().rposition(|(o, _)| o == opts)?;
        Some(p.remove(i).1)
    })?;
    conn.watch.disarm_timer();
    *conn.route.owner.borrow_mut() = Some(owner);
    Some(conn)
}

/// An idle connection of this thread's pool for `opts`, unwatched, for the tokio path (its
/// `enqueue()`, or an acquisition with a waiter before it): the next acquisition reuses it
/// whichever driver runs it (see `hand_to_tokio_pool`).
pub(in crate::dflockd) fn pool_take_stream(opts: &ConnectOptions) -> Option<NonBlockingStream> {
    let conn = POOL.with(|p| {
        let mut p = p.borrow_mut();
        let i = p.iter().rposition(|(o, _)| o == opts)?;
        Some(p.remove(i).1)
    })?;
    conn.watch.close();
    Some(conn.stream)
}

/// Put a stream taken by [`pool_take_stream`] into the core's pool; on tokio.
pub(in crate::dflockd) fn hand_to_tokio_pool(
    opts: &ConnectOptions,
    stream: Option<NonBlockingStream>,
) {
    if let Some(c) = stream.and_then(|s| Connection::from_nonblocking(s, opts)) {
        core::pool::put(opts, c);
    }
}

pub(super) fn pool_put(opts: &ConnectOptions, conn: LoopConn) {
    if !conn.wd.is_idle() {
        // Something is still due on it (never after a clean release): not reusable.
        return conn.close();
    }
    let full = POOL.with(|p| p.borrow().iter().filter(|(o, _)| o == opts).count() >= POOL_MAX);
    if full {
        return conn.close();
    }
    *conn.route.owner.borrow_mut() = None;
    conn.watch.keep_alive(false);
    conn.watch.stop_spin();
    conn.watch.arm_timer(POOL_TTL.as_millis() as u64);
    POOL.with(|p| p.borrow_mut().push((opts.clone(), conn)));
}

/// Once per thread: at the env's teardown close every pooled connection and stop every live
/// loop lock, calling no JS.
pub(super) fn watch_env_teardown(env: &Env) -> napi::Result<()> {
    if HOOKED.with(|h| h.get()) {
        return Ok(());
    }
    env.add_env_cleanup_hook((), |()| {
        HOOKED.with(|h| h.set(false));
        for (_, c) in POOL.with(|p| std::mem::take(&mut *p.borrow_mut())) {
            c.close();
        }
        for l in LIVE.with(|l| std::mem::take(&mut *l.borrow_mut())) {
            if let Some(l) = l.upgrade() {
                l.settle.forget();
                l.stop();
            }
        }
    })?;
    HOOKED.with(|h| h.set(true));
    Ok(())
}
