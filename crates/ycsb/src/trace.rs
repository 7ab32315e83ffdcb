//! Trace replay: real YCSB output, the compact `OP key [len]` form, and Twitter's cache traces
//! ([`crate::twitter`], recognised by their CSV lines).
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
//! Empty lines and lines starting with `#` or `[` (YCSB's `[OVERALL]` statistics), `*` or `"`
//! (the properties list BasicDB prints when it starts) are skipped. Anything else is an error
//! naming the file and line.
//!
//! Keys: with 8-byte integer keys the word after `user` is the integer; with fixed-size string
//! keys the word is the key; with [`KeyStyle::Ycsb`] keys a `user…` word is the key and a bare
//! number (the compact form, which drops `user`) gets `user` back, so both give the bytes
//! [`KeyFormat::key`] makes.
//!
//! A load trace ([`read_load`]) is the output of `ycsb load`: INSERT lines only, whose keys are
//! loaded in file order.
//!
//! Limits, so that no file makes the reader misbehave: a line is at most [`MAX_LINE`] bytes, a
//! trace holds no NUL byte (binary data such as `/dev/zero` is refused at its first line), a scan
//! asks for at most [`MAX_SCAN`] pairs, and errors quote at most [`QUOTE`] characters of what
//! they name.

use std::path::{Path, PathBuf};

use crate::workload::{KeyFormat, KeyStyle, Op, OpKind, YCSB_MAX_KEY_LEN};

/// Longest trace line accepted, in bytes.
pub const MAX_LINE: usize = 64 << 10;
/// Largest scan count a trace may ask for.
pub const MAX_SCAN: usize = 1 << 20;
/// Characters of a word an error quotes.
pub const QUOTE: usize = 40;

/// `word` for an error message: at most [`QUOTE`] characters.
pub fn quote(word: &str) -> String {
    match word.char_indices().nth(QUOTE) {
        Some((at, _)) => format!("{}… ({} bytes)", &word[..at], word.len()),
        None => word.to_string(),
    }
}

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
    if t.is_empty() || t.starts_with(['#', '[', '*', '"']) {
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
        _ => return Err(format!("unknown operation '{}'", quote(op))),
    };
    let mut rest: Vec<&str> = words.collect();
    if rest.len() >= 2 && rest[0] == "usertable" {
        rest.remove(0);
    }
    let key_word = *rest.first().ok_or_else(|| format!("{op} without a key"))?;
    let key = parse_key(key_word, format)?;
    let scan_len = if kind == OpKind::Scan {
        let n = rest.get(1).ok_or_else(|| "SCAN without a record count".to_string())?;
        let n: usize =
            n.parse().map_err(|_| format!("scan count '{}' is not a number", quote(n)))?;
        if n == 0 || n > MAX_SCAN {
            return Err(format!("scan count {n} is not in 1..={MAX_SCAN}"));
        }
        n
    } else {
        if rest.len() > 1 && kind != OpKind::Insert && kind != OpKind::Update {
            // The compact form may carry a length for any op; it must be a number.
            rest[1]
                .parse::<u64>()
                .map_err(|_| format!("unexpected '{}' after the key", quote(rest[1])))?;
        }
        0
    };
    Ok(Some(Op { kind, key, scan_len, insert_number: None }))
}

fn parse_key(word: &str, format: KeyFormat) -> Result<Vec<u8>, String> {
    let digits = word.strip_prefix("user").unwrap_or(word);
    if format.style == KeyStyle::Ycsb {
        // `user` and a Java long in decimal; kept as written (a trace made with zeropadding > 1
        // has leading zeros, and those are its keys).
        let unsigned = digits.strip_prefix('-').unwrap_or(digits);
        if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "key '{}' is not 'user' and a decimal number, as YCSB writes keys",
                quote(word)
            ));
        }
        let key = format!("user{digits}");
        if key.len() > YCSB_MAX_KEY_LEN {
            return Err(format!(
                "key '{}' is longer than the longest YCSB key ({YCSB_MAX_KEY_LEN} bytes)",
                quote(word)
            ));
        }
        return Ok(key.into_bytes());
    }
    if format.is_integer() {
        let v: u64 = digits.parse().map_err(|_| {
            format!("key '{}' is not an integer (use --key-size > 8 for string keys)", quote(word))
        })?;
        return Ok(v.to_be_bytes().to_vec());
    }
    if word.len() > format.size {
        return Err(format!(
            "key '{}' is longer than the key size of {} bytes",
            quote(word),
            format.size
        ));
    }
    Ok(word.as_bytes().to_vec())
}

