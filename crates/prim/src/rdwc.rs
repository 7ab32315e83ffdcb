//! Read delegation and write combining (RDWC, from SMART; used by CHIME and its baselines).
//!
//! # What it does
//!
//! Clients of one compute node that work on the same key at the same time share remote work:
//! * **Read delegation** — searches of one key queue behind one *leader*, which does the
//!   remote search and hands its result to them.
//! * **Write combining** — updates (or upserts) of one key queue likewise; the leader writes
//!   the latest queued value once and every queued writer returns.
//!
//! # Why it stays linearizable
//!
//! A client never takes the result of a remote operation that began before it arrived (that
//! result may predate a write completed before the client was invoked). Clients that arrive
//! while a leader is busy form the *next* batch; when the leader finishes, the earliest of them
//! becomes the next leader and performs a fresh remote operation for the whole batch. Every
//! member of a batch is invoked before that operation starts and returns after it ends, so all
//! of them linearize at its linearization point: readers see its value; combined writers
//! linearize in arrival order immediately before the leader's write of the latest value, each
//! overwritten at once (so they need no remote write of their own). Updates and upserts are
//! batched separately, so every member's return value is the remote operation's.
//!
//! A leader whose operation fails, or that is dropped (a crashed client), sends its batch back
//! to do their own operations, and the next waiting batch still gets a leader.
//!
//! # Table
//!
//! Keys hash into [`SLOTS`] slots, each on its own cache line; a slot counts the clients in it
//! and lists the keys with a listed leader in flight and the batch waiting behind each. A client
//! alone in its slot leads without listing itself (two atomics, no lock); otherwise the slot's
//! lock is held only to edit its list, never across a verb.
//!
//! # Slots nobody shares cost nothing
//!
//! A slot's counter is a line that every client entering the slot writes, so on a compute node
//! whose clients rarely meet on a key the table itself costs each operation a line moved
//! between cores (about 64 ns on the two-core machine this was measured on: a sixth of a CHIME
//! search at 1 M items, a quarter in cache), for nothing. So each slot is *hot* or *cold*, a
//! flag in a packed array that is written only when it flips and otherwise stays in every
//! core's cache:
//! * an operation on a **cold** slot bypasses the table: no write to any shared line, its own
//!   remote operation — except one in [`SAMPLE_EVERY`] (counted per client shard), which enters
//!   to look for company;
//! * a client that enters a slot another client is in, and whose key hash is that of the last
//!   client to enter, has met contention on its key: the slot turns **hot**, and every
//!   operation on it enters;
//! * a hot slot turns cold after [`COOL_AFTER`] entries in a row that met no contention on
//!   their key (neither that, nor a batch to join).
//!
//! Slots start hot, so a table behaves as the paper's from its first operation, and the slots
//! nobody contends go cold within their first few hundred operations. With 128 clients on a
//! compute node (the CHIME paper's shape) no slot goes cold and the simulator's figures are
//! those of the table without the flags; with 2 clients about one operation in 12 enters.
//!
//! Bypassing never costs correctness: a bypassing client does its own remote operation, as a
//! client of another compute node would, and joins no batch; batches form only among clients in
//! the slot, under the rules above. What it can cost is combining: the first contended
//! operations on a cold slot do not combine until a sampled client notices them (with `n`
//! clients on a key at once, each sampled with probability 1/16, that takes a few rounds), which
//! is the price of not writing a shared line when nothing is contended.
//!
//! A search enters its slot when its future is made, not when it is first polled: on a cold
//! slot the future is the wrapped index's own, with no layer around it. Await it promptly. A
//! search made long before it runs only holds its place in the slot meanwhile, which can make
//! a slot look contended (hot) and send other clients through the slot's list: a cost in
//! combining, never in correctness, since batches still form when the searches run.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use dmindex_fabric::{Client, NodeId, Transport};
use futures::channel::oneshot;
use futures::future::Either;
use smallvec::SmallVec;

use dmindex_index::{
    IndexConfig, IndexResult, IndexStats, MnService, Pair, PointIndex, RangeIndex, ScanBuf,
};

