//! Named roots: several indexes on one set of memory nodes, each found by its name.
//!
//! # Layout
//!
//! The name table is [`ENTRIES`] entries of 32 bytes on memory node 0
//! ([`dmindex_fabric::layout::NAMES_OFFSET`]). Entry `i` names the index whose root slots are
//! `2i` and `2i + 1` ([`crate::root`]: a root word and a descriptor):
//!
//! ```text
//! entry i, at NAMES_OFFSET + 32 i
//!  +0   claim u64   0: free; else 1 << 63 | the name's hash >> 1, set once by CAS
//!  +8   name  [24]  the name, UTF-8, zero-padded; written once, after the claim
//! ```
//!
//! # Finding and claiming
//!
//! A name's entries are probed from `hash mod 256`, linearly. Entries are never freed, so a
//! free entry ends every probe: [`find`] stops there (no such index), and [`claim`] CASes it
//! 0 → the name's claim word. Two clients claiming one name probe the same entries in the same
//! order, so they CAS the same free entry and one wins; the loser's failed CAS returns the
//! winner's word, which names the same hash, and the name bytes (re-read until the winner's
//! WRITE landed) say it is taken. A different name with the same 63-bit hash is told apart
//! by its bytes and probes on.
//!
//! # Cost
//!
//! One 8 KiB READ of the table, then one CAS and one 24-byte WRITE to claim: once per
//! create or open, never per operation.

use dmindex_fabric::layout::{NAMES_BYTES, NAMES_OFFSET, ROOT_SLOTS};
use dmindex_fabric::{Client, GlobalAddr, Transport};
use dmindex_index::{IndexError, IndexResult};

use crate::attempts::Attempts;
use crate::hash::hash_bytes;

/// Entries in the name table: one per pair of root slots.
pub const ENTRIES: u32 = ROOT_SLOTS / 2;
/// Bytes of one entry.
pub const ENTRY_BYTES: usize = 32;
/// The longest name, in bytes.
pub const MAX_NAME: usize = 24;
const _: () = assert!(ENTRIES as u64 * ENTRY_BYTES as u64 == NAMES_BYTES);
const _: () = assert!(8 + MAX_NAME == ENTRY_BYTES);

/// The claim word of `name`.
pub fn claim_word(name: &str) -> u64 {
    1 << 63 | hash_bytes(name.as_bytes()) >> 1
}

/// The address of entry `i`.
pub fn entry_addr(i: u32) -> GlobalAddr {
    GlobalAddr::new(0, NAMES_OFFSET + u64::from(i) * ENTRY_BYTES as u64)
}

/// The root slot of the index entry `i` names.
pub const fn root_slot_of(i: u32) -> u32 {
    2 * i
}

/// Checks `name`: 1 to [`MAX_NAME`] bytes, no NUL.
pub fn check(name: &str) -> IndexResult<()> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(IndexError::Config(format!(
            "index name {name:?}: a name is 1 to {MAX_NAME} bytes of UTF-8, without NUL"
        )));
    }
    Ok(())
}

/// The padded bytes of `name` as an entry stores them.
fn padded(name: &str) -> [u8; MAX_NAME] {
    let mut b = [0u8; MAX_NAME];
    b[..name.len()].copy_from_slice(name.as_bytes());
    b
}

/// The name table, as one READ saw it.
struct Table(Vec<u8>);

impl Table {
    async fn read<T: Transport>(c: &Client<T>) -> IndexResult<Table> {
        Ok(Table(c.read_vec(entry_addr(0), NAMES_BYTES as usize).await?))
    }

    fn word(&self, i: u32) -> u64 {
        let at = i as usize * ENTRY_BYTES;
        u64::from_le_bytes(self.0[at..at + 8].try_into().expect("8 bytes"))
    }

    fn name(&self, i: u32) -> &[u8] {
        let at = i as usize * ENTRY_BYTES + 8;
        &self.0[at..at + MAX_NAME]
    }
}

/// Entry `i`'s name bytes, re-read until its claimer's WRITE has landed (a claimer that died
/// in between leaves them zero: reported).
async fn name_of<T: Transport>(c: &Client<T>, i: u32) -> IndexResult<[u8; MAX_NAME]> {
    let mut attempts = Attempts::new();
    loop {
        let mut b = [0u8; MAX_NAME];
        c.read(entry_addr(i).add(8), &mut b).await?;
        if b != [0; MAX_NAME] {
            return Ok(b);
        }
        // Ends: a live claimer's WRITE follows its CAS by one round trip; the attempts' bound
        // reports a claimer that died between the two.
        attempts.failed(entry_addr(i), "a name being written")?;
    }
}

/// Where `name` is, probing from its home: `Ok(i)` its entry, `Err(Some(i))` the free entry
/// that ends its probe, `Err(None)` a full table.
async fn probe<T: Transport>(
    c: &Client<T>,
    table: &Table,
    name: &str,
) -> IndexResult<Result<u32, Option<u32>>> {
    let (want, bytes) = (claim_word(name), padded(name));
    let home = (hash_bytes(name.as_bytes()) % u64::from(ENTRIES)) as u32;
    for k in 0..ENTRIES {
        let i = (home + k) % ENTRIES;
        match table.word(i) {
            0 => return Ok(Err(Some(i))),
            w if w == want => {
                let seen = match table.name(i) {
                    b if b != [0; MAX_NAME] => b.try_into().expect("24 bytes"),
                    _ => name_of(c, i).await?,
                };
                if seen == bytes {
                    return Ok(Ok(i));
                }
            }
            _ => {}
        }
    }
    Ok(Err(None))
}

