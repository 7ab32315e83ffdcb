//! Doorbell batches: READs, WRITEs and atomics posted together to one memory node, one round trip.
//!
//! # Posting
//!
//! [`post`] issues a sequence of verbs, in order, as few round trips as the fabric allows
//! ([`post_iter`] when they are built on the fly):
//!
//! ```text
//! one verb                      -> that verb alone (a READ or a WRITE, not a batch)
//! several, one memory node      -> one doorbell batch
//! several, more than one node   -> one verb after another, each awaited, in order
//! ```
//!
//! [`post_per_node`] is for independent verbs spread over memory nodes (a scan's items or
//! leaves): per node, doorbells of at most [`MAX_BATCH`] verbs, all rung before any is awaited
//! (one round trip for up to [`MAX_DOORBELLS`] of them); [`read_per_node`] does the same for
//! READs into one buffer without a vector of verbs.
//!
//! The shapes the designs use: several ranges of one node READ at once (a neighbourhood that
//! wraps around, a header with it), several whole nodes READ at once (a scan), and the pieces a
//! writer changed WRITTEN in order with the unlocking lock word last (a split writes the new
//! node, then the old one whose image unlocks it).
//!
//! # Ordering
//!
//! The verbs of a batch execute in order, and so do verbs awaited one by one: a WRITE is
//! visible before any later one is. So the last WRITE may publish (or unlock, see
//! [`crate::lock`]) what the earlier ones wrote.

