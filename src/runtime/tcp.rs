//! Ranks joined over TCP (see `rendezvous.rs`) as a [`Group`]: a star through rank 0 carries the
//! coordinating messages (NCCL's and NVSHMEM's ids, flags, timings); on GPUs NCCL moves the data.
//!
//! Without a launcher that kills, the connections also end the job. Every connection has a
//! watchdog, a thread that reads it: it hands the messages to the rank's main thread, and ends
//! the process (whatever the main thread is blocked in, NCCL included) when the peer says abort,
//! or closes without a goodbye. A failing rank tells rank 0, which tells every other rank; rank 0
//! ends the job when any rank's connection drops, and the others when rank 0's does. A clean
//! finish says goodbye first: every rank tells rank 0, which answers each once all have.

use super::comm::Group;
use super::wire::{self, Tag};
use anyhow::{Result, anyhow, bail};
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long a rank that sends an abort waits for its receivers to close (so that their
/// connections carry it before this one closes).
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// How long a rank's main thread, having lost a connection, waits for its watchdog to end the
/// process before it reports the loss itself.
const LOSS_GRACE: Duration = Duration::from_secs(10);

/// Why a job ends before its goodbye.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// This rank failed (it said why) and asked to end the job with `code`.
    Failed {
        /// The exit status.
        code: i32,
    },
    /// Rank `from` said abort.
    Told {
        /// The rank that said it.
        from: usize,
    },
    /// Rank `peer`'s connection closed without a goodbye.
    Lost {
        /// The rank whose connection closed.
        peer: usize,
    },
}

impl Ending {
    /// The exit status of a process that ends this way.
    pub fn code(&self) -> i32 {
        match self {
            Ending::Failed { code } => *code,
            _ => 1,
        }
    }
}

/// What a job's end does last, once the other ranks are told: ends the process, except in tests.
pub type OnEnd = Box<dyn Fn(&Ending) + Send + Sync>;

/// One connection's state, as its watchdog saw it.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// The peer said goodbye.
    bye: bool,
    /// The connection closed.
    closed: bool,
}

/// Where the job is in its ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not ending.
    Running,
    /// Telling the other ranks.
    Ending,
    /// Ended: `on_end` has returned (which only happens in tests).
    Ended,
}

/// What the main thread and the watchdogs share.
struct Shared {
    rank: usize,
    /// Writing ends, by link (rank 0: ranks 1.., others: rank 0).
    writers: Vec<Mutex<TcpStream>>,
    /// Each link's peer.
    peers: Vec<usize>,
    /// Each link's state, and the job's.
    state: Mutex<(Vec<Seen>, Phase)>,
    changed: Condvar,
    on_end: OnEnd,
}

/// The ranks of a job joined over TCP.
pub struct TcpGroup {
    size: usize,
    shared: Arc<Shared>,
    /// Each link's messages, from its watchdog.
    inboxes: Vec<Receiver<Vec<u8>>>,
}

/// The group that a panic ends the job of (see [`abort_if_running`]).
static RUNNING: OnceLock<Arc<Shared>> = OnceLock::new();

