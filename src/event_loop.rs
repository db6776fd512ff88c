//! The JS thread's own libuv loop, for sockets the addon reads without another thread (as
//! Node's `net` does, without its stream machinery), and calls back into JS from it.
//!
//! Every libuv declaration and every `unsafe` of that lives here. libuv is not linked: its
//! functions are looked up at run time in the host process (node and node.exe export them),
//! so the addon gains no link-time symbol and a host without them gets `UNSUPPORTED_PLATFORM`.
//!
//! - [`SocketWatch`]: a `uv_poll_t` on a socket plus a `uv_timer_t` (the reply deadline) and a
//!   `uv_idle_t` (a short busy-poll while a reply is due), with keep-alive control
//!   (`uv_ref`/`uv_unref`) and a close that runs exactly once.
//!
//! The JS function those callbacks call is a [`crate::js_callback::JsCallback`].

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use napi::{sys, Env};

/// `uv_os_sock_t`.
#[cfg(unix)]
type RawSocket = c_int;
#[cfg(windows)]
type RawSocket = usize;

type UvLoop = sys::uv_loop_s;
/// A `uv_handle_t` of any kind (opaque: only libuv reads its fields).
type UvHandle = c_void;
type PollCb = unsafe extern "C" fn(*mut UvHandle, c_int, c_int);
type TimerCb = unsafe extern "C" fn(*mut UvHandle);
type IdleCb = unsafe extern "C" fn(*mut UvHandle);
type CloseCb = unsafe extern "C" fn(*mut UvHandle);

// uv_handle_type values and poll events (uv.h, stable since libuv 1.0).
const UV_IDLE: c_int = 6;
const UV_POLL: c_int = 8;
const UV_TIMER: c_int = 13;
const UV_READABLE: c_int = 1;
const UV_WRITABLE: c_int = 2;

/// The libuv functions of the host process.
struct Uv {
    handle_size: unsafe extern "C" fn(c_int) -> usize,
    handle_set_data: unsafe extern "C" fn(*mut UvHandle, *mut c_void),
    handle_get_data: unsafe extern "C" fn(*const UvHandle) -> *mut c_void,
    poll_init_socket: unsafe extern "C" fn(*mut UvLoop, *mut UvHandle, RawSocket) -> c_int,
    poll_start: unsafe extern "C" fn(*mut UvHandle, c_int, PollCb) -> c_int,
    timer_init: unsafe extern "C" fn(*mut UvLoop, *mut UvHandle) -> c_int,
    timer_start: unsafe extern "C" fn(*mut UvHandle, TimerCb, u64, u64) -> c_int,
    timer_stop: unsafe extern "C" fn(*mut UvHandle) -> c_int,
    idle_init: unsafe extern "C" fn(*mut UvLoop, *mut UvHandle) -> c_int,
    idle_start: unsafe extern "C" fn(*mut UvHandle, IdleCb) -> c_int,
    idle_stop: unsafe extern "C" fn(*mut UvHandle) -> c_int,
    close: unsafe extern "C" fn(*mut UvHandle, CloseCb),
    ref_: unsafe extern "C" fn(*mut UvHandle),
    unref: unsafe extern "C" fn(*mut UvHandle),
}

/// Set to `off` to keep the addon off the host's libuv (the dflockd `Connection` then runs on
/// tokio threads, as on Bun and Deno): for tests, and for a host not recognised below.
pub const LIBUV_ENV: &str = "SEMA_NATIVE_LIBUV";

/// Why the JS thread's libuv loop cannot serve the addon in this process, decided before any
/// libuv function is called; `None` when it can (Node, Electron).
///
/// Finding the functions proves nothing: Bun exports every `uv_*` symbol as a stub that aborts
/// the process (`panic: unsupported uv function: uv_poll_init_socket`), and Deno emulates
/// `uv_poll` partly (the first reply of a connection is read, the second never is). So the host
/// is named first, from what it tells JS (`process.versions.bun`/`.deno`, or its `Bun`/`Deno`
/// global): a false "unusable" only costs speed, a false "usable" costs an abort or a hang.
/// Then the functions must exist and the env must hand out its loop. Decided once per process.
pub fn loop_unusable(env: &Env) -> Option<String> {
    static VERDICT: OnceLock<Option<String>> = OnceLock::new();
    VERDICT
        .get_or_init(|| {
            if std::env::var_os(LIBUV_ENV).is_some_and(|v| v == "off") {
                return Some(format!("{LIBUV_ENV}=off"));
            }
            if let Some(host) = host_without_libuv(env) {
                return Some(host.to_string());
            }
            if let Err(e) = uv() {
                return Some(e.reason.clone());
            }
            match env.get_uv_event_loop() {
                Ok(l) if !l.is_null() => None,
                Ok(_) => {
                    Some("the host has no libuv loop (napi_get_uv_event_loop gave null)".into())
                }
                Err(e) => Some(format!("napi_get_uv_event_loop failed: {}", e.reason)),
            }
        })
        .clone()
}

