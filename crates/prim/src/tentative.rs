//! One committed entry per key: the rule by which an insert of an absent key commits the
//! *tentative* entry it placed ([`crate::kv_slot`]'s `T` bit), shared by the hash tables whose
//! inserts are lock-free CASes into any empty slot of a key's buckets (RACE, CLevel).
//!
//! Two inserts of one absent key would both succeed with plain CASes. So an insert places its
//! entry tentative (no value: readers skip it), re-reads the key's buckets, and calls [`settle`]
//! with the key's entries that re-read shows:
//!
//! * an entry of the key is frozen: a mover (a split, a rehash) has it; wait for the move;
//! * another *committed* entry: the key is present. Withdraw ours (CAS to 0) and start again,
//!   which upserts that entry;
//! * a *lower* tentative entry (by slot address): its insert goes first; re-read until it
//!   commits or goes. One unchanged for [`PATIENCE`] re-reads is presumed to belong to a
//!   stopped client and is aborted (CAS to 0; if its client was only slow, its commit fails
//!   and it starts again);
//! * *higher* tentative entries: abort them (a failed abort means it changed: re-read);
//! * then commit: CAS ours from tentative to committed. The insert takes effect there.
//!
//! Every client orders a key's slots the same way, by address. Two inserts of one absent key
//! that both commit would need each one's deciding re-read to miss the other's entry. The one that placed later re-read
//! every line after both were placed, so it saw the other's entry unless that one was already
//! withdrawn or aborted, and then withdrew, waited or aborted it; a CAS decides every abort
//! against a commit. So committed entries of a key never overlap in time, and a table's readers
//! and writers rely on that (each table's `ops` gives what else its argument needs: headers,
//! contexts).

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;

use crate::kv_slot::{is_frozen, is_tentative, TENTATIVE};

/// Re-reads an insert waits on an unchanged lower tentative entry before aborting it.
pub const PATIENCE: u32 = 64;

/// An entry of the key seen in a re-read: where, and the word there.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub addr: GlobalAddr,
    pub word: u64,
}

/// What a re-read after placing our tentative entry decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Committed: the insert is done.
    Committed,
    /// Re-read and decide again.
    Wait,
    /// Ours is withdrawn (the key is present): start the insert again.
    Restart,
    /// A mover has frozen an entry of the key: wait for the move, then re-read.
    Moving,
}

/// The lower tentative entry an insert is waiting on, and for how many re-reads.
#[derive(Debug, Default)]
pub struct Waiting {
    word: u64,
    reads: u32,
}

/// A decision and the tentative entries of others it aborted on the way.
#[derive(Debug)]
pub struct Settled {
    pub decision: Settle,
    pub aborted: u64,
}

