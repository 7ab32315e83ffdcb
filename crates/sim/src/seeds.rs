//! Running a property over many seeds, and replaying the one that failed.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Environment variable that narrows [`check_seeds`] to one seed.
pub const SEED_ENV: &str = "DMINDEX_SEED";

/// The seed named by `DMINDEX_SEED`, if set and valid.
pub fn seed_override() -> Option<u64> {
    std::env::var(SEED_ENV).ok().and_then(|s| s.trim().parse().ok())
}

/// Runs `property(seed)` for every seed in `seeds` (or only `DMINDEX_SEED` when set). A seed
/// fails when the property returns an error or panics; the first failure panics with the seed
/// and the command that replays it. Under the test harness that command names the running test
/// (its thread's name), which `name`, a label, need not match; elsewhere it names `name`.
pub fn check_seeds(name: &str, seeds: Range<u64>, property: impl Fn(u64) -> Result<(), String>) {
    let list: Vec<u64> = match seed_override() {
        Some(s) => vec![s],
        None => seeds.collect(),
    };
    for seed in list {
        let r = catch_unwind(AssertUnwindSafe(|| property(seed)));
        let msg = match r {
            Ok(Ok(())) => continue,
            Ok(Err(m)) => m,
            Err(p) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        };
        let thread = std::thread::current();
        let test = thread.name().filter(|n| *n != "main").unwrap_or(name);
        panic!(
            "{name}: seed {seed} failed: {msg}\nreplay with: {SEED_ENV}={seed} cargo test {test}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_names_the_seed() {
        if seed_override().is_some() {
            return; // the property below depends on running every seed
        }
        let r = catch_unwind(|| {
            check_seeds("demo", 0..10, |s| if s == 7 { Err("boom".into()) } else { Ok(()) })
        });
        let p = r.unwrap_err();
        let msg = p.downcast_ref::<String>().unwrap();
        assert!(msg.contains("seed 7 failed: boom") && msg.contains("DMINDEX_SEED=7"), "{msg}");
        assert!(msg.contains("cargo test seeds::tests::failure_names_the_seed"), "{msg}");
        let r = catch_unwind(|| {
            check_seeds("demo", 0..3, |s| {
                assert!(s < 2, "too big");
                Ok(())
            })
        });
        assert!(r
            .unwrap_err()
            .downcast_ref::<String>()
            .unwrap()
            .contains("seed 2 failed: too big"));
    }
}
