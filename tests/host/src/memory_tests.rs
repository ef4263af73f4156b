use crate::vring::mem_table::*;

const LIMIT: u64 = 1 << 47;

fn r(gpa: u64, size: u64, uaddr: u64) -> Region {
    Region::new(gpa, size, uaddr, LIMIT).unwrap()
}

#[test]
fn region_rejects_zero_wrap_and_kernel_addresses() {
    assert_eq!(Region::new(0, 0, 0x1000, LIMIT), Err(MemError::BadSize));
    assert_eq!(
        Region::new(u64::MAX - 0xfff, 0x2000, 0x1000, LIMIT),
        Err(MemError::BadSize)
    );
    assert_eq!(
        Region::new(0, 0x2000, u64::MAX - 0xfff, LIMIT),
        Err(MemError::BadSize)
    );
    // Byte granularity, as in the C driver (defect 11: unaligned regions
    // used to be refused).
    assert!(Region::new(0x10, 0x1000, 0x1000, LIMIT).is_ok());
    assert!(Region::new(0, 0x1001, 0x1000, LIMIT).is_ok());
    assert!(Region::new(0, 0x1000, 0x1008, LIMIT).is_ok());
    assert!(Region::new(0x123, 1, 0x7, LIMIT).is_ok());
    assert_eq!(
        Region::new(0, 0x2000, LIMIT - 0x1000, LIMIT),
        Err(MemError::BadUserAddr)
    );
    assert!(Region::new(0, 0x1000, LIMIT - 0x1000, LIMIT).is_ok());
}

#[test]
fn validate_sorts_and_rejects_too_many() {
    let mut v = vec![r(0x10000, 0x1000, 0x5000), r(0, 0x1000, 0x9000)];
    validate(&mut v, 64).unwrap();
    assert_eq!(v[0].gpa(), 0);
    // Overlaps are taken, as the C driver takes them.
    let mut v = vec![r(0, 0x2000, 0), r(0x1000, 0x1000, 0x10000)];
    validate(&mut v, 64).unwrap();
    // Adjacent is fine.
    let mut v = vec![r(0, 0x1000, 0), r(0x1000, 0x1000, 0x10000)];
    validate(&mut v, 64).unwrap();
    let mut v = vec![r(0, 0x1000, 0), r(0x1000, 0x1000, 0x10000)];
    assert_eq!(validate(&mut v, 1), Err(MemError::TooMany));
}

