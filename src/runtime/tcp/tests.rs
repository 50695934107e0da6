//! Ranks as threads over loopback (the rendezvous, the messages, the watchdogs with their end
//! recorded instead of the process ended), and ranks as processes of this test binary (the
//! process ended in earnest).

use super::*;
use crate::runtime::Reported;
use crate::runtime::launcher::Rendezvous;
use crate::runtime::rendezvous;
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Rank `rank` of `size` meeting at `port` of loopback.
fn at(port: u16, rank: usize, size: usize, timeout: Duration) -> Rendezvous {
    Rendezvous {
        source: "torchrun-style variables",
        size_var: "WORLD_SIZE",
        rank,
        size,
        host: "127.0.0.1".into(),
        port,
        timeout,
    }
}

/// A listener on a free port of loopback, for rank 0.
fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// Connections of every rank from threads: rank 0's gather on `listener`, then each rank's join.
fn meet(
    listener: TcpListener,
    ranks: Vec<Rendezvous>,
) -> Vec<JoinHandle<anyhow::Result<Vec<TcpStream>>>> {
    let mut threads = Vec::new();
    let mut listener = Some(listener);
    for r in ranks {
        let listener = if r.rank == 0 { listener.take() } else { None };
        threads.push(std::thread::spawn(move || match listener {
            Some(l) => rendezvous::gather(l, &r),
            None => rendezvous::join(&r).map(|s| vec![s]),
        }));
    }
    threads
}

/// `size` ranks joined as groups whose ends go to the returned receiver, as (rank, ending).
fn groups(size: usize) -> (Vec<TcpGroup>, mpsc::Receiver<(usize, Ending)>) {
    let (l, port) = listener();
    let ranks = (0..size).map(|k| at(port, k, size, Duration::from_secs(20)));
    let (ended, endings) = mpsc::channel();
    let groups = (meet(l, ranks.collect()).into_iter().enumerate())
        .map(|(rank, t)| {
            let ended = Mutex::new(ended.clone());
            let on_end: OnEnd = Box::new(move |e| {
                let _ = ended.lock().unwrap().send((rank, e.clone()));
            });
            TcpGroup::new(rank, size, t.join().unwrap().unwrap(), on_end).unwrap()
        })
        .collect();
    (groups, endings)
}

/// Each group on a thread of its own, running `f`.
fn on_threads<T: Send + 'static>(
    groups: Vec<TcpGroup>,
    f: impl Fn(&TcpGroup) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let threads: Vec<_> = (groups.into_iter())
        .map(|g| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || f(&g))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The endings recorded within `wait`, by rank.
fn endings_within(
    endings: &mpsc::Receiver<(usize, Ending)>,
    n: usize,
    wait: Duration,
) -> Vec<(usize, Ending)> {
    let deadline = Instant::now() + wait;
    let mut seen: Vec<(usize, Ending)> = (0..n)
        .map_while(|_| {
            endings
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .ok()
        })
        .collect();
    seen.sort_by_key(|(rank, _)| *rank);
    seen
}

#[test]
fn ranks_meet_and_exchange_ids_flags_and_timings() {
    let (groups, endings) = groups(4);
    let results = on_threads(groups, |g| {
        let rank = g.rank();
        g.barrier().unwrap();
        let mine = vec![rank as u8; rank];
        let all = g.all_gather_bytes(&mine).unwrap();
        let mut id = if rank == 2 {
            b"nccl-id".to_vec()
        } else {
            vec![0; 7]
        };
        g.broadcast(&mut id, 2).unwrap();
        let slowest = g.max_f64(rank as f64 * 1.5).unwrap();
        g.barrier().unwrap();
        (g.size(), all, id, slowest)
    });
    for (size, all, id, slowest) in results {
        assert_eq!(size, 4);
        assert_eq!(all, vec![vec![], vec![1], vec![2, 2], vec![3, 3, 3]]);
        assert_eq!(id, b"nccl-id");
        assert_eq!(slowest, 4.5);
    }
    // The groups said goodbye as they dropped: no watchdog ended anything.
    assert_eq!(endings_within(&endings, 1, Duration::from_millis(500)), []);
}

