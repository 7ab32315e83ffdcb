//! The checking pipeline: a correct index passes many seeds with crashes; a racy one is caught.

use dmindex_bench::check::{check_seed, check_seed_with, CheckConfig};
use dmindex_fabric::{layout, Client, GlobalAddr, Transport};
use dmindex_index::{IndexConfig, IndexError, IndexResult, Pair, RangeIndex};
use dmindex_sim::seeds::check_seeds;

#[test]
fn reference_index_is_linearizable_under_faults() {
    let cfg = CheckConfig { index: "ref".into(), ..CheckConfig::default() };
    let crashed = std::cell::Cell::new(0);
    check_seeds("reference_index_is_linearizable_under_faults", 0..40, |seed| {
        let r = check_seed(&cfg, seed).map_err(|e| format!("{e:#}"))?;
        crashed.set(crashed.get() + r.crashed);
        Ok(())
    });
    assert!(
        crashed.get() > 0 || dmindex_sim::seeds::seed_override().is_some(),
        "no client ever crashed"
    );
}

#[test]
fn same_seed_same_run() {
    let cfg = CheckConfig::default();
    let a = check_seed(&cfg, 5).unwrap();
    let b = check_seed(&cfg, 5).unwrap();
    assert_eq!(a, b);
}

/// A register per key with no concurrency control: WRITE the presence word, then WRITE the value
/// word, as two verbs; READ both at once. A reader between the two WRITEs sees a value that was
/// never written with that presence.
struct Racy {
    base: GlobalAddr,
    keys: u64,
}

impl Racy {
    fn slot(&self, key: &[u8]) -> IndexResult<GlobalAddr> {
        let k = u64::from_be_bytes(
            key.try_into().map_err(|_| IndexError::InvalidKey("8 bytes".into()))?,
        );
        Ok(self.base.add(16 * (k % self.keys)))
    }
}

impl<T: Transport> RangeIndex<T> for Racy {
    const NAME: &'static str = "racy";

    async fn create(c: &Client<T>, config: &IndexConfig, cn: u16) -> IndexResult<Self> {
        let base = c.alloc(16 * config.expected_items.max(1), 64).await?;
        c.write(layout::root_slot(config.root_slot), &base.raw().to_le_bytes()).await?;
        Self::open(c, config, cn).await
    }

    async fn open(c: &Client<T>, config: &IndexConfig, _cn: u16) -> IndexResult<Self> {
        let base = GlobalAddr::from_raw(c.read_word(layout::root_slot(config.root_slot)).await?);
        Ok(Racy { base, keys: config.expected_items.max(1) + 1 })
    }

    async fn search(&self, c: &Client<T>, key: &[u8]) -> IndexResult<Option<Vec<u8>>> {
        let b = c.read_vec(self.slot(key)?, 16).await?;
        Ok((b[0] == 1).then(|| b[8..16].to_vec()))
    }

    async fn insert(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<()> {
        let s = self.slot(key)?;
        c.write(s, &1u64.to_le_bytes()).await?;
        c.write(s.add(8), value).await?;
        Ok(())
    }

    async fn update(&self, c: &Client<T>, key: &[u8], value: &[u8]) -> IndexResult<bool> {
        let present = self.search(c, key).await?.is_some();
        if present {
            c.write(self.slot(key)?.add(8), value).await?;
        }
        Ok(present)
    }

    async fn delete(&self, c: &Client<T>, key: &[u8]) -> IndexResult<bool> {
        let present = self.search(c, key).await?.is_some();
        c.write(self.slot(key)?, &[0u8; 16]).await?;
        Ok(present)
    }

    async fn scan(
        &self,
        c: &Client<T>,
        from: &[u8],
        count: usize,
        out: &mut Vec<Pair>,
    ) -> IndexResult<()> {
        let start = u64::from_be_bytes(
            from.try_into().map_err(|_| IndexError::InvalidKey("8 bytes".into()))?,
        );
        for k in start..self.keys {
            if out.len() >= count {
                break;
            }
            let kb = k.to_be_bytes();
            if let Some(v) = self.search(c, &kb).await? {
                out.push((kb.to_vec(), v));
            }
        }
        Ok(())
    }
}

#[test]
fn a_racy_index_is_caught() {
    let cfg = CheckConfig { crashes: false, ..CheckConfig::default() };
    let caught =
        (0..20).find_map(|seed| check_seed_with::<Racy>(&cfg, seed).err().map(|e| (seed, e)));
    let (seed, e) = caught.expect("20 seeds and the racy index was never caught");
    let msg = format!("{e:#}");
    assert!(msg.contains("not linearizable"), "seed {seed}: {msg}");
}