/// The root slot of the index named `name`; [`IndexError::Config`] if there is none (listing
/// the names there are).
pub async fn find<T: Transport>(c: &Client<T>, name: &str) -> IndexResult<u32> {
    check(name)?;
    let table = Table::read(c).await?;
    match probe(c, &table, name).await? {
        Ok(i) => Ok(root_slot_of(i)),
        Err(_) => {
            let names = list_in(&table).join(", ");
            let there = if names.is_empty() { "none".to_string() } else { names };
            Err(IndexError::Config(format!(
                "no index named {name:?} on these memory nodes (indexes there: {there})"
            )))
        }
    }
}

/// Claims `name` for a new index: the root slot it is to be created in. [`IndexError::Config`]
/// if an index of that name exists, [`IndexError::Full`] if every entry is taken.
pub async fn claim<T: Transport>(c: &Client<T>, name: &str) -> IndexResult<u32> {
    check(name)?;
    let want = claim_word(name);
    let mut table = Table::read(c).await?;
    // Ends: each lost CAS fills one more entry of the probe, which the next pass goes past.
    for _ in 0..ENTRIES {
        let i = match probe(c, &table, name).await? {
            Ok(_) => {
                return Err(IndexError::Config(format!(
                    "an index named {name:?} already exists on these memory nodes"
                )))
            }
            Err(Some(i)) => i,
            Err(None) => {
                return Err(IndexError::Full(format!(
                    "the name table holds {ENTRIES} indexes already"
                )))
            }
        };
        if c.cas(entry_addr(i), 0, want).await? == 0 {
            c.write(entry_addr(i).add(8), &padded(name)).await?;
            return Ok(root_slot_of(i));
        }
        table = Table::read(c).await?;
    }
    Err(IndexError::Full(format!("the name table holds {ENTRIES} indexes already")))
}

/// The names of the indexes on these memory nodes, by entry.
pub async fn list<T: Transport>(c: &Client<T>) -> IndexResult<Vec<String>> {
    Ok(list_in(&Table::read(c).await?))
}

fn list_in(table: &Table) -> Vec<String> {
    (0..ENTRIES)
        .filter(|&i| table.word(i) != 0)
        .map(|i| {
            let b = table.name(i);
            let end = b.iter().position(|&x| x == 0).unwrap_or(MAX_NAME);
            String::from_utf8_lossy(&b[..end]).into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use dmindex_fabric::exec::run_tasks;
    use dmindex_fabric::{Fabric, LocalConfig, LocalFabric};

    use super::*;

    #[test]
    fn the_layout_is_pinned() {
        assert_eq!(entry_addr(0), GlobalAddr::new(0, 0xE000));
        assert_eq!(entry_addr(255), GlobalAddr::new(0, 0xE000 + 32 * 255));
        assert_eq!(root_slot_of(255), 510);
        assert!(claim_word("chime") >> 63 == 1);
        assert_ne!(claim_word("chime"), claim_word("chime2"));
    }

    #[test]
    fn names_are_claimed_once_and_found_again() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let (a, b) = (f.client(0).unwrap(), f.client(1).unwrap());
        run_tasks([async {
            assert!(find(&a, "chime").await.is_err(), "an empty table names nothing");
            let s1 = claim(&a, "chime").await.unwrap();
            let s2 = claim(&b, "dolphin").await.unwrap();
            assert_ne!(s1, s2);
            assert_eq!((s1 % 2, s2 % 2), (0, 0), "a pair of root slots each");
            assert_eq!(find(&b, "chime").await.unwrap(), s1);
            assert_eq!(find(&a, "dolphin").await.unwrap(), s2);
            let again = claim(&b, "chime").await.unwrap_err().to_string();
            assert!(again.contains("already exists"), "{again}");
            let missing = find(&a, "sherman").await.unwrap_err().to_string();
            assert!(missing.contains("chime") && missing.contains("dolphin"), "{missing}");
            assert!(claim(&a, "").await.is_err() && claim(&a, &"x".repeat(25)).await.is_err());
            let mut names = list(&a).await.unwrap();
            names.sort();
            assert_eq!(names, ["chime", "dolphin"]);
        }]);
    }

    #[test]
    fn a_full_probe_chain_is_walked_past() {
        let f = LocalFabric::new(LocalConfig::default()).unwrap();
        let c = f.client(0).unwrap();
        run_tasks([async {
            // Fill the home of "x" with another name's word, as a collision would.
            let home = (hash_bytes(b"x") % u64::from(ENTRIES)) as u32;
            c.write(entry_addr(home), &claim_word("other").to_le_bytes()).await.unwrap();
            c.write(entry_addr(home).add(8), &padded("other")).await.unwrap();
            let s = claim(&c, "x").await.unwrap();
            assert_eq!(s, root_slot_of((home + 1) % ENTRIES));
            assert_eq!(find(&c, "x").await.unwrap(), s);
        }]);
    }
}
