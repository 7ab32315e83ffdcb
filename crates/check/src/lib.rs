//! # dmindex-check: is this history linearizable?
//!
//! Clients record each operation's invocation and return (times from any common clock: virtual
//! time on the simulator, a monotonic clock on `local`) into a [`History`]. [`History::check`]
//! decides whether some order of the operations, consistent with real time, explains every
//! result under the semantics of an ordered map (see `dmindex-index`).
//!
//! ## Per key
//!
//! Linearizability is local (Herlihy & Wing): a history is linearizable iff each key's
//! sub-history is. So the history is split by key and each key is checked on its own with a
//! Wing–Gong search: repeatedly pick an operation that no unlinearized operation precedes in real
//! time, apply it to the key's state (absent, or a value), keep it if its recorded result matches,
//! backtrack otherwise. Visited (linearized set, state) pairs are memoised (Lowe's refinement); the
//! linearized set is kept as "the first k completed operations" plus the few linearized beyond,
//! so memory stays proportional to concurrency, not history length.
//!
//! ## Operations that never returned
//!
//! A crashed client's operation, or one that failed with an error, may have taken effect at any
//! instant after its invocation — or never. Such pending writes may be linearized anywhere after
//! their invocation or left out; pending reads constrain nothing.
//!
//! ## A map that was not empty
//!
//! [`History::check`] starts every key absent. A process that attaches to an index another
//! process loaded records a history whose keys held values before it began, written by
//! operations it never saw: [`History::check_from_unknown_start`] starts each key in a state the
//! check does not know — absent or any value — and accepts the history if some start explains
//! it. It still catches a key that changes with no write of the history to change it (two reads
//! in turn that disagree, a value that comes back after a delete), as long as no other process
//! writes while the history is recorded.
//!
//! ## Blind writes
//!
//! An index may offer blind updates and deletes (an option; the SepHash paper's): the recorder
//! records a blind update as the insert it is, and a blind delete completed with
//! [`Outcome::Done`] rather than [`Outcome::Existed`]: it removes the key whether or not it was
//! there, and its result constrains nothing.
//!
//! ## Scans
//!
//! A completed scan from `f` returning pairs `R` (at most `n`) covers `[f, last key of R]` if it
//! returned `n` pairs, else `[f, ∞)`. It must be ascending and inside its range; then each returned
//! pair is a read of that key, and each key of the history inside the covered range that it did
//! not return is a read that found nothing — all with the scan's invocation and return times.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invocation {
    Search {
        key: Vec<u8>,
    },
    Insert {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Update {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    Scan {
        from: Vec<u8>,
        count: usize,
    },
    /// Every pair with `lo` ≤ key < `hi`.
    ScanRange {
        lo: Vec<u8>,
        hi: Vec<u8>,
    },
}

/// What it got back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A search's result.
    Found(Option<Vec<u8>>),
    /// An insert completed; or a blind delete, which cannot tell whether the key existed
    /// (`dmindex_index::PointIndex::blind_writes`).
    Done,
    /// An update's or delete's result: whether the key existed.
    Existed(bool),
    /// A scan's result.
    Scanned(Vec<(Vec<u8>, Vec<u8>)>),
}

#[derive(Clone, Debug)]
struct Entry {
    client: u32,
    call: Invocation,
    invoke: u64,
    ret: Option<(u64, Outcome)>,
}

/// A concurrent history, recorded from any number of threads.
#[derive(Debug, Default)]
pub struct History {
    entries: Mutex<Vec<Entry>>,
}

/// Handle of a recorded invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpId(usize);

/// Why a history is not linearizable (or could not be decided).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key whose sub-history fails, if one does.
    pub key: Option<Vec<u8>>,
    /// What is wrong.
    pub reason: String,
    /// The key's sub-history, one operation a line.
    pub ops: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(k) => writeln!(f, "key {}: {}", show(k), self.reason)?,
            None => writeln!(f, "{}", self.reason)?,
        }
        for op in self.ops.iter().take(40) {
            writeln!(f, "  {op}")?;
        }
        if self.ops.len() > 40 {
            writeln!(f, "  … {} more", self.ops.len() - 40)?;
        }
        Ok(())
    }
}

/// Summary of a successful check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Operations recorded.
    pub ops: usize,
    /// Of those, never returned.
    pub pending: usize,
    /// Keys checked.
    pub keys: usize,
    /// Search steps taken.
    pub steps: u64,
}