impl TcpGroup {
    /// The group over the connections of a rendezvous (rank 0: ranks 1 to size - 1 in order;
    /// other ranks: rank 0), with a watchdog on each; `on_end` ends the process.
    pub fn new(rank: usize, size: usize, streams: Vec<TcpStream>, on_end: OnEnd) -> Result<Self> {
        let peers: Vec<usize> = if rank == 0 {
            (1..size).collect()
        } else {
            vec![0]
        };
        if streams.len() != peers.len() {
            bail!("rank {rank} of {size} holds {} connections", streams.len());
        }
        let mut readers = Vec::with_capacity(streams.len());
        let mut writers = Vec::with_capacity(streams.len());
        for s in streams {
            s.set_nodelay(true)?;
            keep_alive(&s)?;
            readers.push(s.try_clone()?);
            writers.push(Mutex::new(s));
        }
        let shared = Arc::new(Shared {
            rank,
            writers,
            state: Mutex::new((vec![Seen::default(); peers.len()], Phase::Running)),
            peers,
            changed: Condvar::new(),
            on_end,
        });
        let mut inboxes = Vec::with_capacity(readers.len());
        for (link, reader) in readers.into_iter().enumerate() {
            let (to_main, inbox) = channel();
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("distrun-watch-{}", shared.peers[link]))
                .spawn(move || watch(&shared, link, reader, to_main))?;
            inboxes.push(inbox);
        }
        Ok(TcpGroup {
            size,
            shared,
            inboxes,
        })
    }

    /// Makes a panic in this process end the job as a failure does ([`abort_if_running`]).
    pub fn end_job_on_panic(&self) {
        let _ = RUNNING.set(Arc::clone(&self.shared));
    }

    fn send(&self, link: usize, bytes: &[u8]) -> Result<()> {
        let sent = wire::send(&mut *self.shared.writer(link), Tag::Data, bytes);
        sent.or_else(|e| self.lost(link, &e.to_string()))
    }

    fn receive(&self, link: usize) -> Result<Vec<u8>> {
        match self.inboxes[link].recv() {
            Ok(bytes) => Ok(bytes),
            Err(_) => self.lost(link, "its connection closed"),
        }
    }

    /// A link that failed under the main thread: its watchdog ends the job, the process with
    /// it; this reports the loss where that has not happened within [`LOSS_GRACE`].
    fn lost<T>(&self, link: usize, why: &str) -> Result<T> {
        self.shared.wait_ended();
        Err(anyhow!("lost rank {}: {why}", self.shared.peers[link]))
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, (Vec<Seen>, Phase)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (at most [`LOSS_GRACE`]) for the job's end to be over, which in earnest ends the
    /// process before.
    fn wait_ended(&self) {
        let state = self.state();
        let _ = (self.changed).wait_timeout_while(state, LOSS_GRACE, |s| s.1 != Phase::Ended);
    }

    fn writer(&self, link: usize) -> MutexGuard<'_, TcpStream> {
        self.writers[link].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the job, once: tells the ranks that need telling, waits a little for them to close,
    /// closes every connection, then `on_end`. A later call waits for the first to be over (the
    /// process ends meanwhile).
    fn end(&self, ending: Ending) {
        {
            let mut state = self.state();
            if state.1 != Phase::Running {
                drop(state);
                return self.wait_ended();
            }
            state.1 = Phase::Ending;
        }
        self.changed.notify_all();
        if let Ending::Lost { peer } = ending {
            let _ = if self.rank == 0 {
                writeln!(
                    std::io::stderr(),
                    "distrun: rank {peer} ended before the job did (its connection to rank 0 \
                     closed): stopping every rank"
                )
            } else {
                writeln!(
                    std::io::stderr(),
                    "distrun: rank {}: rank 0 ended before the job did (the connection to it \
                     closed): stopping",
                    self.rank
                )
            };
        }
        // Rank 0 passes the news on to every rank but the one it came from; another rank tells
        // rank 0 of its own failure only.
        let told: Vec<usize> = (0..self.peers.len())
            .filter(|&link| match ending {
                Ending::Failed { .. } => true,
                Ending::Told { from } | Ending::Lost { peer: from } => {
                    self.rank == 0 && self.peers[link] != from
                }
            })
            .collect();
        for &link in &told {
            let mut w = self.writer(link);
            let _ = wire::send(&mut *w, Tag::Abort, &[]);
            let _ = w.shutdown(Shutdown::Write);
        }
        let state = self.state();
        let _ = self.changed.wait_timeout_while(state, ABORT_GRACE, |s| {
            told.iter().any(|&link| !s.0[link].closed)
        });
        for link in 0..self.writers.len() {
            let _ = self.writer(link).shutdown(Shutdown::Both);
        }
        (self.on_end)(&ending);
        self.state().1 = Phase::Ended;
        self.changed.notify_all();
    }

    fn see(&self, link: usize, what: impl FnOnce(&mut Seen)) -> Seen {
        let mut state = self.state();
        what(&mut state.0[link]);
        self.changed.notify_all();
        state.0[link]
    }
}

/// A link's watchdog: hands its messages to the main thread and ends the job when the peer says
/// abort or leaves without a goodbye.
fn watch(shared: &Shared, link: usize, mut reader: TcpStream, to_main: Sender<Vec<u8>>) {
    loop {
        match wire::receive(&mut reader) {
            Ok((Tag::Data, bytes)) => {
                let _ = to_main.send(bytes);
            }
            Ok((Tag::Abort, _)) => shared.end(Ending::Told {
                from: shared.peers[link],
            }),
            Ok((Tag::Bye, _)) => {
                shared.see(link, |s| s.bye = true);
            }
            // A rendezvous frame now, an unreadable frame, the end of the stream, an error.
            _ => {
                if !shared.see(link, |s| s.closed = true).bye {
                    shared.end(Ending::Lost {
                        peer: shared.peers[link],
                    });
                }
                return;
            }
        }
    }
}

