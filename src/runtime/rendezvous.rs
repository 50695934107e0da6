//! The meeting of ranks started without MPI: rank 0 listens on `MASTER_ADDR:MASTER_PORT` (every
//! address of its host), every other rank connects there (trying again until the timeout), says
//! its rank and the rank count, and rank 0 checks them: a rank twice, a rank out of range or
//! another rank count stops the job, and so do ranks missing at the timeout, named. Once every
//! rank is there, rank 0 welcomes each; a refusal reaches every rank connected by then.

use super::Reported;
use super::launcher::{Rendezvous, TIMEOUT_VAR};
use super::wire::{self, HELLO_MAGIC, Tag};
use anyhow::{Context as _, Result, anyhow, bail};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long rank 0 gives a new connection to say who it is.
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// How often a rank tries again to reach rank 0, and rank 0 looks for new connections.
const RETRY: Duration = Duration::from_millis(100);

/// How long a rank connected to rank 0 waits for its verdict past its own timeout: rank 0 may
/// have started later, and its own timeout ends later.
const VERDICT_GRACE: Duration = Duration::from_secs(30);

/// Meets the other ranks. Rank 0 gets every other rank's connection (by rank, from rank 1),
/// every other rank its connection to rank 0. Where a rank is refused for a reason rank 0 has
/// already printed, the error is [`Reported`].
pub fn meet(r: &Rendezvous) -> Result<Vec<TcpStream>> {
    if r.rank == 0 {
        gather(listen(r.port)?, r)
    } else {
        join(r).map(|s| vec![s])
    }
}

/// A listener on `port` of every IPv4 address of this host (IPv6 where it has no IPv4; the
/// other ranks try every address `MASTER_ADDR` has).
fn listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("0.0.0.0", port))
        .or_else(|e| TcpListener::bind(("::", port)).map_err(|_| e))
        .with_context(|| {
            format!(
                "rank 0 cannot listen on port {port} (MASTER_PORT) for the other ranks: choose \
                 another port"
            )
        })
}

/// Rank 0's part: takes the other ranks' connections on `listener` until all have come. Each
/// new connection says who it is on a thread of its own, so that one that says nothing holds
/// up no other.
pub fn gather(listener: TcpListener, r: &Rendezvous) -> Result<Vec<TcpStream>> {
    let deadline = Instant::now() + r.timeout;
    listener
        .set_nonblocking(true)
        .context("cannot set up the rendezvous listener")?;
    let (said, hellos) = mpsc::channel();
    let mut peers: Vec<Option<(TcpStream, SocketAddr)>> = (0..r.size).map(|_| None).collect();
    let mut arrived = 1;
    while arrived < r.size {
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (1..r.size).filter(|&k| peers[k].is_none()).collect();
            let why = format!(
                "{} of {} did not reach rank 0 at {}:{} within {} (set {TIMEOUT_VAR} to wait \
                 longer); {}",
                ranks_named(&missing),
                r.size,
                r.host,
                r.port,
                seconds(r.timeout),
                r.started_by()
            );
            return Err(refuse(&mut peers, None, why));
        }
        match listener.accept() {
            Ok((stream, from)) => {
                let said = said.clone();
                std::thread::spawn(move || said.send((hello(stream), from)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                let e = anyhow!(e).context("rank 0 cannot take the other ranks' connections");
                return Err(e);
            }
        }
        // Anything but a rank's hello (a port scan, another program) is left alone.
        let Ok((Ok((mut stream, (rank, size))), from)) = hellos.recv_timeout(RETRY) else {
            continue;
        };
        let why = if size != r.size as u64 {
            Some(format!(
                "rank {rank} (at {from}) was started with {}={size}, rank 0 with {}: every rank \
                 needs the same",
                r.size_var,
                r.started_by()
            ))
        } else if rank == 0 || rank >= size {
            Some(format!(
                "a process at {from} says it is rank {rank} of {size}: rank 0 is this one, and \
                 the others are ranks 1 to {}",
                size - 1
            ))
        } else if let Some((_, first)) = &peers[rank as usize] {
            Some(format!(
                "two processes say they are rank {rank} (at {first} and at {from}): every rank \
                 needs its own rank ({})",
                r.started_by()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(refuse(&mut peers, Some(&mut stream), why));
        }
        peers[rank as usize] = Some((stream, from));
        arrived += 1;
    }
    let mut streams = Vec::with_capacity(r.size - 1);
    for (rank, (mut stream, _)) in peers.into_iter().skip(1).flatten().enumerate() {
        wire::send(&mut stream, Tag::Welcome, &[])
            .with_context(|| format!("rank {} left before the job started", rank + 1))?;
        streams.push(stream);
    }
    Ok(streams)
}

/// Says `why` to every rank connected (and to `also`), and returns it as rank 0's error.
fn refuse(
    peers: &mut [Option<(TcpStream, SocketAddr)>],
    also: Option<&mut TcpStream>,
    why: String,
) -> anyhow::Error {
    let streams = peers.iter_mut().flatten().map(|(s, _)| s).chain(also);
    for stream in streams {
        let _ = wire::send(stream, Tag::Refused, why.as_bytes());
    }
    anyhow!(why)
}

/// A new connection's rank and rank count, when it is a rank's.
fn hello(stream: TcpStream) -> io::Result<(TcpStream, (u64, u64))> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HELLO_WAIT))?;
    let mut frame = [0u8; 9 + 24];
    (&stream).read_exact(&mut frame)?;
    let mut expected = vec![Tag::Hello as u8];
    expected.extend_from_slice(&24u64.to_le_bytes());
    expected.extend_from_slice(HELLO_MAGIC);
    if frame[..17] != expected[..] {
        return Err(io::ErrorKind::InvalidData.into());
    }
    let number = |at: usize| u64::from_le_bytes(frame[at..at + 8].try_into().expect("8 bytes"));
    stream.set_read_timeout(None)?;
    Ok((stream, (number(17), number(25))))
}

