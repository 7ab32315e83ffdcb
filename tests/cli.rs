//! The `dmindex` binary: commands run, bad input is refused with exit code 2.

use std::process::Command;

fn dmindex(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dmindex")).args(args).output().expect("run dmindex")
}

#[test]
fn fabric_bench_prints_json_rows() {
    let out = dmindex(&["fabric-bench", "--ops", "2000", "--threads", "1,2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 16);
    for r in rows {
        assert_eq!(r["verbs"].as_u64().unwrap(), 2000 * r["threads"].as_u64().unwrap());
        assert!(r["ns_per_verb"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let out = dmindex(&["fabric-bench", "--threads", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be positive"));
    let out = dmindex(&["fabric-bench", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    let out = dmindex(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sim_bench_replays_by_seed_and_reports_json() {
    let run = |seed: &str| {
        let out = dmindex(&[
            "sim-bench",
            "--cns",
            "2",
            "--clients",
            "4",
            "--verbs",
            "50",
            "--seed",
            seed,
            "--delays",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (a, b, c) = (run("5"), run("5"), run("6"));
    assert_eq!(a["trace_hash"], b["trace_hash"], "same seed, same trace");
    assert_eq!(a["report"], b["report"]);
    assert_ne!(a["trace_hash"], c["trace_hash"]);
    assert_eq!(a["verbs"], 400);
    assert!(a["report"]["latency_p99_ns"].as_u64().unwrap() > 0);
    assert_eq!(a["report"]["nics"].as_array().unwrap().len(), 3);
}

#[test]
fn sim_bench_refuses_bad_fabric_settings() {
    let out = dmindex(&["sim-bench", "--preset", "warp-drive"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown fabric preset 'warp-drive'"));
    let out = dmindex(&["sim-bench", "--set", "link_gbps=-3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("link_gbps"));
}
