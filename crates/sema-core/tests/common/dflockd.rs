//! What the dflockd test files share: the real server recorded by
//! `scripts/setup.js` in `.tools/dflockd.json` (or `$DFLOCKD_BIN`, taken as the Go server),
//! started per test on a free loopback port; a small fake server for behaviour the real one
//! never produces, and the scripted fake that grants and renews; primitives, one-shot probes
//! and loss observers.

use std::future::Future;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sema_core::dflockd::{
    AcquireReply, ConnectOptions, Connection, DflockdError, ErrorCode, Primitive, PrimitiveOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which server implementation the tests run against.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    /// `"go"` or `"python"`.
    pub kind: String,
    /// Version string as recorded.
    pub version: String,
    /// Path of the executable.
    pub bin: PathBuf,
}

impl ServerInfo {
    pub fn is_go(&self) -> bool {
        self.kind == "go"
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The server to test against: `$DFLOCKD_BIN` (Go) or `.tools/dflockd.json`. Panics with a
/// clear message when neither exists (run `node scripts/setup.js --with-server`).
pub fn server_info() -> ServerInfo {
    if let Ok(bin) = std::env::var("DFLOCKD_BIN") {
        if !bin.is_empty() {
            return ServerInfo {
                kind: "go".into(),
                version: "env".into(),
                bin: bin.into(),
            };
        }
    }
    let path = repo_root().join(".tools/dflockd.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "no dflockd server recorded at {} ({e}); run `node scripts/setup.js --with-server`",
            path.display()
        )
    });
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid .tools/dflockd.json");
    let field = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let info = ServerInfo {
        kind: field("kind"),
        version: field("version"),
        bin: field("bin").into(),
    };
    assert!(
        info.bin.exists(),
        "recorded dflockd binary {} does not exist; run `node scripts/setup.js --with-server`",
        info.bin.display()
    );
    info
}

