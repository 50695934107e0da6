//! Where rank 0's progress bar draws: its own terminal, or under a launcher the launcher's
//! (mpiexec forwards rank 0's stderr, a pipe, to its own terminal: the bar is drawn into the pipe
//! with the terminal's escape codes).

use indicatif::{ProgressDrawTarget, TermLike};
use std::io::{self, IsTerminal, Write};

/// The bar's target when stderr ends on a terminal, directly or through the launcher that
/// started this process; None for plain lines (a file, a pipe to something else, a batch job).
pub fn bar_target() -> Option<ProgressDrawTarget> {
    if io::stderr().is_terminal() {
        return Some(ProgressDrawTarget::stderr());
    }
    let launched = crate::runtime::launcher::from_env().is_some();
    (launched && parent_on_terminal()).then(|| ProgressDrawTarget::term_like(Box::new(Forwarded)))
}

/// Whether the parent process (the launcher, e.g. mpiexec) writes its stderr to a terminal.
fn parent_on_terminal() -> bool {
    let parent = std::os::unix::process::parent_id();
    std::fs::read_link(format!("/proc/{parent}/fd/2")).is_ok_and(|target| {
        let t = target.to_string_lossy();
        t.starts_with("/dev/pts/") || t.starts_with("/dev/tty")
    })
}

/// Stderr as a terminal of 100 columns that the launcher forwards: ANSI escape codes for the
/// cursor and the line.
#[derive(Debug)]
struct Forwarded;

impl Forwarded {
    fn put(&self, s: &str) -> io::Result<()> {
        io::stderr().write_all(s.as_bytes())
    }

    /// Moves the cursor `n` places in `direction` (A up, B down, C right, D left); terminals
    /// read a count of 0 as 1, so none is sent.
    fn step(&self, n: usize, direction: char) -> io::Result<()> {
        match n {
            0 => Ok(()),
            n => self.put(&format!("\x1b[{n}{direction}")),
        }
    }
}

impl TermLike for Forwarded {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.step(n, 'A')
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.step(n, 'B')
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.step(n, 'C')
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.step(n, 'D')
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.put(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.put(s)
    }
    fn clear_line(&self) -> io::Result<()> {
        self.put("\r\x1b[2K")
    }
    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}
