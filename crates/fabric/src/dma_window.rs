//! A READ's lines sampled within one short window, as a NIC's DMA samples them.
//!
//! # Why
//!
//! A NIC executes a READ (or a doorbell batch of READs) in about a microsecond, whatever the
//! client's CPU is doing: its lines are sampled close together in time, with at most a few other
//! verbs landing on them meanwhile. On `local` the client's own thread copies the lines, and the
//! operating system can deschedule that thread between two lines for milliseconds. The READ then
//! pairs lines that no NIC could pair, thousands of other clients' writes apart, and defeats the
//! small wrapping counters that designs use to detect torn reads because a NIC's window is short:
//! CHIME's 4-bit cache-line versions (16 writes of a leaf inside one READ), SepHash's merge
//! edition when it had 8 bits (256 merges of a segment inside one doorbell). Real threads on an
//! oversubscribed machine produced both: a CHIME search returned another key's value, and a
//! SepHash delete was undone.
//!
//! # What
//!
//! A READ that spans more than one line, and a doorbell batch made only of READs, counts the
//! WRITEs that landed on its lines while it copied them (each line's sequence moves by two per
//! WRITE: [`crate::memory::Region::read_at`] returns the sequences it copied at, and
//! [`crate::memory::Region::seq_sum`] the current ones). At [`MAX_WRITES`] or more it is redone:
//! that many WRITEs of its own lines fit in a NIC's microsecond only in theory, and in a copy of a
//! few hundred nanoseconds not at all, so only a descheduled copy sees them. That catches a
//! counter moved by WRITEs (CHIME's versions), not one moved by CAS (SepHash closes a segment by
//! CAS and its slots are CAS'd), so a batch of several READs — the doorbells that read a word
//! before and after the rest to prove nothing changed — is also timed with the CPU's cycle
//! counter and redone past [`budget`]. The client cannot tell a redone READ from one the NIC
//! executed at that later instant, so this removes a scheduling artefact and promises nothing
//! RDMA does not: lines are still sampled at different instants, and a few WRITEs may still land
//! between them. A one-line READ is atomic anyway and is not checked; a batch with a WRITE or an
//! atomic is not redone (its effects cannot be taken back). Cost: one more load of each line's
//! sequence, already in cache; two counter reads per batch of READs (about 20 ns each on this
//! host's virtual machine, which is why single READs, the hot path of most searches, are not
//! timed).

use crate::memory::Region;
use crate::verbs::BatchOp;

/// WRITEs landing on a READ's lines while it copies them from which it is redone: 16, the
/// period of the smallest version counter here (CHIME's 4-bit line versions).
pub const MAX_WRITES: u32 = 16;

/// Cycles a batch of READs may take before it counts as descheduled: 40 000 (10–20 µs at
/// 2–4 GHz), about 100 times what copying a few lines costs, plus [`PER_LINE`] per line.
pub const BASE: u64 = 40_000;
/// Extra cycles allowed per line of the batch (a cache-missing line copy costs a few hundred).
pub const PER_LINE: u64 = 2_000;

/// The cycle budget of a batch of READs of `lines` cache lines.
#[inline]
pub fn budget(lines: u64) -> u64 {
    BASE + PER_LINE * lines
}

/// The CPU's cycle counter (nanoseconds since a fixed instant off x86-64).
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Whether lines whose sequences summed `before` when copied and sum `after` now took
/// [`MAX_WRITES`] or more WRITEs meanwhile.
#[inline]
fn stalled(before: u32, after: u32) -> bool {
    after.wrapping_sub(before) >= 2 * MAX_WRITES
}

/// `buf.len()` bytes at `offset` of `region`, redone while WRITEs piled onto its lines.
#[inline]
pub fn read(region: &Region, offset: u64, buf: &mut [u8]) {
    loop {
        let before = region.read_at(offset, buf);
        if !multi_line(offset, buf.len()) || !stalled(before, region.seq_sum(offset, buf.len())) {
            return;
        }
    }
}

