//! The verb-semantics suite every transport must pass.
//!
//! Each function drives one or more [`Client`]s through the verb API and panics with a message
//! naming the broken rule. Transports run them from their own tests on their own executors
//! (`local` on a thread pool, `sim` under virtual time, `ucx` against real memnodes), so the same
//! rules hold everywhere.

use crate::addr::GlobalAddr;
use crate::client::{Client, MAX_DOORBELLS};
use crate::error::FabricError;
use crate::layout::{self, Superblock};
use crate::service::{ServiceId, NODE_INFO};
use crate::stats::VerbCounts;
use crate::verbs::{AtomicOp, BatchOp, Transport, MAX_BATCH};

/// Masked-CAS truth table: `(old, compare, compare_mask, swap, swap_mask, word after)`.
pub const MASKED_CAS_TABLE: &[(u64, u64, u64, u64, u64, u64)] = &[
    // CHIME lock acquire on an unlocked word: compare only the lock bit, swap everything in.
    (0x00FF, 0, 1 << 63, u64::MAX, u64::MAX, u64::MAX),
    // ... on a locked word: fails, word unchanged, old word (with the bitmap) returned.
    (u64::MAX, 0, 1 << 63, u64::MAX, u64::MAX, u64::MAX),
    // Empty compare mask always matches; empty swap mask changes nothing.
    (0x1234, 0xFFFF, 0, 0xABCD, 0xFF00, 0xAB34),
    (0x1234, 0xFFFF, 0, 0xABCD, 0, 0x1234),
    // Only the swap-mask bits are written.
    (0xAAAA_AAAA_AAAA_AAAA, 0xAA, 0xFF, 0x5555_5555_5555_5555, 0xFF00, 0xAAAA_AAAA_AAAA_55AA),
    // A difference outside the compare mask does not matter ...
    (0xF0, 0x00, 0x0F, 0x1, 0x1, 0xF1),
    // ... a difference inside it does.
    (0xF0, 0x00, 0x10, 0x1, 0x1, 0xF0),
    // Full masks behave as plain CAS.
    (7, 7, u64::MAX, 9, u64::MAX, 9),
    (7, 8, u64::MAX, 9, u64::MAX, 7),
];

fn diff(before: VerbCounts, after: VerbCounts) -> VerbCounts {
    after - before
}