/// Another rank's part: reaches rank 0, says who it is, and waits until every rank has come.
pub fn join(r: &Rendezvous) -> Result<TcpStream> {
    let deadline = Instant::now() + r.timeout;
    let at = format!("rank 0 at {}:{}", r.host, r.port);
    let mut stream = loop {
        match connect(&r.host, r.port) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                bail!(
                    "could not reach {at} within {} (set {TIMEOUT_VAR} to wait longer): {e}",
                    seconds(r.timeout)
                )
            }
            Err(_) => std::thread::sleep(RETRY),
        }
    };
    let mut hello = HELLO_MAGIC.to_vec();
    hello.extend_from_slice(&(r.rank as u64).to_le_bytes());
    hello.extend_from_slice(&(r.size as u64).to_le_bytes());
    wire::send(&mut stream, Tag::Hello, &hello).with_context(|| format!("{at} closed"))?;
    let wait = deadline.saturating_duration_since(Instant::now()) + VERDICT_GRACE;
    stream.set_read_timeout(Some(wait))?;
    match wire::receive(&mut stream) {
        Ok((Tag::Welcome, _)) => {}
        Ok((Tag::Refused, why)) => {
            return Err(Reported(String::from_utf8_lossy(&why).into()).into());
        }
        Ok((tag, _)) => bail!("{at} answered with {tag:?}: is MASTER_PORT another program's?"),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            bail!(
                "{at} did not say every rank had come within {} (set {TIMEOUT_VAR} to wait \
                 longer)",
                seconds(r.timeout)
            )
        }
        Err(e) => bail!("{at} closed the connection before the job started ({e})"),
    }
    stream.set_read_timeout(None)?;
    Ok(stream)
}

/// One try at each address of `host:port`.
fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"));
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// "rank 3" or "ranks 1-3, 7".
fn ranks_named(ranks: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &r in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == r => *end = r,
            _ => runs.push((r, r)),
        }
    }
    let text: Vec<String> = (runs.iter())
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    let plural = if ranks.len() == 1 { "" } else { "s" };
    format!("rank{plural} {}", text.join(", "))
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_ranks_are_named_in_runs() {
        assert_eq!(ranks_named(&[3]), "rank 3");
        assert_eq!(ranks_named(&[1, 2, 3, 7, 9, 10]), "ranks 1-3, 7, 9-10");
    }
}