use crate::hash::hash_bytes;
use crate::options::{Opt, Options};

/// Slots per compute node.
pub const SLOTS: usize = 256;

/// One operation in this many on a cold slot enters it, to notice contention (option
/// `rdwc_sample_every`).
pub const SAMPLE_EVERY: u64 = 16;

/// Entries in a row that meet no contention on their key after which a hot slot goes cold
/// (option `rdwc_cool_after`; tests set it low to flip slots all the time).
pub const COOL_AFTER: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Insert,
    Update,
}

/// A finished operation's result, as handed to a batch.
#[derive(Clone, Debug)]
enum Out {
    Read(Option<Vec<u8>>),
    Insert,
    Update(bool),
}

enum Msg {
    /// Lead the batch: these waiters (arrival order) follow.
    Lead(Vec<Waiter>),
    /// The batch's operation finished with this.
    Done(Out),
    /// Do your own operation.
    Retry,
}

struct Waiter {
    value: Vec<u8>,
    tx: oneshot::Sender<Msg>,
}

struct Active {
    /// Inline up to 32 bytes (keys are short), so leading costs no allocation.
    key: SmallVec<[u8; 32]>,
    kind: Kind,
    /// The next batch, in arrival order.
    waiting: Vec<Waiter>,
}

/// What a client does after joining.
enum Role<'a> {
    Lead(Ticket<'a>),
    Done(Out),
}

/// One client counted in a slot's [`Slot::busy`] until dropped (also when its future is).
struct Busy<'a>(&'a Slot);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Release);
    }
}

/// A leader's duty: report to its followers and hand the key on, even if dropped midway.
struct Ticket<'a> {
    slot: &'a Slot,
    key: &'a [u8],
    kind: Kind,
    followers: Vec<Waiter>,
    /// The leader's own value.
    own: &'a [u8],
    out: Option<Out>,
    _busy: Busy<'a>,
}

impl Ticket<'_> {
    /// The value to write: the latest deposited in the batch.
    fn value(&self) -> &[u8] {
        self.followers.last().map_or(self.own, |w| &w.value)
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        for f in self.followers.drain(..) {
            let msg = match &self.out {
                Some(o) => Msg::Done(o.clone()),
                None => Msg::Retry,
            };
            let _ = f.tx.send(msg);
        }
        let mut slot = self.slot.active.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = slot.iter().position(|a| a.kind == self.kind && a.key[..] == *self.key)
        else {
            return;
        };
        let mut next = std::mem::take(&mut slot[at].waiting);
        while !next.is_empty() {
            let first = next.remove(0);
            match first.tx.send(Msg::Lead(next)) {
                Ok(()) => return,
                // That client is gone (crashed): offer the lead to the next one.
                Err(Msg::Lead(rest)) => next = rest,
                Err(_) => unreachable!("a Lead message comes back as sent"),
            }
        }
        slot.swap_remove(at);
    }
}

/// One slot of the table, alone on its cache line: the keys hashed here with a leader in
/// flight.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    /// Clients in the slot now: joining, leading or waiting.
    busy: AtomicU32,
    /// Entries in a row, while hot, that met no contention on their key (a hint: racy).
    calm: AtomicU32,
    /// The key hash of the client that entered last (a hint).
    last_key: AtomicU64,
    active: Mutex<Vec<Active>>,
}

/// Operations that went through the table, counted per shard of clients (by
/// [`Client::ordinal`]) so that clients on different threads write different lines.
#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    writes: AtomicU64,
    /// Those of them that entered their slot (the rest bypassed a cold one).
    entered: AtomicU64,
}

/// Shards of [`Counts`].
const COUNT_SHARDS: usize = 16;

/// A compute node's RDWC table.
pub struct Table {
    slots: Box<[Slot]>,
    /// Per slot, whether operations enter it; packed and written only when a slot flips, so
    /// checking a cold slot reads a line that stays in every core's cache.
    hot: Box<[AtomicBool]>,
    counts: Box<[CachePadded<Counts>]>,
    cool_after: u32,
    sample_every: u64,
    delegated: AtomicU64,
    combined: AtomicU64,
}

