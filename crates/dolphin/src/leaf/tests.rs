use super::*;

fn shape() -> Shape {
    Shape::new(84, 8).unwrap()
}

#[test]
fn layout_is_pinned() {
    let s = shape();
    assert_eq!((s.key_lines, s.per_line, s.cells_at, s.bytes), (3, 7, 256, 1024));
    let keys: Vec<(usize, usize)> =
        [0, 3, 4, 27, 28, 83].iter().map(|&j| (s.key_at(j), s.key_field_of(j))).collect();
    assert_eq!(keys, [(72, 0), (72, 3), (80, 0), (120, 3), (136, 0), (248, 3)]);
    let heads: Vec<usize> = [0, 6, 7, 83].iter().map(|&j| s.head_at(j)).collect();
    assert_eq!(heads, [256, 256, 320, 960]);
    let values: Vec<usize> = [0, 6, 7, 83].iter().map(|&j| s.value_at(j)).collect();
    assert_eq!(values, [264, 312, 328, 1016]);
    // 84 slots is the most a 1 KB leaf holds with 8-byte values (the first build: 36).
    let per_kb = (2..=MAX_SLOTS).take_while(|&n| Shape::new(n, 8).unwrap().bytes <= 1024).last();
    assert_eq!(per_kb, Some(84));
    assert_eq!(Shape::fitting(1024, 8).unwrap(), s, "the default leaf");
    assert_eq!(Shape::new(85, 8).unwrap().bytes, 1152, "a key line and a value line more");
    assert_eq!(Shape::new(36, 8).unwrap().bytes, 64 * (1 + 2 + 6));
    assert_eq!(Shape::new(65, 8).unwrap().bytes, 64 * (1 + 3 + 10), "the paper's 65 slots");
    let sizes: Vec<(usize, usize, usize)> = [16, 24, 32, 56]
        .iter()
        .map(|&w| {
            let s = Shape::new(84, w).unwrap();
            (s.per_line, s.value_at(1) - s.head_at(1), s.bytes)
        })
        .collect();
    assert_eq!(sizes, [(3, 24, 2048), (2, 32, 2944), (1, 8, 5632), (1, 8, 5632)]);
    assert_eq!(Shape::new(84, 12).unwrap().width, 16, "values padded to 8 bytes");
    assert!(Shape::new(1, 8).is_err() && Shape::new(36, 4097).is_err());
    assert!(Shape::new(36, 0).is_err() && Shape::new(257, 8).is_err());
    // Multi-line cells: 100-byte values take two lines, 56 + 63 value bytes, one head each.
    let m = Shape::new(36, 100).unwrap();
    assert_eq!(
        (m.cell, m.per_line, m.cells_at, m.bytes, m.multi_line()),
        (128, 1, 192, 4800, true)
    );
    assert_eq!((m.head_at(1), m.value_at(1)), (320, 328));
    assert_eq!((Shape::new(36, 57).unwrap().cell, Shape::new(36, 120).unwrap().cell), (128, 192));
}

#[test]
fn words_are_pinned() {
    assert_eq!(LineHead::versioned(State::Live, 7, 0x1234).0, 0x1234 << 48 | 1 << 32 | 7);
    assert_eq!(LineHead::new(5).with(3, State::Deleted).0, 2 << 38 | 5);
    assert_eq!(LineHead::new(5).with(6, State::Live).with(0, State::Live).0, 1 << 44 | 1 << 32 | 5);
    assert_eq!(LineHead::versioned(State::Live, 7, 0).locked_by(0).0, 1 << 46 | 1 << 32 | 7);
    let held = LineHead::versioned(State::Live, 7, 3).locked_by(2047);
    assert_eq!(held.0, 3 << 48 | 1 << 46 | 2047 << 34 | 1 << 32 | 7);
    assert_eq!((held.holder(), held.cv(), held.state(0)), (Some(2047), 3, Some(State::Live)));
    assert_eq!(LineHead::versioned(State::Live, 7, 3).holder(), None);
    let taken = held.taken_over_by(2047);
    assert_eq!(taken.0, held.0 | 1 << 45, "the same slot: only the takeover bit changes");
    assert_eq!(taken.taken_over_by(5).0, held.0 & !(2047 << 34) | 5 << 34);
    assert_eq!(taken.holder(), Some(2047));
    assert!(taken.well_formed(1, true));
    assert_eq!((LineHead::mask(2), LineHead::bits(2, State::Live)), (3 << 36, 1 << 36));
    assert_eq!(LineHead(3 << 34).state(1), None);
    assert!(!LineHead(1 << 47 | 1).well_formed(7, true), "bit 47 is never set");
    assert!(!LineHead(1 << 46 | 1).well_formed(7, false), "one-line cells have no lock");
    assert!(held.well_formed(1, true), "a locked multi-line cell names its holder");
    assert!(!LineHead(1 << 34 | 1).well_formed(1, true), "a holder only with the lock");
    assert!(!LineHead(1 << 36 | 1).well_formed(2, false), "no state past the line's cells");
    assert_eq!(key_field(0x0102_0304_0506_07AB), 0x1AB);
    assert_eq!(key_field(0x0102_0304_0506_0700), 0x100, "byte 0 is a key");
    assert_eq!(field_mask(2), 0xFFFF << 32);
}