#[test]
fn a_failing_rank_ends_every_rank_even_one_blocked_in_a_collective() {
    let (groups, endings) = groups(3);
    let t0 = Instant::now();
    let results = on_threads(groups, |g| {
        if g.rank() == 2 {
            g.abort(3);
            return true;
        }
        // Blocked until its watchdog closes the connections under it.
        g.barrier().is_err()
    });
    assert_eq!(results, [true, true, true]);
    let seen = endings_within(&endings, 3, Duration::from_secs(10));
    assert_eq!(
        seen,
        [
            (0, Ending::Told { from: 2 }),
            (1, Ending::Told { from: 0 }),
            (2, Ending::Failed { code: 3 })
        ]
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn a_rank_gone_without_goodbye_ends_the_others() {
    for gone in [1, 0] {
        let (l, port) = listener();
        let ranks = (0..3)
            .map(|k| at(port, k, 3, Duration::from_secs(20)))
            .collect();
        let (ended, endings) = mpsc::channel();
        let mut groups = Vec::new();
        for (rank, t) in meet(l, ranks).into_iter().enumerate() {
            let streams = t.join().unwrap().unwrap();
            if rank == gone {
                drop(streams); // as a crash closes them
                continue;
            }
            let ended = Mutex::new(ended.clone());
            let on_end: OnEnd = Box::new(move |e| {
                let _ = ended.lock().unwrap().send((rank, e.clone()));
            });
            groups.push(TcpGroup::new(rank, 3, streams, on_end).unwrap());
        }
        let results = on_threads(groups, |g| g.barrier().is_err());
        assert_eq!(results, [true, true]);
        let seen = endings_within(&endings, 2, Duration::from_secs(10));
        let expected = match gone {
            1 => [(0, Ending::Lost { peer: 1 }), (2, Ending::Told { from: 0 })],
            _ => [(1, Ending::Lost { peer: 0 }), (2, Ending::Lost { peer: 0 })],
        };
        assert_eq!(seen, expected, "rank {gone} gone");
    }
}

#[test]
fn two_ranks_of_one_number_are_refused_on_every_rank() {
    let (l, port) = listener();
    let ranks = [0, 1, 1].map(|k| at(port, k, 3, Duration::from_secs(20)));
    let results: Vec<_> = (meet(l, ranks.to_vec()).into_iter())
        .map(|t| t.join().unwrap())
        .collect();
    let rank0 = format!("{:#}", results[0].as_ref().unwrap_err());
    assert!(
        rank0.contains("two processes say they are rank 1 (at 127.0.0.1:"),
        "{rank0}"
    );
    assert!(
        rank0.contains("torchrun-style variables (WORLD_SIZE=3)"),
        "{rank0}"
    );
    for r in &results[1..] {
        let e = r.as_ref().unwrap_err();
        assert!(e.is::<Reported>(), "{e:#}");
        assert_eq!(e.to_string(), rank0);
    }
}

#[test]
fn another_rank_count_or_a_rank_out_of_range_is_refused() {
    let (l, port) = listener();
    let ranks = vec![
        at(port, 0, 2, Duration::from_secs(20)),
        at(port, 1, 3, Duration::from_secs(20)),
    ];
    let results: Vec<_> = meet(l, ranks)
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let rank0 = format!("{:#}", results[0].as_ref().unwrap_err());
    assert!(rank0.contains("rank 1 (at 127.0.0.1:"), "{rank0}");
    assert!(
        rank0.contains(
            "was started with WORLD_SIZE=3, rank 0 with torchrun-style variables (WORLD_SIZE=2)"
        ),
        "{rank0}"
    );
    assert!(results[1].as_ref().unwrap_err().is::<Reported>());
    let (l, port) = listener();
    let ranks = vec![
        at(port, 0, 2, Duration::from_secs(20)),
        at(port, 0, 2, Duration::from_secs(20)),
    ];
    let results: Vec<_> = meet(l, ranks)
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let rank0 = format!("{:#}", results[0].as_ref().unwrap_err());
    assert!(rank0.contains("says it is rank 0 of 2"), "{rank0}");
}

#[test]
fn ranks_that_never_arrive_are_named_at_the_timeout() {
    let (l, port) = listener();
    let quick = Duration::from_millis(700);
    let t0 = Instant::now();
    let ranks = vec![at(port, 0, 5, quick), at(port, 2, 5, quick)];
    // A stranger's connection is no rank: it is left alone.
    let mut stranger = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stranger.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let results: Vec<_> = meet(l, ranks)
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let rank0 = format!("{:#}", results[0].as_ref().unwrap_err());
    assert_eq!(
        rank0,
        format!(
            "ranks 1, 3-4 of 5 did not reach rank 0 at 127.0.0.1:{port} within 0.7 s (set \
             DISTRUN_RENDEZVOUS_TIMEOUT_S to wait longer); torchrun-style variables \
             (WORLD_SIZE=5)"
        )
    );
    assert!(results[1].as_ref().unwrap_err().is::<Reported>());
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn a_rank_that_finds_no_rank_0_says_where_it_looked() {
    let (l, port) = listener();
    drop(l);
    let e = rendezvous::join(&at(port, 1, 2, Duration::from_millis(300))).unwrap_err();
    let said = format!("{e:#}");
    assert!(
        said.starts_with(&format!(
            "could not reach rank 0 at 127.0.0.1:{port} within 0.3 s"
        )),
        "{said}"
    );
}

/// Ranks as processes of this test binary ([`rank_process`]) doing `role`: each one's exit
/// status and stderr, and how long they all took. Rank `kill`, where given, is killed once every
/// rank has started.
fn processes(
    role: &str,
    size: usize,
    kill: Option<usize>,
) -> (Vec<(Option<i32>, String)>, Duration) {
    let (l, port) = listener();
    drop(l);
    let dir = std::env::temp_dir().join(format!("distrun-tcp-{}-{role}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let t0 = Instant::now();
    let mut children: Vec<_> = (0..size)
        .map(|rank| {
            let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "runtime::tcp::tests::rank_process",
                "--ignored",
                "--nocapture",
            ])
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", size.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("DISTRUN_RENDEZVOUS_TIMEOUT_S", "30")
            .env("DISTRUN_TEST_ROLE", role)
            .env("DISTRUN_TEST_DIR", &dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
            for var in [
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_RANK",
                "PMI_RANK",
                "PMIX_RANK",
                "PMI_SIZE",
            ] {
                cmd.env_remove(var);
            }
            cmd.spawn().unwrap()
        })
        .collect();
    if let Some(k) = kill {
        // The ranks have met once rank 0's run directory exists, and soon wait in their barrier.
        while std::fs::read_dir(&dir).unwrap().next().is_none()
            && t0.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        children[k].kill().unwrap();
    }
    let mut results = Vec::new();
    for child in children.iter_mut() {
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let took = t0.elapsed();
    for child in children {
        let out = child.wait_with_output().unwrap();
        results.push((
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        left.is_empty(),
        "{role}: run directories left behind: {left:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    (results, took)
}

/// A rank of the process tests: joins the job from its variables; rank 0 starts a run directory
/// that the others open, as a run's writing does; then each does its `DISTRUN_TEST_ROLE`
/// ("finish": goodbye; "fail" and "panic": rank 1 fails; "wait": nothing) and the others wait
/// outside the group, as in NCCL, until their watchdogs end them.
#[test]
#[ignore = "a rank of the process tests, run by them as a process of its own"]
fn rank_process() {
    use crate::output::rundir::RunDir;
    let (Ok(role), Ok(dir)) = (
        std::env::var("DISTRUN_TEST_ROLE"),
        std::env::var("DISTRUN_TEST_DIR"),
    ) else {
        return;
    };
    crate::runtime::abort_job_on_panic();
    let ctx = crate::runtime::start(crate::spec::model::ProcessGroup::Auto, None).unwrap();
    let group = ctx.group();
    let created = (group.rank() == 0)
        .then(|| RunDir::create(std::path::Path::new(&dir).join("run")).unwrap());
    let path = created
        .as_ref()
        .map(|d| d.path().to_str().unwrap().as_bytes().to_vec());
    let path = group
        .all_gather_bytes(&path.unwrap_or_default())
        .unwrap()
        .swap_remove(0);
    let opened =
        (group.rank() != 0).then(|| RunDir::open(String::from_utf8(path).unwrap().into()).unwrap());
    group.barrier().unwrap();
    match role.as_str() {
        "fail" if group.rank() == 1 => ctx.fail(&anyhow!("a planted failure")),
        "panic" if group.rank() == 1 => panic!("a planted panic"),
        "finish" => {
            drop((opened, created));
            return;
        }
        _ => {}
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn rank_processes_that_finish_exit_0() {
    let (results, _) = processes("finish", 3, None);
    for (rank, (code, stderr)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {rank}: {stderr}");
    }
}

#[test]
fn a_failing_rank_process_ends_every_rank_with_its_message_once() {
    for role in ["fail", "panic"] {
        let (results, took) = processes(role, 3, None);
        assert!(took < Duration::from_secs(15), "{role}: {took:?}");
        let all: String = results.iter().map(|(_, e)| e.as_str()).collect();
        for (rank, (code, stderr)) in results.iter().enumerate() {
            assert_eq!(*code, Some(1), "{role}: rank {rank}: {all}");
            if rank != 1 {
                assert!(
                    !stderr.contains("distrun:"),
                    "{role}: rank {rank} said: {stderr}"
                );
            }
        }
        let said = match role {
            "fail" => "distrun: rank 1: a planted failure",
            _ => "a planted panic",
        };
        assert_eq!(all.matches(said).count(), 1, "{role}: {all}");
    }
}

#[test]
fn a_killed_rank_process_ends_the_others() {
    for killed in [1, 0] {
        let (results, took) = processes("wait", 3, Some(killed));
        assert!(
            took < Duration::from_secs(15),
            "rank {killed} killed: {took:?}"
        );
        for (rank, (code, stderr)) in results.iter().enumerate() {
            if rank == killed {
                assert_eq!(*code, None, "killed by a signal");
                continue;
            }
            assert_eq!(*code, Some(1), "rank {rank}: {stderr}");
            // Whoever lost the killed rank says so, once; the others say nothing.
            let said = match (killed, rank) {
                (0, r) => Some(format!(
                    "distrun: rank {r}: rank 0 ended before the job did"
                )),
                (_, 0) => Some("distrun: rank 1 ended before the job did".to_string()),
                _ => None,
            };
            match said {
                Some(line) => assert_eq!(stderr.matches(&line).count(), 1, "{stderr}"),
                None => assert!(!stderr.contains("distrun:"), "{stderr}"),
            }
        }
    }
}
