//! Bounds on the connections of both ports: how many may be open, how long a client may take
//! to start talking, how long a connection may stay idle, and how long a Watch stream may
//! leave its frames untaken. Each accepted socket is wrapped in a [`Guarded`]; once a bound
//! passes, its reads and writes fail with `TimedOut`, which ends the connection (and every
//! stream on it).
//!
//! - gRPC port: the client must send the HTTP/2 preface (its first [`GREETING`] bytes) within
//!   the handshake timeout; a connection without an open request is closed after the idle
//!   timeout (counted from its last request's end, or from its start). Open streams, quiet
//!   Watch streams included, keep it: they are not idle. A Watch stream whose frames waited
//!   for flow-control credit for twice the Watch stall timeout closes its connection (the
//!   transport no longer polls a stream whose client does not read, so nothing else reaches
//!   it; one that reads again after the stall timeout ends with RESOURCE_EXHAUSTED instead).
//! - HTTP/1 ports (admin, webhook, probes; see [`super::http`]): closed when no byte moved
//!   either way for the idle timeout (the request head timeout is hyper's). Besides the total
//!   cap, one peer (IP address) may keep at most a per-peer cap of connections; at either
//!   cap a new connection **evicts** the one that has waited longest without completing a
//!   request head (none in progress), so a probe or a legitimate client always gets in while
//!   slow heads hold the port. A connection counts as waiting only while the server waits for
//!   it: not before its first read, nor while bytes it sent wait unread (a busy server never
//!   evicts a request it has not got round to reading). Only when every connection in the way
//!   is serving a request or has bytes unread is the new one closed, after a short wait.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes a gRPC client must send within the handshake timeout: the HTTP/2 connection preface
/// (24 bytes) and the header of its SETTINGS frame (9).
pub const GREETING: u64 = 33;

/// The bounds of one port.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// gRPC: time to send the HTTP/2 preface.
    pub handshake: Duration,
    /// gRPC: time without an open request; admin: time without a byte read or written.
    pub idle: Duration,
    /// How long a Watch stream's frames may wait for flow-control credit.
    pub watch_stall: Duration,
}

/// Milliseconds since the first call (a process-wide monotonic clock, 0 never returned).
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What closes a connection when it goes quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// gRPC: open requests, the handshake and Watch stalls.
    Streams,
    /// Admin: bytes moving.
    Activity,
}

/// When a Watch stream's last frames were handed to the transport without being taken yet
/// (ms of [`now_ms`]; 0: nothing waits).
#[derive(Debug, Default)]
pub struct Stall(AtomicU64);

impl Stall {
    /// Frames were handed out now.
    pub fn start(&self) {
        self.0.store(now_ms(), Ordering::Relaxed);
    }

    /// The transport took them: how long they waited (`None`: nothing was waiting).
    pub fn end(&self) -> Option<Duration> {
        match self.0.swap(0, Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(now_ms().saturating_sub(since))),
        }
    }

    fn since(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|s| *s != 0)
    }
}

/// The state of one connection that its requests share (found in each request's
/// extensions as [`ConnInfo`]).
#[derive(Debug)]
pub struct Conn {
    limits: Limits,
    /// Requests in progress (each until its response body is dropped).
    open: AtomicUsize,
    /// When `open` last went to 0 (or the connection started).
    idle_since: AtomicU64,
    /// The Watch streams on this connection (dead ones are pruned as it grows).
    watches: Mutex<Vec<Weak<Stall>>>,
    /// Set when a newer connection took its place (see [`Gate::http`]).
    evicted: AtomicBool,
    /// Set while the server waits for the client: its last read found nothing and nothing
    /// arrived since. Clear before the first read and from the moment bytes (or the close)
    /// arrive until the server has read them, so a connection whose request head sits
    /// unread in the socket is never evicted, however busy the server is.
    waiting: AtomicBool,
    /// The reading task's waker (wrapped, see [`ReadWake`]), woken on eviction.
    reader: Mutex<Option<Waker>>,
}

impl Conn {
    fn new(limits: Limits) -> Conn {
        Conn {
            limits,
            open: AtomicUsize::new(0),
            idle_since: AtomicU64::new(now_ms()),
            watches: Mutex::new(Vec::new()),
            evicted: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            reader: Mutex::new(None),
        }
    }

