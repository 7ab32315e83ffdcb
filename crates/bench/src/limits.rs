//! What one run may ask of this machine: bounds on the size and count flags, checked before
//! anything is allocated, so that an absurd value is refused with a message naming it instead
//! of aborting on an allocation, panicking or waking the kernel's OOM killer.

use anyhow::bail;

/// OS threads a run may start (client threads on `local` and `ucx`, `fabric-bench` threads).
pub const MAX_THREADS: usize = 1024;
/// Client tasks (coroutines) a run may drive in all.
pub const MAX_TASKS: usize = 1 << 16;
/// Compute nodes of a simulated or in-process cluster.
pub const MAX_CNS: u16 = 1024;
/// Memory nodes of a simulated or in-process cluster.
pub const MAX_MNS: u16 = 1024;

pub use crate::machine_bytes;

/// Refuses `count` of `what` above `max` (or zero).
pub fn count(what: &str, count: usize, max: usize) -> anyhow::Result<()> {
    if count == 0 || count > max {
        bail!("{what} {count} is not in 1..={max}");
    }
    Ok(())
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
    }
}
