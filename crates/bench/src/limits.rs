//! What a run may ask of this machine: the one set of bounds on the size and count flags of
//! every command (`bench`, `check`, `experiment`, `perf`, `sim-bench`, `fabric-bench`,
//! `memnode`), checked before anything is allocated or run, so that an absurd value is refused
//! with a message naming it (exit 2) instead of aborting on an allocation, filling a pool,
//! running for ever or waking the kernel's OOM killer.

use anyhow::bail;

/// OS threads a run may start (client threads on `local` and `ucx`, `fabric-bench` threads,
/// a memnode's cores).
pub const MAX_THREADS: usize = 1024;
/// Client tasks (coroutines) a run may drive in all.
pub const MAX_TASKS: usize = 1 << 16;
/// Compute nodes of a simulated or in-process cluster.
pub const MAX_CNS: u16 = 1024;
/// Memory nodes of a simulated or in-process cluster.
pub const MAX_MNS: u16 = 1024;
/// Items one load phase may insert, operations one run phase may run, verbs one `sim-bench`
/// run or `fabric-bench` row may issue in all: 2^40, more than a day at ten million a second.
pub const MAX_OPS: u64 = 1 << 40;
/// Bytes of a value.
pub const MAX_VALUE_SIZE: usize = 4096;
/// `check`: client tasks per seed.
pub const MAX_CHECK_CLIENTS: usize = 4096;
/// `check`: operations per client.
pub const MAX_CHECK_OPS: u64 = 1 << 20;
/// `check`: operations per seed in all (clients × operations): each is recorded in memory and
/// the history checked at the end of the seed.
pub const MAX_CHECK_HISTORY: u64 = 1 << 22;

pub use crate::machine_bytes;

/// Refuses `count` of `what` above `max` (or zero).
pub fn count(what: &str, count: usize, max: usize) -> anyhow::Result<()> {
    count_u64(what, count as u64, max as u64)
}

/// [`count`] for 64-bit counts.
pub fn count_u64(what: &str, count: u64, max: u64) -> anyhow::Result<()> {
    if count == 0 || count > max {
        bail!("{what} {count} is not in 1..={max}");
    }
    Ok(())
}

/// Refuses `count` of `what` above `max` (zero is fine: a phase with nothing to do).
pub fn at_most(what: &str, count: u64, max: u64) -> anyhow::Result<()> {
    if count > max {
        bail!("{what} {count} is more than {max}");
    }
    Ok(())
}

/// Refuses `per_task` of `what` for each of `tasks` tasks when they come to more than `max`
/// in all (or `per_task` is zero).
pub fn total(what: &str, per_task: u64, tasks: u64, max: u64) -> anyhow::Result<()> {
    let all = per_task.saturating_mul(tasks);
    if per_task == 0 || all > max {
        bail!("{what} {per_task} for each of {tasks} client tasks is not in 1..={max} in all");
    }
    Ok(())
}

/// Refuses `count` items (`what`: the flag) of `pair_bytes` of key and value each when their
/// keys and values alone would not fit in `memory` bytes of memory nodes (`memory_is`: what
/// sets it), whatever the index.
pub fn pairs_fit(
    what: &str,
    count: u64,
    pair_bytes: u64,
    memory: u64,
    memory_is: &str,
) -> anyhow::Result<()> {
    let need = count.saturating_mul(pair_bytes);
    if need > memory {
        bail!(
            "{what} {count}: {count} keys and values of {pair_bytes} bytes take {}, more than \
             the {} of memory nodes {memory_is}",
            bytes(need),
            bytes(memory)
        );
    }
    Ok(())
}

/// `b` bytes in the largest binary unit of which there is at least one.
fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{b} bytes"),
    }
}

/// Refuses memory nodes of `gib` GiB each that this machine could not hold (each is committed
/// lazily, but one larger than the machine's memory cannot be backed).
pub fn node_gib(flag: &str, gib: u64) -> anyhow::Result<u64> {
    let bytes = gib.checked_mul(1 << 30).filter(|&b| b > 0);
    let Some(bytes) = bytes else { bail!("{flag} {gib} is not a positive size in GiB") };
    if let Some(machine) = machine_bytes() {
        if bytes > machine {
            bail!(
                "{flag} {gib}: a memory node of {gib} GiB is more than this machine's {} GiB of \
                 memory (memory nodes are committed lazily, but each must fit)",
                machine >> 30
            );
        }
    }
    Ok(bytes)
}

/// Refuses a run of `threads` OS threads of `tasks` tasks each.
pub fn threads_and_tasks(threads: usize, tasks_per_thread: usize) -> anyhow::Result<()> {
    count("client threads", threads, MAX_THREADS)?;
    let tasks = threads.saturating_mul(tasks_per_thread);
    if tasks_per_thread == 0 || tasks > MAX_TASKS {
        bail!(
            "{threads} threads × {tasks_per_thread} tasks is {tasks} client tasks, more than the \
             {MAX_TASKS} one run may drive"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_and_counts_are_refused_by_name() {
        assert!(node_gib("--mn-gb", 1).is_ok());
        let e = node_gib("--mn-gb", 100_000).unwrap_err().to_string();
        assert!(e.contains("more than this machine's"), "{e}");
        assert!(node_gib("--mn-gb", u64::MAX).unwrap_err().to_string().contains("not a positive"));
        assert!(node_gib("--mn-gb", 0).is_err());
        assert!(threads_and_tasks(2, 4).is_ok());
        let e = threads_and_tasks(2, 100_000).unwrap_err().to_string();
        assert!(e.contains("200000 client tasks"), "{e}");
        assert!(threads_and_tasks(70_000, 1).unwrap_err().to_string().contains("1..=1024"));
        assert!(threads_and_tasks(usize::MAX, 2).is_err());
        assert!(count("--cns", 65535, MAX_CNS as usize).unwrap_err().to_string().contains("65535"));
        assert!(count_u64("--ops", MAX_OPS, MAX_OPS).is_ok());
        let e = count_u64("--ops", u64::MAX, MAX_OPS).unwrap_err().to_string();
        assert_eq!(e, "--ops 18446744073709551615 is not in 1..=1099511627776");
        assert!(at_most("--items", 0, 5).is_ok() && at_most("--items", 6, 5).is_err());
        assert!(total("--verbs", 2, 3, 6).is_ok());
        assert!(total("--verbs", 2, 3, 5).is_err());
        let e = total("--verbs", u64::MAX, 640, MAX_OPS).unwrap_err().to_string();
        assert!(e.contains("--verbs 18446744073709551615 for each of 640"), "{e}");
        assert!(pairs_fit("--items", 4, 16, 64, "(x)").is_ok());
        let e = pairs_fit("--items", u64::MAX, 16, 4 << 30, "(--mns × --mn-gb)").unwrap_err();
        let e = e.to_string();
        assert!(e.contains("take 17179869184.0 GiB, more than the 4.0 GiB"), "{e}");
    }
}