/// A client in its key's slot with another client there: it joins a batch.
struct Entered<'a> {
    slot: &'a Slot,
    busy: Busy<'a>,
}

/// The slot of a key with hash `h`.
#[inline]
fn slot_of(h: u64) -> usize {
    (h % SLOTS as u64) as usize
}

impl Default for Table {
    fn default() -> Table {
        Table::new(COOL_AFTER, SAMPLE_EVERY)
    }
}

impl Table {
    fn new(cool_after: u32, sample_every: u64) -> Table {
        Table {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            hot: (0..SLOTS).map(|_| AtomicBool::new(true)).collect(),
            counts: (0..COUNT_SHARDS).map(|_| CachePadded::default()).collect(),
            cool_after,
            sample_every,
            delegated: AtomicU64::new(0),
            combined: AtomicU64::new(0),
        }
    }

    /// Whether a client's `nth` operation on a cold slot is one of the sampled ones: a mask when
    /// `sample_every` is a power of two (as by default), so the bypass costs no divide.
    #[inline]
    fn sampled(&self, nth: u64) -> bool {
        let d = self.sample_every;
        if d.is_power_of_two() {
            nth & (d - 1) == 0
        } else {
            nth % d == 0
        }
    }

    /// Enters the slot of `key` for an operation of `kind` by client `ordinal`: `Ok` if another
    /// client is there (join a batch), else `Err` with what the client holds while it does its
    /// own remote operation: its place in the slot if it is alone there (it leads without
    /// listing itself — no lock, no list, nothing awaited), nothing if the slot is cold and the
    /// operation bypasses the table (see the module docs). A client that arrives while a lone
    /// client leads finds no batch for the key, lists itself and leads its own remote
    /// operation: combining starts from the second client on, and the two operations run
    /// independently (each is linearizable on its own).
    fn enter(&self, key: &[u8], kind: Kind, ordinal: u32) -> Result<Entered<'_>, Option<Busy<'_>>> {
        let counts = &self.counts[ordinal as usize % COUNT_SHARDS];
        let counter = if kind == Kind::Read { &counts.reads } else { &counts.writes };
        let nth = counter.fetch_add(1, Ordering::Relaxed);
        let h = hash_bytes(key);
        let i = slot_of(h);
        let hot = self.hot[i].load(Ordering::Relaxed);
        if !hot && !self.sampled(nth) {
            return Err(None);
        }
        counts.entered.fetch_add(1, Ordering::Relaxed);
        let slot = &self.slots[i];
        let before = slot.busy.fetch_add(1, Ordering::Acquire);
        // The line is this client's now: the hints below cost no further transfer.
        let contended = before > 0 && slot.last_key.load(Ordering::Relaxed) == h;
        slot.last_key.store(h, Ordering::Relaxed);
        if contended {
            slot.calm.store(0, Ordering::Relaxed);
            if !hot {
                self.hot[i].store(true, Ordering::Relaxed);
            }
        } else if hot {
            let calm = slot.calm.load(Ordering::Relaxed) + 1;
            if calm >= self.cool_after {
                self.hot[i].store(false, Ordering::Relaxed);
                slot.calm.store(0, Ordering::Relaxed);
            } else {
                slot.calm.store(calm, Ordering::Relaxed);
            }
        }
        let busy = Busy(slot);
        if before == 0 {
            return Err(Some(busy));
        }
        Ok(Entered { slot, busy })
    }