/// The operations of `text` with their (1-based) line numbers, or errors naming `path` and the
/// line; callers stop at the first error.
fn numbered_ops<'a>(
    text: &'a str,
    path: &'a Path,
    format: KeyFormat,
) -> impl Iterator<Item = Result<(usize, Op), TraceError>> + 'a {
    // Twitter cache traces are told apart by their first request line.
    let twitter = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(crate::twitter::looks_like);
    let parse = if twitter { crate::twitter::parse_line } else { parse_line };
    text.lines().enumerate().filter_map(move |(i, line)| match parse(line, format) {
        Ok(Some(op)) => Some(Ok((i + 1, op))),
        Ok(None) => None,
        Err(message) => Some(Err(TraceError { path: path.to_path_buf(), line: i + 1, message })),
    })
}

/// Parses a whole trace.
pub fn parse(text: &str, path: &Path, format: KeyFormat) -> Result<Vec<Op>, TraceError> {
    numbered_ops(text, path, format).map(|r| r.map(|(_, op)| op)).collect()
}

/// Parses a load trace: the keys of its INSERT lines, in file order. Any other operation is an
/// error naming its line, and so is a trace with no INSERT line at all (reported as line 0).
pub fn parse_load(text: &str, path: &Path, format: KeyFormat) -> Result<Vec<Vec<u8>>, TraceError> {
    let mut keys = Vec::new();
    for r in numbered_ops(text, path, format) {
        let (line, op) = r?;
        if op.kind != OpKind::Insert {
            return Err(TraceError {
                path: path.to_path_buf(),
                line,
                message: format!(
                    "{} in a load trace, which may hold only INSERT lines",
                    op.kind.name().to_ascii_uppercase()
                ),
            });
        }
        keys.push(op.key);
    }
    if keys.is_empty() {
        return Err(TraceError {
            path: path.to_path_buf(),
            line: 0,
            message: "load trace has no INSERT lines".into(),
        });
    }
    Ok(keys)
}

/// Reads a trace file as text, a line at a time: a line longer than [`MAX_LINE`], a NUL byte
/// or bytes that are not UTF-8 end it with an error naming the line, so binary data and
/// endless files (`/dev/zero`) are refused at once instead of filling memory.
fn read_text(path: &Path) -> Result<String, TraceError> {
    use std::io::{BufRead, Read};
    let fail = |line, message: String| TraceError { path: path.to_path_buf(), line, message };
    let file = std::fs::File::open(path).map_err(|e| fail(0, format!("cannot read trace: {e}")))?;
    let mut r = std::io::BufReader::new(file);
    let (mut text, mut buf) = (String::new(), Vec::new());
    for n in 1.. {
        buf.clear();
        let got = (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| fail(n, format!("cannot read trace: {e}")))?;
        if got == 0 {
            break;
        }
        if buf.len() > MAX_LINE {
            return Err(fail(n, format!("line longer than {MAX_LINE} bytes: not a trace")));
        }
        if buf.contains(&0) {
            return Err(fail(n, "a NUL byte: binary data, not a trace".into()));
        }
        let line = std::str::from_utf8(&buf)
            .map_err(|_| fail(n, "bytes that are not UTF-8: not a text trace".into()))?;
        text.push_str(line);
    }
    Ok(text)
}

/// Reads and parses a trace file.
pub fn read(path: &Path, format: KeyFormat) -> Result<Vec<Op>, TraceError> {
    parse(&read_text(path)?, path, format)
}