/// The JS runtime whose libuv functions must not be called, from what it tells JS.
fn host_without_libuv(env: &Env) -> Option<&'static str> {
    use napi::bindgen_prelude::{JsObjectValue, Object, Unknown};
    use napi::ValueType;
    fn get<'a>(o: &impl JsObjectValue<'a>, name: &str) -> Option<Unknown<'a>> {
        let v: Unknown = o.get_named_property(name).ok()?;
        (!matches!(v.get_type(), Ok(ValueType::Undefined | ValueType::Null))).then_some(v)
    }
    fn object(v: Unknown<'_>) -> Option<Object<'_>> {
        matches!(v.get_type(), Ok(ValueType::Object))
            // SAFETY: its type was just checked to be an object.
            .then(|| unsafe { v.cast::<Object>() }.ok())
            .flatten()
    }
    let global = env.get_global().ok()?;
    let versions = get(&global, "process")
        .and_then(object)
        .and_then(|p| get(&p, "versions"))
        .and_then(object);
    let named = |runtime: &str, global_name: &str| {
        versions.as_ref().is_some_and(|v| get(v, runtime).is_some())
            || get(&global, global_name).is_some()
    };
    if named("bun", "Bun") {
        return Some("Bun: its libuv functions are stubs that abort the process");
    }
    if named("deno", "Deno") {
        return Some("Deno: its libuv emulation answers a socket's first poll and not the next");
    }
    None
}

fn uv() -> napi::Result<&'static Uv> {
    static UV: OnceLock<Result<Uv, String>> = OnceLock::new();
    UV.get_or_init(load)
        .as_ref()
        .map_err(|e| napi::Error::new(napi::Status::GenericFailure, e.clone()))
}

fn load() -> Result<Uv, String> {
    #[cfg(unix)]
    let lib = libloading::os::unix::Library::this();
    #[cfg(windows)]
    let lib = libloading::os::windows::Library::this().map_err(|e| {
        format!("UNSUPPORTED_PLATFORM: cannot open the host process's symbols: {e}")
    })?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: each name is a libuv function whose C signature (uv.h, unchanged since
            // libuv 1.x, which every supported Node embeds) is the field type it is assigned
            // to; the library is the process itself, which is never unloaded, so the copied
            // function pointer stays valid for the process's life.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| {
                format!(
                    "UNSUPPORTED_PLATFORM: the host process has no libuv function {} \
                     (dflockd connections need Node.js): {e}",
                    $name
                )
            })?
        };
    }
    Ok(Uv {
        handle_size: sym!("uv_handle_size"),
        handle_set_data: sym!("uv_handle_set_data"),
        handle_get_data: sym!("uv_handle_get_data"),
        poll_init_socket: sym!("uv_poll_init_socket"),
        poll_start: sym!("uv_poll_start"),
        timer_init: sym!("uv_timer_init"),
        timer_start: sym!("uv_timer_start"),
        timer_stop: sym!("uv_timer_stop"),
        idle_init: sym!("uv_idle_init"),
        idle_start: sym!("uv_idle_start"),
        idle_stop: sym!("uv_idle_stop"),
        close: sym!("uv_close"),
        ref_: sym!("uv_ref"),
        unref: sym!("uv_unref"),
    })
}

/// What a [`SocketWatch`] reports, on the JS thread.
pub trait WatchHandler {
    /// The socket is readable and/or writable, or polling failed (`error`: a libuv status).
    fn ready(&self, readable: bool, writable: bool, error: Option<i32>);
    /// The timer armed with [`SocketWatch::arm_timer`] expired.
    fn timeout(&self);
}

/// Storage of the three handles and what their callbacks need. Allocated by
/// [`SocketWatch::open`], freed by the second close callback.
struct Slot {
    /// `uv_poll_t`, as `uv_handle_size(UV_POLL)` bytes (8-aligned: its fields are pointers
    /// and integers).
    poll: Box<[u64]>,
    /// `uv_timer_t`, likewise.
    timer: Box<[u64]>,
    /// `uv_idle_t`, likewise: while it is started the loop polls without sleeping (until its
    /// window in [`AWAITED`] ends).
    idle: Box<[u64]>,
    /// Handles not closed yet (3, then 0 after the last close callback).
    open: Cell<u8>,
    handler: RefCell<Option<Rc<dyn WatchHandler>>>,
}