    /// Since when it waits for a request head (`None`: a request is in progress, or bytes
    /// wait for the server to read them).
    fn waiting_since(&self) -> Option<u64> {
        (self.open.load(Ordering::Relaxed) == 0 && self.waiting.load(Ordering::Acquire))
            .then(|| self.idle_since.load(Ordering::Relaxed))
    }

    /// Ends the connection: its next read or write fails.
    fn evict(&self) {
        self.evicted.store(true, Ordering::Relaxed);
        if let Some(w) = self.reader.lock().take() {
            w.wake();
        }
    }

    /// A request started; it counts as open until the returned guard is dropped.
    pub fn request(self: &Arc<Self>) -> RequestGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        RequestGuard(self.clone())
    }

    /// A Watch stream's stall clock, watched by this connection.
    pub fn watch(&self) -> Arc<Stall> {
        let stall = Arc::new(Stall::default());
        let mut watches = self.watches.lock();
        if watches.len() == watches.capacity() {
            watches.retain(|w| w.strong_count() > 0);
        }
        watches.push(Arc::downgrade(&stall));
        stall
    }

    /// How long a Watch stream's frames may wait before it ends (RESOURCE_EXHAUSTED).
    pub fn watch_stall(&self) -> Duration {
        self.limits.watch_stall
    }

    /// True when a Watch stream on it left its frames untaken for twice the stall limit.
    fn stalled(&self, now: u64) -> bool {
        let cut = ms(self.limits.watch_stall).saturating_mul(2);
        let mut watches = self.watches.lock();
        watches.retain(|w| w.strong_count() > 0);
        watches.iter().any(|w| {
            w.upgrade()
                .and_then(|s| s.since())
                .is_some_and(|since| now.saturating_sub(since) >= cut)
        })
    }
}

/// Keeps a request counted as open on its connection.
#[derive(Debug)]
pub struct RequestGuard(Arc<Conn>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.idle_since.store(now_ms(), Ordering::Relaxed);
        }
    }
}

/// What a guarded connection tells the requests on it (tonic puts it in their extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// The connection's shared state.
    pub conn: Arc<Conn>,
}

/// Admits connections up to a limit.
#[derive(Debug, Clone)]
pub struct Gate {
    slots: Slots,
    limits: Limits,
    rule: Rule,
}

/// How a gate counts its connections.
#[derive(Debug, Clone)]
enum Slots {
    /// Up to a fixed number; more are closed at once.
    Fixed(Arc<Semaphore>),
    /// Up to a total and a per-peer cap, evicting the longest waiting for a head.
    Evicting(Arc<Registry>),
}

/// The connections of an evicting gate.
#[derive(Debug)]
struct Registry {
    per_peer: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, (Option<IpAddr>, Weak<Conn>)>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Open {
    fn remove(&mut self, id: u64) {
        if let Some((Some(ip), _)) = self.conns.remove(&id)
            && let Some(n) = self.per_peer.get_mut(&ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_peer.remove(&ip);
            }
        }
    }

    /// The connection (of `peer`, when given) that has waited longest for a request head.
    fn longest_waiting(&self, peer: Option<IpAddr>) -> Option<(u64, Arc<Conn>)> {
        self.conns
            .iter()
            .filter(|(_, (ip, _))| peer.is_none() || *ip == peer)
            .filter_map(|(id, (_, c))| {
                let c = c.upgrade()?;
                let since = c.waiting_since()?;
                Some((since, *id, c))
            })
            .min_by_key(|(since, id, _)| (*since, *id))
            .map(|(_, id, c)| (id, c))
    }
}

/// A connection's place in an evicting gate, given back when it closes.
#[derive(Debug)]
struct Slot {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.open.lock().remove(self.id);
    }
}