    /// Joins the batch for (`key`, `kind`) depositing `value`, having entered its slot with
    /// another client there: lead the batch (listed), or get its result.
    async fn join<'a>(
        &'a self,
        entered: Entered<'a>,
        key: &'a [u8],
        kind: Kind,
        value: &'a [u8],
    ) -> Role<'a> {
        let Entered { slot, busy } = entered;
        let followers = match self.wait_in(slot, key, kind, value).await {
            Ok(f) => f,
            Err(done) => return done,
        };
        Role::Lead(Ticket { slot, key, kind, followers, own: value, out: None, _busy: busy })
    }

    /// The listed path: join the batch behind the key's leader and get its result
    /// (`Err(Role::Done)`), or become a listed leader with these followers.
    async fn wait_in<'a>(
        &'a self,
        slot: &'a Slot,
        key: &'a [u8],
        kind: Kind,
        value: &'a [u8],
    ) -> Result<Vec<Waiter>, Role<'a>> {
        loop {
            let rx = {
                let mut s = slot.active.lock().unwrap_or_else(|e| e.into_inner());
                match s.iter_mut().find(|a| a.kind == kind && a.key[..] == *key) {
                    None => {
                        s.push(Active {
                            key: SmallVec::from_slice(key),
                            kind,
                            waiting: Vec::new(),
                        });
                        return Ok(Vec::new());
                    }
                    Some(a) => {
                        // Contention on the key, however many other keys came in between.
                        slot.calm.store(0, Ordering::Relaxed);
                        let (tx, rx) = oneshot::channel();
                        a.waiting.push(Waiter { value: value.to_vec(), tx });
                        rx
                    }
                }
            };
            match rx.await {
                Ok(Msg::Done(out)) => return Err(Role::Done(out)),
                Ok(Msg::Lead(followers)) => return Ok(followers),
                Ok(Msg::Retry) | Err(_) => continue,
            }
        }
    }

    /// Searches and writes that came to the table, and those of them that entered a slot.
    fn counts(&self) -> (u64, u64, u64) {
        self.counts.iter().fold((0, 0, 0), |(r, w, e), s| {
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            (r + get(&s.reads), w + get(&s.writes), e + get(&s.entered))
        })
    }
}

/// RDWC's options, taken out before the wrapped index reads the rest.
const OPTIONS: Options = Options {
    what: "RDWC",
    known: &[
        Opt::flag("rdwc", &[]),
        Opt::number("rdwc_cool_after", &[], 1..=1 << 30),
        Opt::number("rdwc_sample_every", &[], 1..=1 << 30),
    ],
};

/// Index `I` with RDWC on each compute node's handle (option `rdwc=0` turns it off).
///
/// It is an index itself: a library uses `Rdwc<I>` wherever it would use `I` (created and
/// opened with the same configuration), which is what `dmindex bench` runs for the indexes
/// `dmindex indexes` lists with RDWC on (`dmindex_chime::ChimeRdwc` names CHIME's). It pays
/// off when clients of one compute node work on the same keys at once.
pub struct Rdwc<I> {
    inner: I,
    table: Option<Table>,
}

impl<I> Rdwc<I> {
    /// The wrapped index.
    pub fn inner(&self) -> &I {
        &self.inner
    }

    /// Strips RDWC's options from `cfg`; returns its table (`None`: RDWC off) and the rest.
    fn options(cfg: &IndexConfig) -> IndexResult<(Option<Table>, IndexConfig)> {
        let (mine, rest) = OPTIONS.strip(cfg)?;
        let cool_after = mine.number("rdwc_cool_after").map_or(COOL_AFTER, |n| n as u32);
        let sample_every = mine.number("rdwc_sample_every").map_or(SAMPLE_EVERY, |n| n as u64);
        let table = mine.flag("rdwc").unwrap_or(true).then(|| Table::new(cool_after, sample_every));
        Ok((table, rest))
    }

    fn wrap(inner: I, table: Option<Table>) -> Rdwc<I> {
        Rdwc { inner, table }
    }
}