thread_local! {
    /// The replies this thread's loop awaits, each within its busy-poll window: the watch's id
    /// and when the window ends. A watch spins only while it is alone here (why, measured: `SPIN`
    /// in src/dflockd/on_loop.rs). A reply awaited longer than its window (a blocked acquire)
    /// stops counting when the window ends. A few entries: one per socket with a request just
    /// written.
    static AWAITED: RefCell<Vec<(usize, Instant)>> = const { RefCell::new(Vec::new()) };
}

// Each of these uses `try_with`: a watch may close while the thread's locals are being destroyed
// (the connections in another thread local are dropped at the thread's or process's exit), when
// `AWAITED` may be gone already and `with` would panic and abort the process. Then nothing is
// due and nothing spins.

/// `id`'s reply is due until `until` (its window); entries whose window ended at `now` go.
fn awaited_set(id: usize, now: Instant, until: Instant) {
    let _ = AWAITED.try_with(|a| {
        let mut a = a.borrow_mut();
        a.retain(|&(other, end)| other != id && end > now);
        a.push((id, until));
    });
}

/// `id`'s reply is no longer due (answered, or the watch closed).
fn awaited_remove(id: usize) {
    let _ = AWAITED.try_with(|a| a.borrow_mut().retain(|&(other, _)| other != id));
}

/// Whether `id` may go on spinning at `now`: its reply is due within its window and no other
/// is (false when the thread is ending).
fn spins_alone(id: usize, now: Instant) -> bool {
    AWAITED
        .try_with(|a| {
            let a = a.borrow();
            let mut due = a.iter().filter(|&&(_, end)| end > now);
            matches!((due.next(), due.next()), (Some(&(only, _)), None) if only == id)
        })
        .unwrap_or(false)
}

fn handle_storage(uv: &Uv, kind: c_int) -> Box<[u64]> {
    // SAFETY: uv_handle_size only reads its integer argument.
    let bytes = unsafe { (uv.handle_size)(kind) };
    vec![0u64; bytes.div_ceil(8)].into_boxed_slice()
}

/// A socket polled by the JS thread's loop, with a one-shot timer. Not `Send`: made, used and
/// closed on the JS thread only.
pub struct SocketWatch {
    slot: *mut Slot,
    /// `close()` was called: `slot` may be freed, so nothing touches it any more.
    closed: Cell<bool>,
    /// Currently `uv_ref`'d.
    referenced: Cell<bool>,
    events: Cell<c_int>,
}

impl SocketWatch {
    /// Start polling `socket` for readability on the loop of `env` (unref'd: an idle socket
    /// never keeps the process alive). The socket must stay open until [`SocketWatch::close`].
    pub fn open(
        env: &Env,
        socket: &std::net::TcpStream,
        handler: Rc<dyn WatchHandler>,
    ) -> napi::Result<SocketWatch> {
        let uv = uv()?;
        let uv_loop = env.get_uv_event_loop()?;
        let slot = Box::into_raw(Box::new(Slot {
            poll: handle_storage(uv, UV_POLL),
            timer: handle_storage(uv, UV_TIMER),
            idle: handle_storage(uv, UV_IDLE),
            open: Cell::new(0),
            handler: RefCell::new(Some(handler)),
        }));
        // SAFETY: `slot` was just allocated and is only freed by `on_close` once both handles
        // are closed; the handle storage has the size libuv reports for its type. `uv_loop`
        // is the live loop of this JS thread (we are on it). The socket descriptor is valid
        // (borrowed from a live TcpStream the caller keeps open until close).
        unsafe {
            let poll = (*slot).poll.as_mut_ptr().cast::<UvHandle>();
            let timer = (*slot).timer.as_mut_ptr().cast::<UvHandle>();
            let r = (uv.poll_init_socket)(uv_loop, poll, raw_socket(socket));
            if r != 0 {
                drop(Box::from_raw(slot));
                return Err(uv_error("uv_poll_init_socket", r));
            }
            (uv.handle_set_data)(poll, slot.cast());
            (*slot).open.set(1);
            let r = (uv.timer_init)(uv_loop, timer);
            if r != 0 {
                (uv.close)(poll, on_close);
                return Err(uv_error("uv_timer_init", r));
            }
            (uv.handle_set_data)(timer, slot.cast());
            (*slot).open.set(2);
            let idle = (*slot).idle.as_mut_ptr().cast::<UvHandle>();
            let r = (uv.idle_init)(uv_loop, idle);
            if r != 0 {
                (uv.close)(poll, on_close);
                (uv.close)(timer, on_close);
                return Err(uv_error("uv_idle_init", r));
            }
            (uv.handle_set_data)(idle, slot.cast());
            (*slot).open.set(3);
            (uv.unref)(poll);
            (uv.unref)(timer);
            (uv.unref)(idle);
        }
        let watch = SocketWatch {
            slot,
            closed: Cell::new(false),
            referenced: Cell::new(false),
            events: Cell::new(0),
        };
        if let Err(e) = watch.want(true, false) {
            watch.close();
            return Err(e);
        }
        Ok(watch)
    }

