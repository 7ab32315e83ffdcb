use dmindex_bench::experiment::{Run, Scale};
use dmindex_catalog::papers::histore::*;

use super::{body, session};

/// Fig. 9–12 run end to end at a tiny scale: every scheme that serves an operation is run
/// at every client count; a breakdown's phases add up to the mean latency and put each
/// scheme's cost where its design says (a one-sided GET has no request, a PUT waits on
/// its backups, an all-skiplist GET queues at a server); YCSB is normalised to all-skiplist.
/// The UCX run needs memnode processes: a build that cannot start them says so, as an
/// error `experiment histore/all` skips.
#[test]
fn the_ucx_timeline_needs_a_ucx_build() {
    let scale = Scale { memnode_exe: None, ..(PAPER.scale)() };
    let mut s = session(&scale, &PAPER, &dmindex_catalog::bench);
    let e = body("histore", "ucx-timeline")(&mut s).unwrap_err();
    assert!(e.downcast_ref::<dmindex_bench::experiment::NeedsUcx>().is_some(), "{e}");
    assert!(s.runs.is_empty());
}

#[test]
fn basic_breakdown_and_ycsb_runs_report_what_the_figures_need() {
    let scale =
        Scale { items: 3000, ops: 2000, clients: vec![2, 8], peak_clients: 4, ..(PAPER.scale)() };
    let mut s = session(&scale, &PAPER, &dmindex_catalog::bench);
    body("histore", "basic")(&mut s).unwrap();
    assert_eq!(s.runs.len(), (5 + 5 + 3) * 2, "SCAN on the three schemes with skiplists");
    assert!(s.runs.iter().all(|r| r.report.latency_us.mean > 0.0));
    s.runs.clear();
    body("histore", "breakdown")(&mut s).unwrap();
    assert_eq!(s.runs.len(), 3 + 3 + 2);
    for r in &s.runs {
        let p = phases(&r.report, &DATA);
        let sum: f64 = p.iter().sum();
        let mean = r.report.latency_us.mean;
        assert!((sum - mean).abs() < 0.02 * mean, "{}: {p:?} vs {mean}", r.series);
        assert!(p[4] > 0.0, "{}: every operation touches the data server", r.series);
        match r.series.as_str() {
            "GET histore" | "GET all-hashtable" => {
                assert_eq!((p[0], p[1], p[3]), (0.0, 0.0, 0.0), "one-sided: {p:?}")
            }
            "GET all-skiplist" => assert!(p[0] > 0.0 && p[2] > 0.0, "{p:?}"),
            put if put.starts_with("PUT") => assert!(p[3] > 0.0, "log sync: {p:?}"),
            "SCAN histore" => {
                // Scans are spread over both backups.
                let (a, b) = (r.report.phases[2].requests, r.report.phases[3].requests);
                assert!(a.abs_diff(b) * 10 <= a + b, "backups served {a} and {b}");
            }
            _ => {}
        }
    }
    s.runs.clear();
    let scale = Scale { workloads: vec!["a".into(), "e".into()], ..scale };
    let mut s = session(&scale, &PAPER, &dmindex_catalog::bench);
    body("histore", "ycsb")(&mut s).unwrap();
    assert_eq!(s.runs.len(), 3 + 2, "no YCSB E on all-hashtable");
    assert!(s.runs.iter().all(|r| r.report.clients == PEAK));
    let scans = |r: &Run| r.report.per_op.iter().any(|o| o.op == "scan");
    assert!(s.runs.iter().all(|r| scans(r) == (r.x == 1.0)), "YCSB E scans, A does not");
}

/// Both experiments run end to end at a tiny scale: every recovery run rebuilt its node
/// (the monitor's report is there), and the degraded runs crash the right node or none.
#[test]
fn recovery_and_degraded_runs_report_what_the_figures_need() {
    let scale = Scale { items: 3000, ops: 3000, peak_clients: 4, ..(PAPER.scale)() };
    let mut s = session(&scale, &PAPER, &dmindex_catalog::bench);
    body("histore", "recovery")(&mut s).unwrap();
    assert_eq!(s.runs.len(), 6);
    for r in &s.runs {
        let rec = r.report.recovery.as_ref().expect("a recovery report");
        assert!(rec.rebuild_end_ns > rec.rebuild_start_ns, "{rec:?}");
        assert_eq!(rec.node, if r.series == "primary" { PRIMARY } else { BACKUP });
        assert_eq!(r.report.index_stats.get("rebuilds"), Some(&1));
    }
    assert_eq!(s.runs[2].report.items, 12_000, "1, 2 and 4 times the scale's keys");
    s.runs.clear();
    body("histore", "timeline")(&mut s).unwrap();
    let r = &s.runs[0].report;
    let t = r.timeline.as_ref().expect("a timeline");
    assert_eq!(t.ops.iter().sum::<u64>(), r.ops, "every completion in some interval");
    assert!(r.recovery.as_ref().is_some_and(|x| x.rebuild_end_ns.is_some()));
    s.runs.clear();
    body("histore", "degraded")(&mut s).unwrap();
    assert_eq!(s.runs.len(), 9);
    for r in &s.runs {
        let crashed = r.report.recovery.as_ref().map(|x| x.node);
        let want = match r.series.as_str() {
            "normal" => None,
            "primary down" => Some(PRIMARY),
            _ => Some(BACKUP),
        };
        assert_eq!(crashed, want, "{}", r.series);
    }
}
