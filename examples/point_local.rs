//! A point index (SepHash, a hash index: no scans) on the in-process `local` transport, with
//! string keys and values of varying length, driven by several tasks (coroutines) on one thread.
//!
//!     cargo run --example point_local

use dmindex_fabric::exec::{block_on, run_tasks};
use dmindex_fabric::local::LocalTransport;
use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};
use dmindex_index::{mn_services, IndexConfig, IndexError, PointIndex};
use dmindex_sephash::SepHash;

/// Tasks interleaved on this thread; each has its own client (a client belongs to one task).
const TASKS: usize = 4;
/// Keys each task inserts.
const KEYS_PER_TASK: usize = 1_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = LocalConfig { node_size: 256 << 20, ..LocalConfig::default() };
    let services = mn_services(config.mn_cores, <SepHash as PointIndex<LocalTransport>>::SERVICES)?;
    let fabric = LocalFabric::with_services(config, services)?;

    // Keys of up to 16 bytes, values of up to 32 (SepHash stores both in blocks of their own,
    // so shorter ones are fine). `expected_items` sizes the table; it grows past it.
    let cfg = IndexConfig {
        max_key: 16,
        max_value: 32,
        expected_items: (TASKS * KEYS_PER_TASK) as u64,
        ..IndexConfig::default()
    };
    let setup = fabric.client(0)?;
    block_on(SepHash::create(&setup, &cfg, 0))?;
    let index = block_on(SepHash::open(&setup, &cfg, 0))?;

    // TASKS tasks on this thread: while one waits for a verb, the others run.
    let index = &index;
    let clients: Vec<_> = (0..TASKS).map(|_| fabric.client(0)).collect::<Result<_, _>>()?;
    let results = run_tasks(clients.iter().enumerate().map(|(t, c)| async move {
        for i in (t..TASKS * KEYS_PER_TASK).step_by(TASKS) {
            let value = format!("profile of user {i}");
            index.insert(c, format!("user:{i}").as_bytes(), value.as_bytes()).await?;
        }
        Ok::<(), IndexError>(())
    }));
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    println!("inserted {} keys from {TASKS} tasks", TASKS * KEYS_PER_TASK);

    let c = &clients[0];
    block_on(async {
        let v = index.search(c, b"user:42").await?.expect("user:42 was inserted");
        assert_eq!(v, b"profile of user 42");
        println!("search(user:42) = {:?}", String::from_utf8_lossy(&v));

        assert!(index.update(c, b"user:42", b"moved").await?);
        assert!(!index.update(c, b"user:nobody", b"x").await?, "update inserts nothing");
        assert_eq!(index.search(c, b"user:42").await?.as_deref(), Some(&b"moved"[..]));
        println!("update(user:42, moved) -> true; update(user:nobody) -> false");

        assert!(index.delete(c, b"user:43").await?);
        assert_eq!(index.search(c, b"user:43").await?, None);
        println!("delete(user:43) -> true; search(user:43) = None");

        // Every other key is still there.
        for i in (0..TASKS * KEYS_PER_TASK).filter(|&i| i != 42 && i != 43) {
            let v = index.search(c, format!("user:{i}").as_bytes()).await?;
            assert_eq!(v, Some(format!("profile of user {i}").into_bytes()), "user:{i}");
        }
        println!("the other {} keys found", TASKS * KEYS_PER_TASK - 2);

        // Limits are errors, not panics.
        let long = index.insert(c, b"a key longer than 16 bytes", b"v").await;
        println!("insert of a 26-byte key -> {}", long.expect_err("too long"));
        Ok::<(), IndexError>(())
    })?;

    println!("load factor: {:?}", block_on(index.load_factor(c))?);
    Ok(())
}
