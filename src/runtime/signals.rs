//! SIGINT and SIGTERM: the process still ends by the signal, as without a handler (a launcher then
//! stops the other ranks), but first removes the temporary run directory it is writing.
//!
//! The handler only writes the signal's number to a pipe (write(2) is async-signal-safe); a
//! thread waiting on the pipe does the rest: it removes the directories
//! ([`crate::output::rundir::remove_uncommitted`]), restores the default action and raises the
//! signal again. A signal that the process inherited as ignored (`nohup`, a background job of a
//! non-interactive shell) stays ignored.

use std::io::{self, Write};
use std::os::raw::{c_int, c_void};
use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};

/// The pipe's write end, for the handler.
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// The signals whose arrival removes the run directory being written.
const CAUGHT: [c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Installs the handlers (once per process).
pub fn install() -> io::Result<()> {
    static INSTALLED: Once = Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| result = install_now());
    result
}

fn install_now() -> io::Result<()> {
    let mut fds: [c_int; 2] = [-1; 2];
    // SAFETY: a valid array of two fds to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    WAKE.store(fds[1], Ordering::SeqCst);
    let read_end = fds[0];
    std::thread::Builder::new()
        .name("distrun-signals".into())
        .spawn(move || watch(read_end))?;
    CAUGHT.iter().try_for_each(|&sig| catch(sig))
}

/// Points `sig` at [`on_signal`], unless it is ignored.
fn catch(sig: c_int) -> io::Result<()> {
    // SAFETY: sigaction with a zeroed (empty) struct to read, and one filled here to set.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        if old.sa_sigaction == libc::SIG_IGN {
            return Ok(());
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The handler: the signal's number into the pipe, errno as it was.
extern "C" fn on_signal(sig: c_int) {
    let byte = sig as u8;
    // SAFETY: errno is this thread's; write(2) is async-signal-safe, on a pipe this process owns.
    unsafe {
        let errno = *libc::__errno_location();
        libc::write(
            WAKE.load(Ordering::Relaxed),
            &byte as *const u8 as *const c_void,
            1,
        );
        *libc::__errno_location() = errno;
    }
}

/// Waits for a signal's number on the pipe, then ends the process by it.
fn watch(fd: c_int) {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads one byte into `byte`.
        match unsafe { libc::read(fd, &mut byte as *mut u8 as *mut c_void, 1) } {
            1 => end_by(c_int::from(byte)),
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

/// Removes the run directories being written, then dies by `sig` (exit 128 + sig where that
/// fails).
fn end_by(sig: c_int) -> ! {
    for dir in crate::output::rundir::remove_uncommitted() {
        // Not eprintln!, which panics where the launcher has closed stderr already.
        let _ = writeln!(
            io::stderr(),
            "distrun: {}: removed the unfinished run directory {}",
            name(sig),
            dir.display()
        );
    }
    // SAFETY: the default action for `sig`, unblocked in this thread, then raised: the process
    // ends as the signal's default action ends it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

fn name(sig: c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        _ => "SIGTERM",
    }
}