    fn handles(&self) -> Option<(&'static Uv, *mut UvHandle, *mut UvHandle)> {
        self.all_handles()
            .map(|(uv, poll, timer, _)| (uv, poll, timer))
    }

    /// The loop, the poll, timer and idle handles, and the slot; `None` once closed.
    #[allow(clippy::type_complexity)]
    fn all_handles(&self) -> Option<(&'static Uv, *mut UvHandle, *mut UvHandle, *mut UvHandle)> {
        if self.closed.get() {
            return None;
        }
        let uv = uv().ok()?;
        // SAFETY: not closed, so the slot is alive (freed only after close).
        let (poll, timer, idle) = unsafe {
            (
                (*self.slot).poll.as_mut_ptr().cast::<UvHandle>(),
                (*self.slot).timer.as_mut_ptr().cast::<UvHandle>(),
                (*self.slot).idle.as_mut_ptr().cast::<UvHandle>(),
            )
        };
        Some((uv, poll, timer, idle))
    }

    /// A request was written and its reply is due: keep the loop polling without sleeping for
    /// up to `window` (an unref'd `uv_idle_t`: libuv polls with a zero timeout while one is
    /// started, and it never keeps the process alive), so that a reply coming within it is read
    /// without the wake-up of a sleeping thread, which costs more than a loopback round trip on
    /// a virtual machine. Only while it is the one reply this thread awaits (see [`AWAITED`]):
    /// with others due, their replies wake the loop anyway and a spin would only take the core
    /// the server needs. See `SPIN` where it is used for the measured window.
    pub fn spin_for(&self, window: Duration) {
        let Some((uv, _, _, idle)) = self.all_handles() else {
            return;
        };
        let now = Instant::now();
        awaited_set(self.id(), now, now + window);
        let alone = spins_alone(self.id(), now);
        // SAFETY: `idle` is an initialised, open idle handle on this thread's loop (not closed);
        // starting a started one, or stopping a stopped one, is a no-op in libuv.
        unsafe {
            if alone {
                (uv.idle_start)(idle, on_idle);
            } else {
                (uv.idle_stop)(idle);
            }
        }
    }

    /// The reply came, or none is due any more: end the busy-poll now (a no-op when not
    /// spinning).
    pub fn stop_spin(&self) {
        awaited_remove(self.id());
        if let Some((uv, _, _, idle)) = self.all_handles() {
            // SAFETY: as in `spin_for`.
            unsafe { (uv.idle_stop)(idle) };
        }
    }

    /// This watch's key in [`AWAITED`]: its slot's address, unique while the slot lives (a
    /// watch leaves the set before its slot can be freed, see `close`).
    fn id(&self) -> usize {
        self.slot as usize
    }

    /// Poll for readability and/or writability (a no-op when unchanged or closed).
    pub fn want(&self, readable: bool, writable: bool) -> napi::Result<()> {
        let events =
            if readable { UV_READABLE } else { 0 } | if writable { UV_WRITABLE } else { 0 };
        let Some((uv, poll, _)) = self.handles() else {
            return Ok(());
        };
        if events == self.events.get() {
            return Ok(());
        }
        // SAFETY: `poll` is an initialised, open poll handle on this thread's loop.
        let r = unsafe { (uv.poll_start)(poll, events, on_poll) };
        if r != 0 {
            return Err(uv_error("uv_poll_start", r));
        }
        self.events.set(events);
        Ok(())
    }

    /// Whether the socket keeps the process alive (`uv_ref`) or not (`uv_unref`).
    pub fn keep_alive(&self, on: bool) {
        let Some((uv, poll, _)) = self.handles() else {
            return;
        };
        if self.referenced.replace(on) == on {
            return;
        }
        // SAFETY: `poll` is an initialised, open handle on this thread's loop.
        unsafe {
            if on {
                (uv.ref_)(poll)
            } else {
                (uv.unref)(poll)
            }
        }
    }

