//! A TCP proxy of the tests' own between a daemon and its broker, to make the network paths
//! that no reset announces: a path gone **silent** (the machine lost, a NAT or load balancer
//! that dropped the connection's state: nothing is forwarded either way, the sockets stay
//! open), silent **one way** (daemon to broker only), a **distant** broker (latency each way),
//! and a **heal** (a path there again: new connections are forwarded; those the silence caught
//! stay dead, as their state is gone). Every task ends when the proxy is dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the path forwards now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Nothing, either way.
    Silent,
    /// Broker to daemon only.
    OneWay,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToBroker,
    ToDaemon,
}

struct Path {
    mode: Mode,
    /// Raised by a heal: a connection accepted under an older one is dead for good.
    epoch: u64,
    latency: Duration,
}

impl Path {
    fn forwards(&self, epoch: u64, direction: Direction) -> bool {
        epoch == self.epoch
            && match self.mode {
                Mode::Forward => true,
                Mode::Silent => false,
                Mode::OneWay => direction == Direction::ToDaemon,
            }
    }
}

pub struct NetProxy {
    /// The port the daemon connects to.
    pub port: u16,
    path: Arc<Mutex<Path>>,
    tasks: Arc<Mutex<JoinSet<()>>>,
}

impl NetProxy {
    /// A proxy forwarding to the broker at `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("address").port();
        let path = Arc::new(Mutex::new(Path {
            mode: Mode::Forward,
            epoch: 0,
            latency: Duration::ZERO,
        }));
        let tasks: Arc<Mutex<JoinSet<()>>> = Arc::default();
        let (accepting_path, accepting_tasks) = (path.clone(), tasks.clone());
        lock(&tasks).spawn(async move {
            while let Ok((daemon, _)) = listener.accept().await {
                let (path, tasks) = (accepting_path.clone(), accepting_tasks.clone());
                lock(&accepting_tasks).spawn(async move {
                    connect(daemon, upstream, path, tasks).await;
                });
            }
        });
        Self { port, path, tasks }
    }

    /// The URL a daemon reaches the broker through.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Forwards nothing either way from now on; the sockets stay open.
    pub fn silent(&self) {
        lock(&self.path).mode = Mode::Silent;
    }

    /// Forwards nothing from the daemon to the broker from now on; the other way still flows.
    pub fn one_way(&self) {
        lock(&self.path).mode = Mode::OneWay;
    }

    /// A path is there again: new connections are forwarded both ways. Connections the silence
    /// caught stay silent.
    pub fn heal(&self) {
        let mut path = lock(&self.path);
        path.mode = Mode::Forward;
        path.epoch += 1;
    }

    /// Each byte is delivered `latency` after it was read, each way.
    pub fn latency(&self, latency: Duration) {
        lock(&self.path).latency = latency;
    }
}

impl Drop for NetProxy {
    fn drop(&mut self) {
        lock(&self.tasks).abort_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Connects a daemon's connection to the broker and forwards it, each way by a reader and a
/// writer (so that latency delays bytes without limiting how many are under way).
async fn connect(
    daemon: TcpStream,
    upstream: u16,
    path: Arc<Mutex<Path>>,
    tasks: Arc<Mutex<JoinSet<()>>>,
) {
    let epoch = lock(&path).epoch;
    let Ok(Ok(broker)) = tokio::time::timeout(
        Duration::from_secs(5),
        TcpStream::connect(("127.0.0.1", upstream)),
    )
    .await
    else {
        return;
    };
    let _ = (daemon.set_nodelay(true), broker.set_nodelay(true));
    let (daemon_read, daemon_write) = daemon.into_split();
    let (broker_read, broker_write) = broker.into_split();
    let mut tasks = lock(&tasks);
    for (read, write, direction) in [
        (daemon_read, broker_write, Direction::ToBroker),
        (broker_read, daemon_write, Direction::ToDaemon),
    ] {
        let (sender, receiver) = mpsc::channel(1024);
        tasks.spawn(read_side(read, sender, path.clone(), epoch, direction));
        tasks.spawn(write_side(write, receiver, path.clone(), epoch, direction));
    }
}

/// Reads what one side sends, stamped with when it is to be delivered. Once the path does not
/// forward this way, it stops reading (the sender's buffers fill, as on a silent network) and
/// keeps the socket open until the proxy is dropped.
async fn read_side(
    mut read: tokio::net::tcp::OwnedReadHalf,
    sender: mpsc::Sender<(Instant, Vec<u8>)>,
    path: Arc<Mutex<Path>>,
    epoch: u64,
    direction: Direction,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match read.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let deliver_at = {
            let path = lock(&path);
            if !path.forwards(epoch, direction) {
                break;
            }
            Instant::now() + path.latency
        };
        if sender
            .send((deliver_at, buffer[..n].to_vec()))
            .await
            .is_err()
        {
            return;
        }
    }
    let _kept_open = read;
    std::future::pending::<()>().await;
}

/// Delivers what the reader stamped, each chunk at its instant, while the path forwards this
/// way; then keeps the socket open until the proxy is dropped.
async fn write_side(
    mut write: tokio::net::tcp::OwnedWriteHalf,
    mut receiver: mpsc::Receiver<(Instant, Vec<u8>)>,
    path: Arc<Mutex<Path>>,
    epoch: u64,
    direction: Direction,
) {
    while let Some((deliver_at, bytes)) = receiver.recv().await {
        tokio::time::sleep_until(deliver_at).await;
        if !lock(&path).forwards(epoch, direction) {
            break;
        }
        if write.write_all(&bytes).await.is_err() {
            return;
        }
    }
    // The reader ended (its side closed): close this side too, unless the path is silent.
    if lock(&path).forwards(epoch, direction) {
        let _ = write.shutdown().await;
        return;
    }
    let _kept_open = write;
    std::future::pending::<()>().await;
}