/// Reads a load trace (the output of `ycsb load`, or compact `INSERT key` lines): the keys to
/// load, in file order. See [`parse_load`].
pub fn read_load(path: &Path, format: KeyFormat) -> Result<Vec<Vec<u8>>, TraceError> {
    parse_load(&read_text(path)?, path, format)
}

/// The distinct keys of `ops` in order of first appearance, and each op's key number in that
/// order: what warms an index before a trace is replayed, and what folds a trace's keys
/// ([`KeyFormat::folded`]) so they are dense like a generated load's.
pub fn first_seen(ops: &[Op]) -> (Vec<u64>, Vec<Vec<u8>>) {
    let mut numbers = Vec::with_capacity(ops.len());
    let mut seen = std::collections::HashMap::new();
    let mut keys = Vec::new();
    for op in ops {
        let n = *seen.entry(op.key.as_slice()).or_insert_with(|| {
            keys.push(op.key.clone());
            keys.len() as u64 - 1
        });
        numbers.push(n);
    }
    (numbers, keys)
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
            ("SCAN 5 0\n", 1, "scan count 0 is not in 1..="),
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

    #[test]
    fn ycsb_keys_in_traces_are_the_generator_s() {
        let f = KeyFormat::ycsb(false);
        let read = |line: &str, f| parse_line(line, f).unwrap().unwrap();
        let op = read("READ usertable user6284781860667377211 [ field0 ]", f);
        assert_eq!((op.kind, op.key), (OpKind::Read, f.key(0)));
        assert_eq!(read("READ usertable user412164360235391016 [ <all fields>]", f).key, f.key(13));
        let op = read("SCAN usertable user8517097267634966620 56 [ <all fields>]", f);
        assert_eq!((op.key, op.scan_len), (f.key(1), 56));
        assert_eq!(read("UPDATE usertable user1820151046732198393 [ field0=a ]", f).key, f.key(2));
        // The compact form drops "user"; the key gets it back.
        assert_eq!(read("READ 6284781860667377211", f).key, f.key(0));
        assert_eq!(read("RMW 412164360235391016 8", f).key, f.key(13));
        let o = KeyFormat::ycsb(true);
        assert_eq!(read("READ usertable user41 [ <all fields>]", o).key, o.key(41));
        assert_eq!(read("INSERT 0", o).key, b"user0");
        assert_eq!(read("READ user-9223372036854775808", f).key, f.key_of_value(1 << 63));
        for (line, msg) in [
            ("READ usertable userX [ <all fields>]", "is not 'user' and a decimal number"),
            ("READ user", "is not 'user' and a decimal number"),
            ("READ user12a", "is not 'user' and a decimal number"),
            ("READ user123456789012345678901", "longer than the longest YCSB key (24 bytes)"),
        ] {
            let e = parse_line(line, f).unwrap_err();
            assert!(e.contains(msg), "{line}: {e}");
        }
    }

    fn testdata(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata").join(name)
    }

    #[test]
    fn load_trace_of_real_ycsb_output() {
        // `ycsb load basic` (YCSB 0.17.0, BasicDB, basicdb.verbose=true, recordcount=20,
        // fieldcount=1, fieldlength=8): BasicDB's properties list, 20 INSERT lines, statistics.
        let path = testdata("ycsb-0.17-load-20.txt");
        let f = KeyFormat::ycsb(false);
        let keys = read_load(&path, f).unwrap();
        assert_eq!(keys, crate::workload::load_keys(f, 20, 0, 1).collect::<Vec<_>>());
        assert_eq!(keys[13], b"user412164360235391016");
        let ints = read_load(&path, int()).unwrap();
        let want: Vec<_> =
            (0..20).map(|n| crate::generators::fnvhash64(n).to_be_bytes().to_vec()).collect();
        assert_eq!(ints, want);
    }

    #[test]
    fn load_trace_compact_form() {
        let text = "# load\nINSERT 5\ninsert user7 8\n\nINSERT usertable user9 [ field0=x ]\n";
        let keys = parse_load(text, Path::new("l"), int()).unwrap();
        assert_eq!(keys, [5u64, 7, 9].map(|v| v.to_be_bytes().to_vec()));
        let keys = parse_load(text, Path::new("l"), KeyFormat::ycsb(true)).unwrap();
        assert_eq!(keys, [b"user5".to_vec(), b"user7".to_vec(), b"user9".to_vec()]);
    }

    #[test]
    fn load_trace_rejects_other_operations() {
        let text = "INSERT usertable user1 [ field0=x ]\n\nREAD usertable user1 [ <all fields>]\n";
        let e = parse_load(text, Path::new("load.txt"), int()).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().starts_with("load.txt:3: READ in a load trace"), "{e}");
        let e = parse_load("INSERT 1\nRMW 1\n", Path::new("c"), int()).unwrap_err();
        assert_eq!((e.line, e.message.starts_with("RMW ")), (2, true), "{e}");
    }

    #[test]
    fn load_trace_without_inserts_is_an_error() {
        let path = std::env::temp_dir().join(format!("dmindex-ycsb-empty-{}", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let e = read_load(&path, int()).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((e.path, e.line), (path, 0));
        assert!(e.message.contains("no INSERT lines"), "{}", e.message);
        // Only BasicDB's banner and YCSB's statistics: no keys either.
        let text = "***** properties *****\n\"db\"=\"site.ycsb.BasicDB\"\n*****\n[OVERALL], RunTime(ms), 1\n";
        let e = parse_load(text, Path::new("s"), int()).unwrap_err();
        assert_eq!(e.to_string(), "s:0: load trace has no INSERT lines");
        let e = read_load(Path::new("/no/such/load"), int()).unwrap_err();
        assert!(e.to_string().contains("cannot read trace"), "{e}");
    }

    #[test]
    fn load_trace_malformed_lines_name_file_and_line() {
        let f = KeyFormat::ycsb(false);
        for (text, line, msg) in [
            ("INSERT usertable user1 [ field0=x ]\nFROB 2\n", 2, "unknown operation 'FROB'"),
            ("INSERT 1\nINSERT\n", 2, "INSERT without a key"),
            ("INSERT usertable userABC [ field0=x ]\n", 1, "not 'user' and a decimal number"),
        ] {
            let e = parse_load(text, Path::new("bad.load"), f).unwrap_err();
            assert_eq!(e.line, line, "{text:?}");
            assert!(e.message.contains(msg), "{e}");
            assert!(e.to_string().starts_with(&format!("bad.load:{line}: ")), "{e}");
        }
    }

    /// Hostile files: a scan count past the limit, a line with no end, binary data, a huge
    /// word (quoted short), bytes that are not UTF-8 — each an error naming its line.
    #[test]
    fn hostile_traces_are_refused_with_short_errors() {
        let e = parse("SCAN 5 18446744073709551615\n", Path::new("t"), int()).unwrap_err();
        assert!(e.message.contains("is not in 1..=1048576"), "{e}");
        assert!(parse(&format!("SCAN 5 {MAX_SCAN}\n"), Path::new("t"), int()).is_ok());
        let long = format!("READ {}\n", "7".repeat(10_000));
        let e = parse(&long, Path::new("t"), int()).unwrap_err();
        assert!(e.message.len() < 200, "{e}");
        assert!(e.message.contains("… (10000 bytes)"), "{e}");
        let dir = std::env::temp_dir().join(format!("dmindex-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes, line, msg) in [
            ("zeros", vec![0u8; 100], 1, "NUL byte"),
            ("endless", vec![b'7'; MAX_LINE + 10], 1, "line longer than"),
            ("latin1", b"READ 1\nREAD \xe9\n".to_vec(), 2, "not UTF-8"),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            let e = read(&p, int()).unwrap_err();
            assert_eq!(e.line, line, "{name}: {e}");
            assert!(e.message.contains(msg), "{name}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(quote("short"), "short");
    }
}