    /// Call [`WatchHandler::timeout`] once after `ms` (re-arming replaces the previous one).
    /// The timer itself never keeps the process alive.
    pub fn arm_timer(&self, ms: u64) {
        if let Some((uv, _, timer)) = self.handles() {
            // SAFETY: `timer` is an initialised, open timer handle on this thread's loop.
            unsafe { (uv.timer_start)(timer, on_timer, ms, 0) };
        }
    }

    pub fn disarm_timer(&self) {
        if let Some((uv, _, timer)) = self.handles() {
            // SAFETY: as in `arm_timer`.
            unsafe { (uv.timer_stop)(timer) };
        }
    }

    /// Stop polling and close both handles (idempotent). No callback runs after this; the
    /// handler is dropped when libuv has finished with the handles.
    pub fn close(&self) {
        let Some((uv, poll, timer, idle)) = self.all_handles() else {
            return;
        };
        awaited_remove(self.id());
        self.closed.set(true);
        // SAFETY: the three handles are open (closed only here, once, guarded by `closed`);
        // uv_close stops them at once (the poll's descriptor is deregistered before the
        // caller closes the socket), and `on_close` frees the slot after the last callback.
        unsafe {
            (uv.close)(poll, on_close);
            (uv.close)(timer, on_close);
            (uv.close)(idle, on_close);
        }
    }
}

impl Drop for SocketWatch {
    fn drop(&mut self) {
        self.close();
    }
}

fn uv_error(what: &str, status: c_int) -> napi::Error {
    napi::Error::new(
        napi::Status::GenericFailure,
        format!("{what} failed: libuv status {status}"),
    )
}

#[cfg(unix)]
fn raw_socket(s: &std::net::TcpStream) -> RawSocket {
    use std::os::fd::AsRawFd;
    s.as_raw_fd()
}

#[cfg(windows)]
fn raw_socket(s: &std::net::TcpStream) -> RawSocket {
    use std::os::windows::io::AsRawSocket;
    s.as_raw_socket() as RawSocket
}

/// The slot of a handle made by `SocketWatch::open`.
///
/// SAFETY (caller): `h` is one of the three handles of a slot that is not freed yet (true in
/// every libuv callback of them, since the slot is freed only after both close callbacks).
unsafe fn slot_of(uv: &Uv, h: *mut UvHandle) -> *mut Slot {
    (uv.handle_get_data)(h).cast()
}

fn handler_of(slot: &Slot) -> Option<Rc<dyn WatchHandler>> {
    slot.handler.borrow().clone()
}

unsafe extern "C" fn on_poll(h: *mut UvHandle, status: c_int, events: c_int) {
    let Ok(uv) = uv() else { return };
    // SAFETY: libuv calls this only for an open poll handle of ours (see `slot_of`). The
    // handler is cloned out first: it may close the watch (the slot outlives this call,
    // freed only by a later close callback).
    let Some(handler) = (unsafe { handler_of(&*slot_of(uv, h)) }) else {
        return;
    };
    if status < 0 {
        handler.ready(false, false, Some(status));
    } else {
        handler.ready(events & UV_READABLE != 0, events & UV_WRITABLE != 0, None);
    }
}

unsafe extern "C" fn on_timer(h: *mut UvHandle) {
    let Ok(uv) = uv() else { return };
    // SAFETY: as in `on_poll`.
    if let Some(handler) = unsafe { handler_of(&*slot_of(uv, h)) } {
        handler.timeout();
    }
}

unsafe extern "C" fn on_idle(h: *mut UvHandle) {
    let Ok(uv) = uv() else { return };
    // The watch's id is its slot's address (`SocketWatch::id`). Its window ended, or another
    // reply became due meanwhile, which will wake the loop (see `spin_for`): stop.
    // SAFETY: as in `on_poll`; `h` is the slot's open idle handle.
    unsafe {
        if !spins_alone(slot_of(uv, h) as usize, Instant::now()) {
            (uv.idle_stop)(h);
        }
    }
}

unsafe extern "C" fn on_close(h: *mut UvHandle) {
    let Ok(uv) = uv() else { return };
    // SAFETY: called once per handle of the slot, after which libuv no longer touches that
    // handle; the slot was made by `Box::into_raw` and is freed here exactly once, when its
    // last open handle is closed.
    unsafe {
        let slot = slot_of(uv, h);
        let left = (*slot).open.get().saturating_sub(1);
        (*slot).open.set(left);
        if left == 0 {
            drop(Box::from_raw(slot));
        }
    }
}