/// One decision after a re-read that shows our tentative entry at `ours` (its `word` the
/// committed word, without the tentative bit) among `copies`, every entry of the key the re-read
/// shows (ours included). `waiting` carries over between re-reads of one insert.
pub async fn settle<T: Transport>(
    c: &Client<T>,
    copies: &[Seen],
    ours: Seen,
    waiting: &mut Waiting,
) -> IndexResult<Settled> {
    let decided = |decision| Ok(Settled { decision, aborted: 0 });
    if copies.iter().any(|x| is_frozen(x.word)) {
        return decided(Settle::Moving);
    }
    let tentative = ours.word | TENTATIVE;
    let others = || copies.iter().filter(|x| x.addr != ours.addr);
    if others().any(|x| !is_tentative(x.word)) {
        // The key is present: withdraw ours, then upsert that entry.
        if c.cas(ours.addr, tentative, 0).await? == tentative {
            return decided(Settle::Restart);
        }
        // Aborted or frozen meanwhile: the next re-read says which.
        return decided(Settle::Wait);
    }
    if let Some(lower) = others().find(|x| x.addr.raw() < ours.addr.raw()) {
        if lower.word == waiting.word {
            waiting.reads += 1;
        } else {
            *waiting = Waiting { word: lower.word, reads: 1 };
        }
        let aborted =
            waiting.reads >= PATIENCE && c.cas(lower.addr, lower.word, 0).await? == lower.word;
        return Ok(Settled { decision: Settle::Wait, aborted: u64::from(aborted) });
    }
    let mut aborted = 0;
    for higher in others() {
        if c.cas(higher.addr, higher.word, 0).await? != higher.word {
            // Committed or moved since the re-read: look again.
            return Ok(Settled { decision: Settle::Wait, aborted });
        }
        aborted += 1;
    }
    let decision = if c.cas(ours.addr, tentative, ours.word).await? == tentative {
        Settle::Committed
    } else {
        Settle::Wait
    };
    Ok(Settled { decision, aborted })
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;
    use crate::kv_slot::{slot, FROZEN};

    /// Four slots of one key's bucket, and the words the rule sees there.
    #[test]
    fn each_decision_of_the_rule() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            let base = c.alloc(64, 64).await.unwrap();
            let at = |i: u64| base.add(8 * i);
            let entry = |i: u64| slot(7, 1, GlobalAddr::new(0, 4096 * (i + 1)));
            // Puts `words` in slots 0..4 and returns what the slots hold as seen entries.
            let put = |words: [u64; 4]| {
                let c = &c;
                async move {
                    let mut seen = Vec::new();
                    for (i, &w) in words.iter().enumerate() {
                        c.write(at(i as u64), &w.to_le_bytes()).await.unwrap();
                        if w != 0 {
                            seen.push(Seen { addr: at(i as u64), word: w });
                        }
                    }
                    seen
                }
            };
            let word_at = |i: u64| c.read_word(at(i));
            let ours = Seen { addr: at(1), word: entry(1) };
            let mine = entry(1) | TENTATIVE;

            // A frozen entry of the key: wait for the move, touch nothing.
            let seen = put([entry(0) | FROZEN, mine, 0, 0]).await;
            let s = settle(&c, &seen, ours, &mut Waiting::default()).await.unwrap();
            assert_eq!((s.decision, word_at(1).await.unwrap()), (Settle::Moving, mine));

            // Another committed entry: ours withdrawn.
            let seen = put([0, mine, entry(2), 0]).await;
            let s = settle(&c, &seen, ours, &mut Waiting::default()).await.unwrap();
            assert_eq!((s.decision, word_at(1).await.unwrap()), (Settle::Restart, 0));

            // The same, ours aborted by another insert since the re-read: nothing to withdraw.
            let seen = put([0, mine, entry(2), 0]).await;
            c.write(at(1), &0u64.to_le_bytes()).await.unwrap();
            let s = settle(&c, &seen, ours, &mut Waiting::default()).await.unwrap();
            assert_eq!(s.decision, Settle::Wait);

            // A lower tentative entry: waited on, aborted at the PATIENCE-th unchanged re-read;
            // a change of it starts the count again.
            let mut waiting = Waiting::default();
            let other = put([entry(3) | TENTATIVE, mine, 0, 0]).await;
            for _ in 1..PATIENCE {
                let s = settle(&c, &other, ours, &mut waiting).await.unwrap();
                assert_eq!((s.decision, s.aborted), (Settle::Wait, 0));
            }
            let seen = put([entry(0) | TENTATIVE, mine, 0, 0]).await;
            for n in 1..=PATIENCE {
                let s = settle(&c, &seen, ours, &mut waiting).await.unwrap();
                assert_eq!((s.decision, s.aborted), (Settle::Wait, u64::from(n == PATIENCE)));
            }
            assert_eq!(word_at(0).await.unwrap(), 0, "the stalled lower entry is aborted");

            // Higher tentative entries: aborted, then ours committed.
            let seen = put([0, mine, entry(2) | TENTATIVE, entry(3) | TENTATIVE]).await;
            let s = settle(&c, &seen, ours, &mut Waiting::default()).await.unwrap();
            assert_eq!((s.decision, s.aborted), (Settle::Committed, 2));
            let after: Vec<u64> = [word_at(1).await, word_at(2).await, word_at(3).await]
                .into_iter()
                .map(Result::unwrap)
                .collect();
            assert_eq!(after, [entry(1), 0, 0]);

            // A higher entry committed since the re-read: its abort fails, look again.
            let seen = put([0, mine, entry(2) | TENTATIVE, 0]).await;
            c.write(at(2), &entry(2).to_le_bytes()).await.unwrap();
            let s = settle(&c, &seen, ours, &mut Waiting::default()).await.unwrap();
            assert_eq!((s.decision, word_at(1).await.unwrap()), (Settle::Wait, mine));
        }]);
    }
}