#[test]
fn encode_then_check_then_read() {
    let s = shape();
    let lo = 0x0102_0304_0506_0700;
    let hi = lo | 0xFF;
    let mut out = Vec::new();
    let pairs = [(lo + 5, [5u8; 8]), (lo, [1; 8]), (lo + 9, [9; 8])];
    encode(
        &s,
        0xAB,
        3,
        lo,
        hi,
        4,
        &[],
        pairs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| (*k, &v[..], if i == 1 { State::Deleted } else { State::Live })),
        &mut out,
    );
    assert_eq!(out.len(), 1024);
    assert_eq!(word(&out, 64), 4, "key line 0's epoch");
    assert_eq!(word(&out, 72), 0x109 << 32 | 0x100 << 16 | 0x105, "keys 0..3 at their fields");
    assert_eq!((word(&out, 80), word(&out, 248)), (0, 0), "free");
    let head = LineHead::new(4).with(0, State::Live).with(1, State::Deleted).with(2, State::Live);
    assert_eq!(word(&out, 256), head.0);
    assert_eq!((&out[264..272], &out[280..288]), (&[5; 8][..], &[9; 8][..]));
    assert_eq!(word(&out, 960), LineHead::new(4).0, "an empty line's head");
    let img = LeafImage::check(&s, &out).expect("a whole image checks");
    assert_eq!((img.rev(), img.spear(), img.nv()), (0xAB, 3, 4));
    assert_eq!((img.key(1), img.key(3)), (lo, 0), "key byte 0 is a key, a free word is not");
    assert_eq!(img.find(lo), None, "deleted");
    assert_eq!(img.state(1), State::Deleted);
    let mut v = Vec::new();
    img.value_into(2, &mut v);
    assert_eq!((v, img.cell_whole(2), img.live_whole()), (vec![9; 8], true, true));
    assert_eq!(img.free_from(0), Some(3));
    assert_eq!(img.live().collect::<Vec<_>>(), [(lo + 5, 0), (lo + 9, 2)]);
    assert_eq!(img.judge(lo), Judge::Here);
    assert_eq!(img.judge(hi + 1), Judge::OtherPrefix);
    let narrow = {
        let mut o = out.clone();
        o[HI..HI + 8].copy_from_slice(&(lo + 6).to_le_bytes());
        o
    };
    let n = LeafImage::check(&s, &narrow).unwrap();
    assert_eq!((n.judge(lo + 7), n.live().count()), (Judge::Right, 1));
    // A re-insert after a delete takes a free slot; a reader that sees both prefers the live one.
    let mut again = out.clone();
    let keys = word(&again, 72) | key_field(lo) << 48;
    put(&mut again, 72, keys);
    assert_eq!(LeafImage::check(&s, &again).unwrap().find(lo), Some(3), "pending");
    put(&mut again, 256, head.with(3, State::Live).0);
    assert_eq!(LeafImage::check(&s, &again).unwrap().find(lo), Some(3));
    put(&mut again, 256, head.with(1, State::Live).with(3, State::Empty).0);
    assert_eq!(LeafImage::check(&s, &again).unwrap().find(lo), Some(1));
    // The line that turns a pending cell live.
    let (at, line) = live_head(&s, &out, 3);
    assert_eq!((at, word(&line, 0)), (256, head.with(3, State::Live).0));
}