fn segs(t: &[Region], gpa: u64, len: u64) -> Result<Vec<Segment>, TranslateError> {
    let mut out = Vec::new();
    for_each_piece(t, gpa, len, |s| {
        out.push(s);
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn translate_splits_across_regions_and_refuses_holes() {
    let mut t = vec![
        r(0, 0x1000, 0x100000),
        r(0x1000, 0x1000, 0x900000),
        r(0x3000, 0x1000, 0x500000),
    ];
    validate(&mut t, 64).unwrap();
    assert_eq!(
        segs(&t, 0x10, 0x20).unwrap(),
        vec![Segment {
            gpa: 0x10,
            uaddr: 0x100010,
            len: 0x20
        }]
    );
    // Crosses from region 0 into region 1: two segments, each bounded.
    assert_eq!(
        segs(&t, 0xff0, 0x20).unwrap(),
        vec![
            Segment {
                gpa: 0xff0,
                uaddr: 0x100ff0,
                len: 0x10
            },
            Segment {
                gpa: 0x1000,
                uaddr: 0x900000,
                len: 0x10
            }
        ]
    );
    // Runs into the hole at 0x2000: refused.
    assert_eq!(segs(&t, 0x1ff0, 0x20), Err(TranslateError::NotMapped));
    assert_eq!(segs(&t, 0x4000, 1), Err(TranslateError::NotMapped));
    assert_eq!(segs(&t, u64::MAX, 2), Err(TranslateError::NotMapped));
    assert_eq!(segs(&t, 0x3000, 0).unwrap(), vec![]);
    assert_eq!(segs(&[], 0, 1), Err(TranslateError::NotMapped));
}

#[test]
fn translate_unaligned_odd_sized_regions() {
    // Regions meeting at byte 0x1003, then a one-byte region.
    let mut t = vec![
        r(0x1003, 0x7, 0x900001),
        r(0x3, 0x1000, 0x100005),
        r(0x100a, 1, 0x700000),
    ];
    validate(&mut t, 64).unwrap();
    assert_eq!(
        segs(&t, 0x1000, 0xb).unwrap(),
        vec![
            Segment {
                gpa: 0x1000,
                uaddr: 0x101002,
                len: 3
            },
            Segment {
                gpa: 0x1003,
                uaddr: 0x900001,
                len: 7
            },
            Segment {
                gpa: 0x100a,
                uaddr: 0x700000,
                len: 1
            }
        ]
    );
    assert_eq!(segs(&t, 0x2, 2), Err(TranslateError::NotMapped));
    assert_eq!(segs(&t, 0x100a, 2), Err(TranslateError::NotMapped));
}

#[test]
fn overlapping_regions_translate_as_the_c_interval_tree_does() {
    // A covers [0, 0x3000), B [0x1000, 0x1800) inside it, C [0x2800, 0x4000)
    // overlapping A's end, D with B's start, given after B.
    let mut t = vec![
        r(0x2800, 0x1800, 0x300000),
        r(0x1000, 0x800, 0x200000),
        r(0, 0x3000, 0x100000),
        r(0x1000, 0x100, 0x400000),
    ];
    validate(&mut t, 64).unwrap();
    // Inside B and D: the lowest start containing it is A.
    assert_eq!(
        segs(&t, 0x1200, 0x10).unwrap(),
        vec![Segment {
            gpa: 0x1200,
            uaddr: 0x101200,
            len: 0x10
        }]
    );
    // A to its end, then C (A's end is past C's start, so A wins up to 0x3000).
    assert_eq!(
        segs(&t, 0x2ff0, 0x20).unwrap(),
        vec![
            Segment {
                gpa: 0x2ff0,
                uaddr: 0x102ff0,
                len: 0x10
            },
            Segment {
                gpa: 0x3000,
                uaddr: 0x300800,
                len: 0x10
            }
        ]
    );
    assert_eq!(segs(&t, 0x4000, 1), Err(TranslateError::NotMapped));
    // Without A: B and D share a start; B was given first.
    let mut t = vec![
        r(0x1000, 0x800, 0x200000),
        r(0x1000, 0x100, 0x400000),
        r(0x3000, 0x10, 0x500000),
    ];
    validate(&mut t, 64).unwrap();
    assert_eq!(
        segs(&t, 0x1010, 4).unwrap(),
        vec![Segment {
            gpa: 0x1010,
            uaddr: 0x200010,
            len: 4
        }]
    );
    assert_eq!(segs(&t, 0x1900, 4), Err(TranslateError::NotMapped));
    assert_eq!(
        segs(&t, 0x3008, 8).unwrap(),
        vec![Segment {
            gpa: 0x3008,
            uaddr: 0x500008,
            len: 8
        }]
    );
}

/// The lookup against a model of the C rule (scan for the first region in
/// given-order-stable sorted order that contains the address), on random
/// overlapping tables.
#[test]
fn random_overlapping_tables_match_the_model() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let n = (rnd() % 8 + 1) as usize;
        let given: Vec<Region> = (0..n)
            .map(|i| r(rnd() % 0x800, rnd() % 0x300 + 1, 0x10000 * (i as u64 + 1)))
            .collect();
        let mut t = given.clone();
        validate(&mut t, 64).unwrap();
        for gpa in 0..0xb00u64 {
            let model = given
                .iter()
                .filter(|g| g.gpa() <= gpa && gpa < g.gpa() + g.size())
                .min_by_key(|g| g.gpa())
                .map(|g| g.uaddr() + (gpa - g.gpa()));
            let got = segs(&t, gpa, 1).ok().map(|v| v[0].uaddr);
            assert_eq!(got, model, "gpa {gpa:#x} in {given:?}");
        }
    }
}

#[test]
fn guest_address_reverses_translate() {
    let mut regions = vec![
        r(0x10_0000, 0x1000, 0x7000_0000),
        r(0, 0x8000, 0x5000_0000),
        r(0x20_0000, 0x4000, 0x6000_0000),
    ];
    validate(&mut regions, 8).unwrap();
    // Every range inside one region comes back to the gpa it translates from.
    for (gpa, len) in [
        (0u64, 16u64),
        (0x7ff0, 16),
        (0x10_0800, 0x800),
        (0x20_0000, 0x4000),
        (0x20_3ffe, 2),
    ] {
        let mut uaddr = None;
        for_each_piece(&regions, gpa, len, |seg| {
            uaddr.get_or_insert(seg.uaddr);
            Ok::<(), TranslateError>(())
        })
        .unwrap();
        assert_eq!(
            guest_address(&regions, uaddr.unwrap(), len),
            Some(gpa),
            "gpa {gpa:#x} len {len:#x}"
        );
    }
    // Outside every region, across a region's end, or wrapping: none.
    assert_eq!(guest_address(&regions, 0x5000_8000, 1), None);
    assert_eq!(guest_address(&regions, 0x4fff_ffff, 2), None);
    assert_eq!(guest_address(&regions, 0x5000_7ff8, 16), None);
    assert_eq!(guest_address(&regions, u64::MAX - 4, 16), None);
    assert_eq!(guest_address(&[], 0x5000_0000, 1), None);
}