/// Every verb's semantics, errors and statistics on one client. Needs 8 KiB of free heap; uses
/// root-table slot `511 - cn % 64`.
pub async fn single_client<T: Transport>(c: &Client<T>) {
    let base = c.alloc(8192, 64).await.expect("alloc scratch");
    assert!(base.is_aligned(64), "alloc must honour alignment");

    // Fresh memory is zero.
    let buf = c.read_vec(base, 8192).await.unwrap();
    assert!(buf.iter().all(|&b| b == 0), "allocated memory must be zeroed");

    // READ/WRITE at odd offsets and across cache lines return exactly what was written.
    let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
    for &(off, len) in &[(0u64, 8usize), (3, 1), (5, 70), (63, 2), (100, 300), (1000, 129)] {
        let a = base.add(off);
        c.write(a, &data[..len.min(data.len())]).await.unwrap();
        let got = c.read_vec(a, len.min(data.len())).await.unwrap();
        assert_eq!(got, &data[..len.min(data.len())], "read back {len} bytes at +{off}");
    }
    // A partial write leaves neighbouring bytes alone.
    c.write(base.add(2048), &[1; 16]).await.unwrap();
    c.write(base.add(2053), &[9; 3]).await.unwrap();
    let got = c.read_vec(base.add(2048), 16).await.unwrap();
    assert_eq!(got, [1, 1, 1, 1, 1, 9, 9, 9, 1, 1, 1, 1, 1, 1, 1, 1]);

    // Statistics are exact per verb.
    let w = base.add(4096);
    let s0 = c.counts();
    c.write(w, &5u64.to_le_bytes()).await.unwrap();
    let d = diff(s0, c.counts());
    assert_eq!(d, VerbCounts { round_trips: 1, writes: 1, bytes_written: 8, ..Default::default() });

    // CAS: success swaps, failure returns the current word and leaves it.
    let s0 = c.counts();
    assert_eq!(c.cas(w, 5, 6).await.unwrap(), 5);
    assert_eq!(c.cas(w, 5, 7).await.unwrap(), 6, "failed CAS returns current word");
    assert_eq!(c.read_word(w).await.unwrap(), 6);
    let d = diff(s0, c.counts());
    assert_eq!((d.cas, d.cas_failures, d.round_trips, d.reads), (2, 1, 3, 1), "CAS counts: {d:?}");

    // FAA wraps and returns the old word.
    c.write(w, &u64::MAX.to_le_bytes()).await.unwrap();
    assert_eq!(c.faa(w, 2).await.unwrap(), u64::MAX);
    assert_eq!(c.read_word(w).await.unwrap(), 1);

    // Masked CAS truth table.
    for (i, &(old, cmp, cmask, swap, smask, after)) in MASKED_CAS_TABLE.iter().enumerate() {
        c.write(w, &old.to_le_bytes()).await.unwrap();
        let s0 = c.counts();
        let got = c.masked_cas(w, cmp, cmask, swap, smask).await.unwrap();
        assert_eq!(got, old, "masked CAS row {i} returns the whole old word");
        assert_eq!(c.read_word(w).await.unwrap(), after, "masked CAS row {i} result");
        let d = diff(s0, c.counts());
        let failed = (old ^ cmp) & cmask != 0;
        assert_eq!(d.cas_failures, failed as u64, "masked CAS row {i} failure count");
        assert_eq!(d.masked_cas, 1);
    }

    // Doorbell batch: one round trip, verbs in order (a READ after a WRITE in the batch sees it).
    let b = base.add(5000);
    let mut r1 = [0u8; 8];
    let mut r2 = [0u8; 4];
    let s0 = c.counts();
    c.batch(&mut [
        BatchOp::Write { addr: b, data: &[4, 3, 2, 1, 0, 9, 9, 9] },
        BatchOp::Read { addr: b, buf: &mut r1 },
        BatchOp::Write { addr: b.add(64), data: &[7; 4] },
        BatchOp::Read { addr: b.add(64), buf: &mut r2 },
    ])
    .await
    .unwrap();
    assert_eq!(r1, [4, 3, 2, 1, 0, 9, 9, 9], "batched READ sees the earlier batched WRITE");
    assert_eq!(r2, [7; 4]);
    let d = diff(s0, c.counts());
    assert_eq!(
        d,
        VerbCounts {
            round_trips: 1,
            batches: 1,
            reads: 2,
            writes: 2,
            bytes_read: 12,
            bytes_written: 12,
            ..Default::default()
        },
        "batch counts"
    );

    // Atomics in a doorbell: in order with the READs and WRITEs around them, old words returned,
    // a failed comparison does not stop the verbs after it, one round trip in all.
    let a = base.add(5120);
    let mut seen = [0u8; 16];
    let mut after = [0u8; 8];
    let s0 = c.counts();
    let mut ops = [
        BatchOp::Write { addr: a, data: &40u64.to_le_bytes() },
        BatchOp::atomic(a, AtomicOp::Faa { delta: 2 }),
        BatchOp::Read { addr: a, buf: &mut seen },
        BatchOp::atomic(a, AtomicOp::Cas { expected: 7, new: 9 }),
        BatchOp::atomic(a.add(8), AtomicOp::Cas { expected: 0, new: 5 }),
        BatchOp::atomic(
            a,
            AtomicOp::MaskedCas {
                compare: 42,
                compare_mask: u64::MAX,
                swap: 1 << 40,
                swap_mask: 1 << 40,
            },
        ),
        BatchOp::Read { addr: a, buf: &mut after },
    ];
    c.batch(&mut ops).await.unwrap();
    let olds: Vec<Option<u64>> = ops.iter().map(BatchOp::old).collect();
    assert_eq!(
        olds,
        [None, Some(40), None, Some(42), Some(0), Some(42), None],
        "batched atomics see the earlier batched WRITE and each other, in order"
    );
    assert_eq!(u64::from_le_bytes(seen[..8].try_into().unwrap()), 42, "READ sees the batched FAA");
    assert_eq!(u64::from_le_bytes(seen[8..].try_into().unwrap()), 0, "READ precedes a later CAS");
    assert_eq!(u64::from_le_bytes(after), 42 | 1 << 40, "verbs after a failed CAS still run");
    let d = diff(s0, c.counts());
    assert_eq!(
        (d.round_trips, d.batches, d.reads, d.writes, d.faa, d.cas, d.masked_cas, d.cas_failures),
        (1, 1, 2, 1, 1, 2, 1, 1),
        "batched atomics are counted as atomics, in one round trip"
    );
    assert_eq!((d.bytes_read, d.bytes_written), (16 + 8 + 4 * 8, 8 + 8 + 2 * 16 + 32));
    assert_eq!(c.read_word(a.add(8)).await.unwrap(), 5);
    assert!(matches!(
        c.batch(&mut [BatchOp::atomic(a.add(4), AtomicOp::Faa { delta: 1 })]).await,
        Err(FabricError::Misaligned { required: 8, .. })
    ));

    // Zero-wait WRITE: not a round trip, ordered before later verbs to the node.
    let z = base.add(6000);
    let s0 = c.counts();
    let mut payload = [0x5Au8; 40];
    c.write_zero_wait(z, &payload).unwrap();
    payload.fill(0); // the buffer is ours again at once
    assert_eq!(
        c.read_vec(z, 40).await.unwrap(),
        [0x5A; 40],
        "zero-wait write precedes a later read"
    );
    c.flush().await.unwrap();
    let d = diff(s0, c.counts());
    assert_eq!((d.round_trips, d.writes, d.zero_wait_writes, d.bytes_written), (1, 1, 1, 40));

    // Two-sided request: node info is the superblock.
    for node in 0..c.info().nodes() {
        let sb = Superblock::decode(&c.call(node, NODE_INFO, &[]).await.unwrap()).unwrap();
        assert_eq!(sb.node, node, "node info names its node");
        assert_eq!(Some(sb.region_len), c.info().node_size(node));
    }
    assert!(matches!(
        c.call(0, ServiceId(999), &[]).await,
        Err(FabricError::UnknownService { node: 0, service: ServiceId(999) })
    ));

    // Independent verbs rung as doorbells back to back on every node and awaited together:
    // every buffer filled, every atomic's old word back, one round trip per `MAX_DOORBELLS`
    // doorbells.
    let nodes = c.info().nodes();
    let mut words = Vec::new();
    for node in 0..nodes {
        let a = c.alloc_on(node, 8 * 40, 64).await.expect("alloc_on");
        let stamp: Vec<u8> =
            (0..40u64).flat_map(|i| (u64::from(node) << 32 | i).to_le_bytes()).collect();
        c.write(a, &stamp).await.unwrap();
        words.push(a);
    }
    let w = words[0].add(8 * 39);
    c.write(w, &5u64.to_le_bytes()).await.unwrap();
    let s0 = c.counts();
    // 39 READs dealt over the nodes and an FAA of a word none of them reads.
    let mut bufs = [[0u8; 8]; 39];
    let mut ops: Vec<BatchOp<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            let node = i % usize::from(nodes);
            BatchOp::Read { addr: words[node].add(8 * i as u64), buf: b }
        })
        .collect();
    ops.push(BatchOp::atomic(w, AtomicOp::Faa { delta: 2 }));
    c.doorbells(&mut ops).await.expect("doorbells");
    let d = diff(s0, c.counts());
    let olds: Vec<u64> = ops.iter().filter_map(BatchOp::old).collect();
    assert_eq!(olds, [5], "an atomic's old word comes back");
    drop(ops);
    for (i, b) in bufs.iter().enumerate() {
        let node = (i % usize::from(nodes)) as u64;
        assert_eq!(u64::from_le_bytes(*b), node << 32 | i as u64, "doorbell READ {i}");
    }
    assert_eq!(c.read_word(w).await.unwrap(), 7, "the FAA landed");
    let per_node =
        |n: usize| (0..39).filter(|i| i % usize::from(nodes) == n).count() + usize::from(n == 0);
    let rung: usize = (0..usize::from(nodes)).map(|n| per_node(n).div_ceil(MAX_BATCH)).sum();
    assert_eq!(
        (d.round_trips, d.reads, d.faa),
        (rung.div_ceil(MAX_DOORBELLS) as u64, 39, 1),
        "doorbells: one round trip per {MAX_DOORBELLS} doorbells"
    );
    // More doorbells than one round rings: a second round trip.
    let mut many = [[0u8; 8]; MAX_DOORBELLS * MAX_BATCH + 1];
    let mut ops: Vec<BatchOp<'_>> =
        many.iter_mut().map(|b| BatchOp::Read { addr: words[0].add(8), buf: b }).collect();
    let s0 = c.counts();
    c.doorbells(&mut ops).await.expect("doorbells");
    drop(ops);
    let d = diff(s0, c.counts());
    assert_eq!((d.round_trips, d.batches, d.reads), (2, MAX_DOORBELLS as u64, many.len() as u64));
    assert!(many.iter().all(|b| u64::from_le_bytes(*b) == 1), "node 0's stamp of word 1");
    assert!(c.doorbells(&mut []).await.is_ok());
    let s0 = c.counts();
    let mut x = [0u8; 8];
    let size0 = c.info().node_size(0).unwrap();
    let mut bad = [
        BatchOp::Read { addr: words[0], buf: &mut x },
        BatchOp::Write { addr: GlobalAddr::new(0, size0), data: &[1] },
    ];
    assert!(matches!(c.doorbells(&mut bad).await, Err(FabricError::OutOfBounds { .. })));
    assert_eq!(c.counts(), s0, "a refused round is not counted, nor any of its verbs");

    // Errors, not panics, and nothing counted for a refused verb.
    let s0 = c.counts();
    let nodes = c.info().nodes();
    let size0 = c.info().node_size(0).unwrap();
    let mut one = [0u8; 1];
    assert!(matches!(
        c.read(GlobalAddr::new(nodes, 0), &mut one).await,
        Err(FabricError::UnknownNode { node, .. }) if node == nodes
    ));
    assert!(matches!(
        c.read(GlobalAddr::new(0, size0 - 4), &mut [0u8; 8]).await,
        Err(FabricError::OutOfBounds { len: 8, .. })
    ));
    assert!(matches!(
        c.write(GlobalAddr::new(0, size0), &[1]).await,
        Err(FabricError::OutOfBounds { .. })
    ));
    assert!(matches!(
        c.cas(w.add(4), 0, 1).await,
        Err(FabricError::Misaligned { required: 8, .. })
    ));
    assert!(matches!(c.faa(w.add(1), 1).await, Err(FabricError::Misaligned { .. })));
    assert!(matches!(
        c.masked_cas(GlobalAddr::new(0, size0), 0, 0, 0, 0).await,
        Err(FabricError::OutOfBounds { .. })
    ));
    assert!(matches!(c.batch(&mut []).await, Err(FabricError::EmptyBatch)));
    let mut bufs = [[0u8; 8]; MAX_BATCH + 1];
    let mut big: Vec<BatchOp<'_>> =
        bufs.iter_mut().map(|b| BatchOp::Read { addr: base, buf: b }).collect();
    assert!(matches!(c.batch(&mut big).await, Err(FabricError::BatchTooLarge { .. })));
    if nodes > 1 {
        let mut x = [0u8; 8];
        let mut y = [0u8; 8];
        let r = c
            .batch(&mut [
                BatchOp::Read { addr: GlobalAddr::new(0, layout::HEAP_START), buf: &mut x },
                BatchOp::Read { addr: GlobalAddr::new(1, layout::HEAP_START), buf: &mut y },
            ])
            .await;
        assert!(matches!(r, Err(FabricError::MixedNodesInBatch { first: 0, other: 1 })));
    }
    assert!(matches!(
        c.write_zero_wait(GlobalAddr::new(0, size0), &[1]),
        Err(FabricError::OutOfBounds { .. })
    ));
    assert!(c.alloc(0, 8).await.is_err() && c.alloc(8, 3).await.is_err());
    let nodes = c.info().nodes();
    assert!(matches!(c.alloc_on(nodes, 8, 8).await, Err(FabricError::UnknownNode { .. })));
    assert!(c.alloc_on(0, 0, 8).await.is_err());
    assert_eq!(c.counts(), s0, "refused verbs are not counted");

    // Placed allocations land on the node asked for, zeroed, aligned and apart.
    for node in 0..nodes {
        let a = c.alloc_on(node, 100, 64).await.expect("alloc_on");
        let b = c.alloc_on(node, 100, 64).await.expect("alloc_on");
        assert_eq!((a.node(), b.node()), (node, node), "alloc_on places on the node asked for");
        assert!(a.is_aligned(64) && b.is_aligned(64));
        assert!(b.offset() >= a.offset() + 100 || a.offset() >= b.offset() + 100);
        assert_eq!(c.read_word(a).await.unwrap(), 0, "fresh placed allocation is zero");
    }

    // The root table is CAS-able at its fixed place on node 0 (a slot per compute node, so that
    // clients of different CNs may run this suite at once).
    let slot = layout::root_slot(layout::ROOT_SLOTS - 1 - u32::from(c.cn()) % 64);
    let old = c.read_word(slot).await.unwrap();
    assert_eq!(c.cas(slot, old, base.raw()).await.unwrap(), old);
    assert_eq!(GlobalAddr::from_raw(c.read_word(slot).await.unwrap()), base);
    c.cas(slot, base.raw(), old).await.unwrap();
}