use dmindex_fabric::client::MAX_DOORBELLS;
use dmindex_fabric::verbs::MAX_BATCH;
use dmindex_fabric::{BatchOp, Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use smallvec::SmallVec;

/// Posts `ops` in order: one verb alone, several to one memory node as one doorbell batch,
/// otherwise one verb at a time.
pub async fn post<T: Transport>(c: &Client<T>, ops: &mut [BatchOp<'_>]) -> IndexResult<()> {
    match ops {
        [] => {}
        [op] => one(c, op).await?,
        [first, rest @ ..] if rest.iter().all(|op| op.addr().node() == first.addr().node()) => {
            c.batch(ops).await?
        }
        _ => {
            for op in ops {
                one(c, op).await?;
            }
        }
    }
    Ok(())
}

/// Posts independent `ops` spread over memory nodes: grouped by node (the slice is reordered,
/// stably, each op keeping its buffer), each node's ops in doorbells of at most [`MAX_BATCH`],
/// every doorbell rung before any is awaited ([`Client::doorbells`]): one round trip for up to
/// [`MAX_DOORBELLS`] doorbells.
pub async fn post_per_node<T: Transport>(
    c: &Client<T>,
    ops: &mut [BatchOp<'_>],
) -> IndexResult<()> {
    c.doorbells(ops).await?;
    Ok(())
}

/// Most READs [`read_per_node`] rings in one round trip: [`MAX_DOORBELLS`] doorbells of
/// [`MAX_BATCH`] if they fall on one node (gathered on the stack, so a round allocates nothing).
pub const ROUND_READS: usize = MAX_DOORBELLS * MAX_BATCH;

/// READs pieces laid end to end in `buf`, each of the length `pieces` gives with its address, as
/// [`post_per_node`] would (doorbells of at most [`MAX_BATCH`] per memory node, rung together),
/// but the verbs are gathered on the stack, [`ROUND_READS`] at a time: nothing is allocated (a
/// scan's items).
pub async fn read_per_node<T: Transport>(
    c: &Client<T>,
    pieces: &[(GlobalAddr, usize)],
    buf: &mut [u8],
) -> IndexResult<()> {
    let mut rest = buf;
    for round in pieces.chunks(ROUND_READS) {
        let mut ops = SmallVec::<[BatchOp<'_>; ROUND_READS]>::new();
        for &(addr, len) in round {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            ops.push(BatchOp::Read { addr, buf: piece });
        }
        c.doorbells(&mut ops).await?;
    }
    Ok(())
}

/// [`post`] for verbs built on the fly: one verb is posted as it comes, several are gathered
/// first (the batch needs them side by side), on the stack up to [`MAX_BATCH`] of them (a
/// scan's leaves: no allocation per doorbell).
pub async fn post_iter<'a, T: Transport>(
    c: &Client<T>,
    ops: impl IntoIterator<Item = BatchOp<'a>>,
) -> IndexResult<()> {
    let mut ops = ops.into_iter();
    let Some(first) = ops.next() else { return Ok(()) };
    let Some(second) = ops.next() else { return post(c, &mut [first]).await };
    let mut all = SmallVec::<[BatchOp<'a>; MAX_BATCH]>::new();
    all.push(first);
    all.push(second);
    all.extend(ops);
    post(c, &mut all).await
}

/// One verb on its own.
async fn one<T: Transport>(c: &Client<T>, op: &mut BatchOp<'_>) -> IndexResult<()> {
    match op {
        BatchOp::Read { addr, buf } => c.read(*addr, buf).await?,
        BatchOp::Write { addr, data } => c.write(*addr, data).await?,
        BatchOp::Atomic { addr, op, old } => *old = c.atomic(*addr, *op).await?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;

    #[test]
    fn one_verb_one_batch_or_one_at_a_time() {
        let f =
            LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let a = c.alloc_on(0, 256, 64).await.unwrap();
            let b = c.alloc_on(1, 256, 64).await.unwrap();
            let counts = || {
                let n = c.counts();
                (n.round_trips, n.batches, n.reads, n.writes)
            };
            let before = counts();
            post(&c, &mut [BatchOp::Write { addr: a, data: &[1; 8] }]).await.unwrap();
            let after = counts();
            assert_eq!((after.0 - before.0, after.1 - before.1, after.3 - before.3), (1, 0, 1));
            let before = counts();
            let (mut x, mut y) = ([0u8; 8], [0u8; 8]);
            post(
                &c,
                &mut [
                    BatchOp::Read { addr: a, buf: &mut x },
                    BatchOp::Read { addr: a.add(64), buf: &mut y },
                ],
            )
            .await
            .unwrap();
            let after = counts();
            assert_eq!((after.0 - before.0, after.1 - before.1, after.2 - before.2), (1, 1, 2));
            assert_eq!(x, [1; 8]);
            let before = counts();
            let ops = [(b, [2u8; 8]), (a, [3u8; 8])];
            post_iter(&c, ops.iter().map(|(addr, d)| BatchOp::Write { addr: *addr, data: d }))
                .await
                .unwrap();
            let after = counts();
            assert_eq!((after.0 - before.0, after.1 - before.1, after.3 - before.3), (2, 0, 2));
            assert_eq!(
                (c.read_word(a).await.unwrap(), c.read_word(b).await.unwrap()),
                (u64::from_le_bytes([3; 8]), u64::from_le_bytes([2; 8]))
            );
            post_iter(&c, std::iter::empty::<BatchOp<'_>>()).await.unwrap();
            post(&c, &mut []).await.unwrap();
        }]);
    }

    /// Verbs over two nodes, interleaved: each node's in doorbells of at most `MAX_BATCH`, rung
    /// together, every buffer filled from its own address.
    #[test]
    fn per_node_doorbells_of_at_most_max_batch() {
        let f =
            LocalFabric::new(LocalConfig { memory_nodes: 2, ..LocalConfig::default() }).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let base = [
                c.alloc_on(0, 64 * 23, 64).await.unwrap(),
                c.alloc_on(1, 64 * 3, 64).await.unwrap(),
            ];
            let addrs: Vec<_> = (0..23u64)
                .map(|i| if i % 8 == 3 { base[1].add(i / 8 * 64) } else { base[0].add(i * 64) })
                .collect();
            for (i, a) in addrs.iter().enumerate() {
                c.write(*a, &[i as u8; 8]).await.unwrap();
            }
            let mut bufs = vec![[0u8; 8]; addrs.len()];
            let mut ops: Vec<BatchOp<'_>> = addrs
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&addr, buf)| BatchOp::Read { addr, buf })
                .collect();
            let rt = c.counts().round_trips;
            post_per_node(&c, &mut ops).await.unwrap();
            drop(ops);
            assert_eq!(
                c.counts().round_trips - rt,
                1,
                "20 on node 0 in two doorbells, 3 on node 1 in one, rung together"
            );
            for (i, b) in bufs.iter().enumerate() {
                assert_eq!(*b, [i as u8; 8], "read {i}");
            }
            // The same READs of pieces of one buffer (of 1 to 8 bytes each), without verbs.
            let pieces: Vec<_> = addrs.iter().enumerate().map(|(i, &a)| (a, 1 + i % 8)).collect();
            let mut buf = vec![0u8; pieces.iter().map(|p| p.1).sum()];
            let (rt, batches) = (c.counts().round_trips, c.counts().batches);
            read_per_node(&c, &pieces, &mut buf).await.unwrap();
            let n = c.counts();
            assert_eq!((n.round_trips - rt, n.batches - batches), (1, 3));
            let mut at = 0;
            for (i, &(_, len)) in pieces.iter().enumerate() {
                assert_eq!(buf[at..at + len], vec![i as u8; len], "piece {i}");
                at += len;
            }
            read_per_node(&c, &[], &mut []).await.unwrap();
        }]);
    }
}