/// What holds a connection's place.
#[derive(Debug)]
enum Place {
    Permit(#[allow(dead_code)] OwnedSemaphorePermit),
    Slot(#[allow(dead_code)] Slot),
}

impl Gate {
    /// The gate of the gRPC port.
    pub fn grpc(limits: Limits) -> Gate {
        Gate {
            slots: Slots::Fixed(Arc::new(Semaphore::new(limits.max_connections.max(1)))),
            limits,
            rule: Rule::Streams,
        }
    }

    /// The gate of an HTTP/1 port: at most `limits.max_connections` connections and
    /// `per_peer` from one IP address; at either cap a new connection evicts the one that
    /// has waited longest for a request head.
    pub fn http(limits: Limits, per_peer: usize) -> Gate {
        Gate {
            slots: Slots::Evicting(Arc::new(Registry {
                per_peer: per_peer.max(1),
                open: Mutex::new(Open::default()),
            })),
            limits,
            rule: Rule::Activity,
        }
    }

    /// The gate of the admin port (see [`Gate::http`]; no per-peer cap).
    pub fn admin(limits: Limits) -> Gate {
        Gate::http(limits, usize::MAX)
    }

    /// True for an HTTP/1 gate, which evicts at its caps.
    fn evicting(&self) -> bool {
        matches!(self.slots, Slots::Evicting(_))
    }

    /// `io` guarded, or `None` (drop it: that closes it) when the limit is reached.
    pub fn admit<IO>(&self, io: IO, remote: Option<SocketAddr>) -> Option<Guarded<IO>> {
        self.try_admit(io, remote).ok()
    }

    /// `io` guarded, or given back when the limit is reached.
    fn try_admit<IO>(&self, io: IO, remote: Option<SocketAddr>) -> Result<Guarded<IO>, IO> {
        let conn = Arc::new(Conn::new(self.limits));
        let place = match &self.slots {
            Slots::Fixed(permits) => match permits.clone().try_acquire_owned() {
                Ok(p) => Place::Permit(p),
                Err(_) => return Err(io),
            },
            Slots::Evicting(registry) => {
                match self.take_slot(registry, remote.map(|r| r.ip()), &conn) {
                    Some(slot) => Place::Slot(slot),
                    None => return Err(io),
                }
            }
        };
        let now = now_ms();
        Ok(Guarded {
            io,
            conn,
            rule: self.rule,
            remote,
            started: now,
            read: 0,
            active: now,
            scanned: now,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: None,
            wake: None,
            _place: place,
        })
    }

    /// A place for `conn` from `peer`, evicting whom the caps require; `None` when a cap is
    /// reached and every connection in the way is serving a request.
    fn take_slot(
        &self,
        registry: &Arc<Registry>,
        peer: Option<IpAddr>,
        conn: &Arc<Conn>,
    ) -> Option<Slot> {
        let mut open = registry.open.lock();
        let of_peer = peer
            .and_then(|ip| open.per_peer.get(&ip).copied())
            .unwrap_or(0);
        let victim = if peer.is_some() && of_peer >= registry.per_peer {
            Some(open.longest_waiting(peer)?)
        } else if open.conns.len() >= self.limits.max_connections.max(1) {
            Some(open.longest_waiting(None)?)
        } else {
            None
        };
        if let Some((id, victim)) = victim {
            open.remove(id);
            victim.evict();
            evicted(self.rule);
        }
        let id = open.next;
        open.next += 1;
        open.conns.insert(id, (peer, Arc::downgrade(conn)));
        if let Some(ip) = peer {
            *open.per_peer.entry(ip).or_default() += 1;
        }
        Some(Slot {
            registry: registry.clone(),
            id,
        })
    }
}

/// Logs an eviction (at most once every 10 s).
fn evicted(_rule: Rule) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    if once_per(&LAST, 10_000) {
        tracing::warn!(
            "connection cap reached: the connection waiting longest for a request head was closed for a new one"
        );
    }
}

/// True at most once per `every_ms` for `last`.
fn once_per(last: &AtomicU64, every_ms: u64) -> bool {
    let now = now_ms();
    let seen = last.load(Ordering::Relaxed);
    (seen == 0 || now.saturating_sub(seen) >= every_ms)
        && last
            .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// Connections the kernel queues for a listener before it accepts them (capped by
/// `net.core.somaxconn`). A burst beyond the queue has its SYNs dropped, and each dropped
/// client waits a whole retransmission timeout (1 s) before it tries again: Rust's default
/// of 128 let a burst of reconnecting slow clients delay a probe by that second.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with a [`LISTEN_BACKLOG`]-deep accept queue (and `SO_REUSEADDR`,
/// as the standard bind sets it).
pub fn listen(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The connections accepted on `listener` that `gate` admits (TCP_NODELAY set): the others
/// are closed at once. `port` names the listener in logs.
///
/// A connection that must wait for room at an evicting gate (see [`admit_or_wait`]) waits
/// beside the accept loop, not in it: the loop goes on accepting, so one peer's connections
/// waiting at its cap never delay another peer's. At most [`MAX_WAITING`] wait at once; more
/// are closed at once.
pub fn incoming(
    listener: tokio::net::TcpListener,
    gate: Gate,
    port: &'static str,
) -> impl futures::Stream<Item = io::Result<Guarded<tokio::net::TcpStream>>> {
    let waiting = Waiting::default();
    futures::stream::unfold(
        (listener, gate, waiting),
        move |(listener, gate, mut waiting)| async move {
            loop {
                let admitted = tokio::select! {
                    Some(admitted) = futures::StreamExt::next(&mut waiting), if !waiting.is_empty() => admitted,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, remote)) => admit_or_queue(&gate, &mut waiting, stream, remote),
                        Err(e) => {
                            // Out of file descriptors and the like: back off instead of spinning.
                            tracing::warn!(port, error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                match admitted {
                    Admitted::Now(guarded) => {
                        return Some((Ok(guarded), (listener, gate, waiting)));
                    }
                    Admitted::Queued => {}
                    Admitted::Refused => refused(port, gate.limits.max_connections),
                }
            }
        },
    )
}

/// Connections waiting for room at an evicting gate (see [`admit_or_wait`]).
type Waiting = futures::stream::FuturesUnordered<
    futures::future::BoxFuture<'static, Admitted<tokio::net::TcpStream>>,
>;

/// What became of an accepted connection.
enum Admitted<IO> {
    /// Admitted: serve it.
    Now(Guarded<IO>),
    /// Waiting for room beside the accept loop.
    Queued,
    /// Closed (dropped).
    Refused,
}

/// Admits `stream` at once, or queues it in `waiting` to wait for room (an evicting gate,
/// fewer than [`MAX_WAITING`] already waiting), or refuses it.
fn admit_or_queue(
    gate: &Gate,
    waiting: &mut Waiting,
    stream: tokio::net::TcpStream,
    remote: SocketAddr,
) -> Admitted<tokio::net::TcpStream> {
    use futures::FutureExt;
    // Responses span several segments: without TCP_NODELAY, Nagle and delayed ACKs add
    // ~40 ms.
    let _ = stream.set_nodelay(true);
    match gate.try_admit(stream, Some(remote)) {
        Ok(guarded) => Admitted::Now(guarded),
        Err(stream) if gate.evicting() && waiting.len() < MAX_WAITING => {
            let gate = gate.clone();
            waiting.push(
                async move {
                    match admit_or_wait(&gate, stream, Some(remote)).await {
                        Some(guarded) => Admitted::Now(guarded),
                        None => Admitted::Refused,
                    }
                }
                .boxed(),
            );
            Admitted::Queued
        }
        Err(_) => Admitted::Refused,
    }
}

/// Longest an evicting gate's new connection waits for a connection to become evictable.
const ADMIT_WAIT: Duration = Duration::from_millis(250);

/// Connections of one port waiting for room at once (each holds its socket and looks for
/// room every [`ADMIT_RETRY`]: the bound keeps that looking cheap in a storm).
const MAX_WAITING: usize = 64;

/// How often a waiting connection looks for room.
const ADMIT_RETRY: Duration = Duration::from_millis(10);

/// `stream` admitted by `gate` (an evicting one). At its cap where no connection can be evicted
/// yet (every one is serving a request, has bytes unread or has not been read from: after a
/// burst of connections, or with the server's threads busy), waits up to [`ADMIT_WAIT`] for
/// one to become evictable, as the connections already accepted get read, instead of closing
/// the new one at once.
async fn admit_or_wait<IO>(
    gate: &Gate,
    mut stream: IO,
    remote: Option<SocketAddr>,
) -> Option<Guarded<IO>> {
    let started = tokio::time::Instant::now();
    loop {
        match gate.try_admit(stream, remote) {
            Ok(guarded) => return Some(guarded),
            Err(back) => {
                if started.elapsed() >= ADMIT_WAIT {
                    return None;
                }
                stream = back;
                tokio::time::sleep(ADMIT_RETRY).await;
            }
        }
    }
}

/// Logs a connection refused at the limit (at most once every 10 s).
fn refused(port: &'static str, limit: usize) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    if once_per(&LAST, 10_000) {
        tracing::warn!(
            port,
            limit,
            "connection limit reached: new connections are closed at once"
        );
    }
}

/// An accepted connection under its port's [`Limits`].
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    conn: Arc<Conn>,
    rule: Rule,
    remote: Option<SocketAddr>,
    started: u64,
    /// Bytes read, counted up to [`GREETING`].
    read: u64,
    /// Last read or write of at least one byte.
    active: u64,
    /// Last scan of the Watch streams.
    scanned: u64,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The timer's deadline when it is set.
    armed: Option<u64>,
    /// The reading task's waker and the same waker wrapped to clear `waiting` when woken
    /// (kept to wrap each waker once).
    wake: Option<(Waker, Waker)>,
    _place: Place,
}

/// Wakes the reading task and notes that its connection has something to read.
struct ReadWake {
    conn: Weak<Conn>,
    task: Waker,
}

impl std::task::Wake for ReadWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(conn) = self.conn.upgrade() {
            conn.waiting.store(false, Ordering::Release);
        }
        self.task.wake_by_ref();
    }
}

