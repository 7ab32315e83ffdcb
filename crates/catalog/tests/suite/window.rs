//! A warm window: CHIME's hotspot buffer, measured as the papers measure it (a replayed stream,
//! a middle window of the run), hits far more often than in a cold single pass.

use dmindex_bench::experiment::{paper_window, reads, stat};
use dmindex_bench::{BenchConfig, BenchReport, TransportKind};

fn chime(ops: u64, stream: Option<u64>, warm: bool) -> BenchReport {
    let mut c = BenchConfig::of("chime", "c");
    c.cluster.transport = TransportKind::Sim;
    (c.cluster.clients, c.cluster.coroutines) = (4, 2);
    c.index.options = vec![("speculative".into(), "1".into())];
    (c.workload.items, c.workload.ops, c.workload.stream_ops) = (20_000, Some(ops), stream);
    c.workload.window = warm.then(paper_window);
    c.output.key_reuse = true;
    dmindex_catalog::bench(&c).expect("runs")
}

/// Speculative hits per search, and the ceiling of the same reads.
fn hits(r: &BenchReport) -> (f64, f64) {
    (stat(r, "speculative_hits") / reads(r), r.key_reuse.expect("key reuse asked for"))
}

#[test]
fn a_warm_window_hits_the_hotspot_buffer_more_than_a_cold_pass() {
    let cold = chime(4000, None, false);
    let warm = chime(20_000, Some(4000), true);
    let w = warm.window.as_ref().expect("a window");
    assert_eq!((w.opened_at_op, w.closed_at_op), (8000, 16_000));
    // The window's searches alone: 8000 started inside it, to within one per client task.
    assert!((reads(&warm) - 8000.0).abs() <= 8.0, "{}", reads(&warm));
    let (cold_hits, cold_ceiling) = hits(&cold);
    let (warm_hits, warm_ceiling) = hits(&warm);
    // Reads inside the window come after the stream's first pass: every key repeats.
    assert_eq!(warm_ceiling, 1.0);
    assert!(cold_hits <= cold_ceiling, "{cold_hits} above its ceiling {cold_ceiling}");
    assert!(warm_hits <= warm_ceiling);
    assert!(
        warm_hits > 2.0 * cold_hits && warm_hits > 0.5,
        "warm {warm_hits} against cold {cold_hits}"
    );
    let table = warm.table();
    assert!(table.contains("window 0.4:0.8 of the run phase: operations 8000 to 16000"), "{table}");
}