/// Increments the aligned word at `counter` `n` times with READ + CAS retry loops and the word
/// at `counter + 8` `n` times with FAA. Run it from many clients at once; the words must end at
/// exactly the total. Returns this client's CAS failures.
pub async fn increment<T: Transport>(c: &Client<T>, counter: GlobalAddr, n: u64) -> u64 {
    let s0 = c.counts();
    for _ in 0..n {
        let mut cur = c.read_word(counter).await.unwrap();
        loop {
            let old = c.cas(counter, cur, cur + 1).await.unwrap();
            if old == cur {
                break;
            }
            cur = old;
        }
        c.faa(counter.add(8), 1).await.unwrap();
    }
    (c.counts() - s0).cas_failures
}

/// Allocates `n` objects of `len` bytes, checks they are zeroed and aligned, stamps each with a
/// unique tag, and returns their addresses so the caller can check that no two clients' objects
/// overlap (by reading the tags back).
pub async fn allocate_and_stamp<T: Transport>(
    c: &Client<T>,
    n: usize,
    len: u64,
    tag: u64,
) -> Vec<GlobalAddr> {
    let mut out = Vec::with_capacity(n);
    let before = c.counts().bytes_allocated;
    for i in 0..n {
        let a = c.alloc(len, 64).await.unwrap();
        assert_eq!(
            c.counts().bytes_allocated - before,
            (i as u64 + 1) * len,
            "allocations counted"
        );
        assert!(a.is_aligned(64));
        assert_eq!(c.read_word(a).await.unwrap(), 0, "fresh allocation is zero");
        c.write(a, &(tag << 32 | i as u64).to_le_bytes()).await.unwrap();
        out.push(a);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::AtomicOp;

    #[test]
    fn truth_table_rows_agree_with_apply() {
        for &(old, c, cm, s, sm, after) in MASKED_CAS_TABLE {
            let op = AtomicOp::MaskedCas { compare: c, compare_mask: cm, swap: s, swap_mask: sm };
            assert_eq!(op.apply(old).unwrap_or(old), after);
        }
    }
}