impl<IO> Guarded<IO> {
    /// The state its requests share.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// The next deadline, or the reason the connection must close now.
    fn deadline(&mut self, now: u64) -> Result<Option<u64>, &'static str> {
        let limits = &self.conn.limits;
        let mut next: Option<u64> = None;
        let mut at = |deadline: u64, why: &'static str| {
            if deadline <= now {
                return Err(why);
            }
            next = Some(next.map_or(deadline, |n| n.min(deadline)));
            Ok(())
        };
        match self.rule {
            Rule::Activity => at(
                self.active.saturating_add(ms(limits.idle)),
                "no byte moved for the idle timeout",
            )?,
            Rule::Streams => {
                if self.read < GREETING {
                    at(
                        self.started.saturating_add(ms(limits.handshake)),
                        "no HTTP/2 preface within the handshake timeout",
                    )?;
                }
                if self.conn.open.load(Ordering::Relaxed) == 0 {
                    let since = self.conn.idle_since.load(Ordering::Relaxed);
                    at(
                        since.saturating_add(ms(limits.idle)),
                        "no request for the idle timeout",
                    )?;
                } else {
                    // Streams are open: look at the Watch streams every half stall limit.
                    let every = (ms(limits.watch_stall) / 2).max(1);
                    if self.scanned.saturating_add(every) <= now {
                        self.scanned = now;
                        if self.conn.stalled(now) {
                            return Err("a Watch stream left its frames untaken");
                        }
                    }
                    at(self.scanned.saturating_add(every), "")?;
                }
            }
        }
        Ok(next)
    }

    /// Fails once a bound passed; otherwise arms the timer (waking this task) for the next.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.conn.evicted.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "evicted for a new connection at the connection cap",
            ));
        }
        loop {
            let now = now_ms();
            let next = self.deadline(now).map_err(|why| {
                tracing::debug!(peer = ?self.remote, why, "closing a connection");
                io::Error::new(io::ErrorKind::TimedOut, why)
            })?;
            let Some(next) = next else { return Ok(()) };
            if self.armed.is_none_or(|armed| next < armed) {
                // One millisecond late, so that the deadline has passed when it fires.
                let when = Instant::now() + Duration::from_millis(next - now + 1);
                self.timer.as_mut().reset(when.into());
                self.armed = Some(next);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            self.armed = None;
        }
    }

    fn moved(&mut self, n: usize) {
        if n > 0 {
            self.active = now_ms();
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        let before = buf.filled().len();
        let result = if matches!(this._place, Place::Slot(_)) {
            if !this
                .wake
                .as_ref()
                .is_some_and(|(w, _)| w.will_wake(cx.waker()))
            {
                // A new reading task (or its first read): wrap its waker once, and let an
                // eviction wake it (before the connection can count as waiting below).
                let wrapped = Waker::from(Arc::new(ReadWake {
                    conn: Arc::downgrade(&this.conn),
                    task: cx.waker().clone(),
                }));
                *this.conn.reader.lock() = Some(wrapped.clone());
                this.wake = Some((cx.waker().clone(), wrapped));
            }
            let wrapped = this.wake.as_ref().map_or(cx.waker(), |(_, w)| w);
            // Evictable from here unless this read finds bytes, or bytes arrive (the
            // wrapped waker clears it) before the next.
            this.conn.waiting.store(true, Ordering::Release);
            let result = Pin::new(&mut this.io).poll_read(&mut Context::from_waker(wrapped), buf);
            if result.is_ready() {
                this.conn.waiting.store(false, Ordering::Release);
            }
            result
        } else {
            Pin::new(&mut this.io).poll_read(cx, buf)
        };
        if let Poll::Ready(Ok(())) = result {
            let n = buf.filled().len().saturating_sub(before);
            this.read = this.read.saturating_add(n as u64).min(GREETING);
            this.moved(n);
        }
        result
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        let result = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            this.moved(n);
        }
        result
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        let result = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result {
            this.moved(n);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> tonic::transport::server::Connected
    for Guarded<IO>
{
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            remote: self.remote,
            conn: self.conn.clone(),
        }
    }
}