#[test]
fn torn_and_unwritten_images_are_refused() {
    let s = shape();
    let lo = 0x0A00;
    let (mut old, mut new) = (Vec::new(), Vec::new());
    let v = [7u8; 8];
    encode(&s, 0, 0, lo, lo | 0xFF, 1, &[], [(lo + 1, &v[..], State::Live)], &mut old);
    encode(&s, 0, 0, lo, lo + 0x7F, 2, &[], [(lo + 2, &v[..], State::Live)], &mut new);
    // Every mix of whole lines from two epochs other than all-old and all-new is refused.
    let lines = s.bytes / LINE;
    for mask in 1..(1u32 << lines) - 1 {
        let mut mix = old.clone();
        for l in (0..lines).filter(|l| mask >> l & 1 == 1) {
            mix[l * LINE..(l + 1) * LINE].copy_from_slice(&new[l * LINE..(l + 1) * LINE]);
        }
        assert_eq!(LeafImage::check(&s, &mix).err(), Some(Refused::Torn), "mask {mask:#x}");
    }
    assert!(LeafImage::check(&s, &old).is_ok() && LeafImage::check(&s, &new).is_ok());
    assert_eq!(LeafImage::check(&s, &vec![0; s.bytes]).err(), Some(Refused::NotALeaf));
    assert_eq!(LeafImage::check(&s, &old[..512]).err(), Some(Refused::NotALeaf));
}

#[test]
fn multi_line_cells_carry_their_version_on_every_line() {
    let s = Shape::new(8, 150).unwrap();
    assert_eq!(s.cell, 192, "56 + 63 + 63 >= 150: three lines");
    let lo = 0x0A00;
    let v: Vec<u8> = (0..150).map(|i| i as u8 + 1).collect();
    let mut img = Vec::new();
    encode(&s, 0, 0, lo, lo | 0xFF, 3, &[], [(lo + 1, &v[..], State::Live)], &mut img);
    let at = s.head_at(0);
    // Fresh memory: version 1 everywhere; line t starts with its cl byte.
    assert_eq!(word(&img, at), LineHead::versioned(State::Live, 3, 1).0);
    assert_eq!((img[at + 64], img[at + 128]), (1, 1));
    assert_eq!((img[at + 8], img[at + 63], img[at + 65], img[at + 128 + 31]), (1, 56, 57, 150));
    let leaf = LeafImage::check(&s, &img).unwrap();
    let mut got = Vec::new();
    leaf.value_into(0, &mut got);
    assert_eq!((got, leaf.cell_whole(0)), (v.clone(), true));
    // A rewrite in place: every cell at its old version + 2.
    let mut again = Vec::new();
    let pair = [(lo + 1, &v[..], State::Live)];
    encode(&s, 0, 0, lo, lo | 0xFF, 4, &leaf.cvs(), pair, &mut again);
    assert_eq!(LeafImage::check(&s, &again).unwrap().head(5).cv(), 3);
    // A writer's version 2 landing line by line: any mix of its lines with version 1's is
    // refused, the whole of either taken.
    let mut next = [0u8; 192];
    let w: Vec<u8> = v.iter().map(|b| b ^ 0xFF).collect();
    encode_cell(&s, LineHead::versioned(State::Live, 3, 2), &w, &mut next);
    for mask in 0..8u32 {
        let mut mix = img.clone();
        for l in (0..3).filter(|l| mask >> l & 1 == 1) {
            mix[at + 64 * l..at + 64 * (l + 1)].copy_from_slice(&next[64 * l..64 * (l + 1)]);
        }
        let m = LeafImage::check(&s, &mix).unwrap();
        assert_eq!(m.cell_whole(0), mask == 0 || mask == 7, "mask {mask:#b}");
        assert_eq!(m.live_whole(), mask == 0 || mask == 7);
    }
}

#[test]
fn split_or_compact() {
    let s = shape();
    assert_eq!(split_at(&s, 84), Some(42));
    assert_eq!(split_at(&s, 64), Some(32));
    assert_eq!(split_at(&s, 63), None, "three quarters live: compact in place");
}

/// The default leaf is the paper's 1 KB at every value size: fewer slots as values grow, never
/// fewer than 2.
#[test]
fn the_default_leaf_fits_in_a_kilobyte_at_every_value_size() {
    let got: Vec<(usize, usize, usize)> = [8, 16, 32, 56, 100, 400, 1000]
        .iter()
        .map(|&v| {
            let f = Shape::fitting(1024, v).unwrap();
            (v, f.slots, f.bytes)
        })
        .collect();
    assert_eq!(
        got,
        [
            (8, 84, 1024),
            (16, 39, 1024),
            (32, 14, 1024),
            (56, 14, 1024),
            (100, 7, 1024),
            (400, 2, 1024),
            (1000, 2, 2176)
        ]
    );
    for &(v, slots, bytes) in &got {
        assert!(bytes <= 1024 || slots == 2, "{v}-byte values");
        if bytes <= 1024 && slots < MAX_SLOTS {
            assert!(Shape::new(slots + 1, v).unwrap().bytes > 1024, "{v}: one more would fit");
        }
    }
}
