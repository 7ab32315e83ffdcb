//! Fuzzing what users type and feed: random argument vectors through the command line's parser
//! and every check a command makes before it runs, and random bytes through the trace reader.
//! Errors are fine; a panic, an abort or a hang is a defect. Bounded (a few thousand cases),
//! so it runs on every `cargo test`.

use clap::FromArgMatches;
use proptest::prelude::*;

use crate::{
    bench_cmd, experiment_cmd, fabric_bench, memnode_cmd, perf_cmd, sim_bench, Cli, Command,
};

/// Flags of every command (each command refuses the others').
const FLAGS: &[&str] = &[
    "--index",
    "--transport",
    "--memnode",
    "--token-file",
    "--attach",
    "--fast-load",
    "--preset",
    "--set",
    "--mns",
    "--mn-gb",
    "--cns",
    "--clients",
    "--coroutines",
    "--items",
    "--ops",
    "--workload",
    "--mix",
    "--distribution",
    "--zipf-theta",
    "--scan-len",
    "--trace",
    "--load-trace",
    "--trace-warm",
    "--key-size",
    "--ycsb-keys",
    "--value-size",
    "--ordered",
    "--folded",
    "--cache-mb",
    "--option",
    "--seed",
    "--json",
    "--mn-crash-us",
    "--mn-crash-node",
    "--mn-restart-us",
    "--timeline-us",
    "--spawn-memnodes",
    "--watch-node",
    "--ucx-timeout-ms",
    "--check",
    "--seeds",
    "--first-seed",
    "--keys",
    "--long-keys",
    "--keys-per-prefix",
    "--long-key-bytes",
    "--no-crashes",
    "--crash-every",
    "--no-delays",
    "--stall-us",
    "--threads",
    "--tasks",
    "--yield-per-verb",
    "--verbs",
    "--bytes",
    "--read-pct",
    "--delays",
    "--out",
    "--paper",
    "--peak-clients",
    "--workloads",
    "--traces",
];

/// Values that have broken something somewhere: bounds, overflow, nonsense, other commands'.
const VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "7",
    "64",
    "1024",
    "65535",
    "65536",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1e-300",
    "1e300",
    "NaN",
    "inf",
    "0.5",
    "",
    " ",
    "a",
    "=",
    "chime",
    "sherman",
    "histore",
    "ref",
    "sephash",
    "race",
    "smart",
    "dolphin",
    "marlin",
    "sim",
    "local",
    "ucx",
    "c",
    "e",
    "load",
    "zipfian",
    "latest",
    "read=1",
    "scan=1,read=0",
    "read=0.5,update=0.5",
    "span=64",
    "h=2",
    "hotspot_mb=17592186044416",
    "link_gbps=0",
    "one_way_ns=18446744073709551615",
    "atomic_mops=1e-12",
    "mn_cores=0",
    "/dev/zero",
    "/dev/null",
    "/nonexistent",
    "127.0.0.1:1",
    "chime/ycsb",
    "histore/all",
    "1,2",
    "0,0",
    "a,load",
    "0.4:0.8",
    "0:1",
    "1:0.5",
    "0.5:NaN",
];

const COMMANDS: &[&str] =
    &["bench", "check", "fabric-bench", "sim-bench", "experiment", "perf", "memnode"];

/// A command's own flags, as its parser declares them.
fn flags_of(cmd: &str) -> Vec<String> {
    let c = crate::command();
    let sub = c.find_subcommand(cmd).expect("a command");
    sub.get_arguments().filter_map(|a| a.get_long().map(|l| format!("--{l}"))).collect()
}

fn argv() -> impl Strategy<Value = Vec<String>> {
    proptest::sample::select(COMMANDS).prop_flat_map(|cmd| {
        let own = flags_of(cmd);
        let word = prop_oneof![
            6 => proptest::sample::select(own).prop_map(String::from),
            1 => proptest::sample::select(FLAGS).prop_map(String::from),
            6 => proptest::sample::select(VALUES).prop_map(String::from),
            1 => "[a-z0-9=,.:/_-]{0,12}",
            1 => (1usize..20_000).prop_map(|n| "x".repeat(n)),
        ];
        proptest::collection::vec(word, 0..12).prop_map(move |rest| {
            let mut v = vec!["dmindex".to_string(), cmd.to_string()];
            v.extend(rest);
            v
        })
    })
}

/// Parses `argv` and runs every check its command makes before it would run.
fn plan(argv: &[String]) {
    let Ok(matches) = crate::command().try_get_matches_from(argv) else { return };
    let Ok(cli) = Cli::from_arg_matches(&matches) else { return };
    match cli.command {
        Command::Bench(cfg) => drop(dmindex_bench::check_config(&cfg)),
        Command::Check(a) => drop(bench_cmd::check_plan(&a)),
        Command::FabricBench(a) => drop(fabric_bench::validate(&a)),
        Command::SimBench(a) => drop(sim_bench::validate(&a)),
        Command::Experiment(a) => drop(experiment_cmd::plan(&a)),
        Command::Perf(a) => drop(perf_cmd::validate(&a)),
        Command::Memnode(a) => drop(memnode_cmd::validate(&a)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn no_argument_vector_panics(v in argv()) {
        plan(&v);
    }

    #[test]
    fn no_trace_panics(lines in proptest::collection::vec(trace_line(), 0..20), binary in any::<bool>()) {
        let text = lines.join("\n");
        for format in [
            dmindex_ycsb::KeyFormat::new(8, false).unwrap(),
            dmindex_ycsb::KeyFormat::new(24, false).unwrap(),
            dmindex_ycsb::KeyFormat::ycsb(false),
        ] {
            let _ = dmindex_ycsb::trace::parse(&text, std::path::Path::new("t"), format);
            let _ = dmindex_ycsb::trace::parse_load(&text, std::path::Path::new("t"), format);
        }
        if binary {
            let p = std::env::temp_dir().join(format!("dmindex-fuzz-{}", std::process::id()));
            let mut bytes = text.into_bytes();
            bytes.push(0xff);
            std::fs::write(&p, &bytes).unwrap();
            let f = dmindex_ycsb::KeyFormat::new(8, false).unwrap();
            let _ = dmindex_ycsb::trace::read(&p, f);
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// A trace line: mostly well-formed words in random order, sometimes anything.
fn trace_line() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        proptest::sample::select(
            &[
                "READ",
                "INSERT",
                "UPDATE",
                "SCAN",
                "DELETE",
                "RMW",
                "usertable",
                "user1",
                "user",
                "18446744073709551615",
                "18446744073709551616",
                "0",
                "-5",
                "[",
                "]",
                "field0=x",
                "#",
                "get",
                "set",
                "1,k,8,8,1,get,0",
                "0,key,0,100,1,set,0",
            ][..]
        )
        .prop_map(String::from),
        "[ -~]{0,30}",
        any::<String>(),
    ];
    proptest::collection::vec(word, 0..6).prop_map(|w| w.join(" "))
}
