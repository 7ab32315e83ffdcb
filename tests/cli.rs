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