/// Bytes as hex (short keys) for messages.
pub fn show(b: &[u8]) -> String {
    if b.len() <= 16 {
        b.iter().map(|x| format!("{x:02x}")).collect()
    } else {
        String::from_utf8_lossy(b).into_owned()
    }
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    /// Records an invocation at `time`.
    pub fn invoke(&self, client: u32, call: Invocation, time: u64) -> OpId {
        let mut e = self.entries.lock().expect("history lock");
        e.push(Entry { client, call, invoke: time, ret: None });
        OpId(e.len() - 1)
    }

    /// Records the return of `id` at `time`. Operations never completed count as pending.
    pub fn complete(&self, id: OpId, outcome: Outcome, time: u64) {
        let mut e = self.entries.lock().expect("history lock");
        e[id.0].ret = Some((time, outcome));
    }

    /// Number of recorded operations.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("history lock").len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When `client`'s first operation to return after `time` returned (`None`: none did).
    pub fn first_return_after(&self, client: u32, time: u64) -> Option<u64> {
        let e = self.entries.lock().expect("history lock");
        e.iter()
            .filter(|x| x.client == client)
            .filter_map(|x| x.ret.as_ref().map(|r| r.0))
            .filter(|&t| t > time)
            .min()
    }

    /// Every key a point operation (search, insert, update, delete) named, in order.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let e = self.entries.lock().expect("history lock");
        let keys: std::collections::BTreeSet<&[u8]> = e
            .iter()
            .filter_map(|x| match &x.call {
                Invocation::Search { key }
                | Invocation::Insert { key, .. }
                | Invocation::Update { key, .. }
                | Invocation::Delete { key } => Some(&key[..]),
                Invocation::Scan { .. } | Invocation::ScanRange { .. } => None,
            })
            .collect();
        keys.into_iter().map(<[u8]>::to_vec).collect()
    }

    /// Checks the history; see the crate docs.
    pub fn check(&self) -> Result<CheckStats, Violation> {
        let entries = self.entries.lock().expect("history lock").clone();
        check_entries(&entries, Start::Empty)
    }

    /// Checks the history of a map that held something already when it began, written by
    /// nobody this history knows (another process loaded it): each key starts in some state
    /// unknown to the check — absent, or any value — that stays until an operation of the
    /// history changes it. Sound as long as only this history's operations write while it is
    /// recorded: two reads that see different values with no write between them still fail.
    pub fn check_from_unknown_start(&self) -> Result<CheckStats, Violation> {
        let entries = self.entries.lock().expect("history lock").clone();
        check_entries(&entries, Start::Unknown)
    }
}

/// What each key holds before the history begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Nothing: the map begins empty.
    Empty,
    /// Some state the history does not say: absent or any value.
    Unknown,
}

/// A per-key operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KCall {
    Get(Option<u32>),
    Put(u32),
    Update(u32, Option<bool>),
    Delete(Option<bool>),
}

#[derive(Clone, Debug)]
struct KOp {
    call: KCall,
    invoke: u64,
    /// `u64::MAX` when pending.
    ret: u64,
    pending: bool,
    desc: usize,
}

type State = Option<u32>;

impl KCall {
    /// The state after this op from `s`, or `None` if its recorded result is impossible.
    /// Whether the call leaves the state as it is wherever it applies: a search, and an update or
    /// delete that found nothing.
    fn read_only(self) -> bool {
        matches!(self, KCall::Get(_) | KCall::Update(_, Some(false)) | KCall::Delete(Some(false)))
    }

    fn apply(self, s: State) -> Option<State> {
        match self {
            KCall::Get(v) => (v == s).then_some(s),
            KCall::Put(v) => Some(Some(v)),
            KCall::Update(v, r) => {
                if r.is_some_and(|r| r != s.is_some()) {
                    return None;
                }
                Some(if s.is_some() { Some(v) } else { None })
            }
            KCall::Delete(r) => {
                if r.is_some_and(|r| r != s.is_some()) {
                    return None;
                }
                Some(None)
            }
        }
    }
}

