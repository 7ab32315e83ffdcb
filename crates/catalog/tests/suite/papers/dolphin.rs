use dmindex_bench::config::Deal;
use dmindex_bench::experiment::Scale;
use dmindex_bench::{BenchConfig, BenchReport};
use dmindex_catalog::papers::dolphin::*;

use super::{body, runs_nothing, session};

#[test]
fn runs_are_placed_as_the_paper_places_them() {
    let scale = (PAPER.scale)();
    let s = session(&scale, &PAPER, &runs_nothing);
    let c = base(&s, "dolphin", "a");
    assert_eq!(
        (c.cluster.cns, c.cluster.clients, c.cluster.memory_nodes(), c.keys.folded),
        (4, 18, 4, true)
    );
    assert!(!c.keys.ordered);
    assert!((c.cluster.cache_mb - 2000.0 * 500_000.0 / 512e6).abs() < 1e-9);
    let r = scans(&s, "smart", 0.5);
    assert_eq!(
        (r.workload.scan_len, r.workload.mix.as_deref()),
        (Some(100), Some("scan=0.5,insert=0.5"))
    );
}

#[test]
fn twitter_replays_each_cluster_after_loading_its_keys() {
    let dir = std::env::temp_dir().join(format!("dmindex-twitter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut scale = (PAPER.scale)();
    let seen = std::cell::RefCell::new(Vec::new());
    let runner = |c: &BenchConfig| -> anyhow::Result<BenchReport> {
        // Round-robin: dealt by key, the hot keys' requests would bound the run.
        assert_eq!(c.workload.deal, Deal::RoundRobin);
        seen.borrow_mut().push((
            c.index.name.clone(),
            c.workload.trace.clone(),
            c.workload.trace_warm,
            c.keys.folded,
        ));
        anyhow::bail!("not run")
    };
    // No directory: the typed error that `all` skips on.
    let mut s = session(&scale, &PAPER, &runner);
    let e = body("dolphin", "twitter")(&mut s).unwrap_err();
    assert!(e.downcast_ref::<dmindex_bench::experiment::NeedsTraces>().is_some(), "{e}");
    assert!(e.to_string().contains("--traces DIR"), "{e}");
    // A directory with cluster8 only (cluster9 still compressed): named as missing.
    std::fs::write(dir.join("cluster8.sort"), "0,k,1,1,1,set,0\n").unwrap();
    std::fs::write(dir.join("cluster9.sort.zst"), "").unwrap();
    std::fs::write(dir.join("cluster90"), "0,k,1,1,1,get,0\n").unwrap();
    scale.traces = Some(dir.clone());
    let mut s = session(&scale, &PAPER, &runner);
    let e = body("dolphin", "twitter")(&mut s).unwrap_err().to_string();
    assert!(e.contains("no decompressed file named cluster9"), "{e}");
    std::fs::write(dir.join("cluster9.csv"), "0,k,1,1,1,get,0\n").unwrap();
    let mut s = session(&scale, &PAPER, &runner);
    assert!(format!("{:#}", body("dolphin", "twitter")(&mut s).unwrap_err()).contains("not run"));
    let first = seen.borrow().last().cloned().unwrap();
    assert_eq!(first, ("dolphin".into(), Some(dir.join("cluster8.sort")), true, true));
    let _ = std::fs::remove_dir_all(&dir);
}
#[test]
fn twitter_standin_replays_a_synthetic_trace_of_each_cluster() {
    let scale = Scale { items: 2_000, ops: 3_000, ..(PAPER.scale)() };
    let seen = std::cell::RefCell::new(Vec::new());
    let runner = |c: &BenchConfig| -> anyhow::Result<BenchReport> {
        let file = c.workload.trace.clone().expect("a trace");
        let text = std::fs::read_to_string(&file)?;
        // Every request line plus the header comment.
        assert_eq!(text.lines().count(), 3_001, "{}", file.display());
        let ops = dmindex_ycsb::trace::read(
            &file,
            dmindex_ycsb::KeyFormat::new(8, false).map_err(anyhow::Error::msg)?,
        )?;
        let reads = ops.iter().filter(|o| o.kind == dmindex_ycsb::OpKind::Read).count();
        assert_eq!(c.workload.deal, Deal::RoundRobin);
        seen.borrow_mut().push((c.index.name.clone(), c.workload.trace_warm, reads, file));
        anyhow::bail!("not run")
    };
    let mut s = session(&scale, &PAPER, &runner);
    assert!(format!("{:#}", body("dolphin", "twitter-standin")(&mut s).unwrap_err())
        .contains("not run"));
    let (index, warm, reads, file) = seen.borrow()[0].clone();
    assert_eq!((index.as_str(), warm), ("dolphin", true));
    // cluster8's published mix: half gets.
    assert!((1_350..1_650).contains(&reads), "{reads} reads of 3 000");
    assert!(!file.exists(), "the stand-ins are removed after the runs");
}
