//! Twitter's production cache traces (the `twitter/cache-trace` release, used by Dolphin's
//! Fig. 9): one request per CSV line,
//!
//! ```text
//! timestamp,anonymized key,key size,value size,client id,operation,TTL
//! 0,q:q:1:8WTfjZU,10,0,2,get,0
//! 3,gTsN:R:7yNr6cq,15,180,7,set,3600
//! ```
//!
//! Operations map onto the index contract: `get` and `gets` read; `set`, `add`, `replace`,
//! `cas`, `append`, `prepend`, `incr` and `decr` write the key (an upsert, as a cache's set is);
//! `delete` deletes. The value size and TTL are not replayed (the run's `--value-size` is), and
//! neither is the timestamp (requests run back to back).
//!
//! Keys: with 8-byte integer keys (`--key-size 8`), a key is the FNV-1a 64-bit hash of its
//! anonymized string, big-endian, so equal strings give equal keys and distinct ones collide
//! with probability n²/2⁶⁵; with string keys it is the string itself, which must fit the key
//! size.
//!
//! Replaying a real trace: download one cluster's file from the release, decompress it
//! (`zstd -d cluster52.sort.zst`), optionally cut it (`head -n 10000000`), and pass it to
//! `dmindex bench --trace FILE`; a file whose first request line has six commas is read in this
//! format.

use crate::workload::{KeyFormat, Op, OpKind};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over the bytes of `s`.
pub fn fnv1a64(s: &[u8]) -> u64 {
    s.iter().fold(FNV_OFFSET, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME))
}

/// Whether `line` is a request line of this format (seven comma-separated fields).
pub fn looks_like(line: &str) -> bool {
    line.trim().bytes().filter(|&b| b == b',').count() == 6
}

/// Parses one line; `Ok(None)` for empty lines and `#` comments.
pub fn parse_line(line: &str, format: KeyFormat) -> Result<Option<Op>, String> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    let f: Vec<&str> = t.split(',').collect();
    if f.len() != 7 {
        return Err(format!(
            "expected 7 comma-separated fields (timestamp, key, key size, value size, client, \
             operation, TTL), found {}",
            f.len()
        ));
    }
    for (i, name) in
        [(0, "timestamp"), (2, "key size"), (3, "value size"), (4, "client id"), (6, "TTL")]
    {
        f[i].trim()
            .parse::<i64>()
            .map_err(|_| format!("{name} '{}' is not a number", crate::trace::quote(f[i])))?;
    }
    let kind = match f[5].trim() {
        "get" | "gets" => OpKind::Read,
        "set" | "add" | "replace" | "cas" | "append" | "prepend" | "incr" | "decr" => {
            OpKind::Insert
        }
        "delete" => OpKind::Delete,
        other => return Err(format!("unknown operation '{}'", crate::trace::quote(other))),
    };
    let word = f[1];
    if word.is_empty() {
        return Err("empty key".into());
    }
    let key = if format.is_integer() {
        fnv1a64(word.as_bytes()).to_be_bytes().to_vec()
    } else if word.len() > format.size {
        return Err(format!(
            "key '{}' is longer than the key size of {} bytes",
            crate::trace::quote(word),
            format.size
        ));
    } else {
        word.as_bytes().to_vec()
    };
    Ok(Some(Op { kind, key, scan_len: 0, insert_number: None }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn lines_map_onto_the_contract() {
        let int = KeyFormat::new(8, false).unwrap();
        let op = |l| parse_line(l, int).unwrap().unwrap();
        let get = op("0,q:q:1:8WTfjZU,10,0,2,get,0");
        assert_eq!(
            (get.kind, get.key.clone()),
            (OpKind::Read, fnv1a64(b"q:q:1:8WTfjZU").to_be_bytes().to_vec())
        );
        assert_eq!(op("3,q:q:1:8WTfjZU,10,180,7,set,3600").key, get.key, "same string, same key");
        assert_eq!(op("4,k,1,5,1,append,0").kind, OpKind::Insert);
        assert_eq!(op("5,k,1,0,1,delete,0").kind, OpKind::Delete);
        assert_eq!(parse_line("# header", int), Ok(None));
        let s16 = KeyFormat::new(16, false).unwrap();
        assert_eq!(parse_line("0,abc,3,0,1,gets,0", s16).unwrap().unwrap().key, b"abc");
        assert!(looks_like("0,abc,3,0,1,gets,0") && !looks_like("READ user1"));
    }

    #[test]
    fn malformed_lines_name_the_problem() {
        let int = KeyFormat::new(8, false).unwrap();
        let err = |l| parse_line(l, int).unwrap_err();
        assert!(err("0,k,1,0,1,get").contains("expected 7"));
        assert!(err("x,k,1,0,1,get,0").contains("timestamp 'x'"));
        assert!(err("0,k,1,0,1,flush,0").contains("unknown operation 'flush'"));
        assert!(err("0,,1,0,1,get,0").contains("empty key"));
        let s4 = KeyFormat::new(9, false).unwrap();
        assert!(parse_line("0,abcdefghij,10,0,1,get,0", s4).unwrap_err().contains("longer than"));
    }
}