impl<I> Rdwc<I> {
    /// [`PointIndex::search_into`] in a slot this client entered: alone there (leading without
    /// a list, counted until the search ends) or joining a batch.
    async fn search_entered<T: Transport>(
        &self,
        t: &Table,
        entered: Result<Entered<'_>, Option<Busy<'_>>>,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> IndexResult<bool>
    where
        I: PointIndex<T>,
    {
        let entered = match entered {
            Ok(e) => e,
            Err(_held) => return self.inner.search_into(c, key, out).await,
        };
        match t.join(entered, key, Kind::Read, &[]).await {
            Role::Done(Out::Read(v)) => {
                t.delegated.fetch_add(1, Ordering::Relaxed);
                out.clear();
                if let Some(v) = &v {
                    out.extend_from_slice(v);
                }
                Ok(v.is_some())
            }
            Role::Done(_) => unreachable!("read batches get read results"),
            Role::Lead(mut ticket) => {
                let found = self.inner.search_into(c, key, out).await?;
                // Only followers need a copy (a lone leader, the common case, copies nothing).
                if !ticket.followers.is_empty() {
                    ticket.out = Some(Out::Read(found.then(|| out.clone())));
                }
                Ok(found)
            }
        }
    }
}

impl<I> Rdwc<I> {
    /// A write of `kind` on `key` by client `ordinal`: the inner index's own future (`bypass`)
    /// without a table or on a cold slot, else the path through the slot entered (`entered`).
    /// The slot is entered here, when the write's future is made.
    fn route<'a, F, G>(
        &'a self,
        key: &[u8],
        kind: Kind,
        ordinal: u32,
        bypass: impl FnOnce() -> F,
        entered: impl FnOnce(&'a Table, Result<Entered<'a>, Option<Busy<'a>>>) -> G,
    ) -> Either<F, G> {
        let Some(t) = &self.table else { return Either::Left(bypass()) };
        match t.enter(key, kind, ordinal) {
            Err(None) => Either::Left(bypass()),
            e => Either::Right(entered(t, e)),
        }
    }