/// Probes an idle connection (after 10 s, every 5 s, 3 times), so that a host that vanishes
/// without closing it (a crash, a lost network) ends the job too.
fn keep_alive(stream: &TcpStream) -> Result<()> {
    let fd = stream.as_raw_fd();
    let set = |level, name, value: libc::c_int| {
        // SAFETY: an int option on a socket this process holds.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                &value as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(anyhow!(std::io::Error::last_os_error()).context("cannot set keepalive"));
        }
        Ok(())
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)
}

/// Ends the job as [`Group::abort`] does where this process joined one over TCP; otherwise does
/// nothing.
pub fn abort_if_running(code: i32) {
    if let Some(shared) = RUNNING.get() {
        shared.end(Ending::Failed { code });
    }
}

/// The end of a process in a job joined over TCP: the run directory being written removed, then
/// `_exit`, which runs no exit handlers: CUDA's could wait on a kernel that waits in NCCL for a
/// rank that is gone.
pub fn exit_process(ending: &Ending) {
    crate::output::rundir::remove_uncommitted();
    let _ = std::io::stdout().flush();
    // SAFETY: ends the process.
    unsafe { libc::_exit(ending.code()) }
}

impl Group for TcpGroup {
    fn rank(&self) -> usize {
        self.shared.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn barrier(&self) -> Result<()> {
        self.all_gather_bytes(&[]).map(drop)
    }

    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        let mine: &[u8] = if self.rank() == root { buf } else { &[] };
        let theirs = self.all_gather_bytes(mine)?.swap_remove(root);
        if theirs.len() != buf.len() {
            bail!(
                "rank {root} broadcast {} bytes into a buffer of {}",
                theirs.len(),
                buf.len()
            );
        }
        buf.copy_from_slice(&theirs);
        Ok(())
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        if self.rank() != 0 {
            self.send(0, mine)?;
            let all = self.receive(0)?;
            return wire::unpack(&all, self.size)
                .ok_or_else(|| anyhow!("rank 0 sent {} bytes that are no gather", all.len()));
        }
        let mut all = vec![mine.to_vec()];
        for link in 0..self.inboxes.len() {
            all.push(self.receive(link)?);
        }
        let packed = wire::pack(&all);
        for link in 0..self.inboxes.len() {
            self.send(link, &packed)?;
        }
        Ok(all)
    }

    fn max_f64(&self, x: f64) -> Result<f64> {
        let all = self.all_gather_bytes(&x.to_le_bytes())?;
        all.iter()
            .map(|b| Ok(f64::from_le_bytes(b[..].try_into()?)))
            .try_fold(f64::NEG_INFINITY, |m, x: Result<f64>| Ok(m.max(x?)))
    }

    fn abort(&self, code: i32) {
        self.shared.end(Ending::Failed { code });
    }
}

impl Drop for TcpGroup {
    /// The goodbye: every rank tells rank 0 it is done, rank 0 answers each once all are, and
    /// only then do the connections close (the watchdogs take that for a finish). Skipped while
    /// the job ends, or a panic unwinds (which ends it: see [`abort_if_running`]).
    fn drop(&mut self) {
        if self.shared.state().1 != Phase::Running || std::thread::panicking() {
            return;
        }
        let links = 0..self.inboxes.len();
        if self.rank() != 0 {
            let _ = wire::send(&mut *self.shared.writer(0), Tag::Bye, &[]);
        }
        let state = self.shared.state();
        let ending = (self.shared.changed)
            .wait_while(state, |s| {
                s.1 == Phase::Running && links.clone().any(|l| !s.0[l].bye && !s.0[l].closed)
            })
            .map_or(true, |s| s.1 != Phase::Running);
        if ending {
            return;
        }
        for link in links {
            let mut w = self.shared.writer(link);
            if self.rank() == 0 {
                let _ = wire::send(&mut *w, Tag::Bye, &[]);
            }
            let _ = w.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests;