fn check_entries(entries: &[Entry], start: Start) -> Result<CheckStats, Violation> {
    let mut values: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut intern = |v: &[u8]| {
        let n = values.len() as u32;
        *values.entry(v.to_vec()).or_insert(n)
    };
    let mut per_key: BTreeMap<Vec<u8>, Vec<KOp>> = BTreeMap::new();
    let mut stats = CheckStats { ops: entries.len(), ..Default::default() };
    let mut scans = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let ret = e.ret.as_ref().map_or(u64::MAX, |r| r.0);
        let pending = e.ret.is_none();
        stats.pending += pending as usize;
        let outcome = e.ret.as_ref().map(|r| &r.1);
        let (key, call) = match (&e.call, outcome) {
            (Invocation::Search { .. }, None)
            | (Invocation::Scan { .. }, None)
            | (Invocation::ScanRange { .. }, None) => continue,
            (Invocation::Search { key }, Some(Outcome::Found(v))) => {
                (key, KCall::Get(v.as_deref().map(&mut intern)))
            }
            (Invocation::Insert { key, value }, _) => (key, KCall::Put(intern(value))),
            (Invocation::Update { key, value }, o) => {
                let r = match o {
                    Some(Outcome::Existed(b)) => Some(*b),
                    None => None,
                    Some(other) => return Err(mismatch(e, other)),
                };
                (key, KCall::Update(intern(value), r))
            }
            (Invocation::Delete { key }, o) => {
                let r = match o {
                    Some(Outcome::Existed(b)) => Some(*b),
                    // A blind delete: it took effect, whether the key existed is not known.
                    Some(Outcome::Done) => None,
                    None => None,
                    Some(other) => return Err(mismatch(e, other)),
                };
                (key, KCall::Delete(r))
            }
            (Invocation::Scan { from, count }, Some(Outcome::Scanned(r))) => {
                scans.push((i, from, Some(*count), None, r));
                continue;
            }
            (Invocation::ScanRange { lo, hi }, Some(Outcome::Scanned(r))) => {
                scans.push((i, lo, None, Some(hi), r));
                continue;
            }
            (_, Some(other)) => return Err(mismatch(e, other)),
        };
        per_key.entry(key.clone()).or_default().push(KOp {
            call,
            invoke: e.invoke,
            ret,
            pending,
            desc: i,
        });
    }
    // Keys that only a scan returned held them before the history began, if it began with
    // unknown contents: they are checked as every other key.
    if start == Start::Unknown {
        for (.., result) in &scans {
            for (k, _) in result.iter() {
                per_key.entry(k.clone()).or_default();
            }
        }
    }
    // Scans become reads of every key in the range they cover.
    let keys: Vec<Vec<u8>> = per_key.keys().cloned().collect();
    for (i, from, count, hi, result) in scans {
        let e = &entries[i];
        let ret = e.ret.as_ref().expect("completed scan").0;
        for w in result.windows(2) {
            if w[0].0 >= w[1].0 {
                return Err(Violation {
                    key: Some(w[1].0.clone()),
                    reason: format!("scan #{i} is not in ascending key order"),
                    ops: vec![describe(i, e)],
                });
            }
        }
        if count.is_some_and(|n| result.len() > n)
            || result.first().is_some_and(|(k, _)| k.as_slice() < from.as_slice())
            || hi.is_some_and(|h| result.last().is_some_and(|(k, _)| k >= h))
        {
            return Err(Violation {
                key: None,
                reason: format!("scan #{i} returned pairs outside its request"),
                ops: vec![describe(i, e)],
            });
        }
        // The keys the scan speaks for: up to its last pair when it filled its count, up to
        // `hi` for a range scan, else everything from `from` on.
        let inclusive_end = match count {
            Some(n) if result.len() == n => result.last().map(|(k, _)| k.clone()),
            _ => None,
        };
        let returned: HashMap<&[u8], &[u8]> =
            result.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
        let start = keys.partition_point(|k| k.as_slice() < from.as_slice());
        for k in &keys[start..] {
            if inclusive_end.as_ref().is_some_and(|e| k > e) || hi.is_some_and(|h| k >= h) {
                break;
            }
            let seen = returned.get(k.as_slice()).map(|v| intern(v));
            per_key.get_mut(k).expect("known key").push(KOp {
                call: KCall::Get(seen),
                invoke: e.invoke,
                ret,
                pending: false,
                desc: i,
            });
        }
        for (k, v) in result.iter() {
            if !per_key.contains_key(k) {
                // A key nobody wrote: only possible as garbage.
                return Err(Violation {
                    key: Some(k.clone()),
                    reason: format!("scan #{i} returned a key never inserted (value {})", show(v)),
                    ops: vec![describe(i, e)],
                });
            }
        }
    }
    stats.keys = per_key.len();
    for (key, ops) in per_key {
        match check_key(ops, start, 50_000_000) {
            Ok(steps) => stats.steps += steps,
            Err((reason, ops)) => {
                return Err(Violation {
                    key: Some(key),
                    reason,
                    ops: ops.iter().map(|o| describe(o.desc, &entries[o.desc])).collect(),
                })
            }
        }
    }
    Ok(stats)
}

fn mismatch(e: &Entry, o: &Outcome) -> Violation {
    Violation { key: None, reason: format!("outcome {o:?} does not fit {:?}", e.call), ops: vec![] }
}

fn describe(i: usize, e: &Entry) -> String {
    let call = match &e.call {
        Invocation::Search { key } => format!("search {}", show(key)),
        Invocation::Insert { key, value } => format!("insert {} = {}", show(key), show(value)),
        Invocation::Update { key, value } => format!("update {} = {}", show(key), show(value)),
        Invocation::Delete { key } => format!("delete {}", show(key)),
        Invocation::Scan { from, count } => format!("scan from {} × {count}", show(from)),
        Invocation::ScanRange { lo, hi } => format!("scan [{}, {})", show(lo), show(hi)),
    };
    let ret = match &e.ret {
        None => "… (never returned)".to_string(),
        Some((t, o)) => {
            let o = match o {
                Outcome::Found(Some(v)) => format!("found {}", show(v)),
                Outcome::Found(None) => "not found".into(),
                Outcome::Done => "ok".into(),
                Outcome::Existed(b) => format!("existed={b}"),
                Outcome::Scanned(r) => format!("{} pairs", r.len()),
            };
            format!("@{t} → {o}")
        }
    };
    format!("#{i} client {} @{} {call} {ret}", e.client, e.invoke)
}

