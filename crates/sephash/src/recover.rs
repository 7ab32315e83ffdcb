//! Client-crash recovery: a writer waiting for a closed CurSegment judges the client that
//! closed it, and finishes its merge (or split) when it died.
//!
//! # Who holds a closed segment
//!
//! A closed meta at edition `e` comes with a merge record naming one member at tag `e`: the
//! merger ([`crate::layout`]). A segment a split creates is born closed with a record naming
//! its splitter at tag `e − 1`; it opens when its old half is split. So a writer that has
//! waited half a lease for a closed meta READs the record with it (16 B, one READ, one line:
//! one instant) once a quarter lease and watches the member it names ([`lease::Watch`]): three
//! leases without a renewal and the member is fenced. Who it watches:
//!
//! * a record at tag `e`: the merger;
//! * a record at tag `e − 1` (the new half B of a split): if the old half A is already at B's
//!   depth, B's splitter, who only has B to open; else A's merger, whose split is not done.
//!
//! # Repairing (after the fence)
//!
//! The repairer takes the record over by CAS from the exact word the dead member left, to its
//! own held word with the same tag; one repairer wins, and if it dies the next waiter judges
//! it. Then, if the meta is still the closed meta it waited on:
//!
//! * **A merge** (tag `e`): the repairer merges the segment itself, from scratch: the closed
//!   segment's slots and MainSegment are immutable while it is closed, so it computes what the
//!   dead merger would have. Whatever the dead merger had written is harmless: a MainSegment
//!   not yet named by the meta is unreachable garbage; filter lines it rewrote name its
//!   MainSegment, complete (WRITTEN and awaited before the lines) and of the same content, and
//!   are rewritten with the repairer's tag before the meta opens. If the merge splits and the
//!   directory already names B (the dead splitter created it whole before entering it), B is
//!   kept: its MainSegment is the half the repairer would write; B's record is taken over from
//!   whichever fenced predecessor it names (only holders of A's record write it while A is
//!   unsplit), A is redone and reopened one level deeper, then B opened.
//! * **B, born closed, A already split** (tag `e − 1`): B's meta is CAS'd open. This is safe
//!   only once B's splitter is fenced: a splitter merely paused could otherwise open B with a
//!   plain WRITE after B had been opened and closed again.
//!
//! Nothing is lost or duplicated: the closed generation's slots and MainSegment are replaced by
//! one merge only (the record's holder's), and B opens only after A is reopened at B's depth,
//! as in the live protocol.

use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::IndexResult;
use dmindex_prim::lease::{self, Verdict, WaitWatch, Watch};
use dmindex_prim::lock::{self, holder};

use crate::layout::{low_mask, record_tag, Meta, RECORD};
use crate::search::word;
use crate::{bump, SepHash};

impl SepHash {
    /// One failed look at segment `seg` (suffix `suffix`), closed as `meta`: judges who must
    /// reopen it when the wait has lasted, and repairs when that client is dead.
    pub(crate) async fn judge_closed<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        suffix: u64,
        meta: Meta,
        w: &mut WaitWatch,
    ) -> IndexResult<()> {
        if !w.due(c) {
            return Ok(());
        }
        lease::renew_if_due(c).await?;
        let mut head = [0u8; 16];
        c.read(seg, &mut head).await?;
        let record = word(&head, 8);
        if word(&head, 0) != meta.0 {
            return Ok(());
        }
        let Some(member) = holder(record) else { return Ok(()) };
        let tag = record_tag(record);
        if tag == meta.edition() {
            if w.watch.look(c, record, member).await? == Verdict::Fenced {
                self.repair_merge(c, seg, suffix, meta, record).await?;
                w.watch = Watch::new();
            }
            return Ok(());
        }
        if tag != meta.prev_edition() || meta.depth() == 0 {
            // Not a closed segment's record (a transient image): look again later.
            return Ok(());
        }
        // Born closed: B of a split whose old half A is entered at B's suffix without its
        // top bit (directory entries are written once).
        let a_suffix = suffix & low_mask(meta.depth() - 1);
        let a = GlobalAddr::from_raw(c.read_word(self.dir_entry(a_suffix)).await?);
        let mut a_head = [0u8; 16];
        c.read(a, &mut a_head).await?;
        let a_meta = Meta(word(&a_head, 0));
        if a_meta.depth() >= meta.depth() {
            if w.watch.look(c, record, member).await? == Verdict::Fenced {
                self.repair_born(c, seg, meta, record).await?;
                w.watch = Watch::new();
            }
            return Ok(());
        }
        let a_record = word(&a_head, 8);
        let Some(a_member) = holder(a_record) else { return Ok(()) };
        if a_meta.closed()
            && record_tag(a_record) == a_meta.edition()
            && w.watch.look(c, a_record, a_member).await? == Verdict::Fenced
        {
            self.repair_merge(c, a, a_suffix, a_meta, a_record).await?;
            w.watch = Watch::new();
        }
        Ok(())
    }

    /// Takes the merge record of `seg` over from `dead` (a fenced member's exact word) and,
    /// if the segment is still closed as `meta`, merges it as this client (module docs).
    async fn repair_merge<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        suffix: u64,
        meta: Meta,
        dead: u64,
    ) -> IndexResult<()> {
        let Some(mine) = self.take_record(c, seg, meta, dead).await? else { return Ok(()) };
        self.merge(c, seg, suffix, meta, mine, true).await
    }

    /// Takes B's record over from `dead` and opens B, born closed as `meta`, whose old half is
    /// split already (module docs).
    async fn repair_born<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        meta: Meta,
        dead: u64,
    ) -> IndexResult<()> {
        if self.take_record(c, seg, meta, dead).await?.is_none() {
            return Ok(());
        }
        // Only the record's holder opens B: this CAS cannot fail.
        c.cas(seg, meta.0, meta.open().0).await?;
        Ok(())
    }

    /// CAS of `seg`'s merge record from `dead` to this client's held word with the same tag;
    /// `Some(that word)` if it won and the meta is still `meta`.
    async fn take_record<T: Transport>(
        &self,
        c: &Client<T>,
        seg: GlobalAddr,
        meta: Meta,
        dead: u64,
    ) -> IndexResult<Option<u64>> {
        let member = lease::renew_if_due(c).await?;
        let mine = lock::held_word(member, record_tag(dead));
        if c.cas(seg.add(RECORD), dead, mine).await? != dead {
            // Another waiter took it over first.
            return Ok(None);
        }
        // The dead member's last verbs landed before its fence: it may have reopened.
        if c.read_word(seg).await? != meta.0 {
            return Ok(None);
        }
        bump(&self.counters.repairs, 1);
        Ok(Some(mine))
    }
}