/// The connection of a request (plain or TLS), if it came through a [`Gate`].
pub fn conn_of<B>(request: &tonic::codegen::http::Request<B>) -> Option<Arc<Conn>> {
    let extensions = request.extensions();
    extensions
        .get::<ConnInfo>()
        .or_else(|| {
            extensions
                .get::<tonic::transport::server::TlsConnectInfo<ConnInfo>>()
                .map(|t| t.get_ref())
        })
        .map(|i| i.conn.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits() -> Limits {
        Limits {
            max_connections: 2,
            handshake: Duration::from_millis(200),
            idle: Duration::from_millis(400),
            watch_stall: Duration::from_millis(200),
        }
    }

    /// A guarded end of an in-memory pipe, and the client's end.
    fn pipe(gate: &Gate) -> Option<(Guarded<tokio::io::DuplexStream>, tokio::io::DuplexStream)> {
        let (server, client) = tokio::io::duplex(1024);
        gate.admit(server, None).map(|g| (g, client))
    }

    async fn read_fails_within(conn: &mut Guarded<tokio::io::DuplexStream>, within: Duration) {
        let mut buf = [0u8; 64];
        let outcome = tokio::time::timeout(within, async {
            loop {
                if conn.read(&mut buf).await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(outcome.is_ok(), "still open after {within:?}");
    }

    #[tokio::test]
    async fn the_gate_admits_up_to_its_limit_and_frees_a_place_on_close() {
        let gate = Gate::grpc(limits());
        let a = pipe(&gate).expect("first");
        let _b = pipe(&gate).expect("second");
        assert!(pipe(&gate).is_none(), "over the limit");
        drop(a);
        assert!(pipe(&gate).is_some(), "a place was freed");
    }

    #[tokio::test]
    async fn a_silent_grpc_connection_is_closed_after_the_handshake_timeout() {
        let gate = Gate::grpc(limits());
        let (mut conn, _client) = pipe(&gate).expect("admitted");
        let start = Instant::now();
        read_fails_within(&mut conn, Duration::from_secs(2)).await;
        assert!(start.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn an_open_request_keeps_a_grpc_connection_and_its_end_starts_the_idle_clock() {
        let gate = Gate::grpc(limits());
        let (mut conn, mut client) = pipe(&gate).expect("admitted");
        client.write_all(&[0u8; GREETING as usize]).await.unwrap();
        let mut buf = [0u8; 64];
        let mut got = 0;
        while got < GREETING as usize {
            got += conn.read(&mut buf).await.unwrap();
        }
        let request = conn.conn().request();
        // Open for three idle timeouts: still served.
        let quiet = tokio::time::timeout(Duration::from_millis(1200), conn.read(&mut buf)).await;
        assert!(quiet.is_err(), "a connection with an open request stays");
        drop(request);
        let start = Instant::now();
        read_fails_within(&mut conn, Duration::from_secs(2)).await;
        assert!(start.elapsed() >= Duration::from_millis(350));
    }

    #[tokio::test]
    async fn a_watch_that_leaves_its_frames_untaken_closes_its_connection() {
        let gate = Gate::grpc(limits());
        let (mut conn, mut client) = pipe(&gate).expect("admitted");
        client.write_all(&[0u8; GREETING as usize]).await.unwrap();
        let _request = conn.conn().request();
        let quiet = conn.conn().watch();
        let stalled = conn.conn().watch();
        stalled.start();
        let start = Instant::now();
        read_fails_within(&mut conn, Duration::from_secs(3)).await;
        assert!(
            start.elapsed() >= Duration::from_millis(400),
            "twice the limit"
        );
        assert!(quiet.end().is_none());
        assert!(stalled.end().is_some());
    }

    #[tokio::test]
    async fn an_admin_connection_lives_while_bytes_move() {
        let gate = Gate::admin(limits());
        let (mut conn, mut client) = pipe(&gate).expect("admitted");
        let mut buf = [0u8; 8];
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            client.write_all(b"x").await.unwrap();
            assert_eq!(conn.read(&mut buf).await.unwrap(), 1);
        }
        read_fails_within(&mut conn, Duration::from_secs(2)).await;
    }

    fn peer(last: u8) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, last], 4000)))
    }

    #[tokio::test]
    async fn at_a_cap_a_new_connection_evicts_the_one_waiting_longest_for_a_head() {
        let gate = Gate::http(
            Limits {
                max_connections: 3,
                ..limits()
            },
            2,
        );
        let admit = |p| {
            let (server, client) = tokio::io::duplex(64);
            gate.admit(server, p).map(|g| (g, client))
        };
        // A connection becomes evictable once the server waited for it to send.
        async fn touch(g: &mut Guarded<tokio::io::DuplexStream>) {
            let mut buf = [0u8; 8];
            let _ = tokio::time::timeout(Duration::from_millis(1), g.read(&mut buf)).await;
        }
        let (mut oldest, _c1) = admit(peer(1)).expect("first");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (mut busy, _c2) = admit(peer(1)).expect("second");
        // Not read yet: never evicted (its head may be waiting in the socket).
        assert!(admit(peer(1)).is_none(), "nothing evictable yet");
        touch(&mut oldest).await;
        touch(&mut busy).await;
        let _request = busy.conn().request();
        // Peer 1 at its cap: its third connection evicts the one waiting for a head, not
        // the one serving a request.
        let (mut third, _c3) = admit(peer(1)).expect("third evicts");
        touch(&mut third).await;
        read_fails_within(&mut oldest, Duration::from_millis(100)).await;
        assert!(!busy.conn().evicted.load(Ordering::Relaxed));
        // Total cap (3): peer 2 fills it; then peer 3 evicts the longest waiting of all.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (mut other, _c4) = admit(peer(2)).expect("another peer gets in");
        touch(&mut other).await;
        let (again, _c5) = admit(peer(3)).expect("evicts at the total cap");
        assert!(third.conn().evicted.load(Ordering::Relaxed));
        assert!(!other.conn().evicted.load(Ordering::Relaxed));
        // Every connection in the way serving a request: refused.
        let _r1 = other.conn().request();
        let _r2 = again.conn().request();
        assert!(admit(peer(4)).is_none(), "all busy: closed at once");
    }

    #[tokio::test]
    async fn at_the_cap_a_new_connection_waits_for_one_to_be_read_before_it_is_refused() {
        let gate = Gate::http(
            Limits {
                max_connections: 1,
                ..limits()
            },
            8,
        );
        let (server, _c1) = tokio::io::duplex(64);
        let mut unread = gate.admit(server, peer(1)).expect("first");
        // The first connection is read 50 ms later (a server busy after a burst): the new
        // one waits for that and evicts it instead of being closed at once.
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let (server, client) = tokio::io::duplex(64);
                admit_or_wait(&gate, server, peer(2))
                    .await
                    .map(|g| (g, client))
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut buf = [0u8; 8];
        let _ = tokio::time::timeout(Duration::from_millis(1), unread.read(&mut buf)).await;
        let admitted = waiting.await.expect("joins");
        assert!(admitted.is_some(), "admitted once the first was read");
        read_fails_within(&mut unread, Duration::from_millis(100)).await;
        // Serving a request for longer than the wait: refused after it.
        let (mut serving, _c3) = admitted.expect("admitted");
        let _ = tokio::time::timeout(Duration::from_millis(1), serving.read(&mut buf)).await;
        let _request = serving.conn().request();
        let started = std::time::Instant::now();
        let (server, _c4) = tokio::io::duplex(64);
        assert!(admit_or_wait(&gate, server, peer(3)).await.is_none());
        assert!(started.elapsed() >= ADMIT_WAIT, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_connection_whose_request_waits_unread_is_not_evicted() {
        let gate = Gate::http(limits(), 1);
        let (server, mut client) = tokio::io::duplex(64);
        let mut sent = gate.admit(server, peer(1)).expect("first");
        let mut buf = [0u8; 8];
        // The server read once and found nothing: it waits for the client.
        let _ = tokio::time::timeout(Duration::from_millis(1), sent.read(&mut buf)).await;
        assert!(sent.conn().waiting_since().is_some());
        // The request arrives while the server is busy elsewhere: not evictable.
        client.write_all(b"GET /livez").await.unwrap();
        assert!(sent.conn().waiting_since().is_none());
        let (other, _c2) = tokio::io::duplex(64);
        assert!(
            gate.admit(other, peer(1)).is_none(),
            "its bytes wait unread"
        );
        // Read, and waiting again: now it is the one to go.
        assert_eq!(sent.read(&mut buf).await.unwrap(), 8);
        assert_eq!(sent.read(&mut buf).await.unwrap(), 2);
        let _ = tokio::time::timeout(Duration::from_millis(1), sent.read(&mut buf)).await;
        let (other, _c3) = tokio::io::duplex(64);
        assert!(
            gate.admit(other, peer(1)).is_some(),
            "evicts the waiting one"
        );
        read_fails_within(&mut sent, Duration::from_millis(100)).await;
    }

    #[tokio::test]
    async fn a_connection_waiting_for_room_does_not_hold_up_another_peer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate::http(
            Limits {
                max_connections: 16,
                ..limits()
            },
            1,
        );
        let mut accepted = std::pin::pin!(incoming(listener, gate, "test"));
        let from = |ip: [u8; 4]| async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::from((ip, 0))).unwrap();
            socket.connect(addr).await.unwrap()
        };
        let _busy_client = from([127, 0, 0, 1]).await;
        let busy = futures::StreamExt::next(&mut accepted)
            .await
            .unwrap()
            .unwrap();
        let _serving = busy.conn().request();
        // 127.0.0.1 is at its cap with nothing evictable: its next connection waits for room.
        let _waiting_client = from([127, 0, 0, 1]).await;
        let _other_client = from([127, 0, 0, 2]).await;
        let started = Instant::now();
        let next = futures::StreamExt::next(&mut accepted)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(next.remote.map(|r| r.ip()), Some([127, 0, 0, 2].into()));
        assert!(
            started.elapsed() < ADMIT_WAIT,
            "another peer waited {:?} behind it",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_burst_beyond_the_default_backlog_is_queued_not_dropped() {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0))).expect("listens");
        let addr = listener.local_addr().unwrap();
        // Nothing accepts: with the default queue of 128 the SYNs after it are dropped and
        // their clients wait a second to try again.
        // (A kernel whose `net.core.somaxconn` caps the queue lower is asked for less.)
        let cap: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(128);
        let started = Instant::now();
        let mut open = Vec::new();
        for _ in 0..cap.min(300) {
            let connect = tokio::net::TcpStream::connect(addr);
            let stream = tokio::time::timeout(Duration::from_millis(500), connect)
                .await
                .expect("connected at once, not after a retransmission")
                .expect("connects");
            open.push(stream);
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(listener);
    }
}
