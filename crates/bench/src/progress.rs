//! How a run shows its progress on standard error: a bar on a terminal, a line every few
//! seconds into a log or a pipe ([`Progress`]).

use std::ops::Deref;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::rate;

/// How a run shows its progress on standard error (the command line picks it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// Nothing (runs built in code: experiments and tests log what they need).
    #[default]
    Off,
    /// A bar redrawn in place, for a terminal.
    Bars,
    /// A line every `LINE_EVERY`, for a log or a pipe, where a bar would be lost or garble.
    Lines,
}

/// How often [`Progress::Lines`] prints a line.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// A phase's progress: the bar the clients count their operations on (hidden unless drawn),
/// and with [`Progress::Lines`] the thread that prints its position. Dropping it stops the
/// thread.
pub(crate) struct PhaseProgress {
    bar: ProgressBar,
    lines: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Deref for PhaseProgress {
    type Target = ProgressBar;

    fn deref(&self) -> &ProgressBar {
        &self.bar
    }
}

impl Drop for PhaseProgress {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.lines.take() {
            // A send fails only if the thread is gone already; either way it ends.
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}

/// The progress of a phase `phase` of `len` operations.
pub(crate) fn phase_progress(how: Progress, len: u64, phase: &str) -> PhaseProgress {
    match how {
        Progress::Off => PhaseProgress { bar: ProgressBar::hidden(), lines: None },
        Progress::Bars => {
            let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:>5} [{bar:40}] {pos}/{len} {per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(phase.to_string());
            PhaseProgress { bar, lines: None }
        }
        Progress::Lines => {
            let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
            let (stop, stopped) = mpsc::channel();
            let (counted, phase) = (bar.clone(), phase.to_string());
            let thread = std::thread::spawn(move || print_lines(&counted, &phase, len, &stopped));
            PhaseProgress { bar, lines: Some((stop, thread)) }
        }
    }
}

/// Prints `bar`'s position every [`LINE_EVERY`] until told to stop, and then, if it printed
/// any, one line for the phase's end (a phase shorter than that prints nothing).
fn print_lines(bar: &ProgressBar, phase: &str, len: u64, stop: &mpsc::Receiver<()>) {
    let start = Instant::now();
    let mut printed = false;
    // Ends when the phase's progress is dropped (a message, or the sender gone).
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(LINE_EVERY) {
        eprintln!("{}", line(phase, bar.position(), len, start.elapsed()));
        printed = true;
    }
    if printed {
        eprintln!("{}", line(phase, bar.position(), len, start.elapsed()));
    }
}

/// One progress line: the phase, its operations done of `len`, and the real time so far.
pub(crate) fn line(phase: &str, done: u64, len: u64, elapsed: Duration) -> String {
    let s = elapsed.as_secs_f64();
    let pct = if len == 0 { 100.0 } else { done as f64 * 100.0 / len as f64 };
    let speed = if s > 0.0 { rate(done as f64 / s) } else { rate(0.0) };
    format!("{phase}: {done} of {len} operations ({pct:.0} %) after {s:.0} s, {speed} real time")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gives_the_phase_its_share_done_and_the_time() {
        let l = line("run", 250_000, 1_000_000, Duration::from_secs(5));
        assert_eq!(l, "run: 250000 of 1000000 operations (25 %) after 5 s, 50.00 kops/s real time");
    }

    /// Lines stop with the phase: dropping its progress joins the printing thread at once,
    /// not after a whole interval.
    #[test]
    fn lines_stop_when_the_phase_ends() {
        let t = Instant::now();
        let p = phase_progress(Progress::Lines, 10, "load");
        p.inc(10);
        assert_eq!(p.position(), 10);
        drop(p);
        assert!(t.elapsed() < LINE_EVERY, "{:?}", t.elapsed());
    }
}