/// Print the standard skip line for a test that needs the Go server. In CI (`$CI` set) there is
/// no skip: a missing Go server fails the test, so CI cannot pass with the feature untested.
pub fn skip_unless_go(test: &str, feature: &str) -> bool {
    let info = server_info();
    if info.is_go() {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI needs the Go dflockd server ({feature}); the recorded server is {} {}",
        info.kind,
        info.version
    );
    // Written straight to fd 2 (not through `eprintln!`, which the test harness captures), so
    // the skip is visible in every `cargo test` run, not only with `--nocapture`.
    let line = format!(
        "SKIPPED {test}: needs the Go dflockd server ({feature}); the recorded server is {} {}\n",
        info.kind, info.version
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    true
}

/// A free loopback TCP port (bind to :0 and release it).
pub fn free_port() -> u16 {
    let l = StdListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A real dflockd server process on 127.0.0.1; killed on drop.
pub struct TestServer {
    child: Option<Child>,
    pub port: u16,
    pub info: ServerInfo,
    args: Vec<String>,
}

impl TestServer {
    /// Start a server on a free port with extra flags (e.g. `["--read-timeout", "3"]`) and
    /// wait until it accepts connections.
    pub fn start(extra: &[&str]) -> TestServer {
        let mut s = TestServer {
            child: None,
            port: free_port(),
            info: server_info(),
            args: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(&self.info.bin);
        cmd.arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Environment variables override flags on the Python server: clear them all.
        for (k, _) in std::env::vars() {
            if k.starts_with("DFLOCKD_")
                || matches!(
                    k.as_str(),
                    "DEFAULT_LEASE_TTL_S"
                        | "LEASE_SWEEP_INTERVAL_S"
                        | "GC_LOOP_SLEEP"
                        | "GC_MAX_UNUSED_TIME"
                        | "MAX_LOCKS"
                )
            {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.info.bin.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if StdStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("dflockd exited early with {status} (port {})", self.port);
                }
            }
            assert!(
                Instant::now() < deadline,
                "dflockd did not accept on port {} within 20 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill the server process (SIGKILL) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the server again on the same port with the same flags.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn connect_options(&self) -> ConnectOptions {
        let mut o = ConnectOptions::new("127.0.0.1", self.port);
        o.connect_timeout = Duration::from_secs(5);
        o.socket_timeout = Duration::from_secs(5);
        o
    }

    /// Lock options for `key` on this server (acquire timeout 5 s).
    pub fn lock_options(&self, key: &str) -> PrimitiveOptions {
        let mut p = PrimitiveOptions::new(key, self.connect_options());
        p.acquire_timeout_s = 5;
        p
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One accepted connection of the fake server, recording every byte it reads.
pub struct FakeConn {
    stream: TcpStream,
    buf: Vec<u8>,
    received: Arc<Mutex<Vec<u8>>>,
}

impl FakeConn {
    /// Read one 3-line request; `None` on EOF/error.
    pub async fn read_request(&mut self) -> Option<[String; 3]> {
        let mut lines: Vec<String> = Vec::new();
        while lines.len() < 3 {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
                continue;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.received
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(&chunk[..n]);
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Some([lines.remove(0), lines.remove(0), lines.remove(0)])
    }

    /// Write raw bytes (errors ignored: the client may have gone).
    pub async fn write(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
        let _ = self.stream.flush().await;
    }

    /// Wait until the client closes (EOF), at most `limit`; true when EOF was seen.
    pub async fn wait_eof(&mut self, limit: Duration) -> bool {
        let r = tokio::time::timeout(limit, async {
            let mut chunk = [0u8; 4096];
            loop {
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => self
                        .received
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        r.is_ok()
    }
}

/// A fake server on 127.0.0.1 running `handler` for every accepted connection.
pub struct Fake {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<u8>>>,
    pub accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    pub async fn start<F, Fut>(handler: F) -> Fake
    where
        F: Fn(FakeConn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
        let addr = listener.local_addr().expect("fake addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(handler);
        let (rec, acc) = (received.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                acc.fetch_add(1, Ordering::SeqCst);
                let conn = FakeConn {
                    stream,
                    buf: Vec::new(),
                    received: rec.clone(),
                };
                tokio::spawn(handler(conn));
            }
        });
        Fake {
            addr,
            received,
            accepted,
            task,
        }
    }

    pub fn connect_options(&self) -> ConnectOptions {
        let mut o = ConnectOptions::new("127.0.0.1", self.addr.port());
        o.connect_timeout = Duration::from_secs(2);
        o.socket_timeout = Duration::from_millis(500);
        o
    }

    pub fn received(&self) -> Vec<u8> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn received_text(&self) -> String {
        String::from_utf8_lossy(&self.received()).into_owned()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A fresh unique key for a test.
pub fn key(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Loss notifications of `p` as a channel of `(key, token, when)`, so a test can wait for the
/// loss with a bounded timeout instead of polling.
pub fn loss_channel(
    p: &sema_core::dflockd::Primitive,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    p.set_on_lost(Some(Arc::new(move |k: &str, t: &str, _reason: &str| {
        let _ = tx.send((k.to_string(), t.to_string(), Instant::now()));
    })));
    rx
}

/// Wait at most `limit` for the next loss notification on `rx`; `None` when none came.
pub async fn next_loss(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)>,
    limit: Duration,
) -> Option<(String, String, Instant)> {
    tokio::time::timeout(limit, rx.recv()).await.ok().flatten()
}

/// Loss notifications as [`loss_channel`] delivers them.
pub type LossRx = tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)>;

/// Asserts that no loss is reported on `rx` within `limit`.
pub async fn assert_no_loss(rx: &mut LossRx, limit: Duration) {
    if let Some((k, t, _)) = next_loss(rx, limit).await {
        panic!("unexpected loss of {k} ({t})");
    }
}

/// A primitive from options the test knows are valid.
pub fn prim(opts: PrimitiveOptions) -> Primitive {
    Primitive::new(opts).expect("valid options")
}

/// Acquires `k` on `server` with a 60 s lease and renewals at most `renew_cap` apart, and
/// observes its losses.
pub async fn held_lock(server: &TestServer, k: &str, renew_cap: Duration) -> (Primitive, LossRx) {
    let mut o = server.lock_options(k);
    o.lease_ttl_s = Some(60);
    o.renew_max_interval = renew_cap;
    let a = prim(o);
    let lost = loss_channel(&a);
    assert!(a.acquire().await.expect("acquire"));
    (a, lost)
}

/// A one-shot `l key 0` from a fresh connection: true when granted (then released).
pub async fn try_once(server: &TestServer, k: &str) -> bool {
    let mut conn = Connection::connect(&server.connect_options())
        .await
        .expect("connect");
    match conn.lock(k, 0, None).await.expect("l reply") {
        AcquireReply::Granted(g) => {
            conn.release(k, &g.token).await.expect("release");
            true
        }
        AcquireReply::TimedOut => false,
    }
}

/// Counts the loss notifications of `p`; with `expect`, each must name that key and token.
pub fn loss_counter(
    p: &Primitive,
    expect: Option<(&'static str, &'static str)>,
) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    p.set_on_lost(Some(Arc::new(move |k: &str, t: &str, _reason: &str| {
        if let Some(kt) = expect {
            assert_eq!((k, t), kt);
        }
        c.fetch_add(1, Ordering::SeqCst);
    })));
    n
}

/// The code of an error the test requires.
pub fn code(r: Result<impl std::fmt::Debug, DflockdError>) -> ErrorCode {
    r.expect_err("must fail").code()
}

/// The token every fake grant carries.
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A fake answering the first request with `reply` (raw bytes) and then idling.
pub async fn replying(reply: &'static [u8]) -> Fake {
    Fake::start(move |mut c: FakeConn| async move {
        if c.read_request().await.is_some() {
            c.write(reply).await;
        }
        c.wait_eof(Duration::from_secs(30)).await;
    })
    .await
}

/// A fresh connection's `l k 5`.
pub async fn lock_once(opts: &ConnectOptions) -> Result<AcquireReply, DflockdError> {
    let mut conn = Connection::connect(opts).await?;
    conn.lock("k", 5, None).await
}

/// A fake dflockd that grants `l`/`e`, answers renews via `renew_reply`, records requests.
pub struct Scripted {
    pub fake: Fake,
    log: Arc<Mutex<Vec<[String; 3]>>>,
}

pub async fn scripted(
    lease: u64,
    renew_reply: impl Fn(usize) -> Option<(&'static str, Duration)> + Send + Sync + 'static,
) -> Scripted {
    let log = Arc::new(Mutex::new(Vec::new()));
    let renews = Arc::new(AtomicUsize::new(0));
    let renew_reply = Arc::new(renew_reply);
    let l2 = log.clone();
    let fake = Fake::start(move |mut c: FakeConn| {
        let log = l2.clone();
        let renews = renews.clone();
        let renew_reply = renew_reply.clone();
        async move {
            while let Some(req) = c.read_request().await {
                let cmd = req[0].clone();
                log.lock().unwrap_or_else(|e| e.into_inner()).push(req);
                match cmd.as_str() {
                    "l" | "w" => c.write(format!("ok {TOKEN} {lease}\n").as_bytes()).await,
                    "e" => {
                        c.write(format!("acquired {TOKEN} {lease}\n").as_bytes())
                            .await
                    }
                    "r" => c.write(b"ok\n").await,
                    "n" => {
                        let i = renews.fetch_add(1, Ordering::SeqCst);
                        match renew_reply(i) {
                            Some((reply, delay)) => {
                                tokio::time::sleep(delay).await;
                                c.write(reply.as_bytes()).await;
                            }
                            None => return, // hang up
                        }
                    }
                    _ => c.write(b"error\n").await,
                }
            }
        }
    })
    .await;
    Scripted { fake, log }
}

impl Scripted {
    pub fn requests(&self) -> Vec<[String; 3]> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    pub fn count(&self, cmd: &str) -> usize {
        self.requests().iter().filter(|r| r[0] == cmd).count()
    }
}