    /// [`PointIndex::insert`] in a slot this client entered: alone there (counted until the
    /// insert ends) or joining a batch, whose leader writes the last value deposited.
    async fn insert_entered<T: Transport>(
        &self,
        t: &Table,
        entered: Result<Entered<'_>, Option<Busy<'_>>>,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<()>
    where
        I: PointIndex<T>,
    {
        let entered = match entered {
            Ok(e) => e,
            Err(_held) => return self.inner.insert(c, key, value).await,
        };
        match t.join(entered, key, Kind::Insert, value).await {
            Role::Done(_) => {
                t.combined.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Role::Lead(mut ticket) => {
                self.inner.insert(c, key, ticket.value()).await?;
                ticket.out = Some(Out::Insert);
                Ok(())
            }
        }
    }

    /// [`PointIndex::update`] in a slot this client entered.
    async fn update_entered<T: Transport>(
        &self,
        t: &Table,
        entered: Result<Entered<'_>, Option<Busy<'_>>>,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> IndexResult<bool>
    where
        I: PointIndex<T>,
    {
        let entered = match entered {
            Ok(e) => e,
            Err(_held) => return self.inner.update(c, key, value).await,
        };
        match t.join(entered, key, Kind::Update, value).await {
            Role::Done(Out::Update(existed)) => {
                t.combined.fetch_add(1, Ordering::Relaxed);
                Ok(existed)
            }
            Role::Done(_) => unreachable!("update batches get update results"),
            Role::Lead(mut ticket) => {
                let existed = self.inner.update(c, key, ticket.value()).await?;
                ticket.out = Some(Out::Update(existed));
                Ok(existed)
            }
        }
    }
}

/// Every item the trait gives a default is forwarded to the wrapped index, except `search`,
/// whose default already goes through this `search_into` (a test reads the trait to check).
impl<T: Transport, I: PointIndex<T>> PointIndex<T> for Rdwc<I> {
    const SERVICES: &'static [MnService] = I::SERVICES;
    const SURVIVES_MN_CRASH: bool = I::SURVIVES_MN_CRASH;
    const RECOVERS_CLIENT_CRASHES: bool = I::RECOVERS_CLIENT_CRASHES;
    const LEVELS: &'static [&'static str] = I::LEVELS;
    const BACKGROUND: bool = I::BACKGROUND;
    const BULK_LOAD: bool = I::BULK_LOAD;

    fn recovers_client_crashes(cfg: &IndexConfig) -> bool {
        I::recovers_client_crashes(cfg)
    }

    async fn create(c: &Client<T>, cfg: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let (table, cfg) = Self::options(cfg)?;
        Ok(Self::wrap(I::create(c, &cfg, cn).await?, table))
    }

    async fn open(c: &Client<T>, cfg: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let (table, cfg) = Self::options(cfg)?;
        Ok(Self::wrap(I::open(c, &cfg, cn).await?, table))
    }

    /// A search that bypasses a cold slot (most of them) is the index's own future, with no
    /// layer around it; so the slot is entered when the future is made (see the module docs).
    fn search_into(
        &self,
        c: &Client<T>,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> impl Future<Output = IndexResult<bool>> {
        let Some(t) = &self.table else { return Either::Left(self.inner.search_into(c, key, out)) };
        match t.enter(key, Kind::Read, c.ordinal()) {
            Err(None) => Either::Left(self.inner.search_into(c, key, out)),
            entered => Either::Right(self.search_entered(t, entered, c, key, out)),
        }
    }

    /// Like a search, a write that bypasses a cold slot is the index's own future.
    fn insert(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> impl Future<Output = IndexResult<()>> {
        let bypass = || self.inner.insert(c, key, value);
        self.route(key, Kind::Insert, c.ordinal(), bypass, |t, entered| {
            self.insert_entered(t, entered, c, key, value)
        })
    }

    fn update(
        &self,
        c: &Client<T>,
        key: &[u8],
        value: &[u8],
    ) -> impl Future<Output = IndexResult<bool>> {
        let bypass = || self.inner.update(c, key, value);
        self.route(key, Kind::Update, c.ordinal(), bypass, |t, entered| {
            self.update_entered(t, entered, c, key, value)
        })
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        self.inner.delete(c, key).await
    }

    fn blind_writes(&self) -> bool {
        self.inner.blind_writes()
    }

    fn stats(&self) -> IndexStats {
        let mut s = self.inner.stats();
        if let Some(t) = &self.table {
            let (reads, writes, entered) = t.counts();
            s.extra.extend([
                ("rdwc_entered", entered),
                ("rdwc_reads", reads),
                ("rdwc_reads_delegated", t.delegated.load(Ordering::Relaxed)),
                ("rdwc_writes", writes),
                ("rdwc_writes_combined", t.combined.load(Ordering::Relaxed)),
            ]);
        }
        s
    }

    async fn load_factor(&self, c: &Client<T>) -> IndexResult<Option<f64>> {
        self.inner.load_factor(c).await
    }

    /// Rebuilding a memory node is the wrapped index's: RDWC keeps nothing remote.
    async fn recover_memory_node(&self, c: &Client<T>, node: NodeId) -> IndexResult<()> {
        self.inner.recover_memory_node(c, node).await
    }

    async fn background(&self, c: &Client<T>, stop: &dyn Fn() -> bool) -> IndexResult<()> {
        self.inner.background(c, stop).await
    }

    /// A bulk load writes no key through the combining table: it is the wrapped index's.
    async fn bulk_load(&self, c: &Client<T>, pairs: &[(Vec<u8>, Vec<u8>)]) -> IndexResult<()> {
        self.inner.bulk_load(c, pairs).await
    }
}

/// Scans pass through: RDWC combines point operations only.
impl<T: Transport, I: RangeIndex<T>> RangeIndex<T> for Rdwc<I> {
    async fn scan_into(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        self.inner.scan_into(c, from, count, out).await
    }

    async fn scan_range_into(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut ScanBuf,
    ) -> IndexResult<()> {
        self.inner.scan_range_into(c, lo, hi, out).await
    }

    async fn scan(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        self.inner.scan(c, from, count, out).await
    }

    async fn scan_range(
        &self,
        c: &Client<T>,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        self.inner.scan_range(c, lo, hi, out).await
    }
}

#[cfg(test)]
mod tests;