/// A doorbell batch on `region`: READs only are redone while WRITEs piled onto their lines (as
/// one window); a batch with any other verb runs once, in order.
#[inline]
pub fn apply(region: &Region, ops: &mut [BatchOp<'_>]) {
    apply_timed(region, ops, ticks);
}

/// [`apply`] timed by `clock`; returns how many times the READs were executed.
#[inline]
fn apply_timed(region: &Region, ops: &mut [BatchOp<'_>], mut clock: impl FnMut() -> u64) -> u32 {
    let reads_only = ops.iter().all(|op| matches!(op, BatchOp::Read { .. }));
    if !reads_only {
        crate::service::MnMemory::apply(region, ops);
        return 1;
    }
    if let [BatchOp::Read { addr, buf }] = ops {
        read(region, addr.offset(), buf);
        return 1;
    }
    let lines = ops.iter().fold(0, |n, op| match op {
        BatchOp::Read { addr, buf } => n + line_count(addr.offset(), buf.len()),
        _ => n,
    });
    let budget = budget(lines);
    let mut passes = 0;
    loop {
        passes += 1;
        let start = clock();
        let mut before = 0u32;
        for op in ops.iter_mut() {
            if let BatchOp::Read { addr, buf } = op {
                before = before.wrapping_add(region.read_at(addr.offset(), buf));
            }
        }
        let took = clock().wrapping_sub(start);
        let after = ops.iter().fold(0u32, |sum, op| match op {
            BatchOp::Read { addr, buf } => {
                sum.wrapping_add(region.seq_sum(addr.offset(), buf.len()))
            }
            _ => sum,
        });
        // A counter that went backwards (a migration between unsynchronised counters) reads as
        // a huge span: redone too, which is always allowed.
        if !stalled(before, after) && took <= budget {
            return passes;
        }
    }
}

/// Whether `len` bytes at `offset` span more than one cache line.
#[inline]
fn multi_line(offset: u64, len: usize) -> bool {
    line_count(offset, len) > 1
}

/// Cache lines touched by `len` bytes at `offset`.
#[inline]
fn line_count(offset: u64, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let (first, last) = crate::memory::line_span(offset as usize, len);
    (last - first + 1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::GlobalAddr;

    #[test]
    fn counts_writes_on_the_lines_read() {
        let r = Region::new(4096);
        let mut buf = [0u8; 100];
        let before = r.read_at(10, &mut buf);
        assert_eq!(r.seq_sum(10, 100), before, "nothing written since");
        r.write(64, &[1; 8]);
        r.write(0, &[2; 8]);
        r.write(200, &[3; 8]); // another line
        assert_eq!(r.seq_sum(10, 100).wrapping_sub(before), 4, "two WRITEs of its lines");
        assert!(!stalled(before, r.seq_sum(10, 100)));
        for _ in 0..MAX_WRITES {
            r.write(70, &[4; 8]);
        }
        assert!(stalled(before, r.seq_sum(10, 100)));
        assert!(multi_line(63, 2) && !multi_line(64, 64) && !multi_line(0, 0));
        assert_eq!([line_count(0, 0), line_count(0, 65), line_count(100, 200)], [0, 2, 4]);
        assert_eq!(budget(3), BASE + 3 * PER_LINE);
    }

    /// Two READs of `r`'s lines 0..2 and 5, as one batch timed by `clock`: the passes it took
    /// and the first line's bytes as read.
    fn batch(r: &Region, clock: impl FnMut() -> u64) -> (u32, [u8; 8]) {
        let (mut a, mut b) = ([0u8; 130], [0u8; 8]);
        let mut ops = [
            BatchOp::Read { addr: GlobalAddr::new(0, 0), buf: &mut a },
            BatchOp::Read { addr: GlobalAddr::new(0, 320), buf: &mut b },
        ];
        let passes = apply_timed(r, &mut ops, clock);
        (passes, a[..8].try_into().unwrap())
    }

    #[test]
    fn a_batch_descheduled_past_its_budget_is_redone() {
        let r = Region::new(4096);
        // Lines: 3 for the first READ, 1 for the second.
        let limit = budget(4);
        // A clock whose second reading (the end of the first pass) comes `extra` cycles late.
        let slow_once = |extra: u64| {
            let (mut calls, mut t) = (0, 0u64);
            move || {
                calls += 1;
                t += if calls == 2 { extra } else { 1 };
                t
            }
        };
        assert_eq!(batch(&r, slow_once(limit - 1)).0, 1, "within the budget: once");
        assert_eq!(batch(&r, slow_once(limit + 1)).0, 2, "past it: redone");
        assert_eq!(batch(&r, slow_once(u64::MAX / 2)).0, 2);
    }

    #[test]
    fn a_batch_that_writes_piled_onto_is_redone_and_sees_them() {
        let r = Region::new(4096);
        let mut calls = 0;
        // The clock's second reading (the end of the first pass) lands MAX_WRITES WRITEs on a
        // line read: the pass is redone, and the redo reads what they wrote.
        let (passes, first) = batch(&r, || {
            calls += 1;
            if calls == 2 {
                for i in 0..MAX_WRITES {
                    r.write(0, &[i as u8 + 1; 8]);
                }
            }
            0
        });
        assert_eq!((passes, first), (2, [MAX_WRITES as u8; 8]));
        let mut calls = 0;
        let (passes, first) = batch(&r, || {
            calls += 1;
            if calls == 2 {
                for _ in 1..MAX_WRITES {
                    r.write(64, &[0xAB; 8]);
                }
            }
            0
        });
        assert_eq!((passes, first), (1, [MAX_WRITES as u8; 8]), "fewer WRITEs: read once");
    }

    #[test]
    fn a_read_comes_back_whole_and_current() {
        let r = Region::new(4096);
        r.write(0, &[7; 256]);
        let mut a = [0u8; 200];
        let mut b = [0u8; 8];
        read(&r, 30, &mut a);
        assert!(a.iter().all(|&x| x == 7));
        apply(
            &r,
            &mut [
                BatchOp::Read { addr: GlobalAddr::new(0, 0), buf: &mut a },
                BatchOp::Read { addr: GlobalAddr::new(0, 300), buf: &mut b },
            ],
        );
        assert!(a.iter().all(|&x| x == 7) && b == [0; 8]);
        apply(&r, &mut [BatchOp::Write { addr: GlobalAddr::new(0, 300), data: &[9; 8] }]);
        read(&r, 300, &mut b);
        assert_eq!(b, [9; 8]);
    }
}