/// The linearized set: completed ops `0..prefix` (in invoke order) plus `extra` (sorted), plus
/// the linearized pending ops.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Lin {
    prefix: u32,
    extra: Vec<u32>,
    pend: Vec<u32>,
    state: State,
}

/// The value standing for every value that no read of the key returned.
const UNSEEN: u32 = u32::MAX;

/// Wing–Gong with memoisation over one key; returns the steps taken.
#[allow(clippy::type_complexity)]
fn check_key(mut ops: Vec<KOp>, start: Start, budget: u64) -> Result<u64, (String, Vec<KOp>)> {
    // Values no read returned are told apart by nothing: every result depends on them only
    // through the key's presence. Writing them as one value lets the memo merge the orders of
    // such writes (concurrent upserts of a hot key otherwise multiply the states by their
    // permutations).
    let observed: HashSet<u32> = ops
        .iter()
        .filter_map(|o| match o.call {
            KCall::Get(Some(v)) => Some(v),
            _ => None,
        })
        .collect();
    let hide = |v: u32| if observed.contains(&v) { v } else { UNSEEN };
    for o in &mut ops {
        o.call = match o.call {
            KCall::Put(v) => KCall::Put(hide(v)),
            KCall::Update(v, r) => KCall::Update(hide(v), r),
            c => c,
        };
    }
    let (mut done, mut pend): (Vec<KOp>, Vec<KOp>) = ops.into_iter().partition(|o| !o.pending);
    done.sort_by_key(|o| (o.invoke, o.ret));
    // Pending reads constrain nothing.
    pend.retain(|o| !matches!(o.call, KCall::Get(_)));
    pend.sort_by_key(|o| o.invoke);
    let n = done.len() as u32;
    let is_lin = |l: &Lin, i: u32| i < l.prefix || l.extra.binary_search(&i).is_ok();
    // Memo keys are small (a few integers): a fast hash pays off on millions of inserts.
    let mut seen: rustc_hash::FxHashSet<Lin> = rustc_hash::FxHashSet::default();
    // The states the key may start in: absent; or, when unknown, also any value — one that
    // some read returned, or one that none did (all alike, as for writes above).
    let first = |state| Lin { prefix: 0, extra: vec![], pend: vec![], state };
    let mut stack = Vec::new();
    if start == Start::Unknown {
        let mut values: Vec<u32> = observed.iter().copied().chain([UNSEEN]).collect();
        values.sort_unstable();
        stack.extend(values.into_iter().map(|v| first(Some(v))));
    }
    // Last, so tried first.
    stack.push(first(None));
    let mut steps = 0u64;
    let mut deepest = 0u32;
    while let Some(l) = stack.pop() {
        if l.prefix == n {
            return Ok(steps);
        }
        steps += 1;
        if steps > budget {
            let all = done.into_iter().chain(pend).collect();
            return Err((format!("inconclusive: search budget of {budget} steps exhausted"), all));
        }
        deepest = deepest.max(l.prefix);
        // Earliest return among unlinearized completed ops bounds who may go next.
        let mut min_ret = u64::MAX;
        let mut i = l.prefix;
        while i < n {
            if !is_lin(&l, i) {
                min_ret = min_ret.min(done[i as usize].ret);
                if done[i as usize].invoke > min_ret {
                    break;
                }
            }
            i += 1;
        }
        let mut push = |next: Lin, stack: &mut Vec<Lin>| {
            if seen.insert(next.clone()) {
                stack.push(next);
            }
        };
        let linearize = |l: &Lin, i: u32, state: State| {
            let mut next = l.clone();
            next.state = state;
            if i == next.prefix {
                next.prefix += 1;
                while next.extra.first() == Some(&next.prefix) {
                    next.extra.remove(0);
                    next.prefix += 1;
                }
            } else {
                let at = next.extra.binary_search(&i).unwrap_err();
                next.extra.insert(at, i);
            }
            next
        };
        // A read-only operation that may go next and sees this state goes next, alone: it
        // changes nothing, so any order that places it later can place it here instead (its
        // real-time predecessors are all placed). Without this, a window of k concurrent reads
        // of one key is searched in up to 2^k orders.
        let window = || (l.prefix..n).take_while(|&i| done[i as usize].invoke <= min_ret);
        let eager = window().find(|&i| {
            let call = done[i as usize].call;
            !is_lin(&l, i) && call.read_only() && call.apply(l.state).is_some()
        });
        if let Some(i) = eager {
            push(linearize(&l, i, l.state), &mut stack);
            continue;
        }
        // Pending writes first onto the stack, so completed ops are tried first.
        for (p, op) in pend.iter().enumerate() {
            let p = p as u32;
            if op.invoke > min_ret || l.pend.contains(&p) {
                continue;
            }
            if let Some(state) = op.call.apply(l.state) {
                let mut next = l.clone();
                next.pend.push(p);
                next.pend.sort_unstable();
                next.state = state;
                push(next, &mut stack);
            }
        }
        // Of candidates with the same call (two upserts of values nobody read, say), only the
        // one that returned first is tried first: any order placing another first can swap the
        // two, since everything that must follow the earlier-returning one follows both.
        let candidates: Vec<u32> = window().filter(|&i| !is_lin(&l, i)).collect();
        for &i in &candidates {
            let op = &done[i as usize];
            let shadowed = candidates.iter().any(|&j| {
                let other = &done[j as usize];
                j != i && other.call == op.call && (other.ret, j) < (op.ret, i)
            });
            if shadowed {
                continue;
            }
            if let Some(state) = op.call.apply(l.state) {
                push(linearize(&l, i, state), &mut stack);
            }
        }
    }
    let around = deepest as usize;
    let lo = around.saturating_sub(10);
    let hi = (around + 10).min(done.len());
    let mut shown: Vec<KOp> = done[lo..hi].to_vec();
    shown.extend(pend);
    Err((format!("not linearizable: no order explains the results (stuck after {deepest} of {n} operations)"), shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(x: u8) -> Vec<u8> {
        vec![x]
    }
    fn v(x: u8) -> Vec<u8> {
        vec![b'v', x]
    }

    /// (client, call, invoke, Option<(ret, outcome)>).
    type Rec = (u32, Invocation, u64, Option<(u64, Outcome)>);

    /// Builds a history from records.
    fn h(ops: Vec<Rec>) -> History {
        let hist = History::new();
        for (c, call, t0, ret) in ops {
            let id = hist.invoke(c, call, t0);
            if let Some((t1, o)) = ret {
                hist.complete(id, o, t1);
            }
        }
        hist
    }
    /// The keys a history names are those of its point operations, once each, in order.
    #[test]
    fn keys_are_the_point_operations_keys() {
        let scan = Invocation::Scan { from: k(0), count: 9 };
        let hist = h(vec![
            (0, ins(3, 1), 0, None),
            (1, get(1), 1, None),
            (0, Invocation::Delete { key: k(3) }, 2, None),
            (2, scan, 3, None),
        ]);
        assert_eq!(hist.keys(), [k(1), k(3)]);
    }

    fn ins(key: u8, val: u8) -> Invocation {
        Invocation::Insert { key: k(key), value: v(val) }
    }
    fn get(key: u8) -> Invocation {
        Invocation::Search { key: k(key) }
    }
    fn found(val: u8) -> Outcome {
        Outcome::Found(Some(v(val)))
    }

    #[test]
    fn sequential_and_concurrent_histories_pass() {
        let ok = h(vec![
            (0, ins(1, 1), 0, Some((10, Outcome::Done))),
            (1, get(1), 20, Some((30, found(1)))),
            // Concurrent write and read: either value is fine.
            (0, ins(1, 2), 40, Some((60, Outcome::Done))),
            (1, get(1), 45, Some((50, found(1)))),
            (2, get(1), 46, Some((55, found(2)))),
            (1, Invocation::Delete { key: k(1) }, 70, Some((80, Outcome::Existed(true)))),
            (2, get(1), 90, Some((95, Outcome::Found(None)))),
            (
                2,
                Invocation::Update { key: k(1), value: v(9) },
                96,
                Some((97, Outcome::Existed(false))),
            ),
        ]);
        let s = ok.check().unwrap();
        assert_eq!((s.ops, s.keys, s.pending), (8, 1, 0));
    }

    /// A blind delete (done, not whether the key existed) of a present or an absent key is
    /// fine, and the key is absent after it; the same deletes claiming the key existed are not
    /// linearizable, and neither is a read of the old value after a blind delete.
    #[test]
    fn blind_deletes_remove_whatever_was_there() {
        let del = || Invocation::Delete { key: k(1) };
        let run = |done: fn(Outcome) -> Outcome| {
            h(vec![
                (0, ins(1, 1), 0, Some((10, Outcome::Done))),
                (0, del(), 40, Some((50, done(Outcome::Existed(true))))),
                (0, del(), 60, Some((70, done(Outcome::Existed(true))))),
                (1, get(1), 80, Some((90, Outcome::Found(None)))),
            ])
        };
        let s = run(|_| Outcome::Done).check().unwrap();
        assert_eq!((s.ops, s.pending), (4, 0));
        assert!(run(|o| o).check().is_err(), "a delete that claims an absent key existed");
        let lost = h(vec![
            (0, ins(1, 1), 0, Some((10, Outcome::Done))),
            (0, del(), 20, Some((30, Outcome::Done))),
            (1, get(1), 40, Some((50, found(1)))),
        ]);
        assert!(lost.check().is_err(), "a blind delete that did not remove the key");
    }

    #[test]
    fn the_first_return_after_an_instant_is_the_clients_own() {
        let hist = h(vec![
            (0, ins(1, 1), 0, Some((10, Outcome::Done))),
            (1, ins(1, 2), 5, Some((12, Outcome::Done))),
            (0, ins(1, 3), 20, Some((30, Outcome::Done))),
            (0, ins(1, 4), 40, None),
            (0, ins(1, 5), 15, Some((25, Outcome::Done))),
        ]);
        assert_eq!(hist.first_return_after(0, 10), Some(25), "not 10 itself, not client 1's 12");
        assert_eq!(hist.first_return_after(1, 0), Some(12));
        assert_eq!(hist.first_return_after(1, 12), None);
        assert_eq!(hist.first_return_after(0, 30), None, "a pending operation never returned");
    }

    #[test]
    fn stale_read_is_caught() {
        let bad = h(vec![
            (0, ins(1, 1), 0, Some((10, Outcome::Done))),
            (0, ins(1, 2), 20, Some((30, Outcome::Done))),
            (1, get(1), 40, Some((50, found(1)))),
        ]);
        let e = bad.check().unwrap_err();
        assert_eq!(e.key, Some(k(1)));
        assert!(e.reason.contains("not linearizable"), "{e}");
        assert!(e.to_string().contains("search 01"), "{e}");
    }

    #[test]
    fn lost_write_is_caught() {
        // An acknowledged insert that no later read sees.
        let bad = h(vec![
            (0, ins(2, 1), 0, Some((10, Outcome::Done))),
            (1, get(2), 20, Some((30, Outcome::Found(None)))),
        ]);
        assert!(bad.check().is_err());
    }

    #[test]
    fn non_monotonic_reads_are_caught() {
        // The write overlaps both reads, but the reads do not overlap each other: new then old.
        let bad = h(vec![
            (0, ins(3, 1), 0, Some((5, Outcome::Done))),
            (0, ins(3, 2), 10, Some((100, Outcome::Done))),
            (1, get(3), 20, Some((30, found(2)))),
            (2, get(3), 40, Some((50, found(1)))),
        ]);
        assert!(bad.check().is_err());
        // Overlapping reads may see the values in either order.
        let ok = h(vec![
            (0, ins(3, 1), 0, Some((5, Outcome::Done))),
            (0, ins(3, 2), 10, Some((100, Outcome::Done))),
            (1, get(3), 20, Some((45, found(2)))),
            (2, get(3), 40, Some((50, found(1)))),
        ]);
        ok.check().unwrap();
    }

    #[test]
    fn pending_writes_may_or_may_not_apply() {
        for seen in [1u8, 2] {
            let hist = h(vec![
                (0, ins(4, 1), 0, Some((10, Outcome::Done))),
                (1, ins(4, 2), 20, None), // crashed
                (2, get(4), 30, Some((40, found(seen)))),
                (2, get(4), 50, Some((60, found(seen)))),
            ]);
            let s = hist.check().unwrap();
            assert_eq!(s.pending, 1);
        }
        // ... but not flip back once applied.
        let bad = h(vec![
            (0, ins(4, 1), 0, Some((10, Outcome::Done))),
            (1, ins(4, 2), 20, None),
            (2, get(4), 30, Some((40, found(2)))),
            (2, get(4), 50, Some((60, found(1)))),
        ]);
        assert!(bad.check().is_err());
        // A pending write cannot take effect before it was invoked.
        let bad = h(vec![
            (0, ins(4, 1), 0, Some((10, Outcome::Done))),
            (2, get(4), 30, Some((40, found(2)))),
            (1, ins(4, 2), 50, None),
        ]);
        assert!(bad.check().is_err());
    }

    #[test]
    fn scans_are_checked_per_key() {
        let scan = |from: u8, count, t0, t1, r: Vec<(u8, u8)>| {
            (
                9,
                Invocation::Scan { from: k(from), count },
                t0,
                Some((t1, Outcome::Scanned(r.into_iter().map(|(a, b)| (k(a), v(b))).collect()))),
            )
        };
        let base = || {
            vec![
                (0, ins(1, 1), 0, Some((1, Outcome::Done))),
                (0, ins(3, 3), 2, Some((3, Outcome::Done))),
                (0, ins(5, 5), 4, Some((5, Outcome::Done))),
            ]
        };
        let mut ok = base();
        ok.push(scan(2, 10, 10, 20, vec![(3, 3), (5, 5)]));
        ok.push(scan(0, 2, 10, 20, vec![(1, 1), (3, 3)]));
        h(ok).check().unwrap();
        // Missing key 3 inside the covered range.
        let mut bad = base();
        bad.push(scan(2, 10, 10, 20, vec![(5, 5)]));
        assert!(h(bad).check().is_err());
        // Not ascending.
        let mut bad = base();
        bad.push(scan(0, 10, 10, 20, vec![(3, 3), (1, 1)]));
        assert!(h(bad).check().unwrap_err().reason.contains("ascending"));
        // Below its start.
        let mut bad = base();
        bad.push(scan(2, 10, 10, 20, vec![(1, 1), (3, 3), (5, 5)]));
        assert!(h(bad).check().is_err());
        // A key that was never written.
        let mut bad = base();
        bad.push(scan(0, 10, 10, 20, vec![(1, 1), (2, 2), (3, 3), (5, 5)]));
        assert!(h(bad).check().unwrap_err().reason.contains("never inserted"));
        // Range scans cover exactly [lo, hi).
        let range = |lo: u8, hi: u8, r: Vec<(u8, u8)>| {
            (
                8,
                Invocation::ScanRange { lo: k(lo), hi: k(hi) },
                10,
                Some((20, Outcome::Scanned(r.into_iter().map(|(a, b)| (k(a), v(b))).collect()))),
            )
        };
        let mut ok = base();
        ok.push(range(2, 5, vec![(3, 3)]));
        ok.push(range(0, 9, vec![(1, 1), (3, 3), (5, 5)]));
        h(ok).check().unwrap();
        let mut bad = base();
        bad.push(range(2, 6, vec![(3, 3)]));
        assert!(h(bad).check().is_err(), "key 5 is inside [2, 6) and was missed");
        let mut bad = base();
        bad.push(range(2, 5, vec![(3, 3), (5, 5)]));
        assert!(h(bad).check().is_err(), "key 5 is outside [2, 5)");
        // A scan concurrent with a delete may see the key or not.
        let mut ok = base();
        ok.push((1, Invocation::Delete { key: k(3) }, 12, Some((18, Outcome::Existed(true)))));
        ok.push(scan(2, 10, 10, 20, vec![(5, 5)]));
        h(ok).check().unwrap();
    }

    #[test]
    fn long_sequential_history_is_cheap() {
        let hist = History::new();
        for i in 0..20_000u64 {
            let id = hist.invoke(0, ins(1, (i % 200) as u8), 2 * i);
            hist.complete(id, Outcome::Done, 2 * i + 1);
        }
        let s = hist.check().unwrap();
        assert!(s.steps <= 20_001, "{s:?}");
    }

    /// The search, with its reductions (reads placed eagerly, unread values merged, identical
    /// calls tried in return order), against brute force: every order of every subset of the
    /// pending operations, on thousands of small random histories of one key.
    #[test]
    fn the_search_agrees_with_brute_force() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut yes, mut no) = (0, 0);
        for _ in 0..3000 {
            let n = 2 + rnd(5) as usize;
            let mut recs: Vec<Rec> = Vec::new();
            for c in 0..n {
                let t0 = rnd(12);
                let t1 = t0 + 1 + rnd(8);
                let (call, out) = match rnd(4) {
                    0 => (
                        get(1),
                        Outcome::Found(match rnd(3) {
                            0 => None,
                            _ => Some(v(rnd(3) as u8)),
                        }),
                    ),
                    1 => (ins(1, rnd(3) as u8), Outcome::Done),
                    2 => (
                        Invocation::Update { key: k(1), value: v(rnd(3) as u8) },
                        Outcome::Existed(rnd(2) == 0),
                    ),
                    _ => (Invocation::Delete { key: k(1) }, Outcome::Existed(rnd(2) == 0)),
                };
                let ret = (rnd(6) != 0).then_some((t1, out));
                recs.push((c as u32, call, t0, ret));
            }
            let fast = h(recs.clone()).check().is_ok();
            let slow = brute(&recs);
            assert_eq!(fast, slow, "{recs:?}");
            if slow {
                yes += 1;
            } else {
                no += 1;
            }
        }
        assert!(yes > 300 && no > 300, "both verdicts are exercised: {yes} / {no}");
    }

    /// The search from an unknown start against brute force from every start: absent, each
    /// value the histories write, and one they never write.
    #[test]
    fn an_unknown_start_agrees_with_brute_force() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let starts = [None, Some(v(0)), Some(v(1)), Some(v(2)), Some(v(9))];
        let (mut yes, mut no, mut only_unknown) = (0, 0, 0);
        for _ in 0..3000 {
            let n = 1 + rnd(5) as usize;
            let mut recs: Vec<Rec> = Vec::new();
            for c in 0..n {
                let t0 = rnd(12);
                let t1 = t0 + 1 + rnd(8);
                let (call, out) = match rnd(5) {
                    0 | 1 => (
                        get(1),
                        Outcome::Found(match rnd(4) {
                            0 => None,
                            // A value no operation here writes: only the start can hold it.
                            1 => Some(v(9)),
                            _ => Some(v(rnd(3) as u8)),
                        }),
                    ),
                    2 => (ins(1, rnd(3) as u8), Outcome::Done),
                    3 => (
                        Invocation::Update { key: k(1), value: v(rnd(3) as u8) },
                        Outcome::Existed(rnd(2) == 0),
                    ),
                    _ => (Invocation::Delete { key: k(1) }, Outcome::Existed(rnd(2) == 0)),
                };
                let ret = (rnd(6) != 0).then_some((t1, out));
                recs.push((c as u32, call, t0, ret));
            }
            let fast = h(recs.clone()).check_from_unknown_start().is_ok();
            let slow = starts.iter().any(|s| brute_from(&recs, s));
            assert_eq!(fast, slow, "{recs:?}");
            match (slow, brute(&recs)) {
                (true, true) => yes += 1,
                (true, false) => only_unknown += 1,
                (false, _) => no += 1,
            }
        }
        assert!(
            yes > 300 && no > 300 && only_unknown > 300,
            "every verdict is exercised: {yes} / {no} / {only_unknown}"
        );
    }

    /// What an unknown start allows and what it still catches.
    #[test]
    fn an_unknown_start_is_fixed_until_written() {
        // A value nobody here wrote, read first: another process's, from before.
        let theirs = vec![
            (1, get(1), 0, Some((10, found(7)))),
            (0, ins(1, 1), 20, Some((30, Outcome::Done))),
            (1, get(1), 40, Some((50, found(1)))),
        ];
        assert!(h(theirs.clone()).check().is_err(), "an empty start holds nothing");
        h(theirs).check_from_unknown_start().unwrap();
        // ... but the start is one state: two values, one after the other, with no write
        // between, are not explained by any.
        let flips =
            vec![(1, get(1), 0, Some((10, found(7)))), (2, get(1), 20, Some((30, found(8))))];
        assert!(h(flips).check_from_unknown_start().is_err());
        // A start that was present, then deleted, stays deleted.
        let gone = vec![
            (0, Invocation::Delete { key: k(1) }, 0, Some((10, Outcome::Existed(true)))),
            (1, get(1), 20, Some((30, found(7)))),
        ];
        assert!(h(gone).check_from_unknown_start().is_err());
        // A key only a scan returned is a key of the start, checked like any other.
        let scan = |t0, r: Vec<(u8, u8)>| {
            let pairs = r.into_iter().map(|(a, b)| (k(a), v(b))).collect();
            (
                9,
                Invocation::Scan { from: k(0), count: 10 },
                t0,
                Some((t0 + 5, Outcome::Scanned(pairs))),
            )
        };
        let listed = vec![scan(0, vec![(4, 4)]), scan(10, vec![(4, 4)])];
        assert!(h(listed.clone()).check().unwrap_err().reason.contains("never inserted"));
        h(listed).check_from_unknown_start().unwrap();
        let vanished = vec![scan(0, vec![(4, 4)]), scan(10, vec![])];
        assert!(h(vanished).check_from_unknown_start().is_err(), "key 4 vanished unwritten");
    }

    /// Linearizable by brute force: some order of the completed operations and some of the
    /// pending ones, consistent with real time, explains every completed result.
    fn brute(recs: &[Rec]) -> bool {
        brute_from(recs, &None)
    }

    /// [`brute`] from `start` as the key's state before the history.
    fn brute_from(recs: &[Rec], start: &Option<Vec<u8>>) -> bool {
        let n = recs.len();
        (0u32..1 << n).any(|mask| {
            let chosen: Vec<usize> = (0..n)
                .filter(|&i| recs[i].3.is_some() || mask & (1 << i) != 0)
                .filter(|&i| recs[i].3.is_some() || !matches!(recs[i].1, Invocation::Search { .. }))
                .collect();
            if chosen.iter().any(|&i| recs[i].3.is_none() && mask & (1 << i) == 0) {
                return false;
            }
            permutations(&chosen).iter().any(|order| explains(recs, order, start))
        })
    }

    fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
        if items.is_empty() {
            return vec![vec![]];
        }
        let mut out = Vec::new();
        for (i, &x) in items.iter().enumerate() {
            let mut rest = items.to_vec();
            rest.remove(i);
            for mut p in permutations(&rest) {
                p.insert(0, x);
                out.push(p);
            }
        }
        out
    }

    fn explains(recs: &[Rec], order: &[usize], start: &Option<Vec<u8>>) -> bool {
        let ret = |i: usize| recs[i].3.as_ref().map_or(u64::MAX, |r| r.0);
        for (a, &i) in order.iter().enumerate() {
            if order[a + 1..].iter().any(|&j| ret(j) < recs[i].2) {
                return false;
            }
        }
        let mut state: Option<Vec<u8>> = start.clone();
        for &i in order {
            let out = recs[i].3.as_ref().map(|r| &r.1);
            match (&recs[i].1, out) {
                (Invocation::Search { .. }, Some(Outcome::Found(f))) if *f != state => {
                    return false
                }
                (Invocation::Insert { value, .. }, _) => state = Some(value.clone()),
                (Invocation::Update { value, .. }, o) => {
                    if let Some(Outcome::Existed(b)) = o {
                        if *b != state.is_some() {
                            return false;
                        }
                    }
                    if state.is_some() {
                        state = Some(value.clone());
                    }
                }
                (Invocation::Delete { .. }, o) => {
                    if let Some(Outcome::Existed(b)) = o {
                        if *b != state.is_some() {
                            return false;
                        }
                    }
                    state = None;
                }
                _ => {}
            }
        }
        true
    }
}
