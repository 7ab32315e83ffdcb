//! Trace replay: real YCSB output and the compact `OP key [len]` form.
//!
//! Accepted lines (operation names case-insensitive):
//!
//! ```text
//! INSERT usertable user6284781860667377211 [ field0=... ]     YCSB BasicDB, verbose
//! READ usertable user6284781860667377211 [ <all fields>]
//! UPDATE usertable user123 [ field0=... ]
//! SCAN usertable user123 57 [ <all fields>]
//! DELETE usertable user123
//! READ 6284781860667377211                                    compact (CHIME/SMART pipeline)
//! SCAN 6284781860667377211 57
//! RMW user123
//! ```
//!
//! Empty lines and lines starting with `#` or `[` (YCSB's `[OVERALL]` statistics) are skipped.
//! Anything else is an error naming the file and line.

use std::path::{Path, PathBuf};

use crate::workload::{KeyFormat, Op, OpKind};

/// A trace line that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {message}", path.display())]
pub struct TraceError {
    pub path: PathBuf,
    pub line: usize,
    pub message: String,
}

/// Parses one line; `Ok(None)` for lines to skip.
pub fn parse_line(line: &str, format: KeyFormat) -> Result<Option<Op>, String> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') || t.starts_with('[') {
        return Ok(None);
    }
    // Drop YCSB's bracketed field list.
    let head = t.split_once(" [").map_or(t, |(h, _)| h).trim();
    let mut words = head.split_whitespace();
    let op = words.next().expect("non-empty line has a word");
    let kind = match op.to_ascii_uppercase().as_str() {
        "READ" => OpKind::Read,
        "INSERT" => OpKind::Insert,
        "UPDATE" => OpKind::Update,
        "SCAN" => OpKind::Scan,
        "DELETE" => OpKind::Delete,
        "RMW" | "READMODIFYWRITE" => OpKind::ReadModifyWrite,
        _ => return Err(format!("unknown operation '{op}'")),
    };
    let mut rest: Vec<&str> = words.collect();
    if rest.len() >= 2 && rest[0] == "usertable" {
        rest.remove(0);
    }
    let key_word = *rest.first().ok_or_else(|| format!("{op} without a key"))?;
    let key = parse_key(key_word, format)?;
    let scan_len = if kind == OpKind::Scan {
        let n = rest.get(1).ok_or_else(|| "SCAN without a record count".to_string())?;
        let n: usize = n.parse().map_err(|_| format!("scan count '{n}' is not a number"))?;
        if n == 0 {
            return Err("scan count must be positive".into());
        }
        n
    } else {
        if rest.len() > 1 && kind != OpKind::Insert && kind != OpKind::Update {
            // The compact form may carry a length for any op; it must be a number.
            rest[1]
                .parse::<u64>()
                .map_err(|_| format!("unexpected '{}' after the key", rest[1]))?;
        }
        0
    };
    Ok(Some(Op { kind, key, scan_len, insert_number: None }))
}

fn parse_key(word: &str, format: KeyFormat) -> Result<Vec<u8>, String> {
    let digits = word.strip_prefix("user").unwrap_or(word);
    if format.size == 8 {
        let v: u64 = digits.parse().map_err(|_| {
            format!("key '{word}' is not an integer (use --key-size > 8 for string keys)")
        })?;
        return Ok(v.to_be_bytes().to_vec());
    }
    if word.len() > format.size {
        return Err(format!("key '{word}' is longer than the key size of {} bytes", format.size));
    }
    Ok(word.as_bytes().to_vec())
}

/// Parses a whole trace.
pub fn parse(text: &str, path: &Path, format: KeyFormat) -> Result<Vec<Op>, TraceError> {
    let mut ops = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match parse_line(line, format) {
            Ok(Some(op)) => ops.push(op),
            Ok(None) => {}
            Err(message) => {
                return Err(TraceError { path: path.to_path_buf(), line: i + 1, message })
            }
        }
    }
    Ok(ops)
}

/// Reads and parses a trace file.
pub fn read(path: &Path, format: KeyFormat) -> Result<Vec<Op>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| TraceError {
        path: path.to_path_buf(),
        line: 0,
        message: format!("cannot read trace: {e}"),
    })?;
    parse(&text, path, format)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> KeyFormat {
        KeyFormat::new(8, false).unwrap()
    }

    #[test]
    fn ycsb_basicdb_lines() {
        let text = "\
INSERT usertable user6284781860667377211 [ field1=abc field0=def ]
READ usertable user8517097267634966620 [ <all fields>]
UPDATE usertable user1820151046732198393 [ field3=xyz ]
SCAN usertable user2071219101098386137 56 [ <all fields>]
DELETE usertable user5
[OVERALL], RunTime(ms), 123

# comment
";
        let ops = parse(text, Path::new("t.txt"), int()).unwrap();
        let kinds: Vec<_> = ops.iter().map(|o| o.kind).collect();
        assert_eq!(
            kinds,
            [OpKind::Insert, OpKind::Read, OpKind::Update, OpKind::Scan, OpKind::Delete]
        );
        assert_eq!(ops[0].key, 6284781860667377211u64.to_be_bytes());
        assert_eq!(ops[3].scan_len, 56);
        let s = parse(text, Path::new("t.txt"), KeyFormat::new(24, false).unwrap()).unwrap();
        assert_eq!(s[0].key, b"user6284781860667377211");
    }

    #[test]
    fn compact_lines() {
        let ops =
            parse("read 42\nSCAN 7 3\nRMW user9\ninsert 11 8\n", Path::new("c"), int()).unwrap();
        assert_eq!(ops[0].key, 42u64.to_be_bytes());
        assert_eq!((ops[1].kind, ops[1].scan_len), (OpKind::Scan, 3));
        assert_eq!(ops[2].kind, OpKind::ReadModifyWrite);
        assert_eq!(ops[3].kind, OpKind::Insert);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let bad = [
            ("READ 1\nFROB 2\n", 2, "unknown operation 'FROB'"),
            ("READ\n", 1, "without a key"),
            ("SCAN 5\n", 1, "without a record count"),
            ("SCAN 5 x\n", 1, "not a number"),
            ("SCAN 5 0\n", 1, "positive"),
            ("\n\nREAD userX\n", 3, "not an integer"),
            ("READ 5 junk\n", 1, "unexpected 'junk'"),
        ];
        for (text, line, msg) in bad {
            let e = parse(text, Path::new("w.trace"), int()).unwrap_err();
            assert_eq!(e.line, line, "{text:?}");
            assert!(e.message.contains(msg), "{e}");
            assert!(e.to_string().starts_with(&format!("w.trace:{line}: ")), "{e}");
        }
        let e =
            parse("READ user123456789012\n", Path::new("s"), KeyFormat::new(10, false).unwrap())
                .unwrap_err();
        assert!(e.message.contains("longer than the key size"));
        let e = read(Path::new("/no/such/trace"), int()).unwrap_err();
        assert!(e.to_string().contains("cannot read trace"));
    }
}
