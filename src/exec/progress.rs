//! What rank 0 tells the user while a run goes: a progress bar on a terminal (its own, or the
//! launcher's: see `terminal.rs`), plain lines otherwise, nothing with `-q`.

use super::{Chosen, StepRecord};
use crate::ops::matmul::MatmulPipeline;
use crate::plan::figures::Figures;
use indicatif::{ProgressBar, ProgressStyle};
use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::Instant;

/// When this process began its work (`mark_start`), for `-v`'s first line.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Marks the start of this process's work (first thing in `cli::main`).
pub fn mark_start() {
    STARTED.get_or_init(Instant::now);
}

/// Seconds since `mark_start` (None before it).
pub fn since_start_seconds() -> Option<f64> {
    STARTED.get().map(|t| t.elapsed().as_secs_f64())
}

/// Rank 0's reporter (silent on other ranks and with `-q`).
pub struct Progress {
    on: bool,
    verbose: bool,
    steps: usize,
    bar: RefCell<Option<ProgressBar>>,
}

impl Progress {
    /// A reporter; `on` only on rank 0 without `-q`.
    pub fn new(on: bool, verbose: bool, steps: usize) -> Self {
        Progress {
            on,
            verbose,
            steps,
            bar: RefCell::new(None),
        }
    }

    /// A step begins, with this many runs (warm-up included).
    pub fn start_step(&self, index: usize, name: &str, runs: u32) {
        if !self.on {
            return;
        }
        if let Some(target) = super::terminal::bar_target() {
            let bar = ProgressBar::with_draw_target(Some(u64::from(runs)), target);
            bar.set_style(
                ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {msg}")
                    .expect("a valid template"),
            );
            bar.set_prefix(format!("[{}/{}] {name}", index + 1, self.steps));
            *self.bar.borrow_mut() = Some(bar);
        } else {
            eprintln!(
                "distrun: step {}/{} {name}: {runs} runs",
                index + 1,
                self.steps
            );
        }
    }

    /// One run finished in `seconds` (the slowest rank's).
    pub fn iteration(&self, k: u32, seconds: f64) {
        if let Some(bar) = self.bar.borrow().as_ref() {
            bar.inc(1);
        }
        if self.on && self.verbose {
            self.line(&format!("distrun:   run {k}: {}", duration(seconds)));
        }
    }

    /// A step is done; `figures` say what it was (size, count, dtype, reduction; m, n, k; an
    /// FFT's kind and shape).
    pub fn end_step(&self, record: &StepRecord, figures: &Figures) {
        if !self.on {
            return;
        }
        if let Some(bar) = self.bar.borrow_mut().take() {
            bar.finish_and_clear();
        }
        let (_, median, _) = record.min_median_max();
        let mut line = format!("distrun: {} ({}", record.name, record.op);
        if let Some(what) = figures.summary() {
            line.push_str(&format!(", {what}"));
        }
        line.push_str(&format!("): median {}", duration(median)));
        if let Some((bytes, factor)) = record.bandwidth.filter(|_| median > 0.0) {
            let alg = bytes / median / 1e9;
            line.push_str(&format!(
                ", algbw {alg:.2} GB/s, busbw {:.2} GB/s",
                alg * factor
            ));
        }
        if let (
            Some(Chosen {
                trials: Some([nccl, puts]),
                ..
            }),
            Some(way),
        ) = (record.via, record.via_name())
        {
            line.push_str(&format!(
                ", by {way} (trials: nccl {}, {} {})",
                duration(nccl),
                record.puts_name(),
                duration(puts)
            ));
        }
        if let Some(Chosen { way, trials }) = record.pipeline {
            line.push_str(&match (way, record.window_slices) {
                (MatmulPipeline::Rounds, _) => ", in rounds".to_string(),
                (_, Some(1)) => ", whole in 1 slice within NCCL windows".to_string(),
                (_, Some(n)) => format!(", whole in {n} slices within NCCL windows"),
                _ => ", in one exchange".to_string(),
            });
            if let Some([rounds, whole]) = trials {
                line.push_str(&format!(
                    " (trials: rounds {}, whole {})",
                    duration(rounds),
                    duration(whole)
                ));
            }
        }
        if let Some(Chosen { way, trials }) = record.product_layout {
            line.push_str(&format!(", product written {way}"));
            if let Some([c, f]) = trials {
                line.push_str(&format!(" (trials: C {}, F {})", duration(c), duration(f)));
            }
        }
        if !record.batches.is_empty() {
            let each: Vec<String> = record.batches.iter().map(|n| n.to_string()).collect();
            line.push_str(&format!(", transposes in {} batches", each.join(" and ")));
        }
        if let Some(c) = record.check {
            line.push_str(if c.passed {
                ", check passed"
            } else {
                ", CHECK FAILED"
            });
            line.push_str(&format!(" (max error {:.3e})", c.max_error));
        }
        eprintln!("{line}");
    }

    /// With `-v`: a setup or closing phase (backend start, an init, the heap buffer, a
    /// download, the outputs) and its time. The caller waits for the device first, so the time
    /// is the phase's own.
    pub fn setup(&self, what: &str, seconds: f64) {
        if self.verbose {
            self.line(&format!("distrun: {what} ({:.3} s)", seconds));
        }
    }

    /// With `-v`: `what` took the time since `mark_start` (the spec read and planned, the
    /// process group up: a launcher's share of start-up shows beside the backend's).
    pub fn since_start(&self, what: &str) {
        if let Some(t) = since_start_seconds() {
            self.setup(what, t);
        }
    }

    /// Whether `-v` asked for setup phases and iterations.
    pub fn verbose(&self) -> bool {
        self.on && self.verbose
    }

    /// A plain message.
    pub fn line(&self, text: &str) {
        if !self.on {
            return;
        }
        match self.bar.borrow().as_ref() {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }
}

/// A step's time for people: microseconds below a millisecond, milliseconds below a second.
fn duration(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.2} us", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{seconds:.3} s")
    }
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_keep_their_digits() {
        assert_eq!(duration(1.234e-6), "1.23 us");
        assert_eq!(duration(0.000_999), "999.00 us");
        assert_eq!(duration(0.0125), "12.500 ms");
        assert_eq!(duration(2.5), "2.500 s");
    }
}
