use crate::iotlb_model::*;
use crate::random_tests::Rng;
use crate::vring::iotlb::message::{FrameError, MSG_MISS};
use crate::vring::iotlb::*;
use crate::vring::mem_table::{Access, Segment, TranslateError};
use crate::vring::Stop;

fn table(capacity: usize) -> Iotlb<Vec<Mapping>> {
    Iotlb::new(vec![Mapping::default(); capacity])
}

const RW: u8 = ACCESS_RO | ACCESS_WO;

#[test]
fn update_translates_and_checks_permissions() {
    let mut t = table(8);
    t.update(0x1000, 0x1000, 0x7000_0000, ACCESS_RO, USER_LIMIT)
        .unwrap();
    t.update(0x2000, 0x1000, 0x7100_0000, ACCESS_WO, USER_LIMIT)
        .unwrap();
    // A read across both: the second refuses reads, at its first byte.
    let (got, err) = pieces(&t, 0x1ff0, 0x20, Access::Read);
    assert_eq!(
        got,
        vec![Segment {
            gpa: 0x1ff0,
            uaddr: 0x7000_0ff0,
            len: 0x10
        }]
    );
    assert_eq!(
        err,
        Some(TranslateError::Denied {
            iova: 0x2000,
            access: Access::Read
        })
    );
    // A write into the read-only mapping is refused.
    assert_eq!(
        pieces(&t, 0x1800, 8, Access::Write).1,
        Some(TranslateError::Denied {
            iova: 0x1800,
            access: Access::Write
        })
    );
    // A miss names the first untranslated address, not the start.
    let (got, err) = pieces(&t, 0x2ff8, 0x10, Access::Write);
    assert_eq!(
        got,
        vec![Segment {
            gpa: 0x2ff8,
            uaddr: 0x7100_0ff8,
            len: 8
        }]
    );
    assert_eq!(
        err,
        Some(TranslateError::Miss {
            iova: 0x3000,
            access: Access::Write
        })
    );
    assert_eq!(
        pieces(&t, 0x500, 1, Access::Read).1,
        Some(TranslateError::Miss {
            iova: 0x500,
            access: Access::Read
        })
    );
    // A length of 0 translates to nothing, even unmapped.
    assert_eq!(pieces(&t, 0x500, 0, Access::Read), (vec![], None));
}

#[test]
fn update_refuses_what_c_refuses() {
    let mut t = table(4);
    assert_eq!(
        t.update(0x1000, 0, 0x1000, RW, USER_LIMIT),
        Err(UpdateError::BadRange)
    );
    assert_eq!(
        t.update(u64::MAX, 2, 0x1000, RW, USER_LIMIT),
        Err(UpdateError::BadRange)
    );
    assert_eq!(
        t.update(0, 0x2000, u64::MAX - 0xfff, 0, USER_LIMIT),
        Err(UpdateError::BadUserAddr)
    );
    // Past the user address space, for a readable or writable mapping.
    assert_eq!(
        t.update(0, 0x2000, USER_LIMIT - 0x1000, ACCESS_RO, USER_LIMIT),
        Err(UpdateError::BadUserAddr)
    );
    assert_eq!(
        t.update(0, 0x2000, USER_LIMIT - 0x1000, ACCESS_WO, USER_LIMIT),
        Err(UpdateError::BadUserAddr)
    );
    t.update(0, 0x1000, USER_LIMIT - 0x1000, RW, USER_LIMIT)
        .unwrap();
    // The user limit itself is the first refused byte.
    assert_eq!(
        t.update(0, 0x1001, USER_LIMIT - 0x1000, ACCESS_RO, USER_LIMIT),
        Err(UpdateError::BadUserAddr)
    );
    t.invalidate(0, 1);
    // Up to 2^64 exactly: C's vhost_overflow allows it; without
    // permissions access_ok is not asked, and nothing can use it.
    t.update(0x10000, 0x1000, u64::MAX - 0xfff, 0, USER_LIMIT)
        .unwrap();
    assert_eq!(
        pieces(&t, 0x10000, 1, Access::Read).1,
        Some(TranslateError::Denied {
            iova: 0x10000,
            access: Access::Read
        })
    );
    // The last IOVA may be 2^64 - 1.
    t.update(u64::MAX - 0xfff, 0x1000, 0x5000, RW, USER_LIMIT)
        .unwrap();
    assert_eq!(
        pieces(&t, u64::MAX, 1, Access::Read).0,
        vec![Segment {
            gpa: u64::MAX,
            uaddr: 0x5fff,
            len: 1
        }]
    );
    assert_eq!(
        pieces(&t, u64::MAX, 2, Access::Read).1,
        Some(TranslateError::NotMapped)
    );
    let mut empty = table(0);
    assert_eq!(
        empty.update(0, 1, 0, RW, USER_LIMIT),
        Err(UpdateError::NoCapacity)
    );
}

#[test]
fn overlaps_resolve_as_the_interval_tree_does() {
    let mut t = table(8);
    t.update(0x2000, 0x1000, 0xa000, RW, USER_LIMIT).unwrap();
    t.update(0x1000, 0x3000, 0xb000, RW, USER_LIMIT).unwrap();
    t.update(0x1000, 0x3000, 0xc000, RW, USER_LIMIT).unwrap();
    // Lowest start wins, the oldest of equal starts.
    assert_eq!(t.find(0x2800).unwrap().uaddr(), 0xb000);
    // Nothing is trimmed: a range runs on in the mapping it started in.
    assert_eq!(
        pieces(&t, 0x1800, 0x2000, Access::Read).0,
        vec![Segment {
            gpa: 0x1800,
            uaddr: 0xb800,
            len: 0x2000
        }]
    );
    // An invalidation takes every overlapping mapping, whole.
    assert_eq!(t.invalidate(0x3fff, 1), 2);
    assert_eq!(t.len(), 1);
    assert_eq!(t.find(0x1000), None);
    assert_eq!(t.find(0x2000).unwrap().uaddr(), 0xa000);
}

#[test]
fn full_table_retires_the_oldest_mapping() {
    let mut t = table(3);
    for i in 0..3u64 {
        // Inserted from high to low: the oldest sorts last.
        t.update(0x10000 - i * 0x1000, 0x1000, i << 20, RW, USER_LIMIT)
            .unwrap();
    }
    t.update(0x1000, 0x1000, 0xf00000, RW, USER_LIMIT).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t.find(0x10000), None, "the oldest mapping went");
    assert!(t.find(0xf000).is_some() && t.find(0xe000).is_some() && t.find(0x1000).is_some());
}

#[test]
fn random_operations_agree_with_the_model() {
    let seed = std::env::var("VNR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x10_71b);
    let mut r = Rng(seed);
    for round in 0..300 {
        let capacity = (r.next() % 24) as usize;
        let mut t = table(capacity);
        let mut model = Model::new(capacity);
        // Small IOVA and owner spaces, so that ranges meet and overlap,
        // and often page-aligned, so that mappings share starts.
        let addr = |r: &mut Rng| match r.next() % 8 {
            0 => u64::MAX - r.next() % 0x3000,
            1 => USER_LIMIT - r.next() % 0x3000,
            2..=4 => (r.next() % 0x20) << 12,
            _ => r.next() % 0x20000,
        };
        for _ in 0..200 {
            match r.next() % 10 {
                0..=4 => {
                    let (iova, uaddr) = (addr(&mut r), addr(&mut r));
                    let size = match r.next() % 6 {
                        0 => 0,
                        1 => u64::MAX - r.next() % 4,
                        _ => 1 + r.next() % 0x4000,
                    };
                    let perm = (r.next() % 4) as u8;
                    assert_eq!(
                        t.update(iova, size, uaddr, perm, USER_LIMIT),
                        model.update(iova, size, uaddr, perm),
                        "round {round}"
                    );
                }
                5 | 6 => {
                    let (iova, size) = (addr(&mut r), 1 + r.next() % 0x3000);
                    assert_eq!(t.invalidate(iova, size), model.invalidate(iova, size));
                }
                7 => {
                    // Wrapping and huge invalidations, as C computes them.
                    let (iova, size) = (addr(&mut r), r.next());
                    assert_eq!(t.invalidate(iova, size), model.invalidate(iova, size));
                }
                _ => {
                    if r.next() % 50 == 0 {
                        t.clear();
                        model.maps.clear();
                    }
                }
            }
            let probes: Vec<(u64, u64)> =
                (0..4).map(|_| (addr(&mut r), r.next() % 0x8000)).collect();
            agree(&t, &model, &probes);
        }
    }
}

#[test]
fn messages_have_the_c_layout() {
    // struct vhost_msg_v2 { u32 type; u32 asid; struct vhost_iotlb_msg iotlb; ... }
    let mut w = [0u8; MSG_LEN];
    w[..4].copy_from_slice(&FORMAT_V2.to_ne_bytes());
    w[4..8].copy_from_slice(&7u32.to_ne_bytes()); // asid: skipped
    w[8..16].copy_from_slice(&0x1000u64.to_ne_bytes());
    w[16..24].copy_from_slice(&0x2000u64.to_ne_bytes());
    w[24..32].copy_from_slice(&0x7000u64.to_ne_bytes());
    w[32] = ACCESS_RO;
    w[33] = MSG_UPDATE;
    let m = parse_write(&w).unwrap();
    assert_eq!(
        m,
        Message {
            format: FORMAT_V2,
            iova: 0x1000,
            size: 0x2000,
            uaddr: 0x7000,
            perm: ACCESS_RO,
            kind: MSG_UPDATE
        }
    );
    // The body is all C needs: 40 bytes.
    assert_eq!(parse_write(&w[..MIN_WRITE]), Ok(m));
    assert_eq!(parse_write(&w[..MIN_WRITE - 1]), Err(FrameError::Short));
    assert_eq!(parse_write(&w[..3]), Err(FrameError::Short));
    w[..4].copy_from_slice(&FORMAT_V1.to_ne_bytes());
    assert_eq!(parse_write(&w).unwrap().format, FORMAT_V1);
    w[..4].copy_from_slice(&3u32.to_ne_bytes());
    assert_eq!(parse_write(&w), Err(FrameError::UnknownFormat));
    w[..4].copy_from_slice(&FORMAT_V1.to_ne_bytes());
    w[16..24].copy_from_slice(&0u64.to_ne_bytes());
    assert_eq!(parse_write(&w), Err(FrameError::EmptyUpdate));
    // An invalidation of size 0 passes the framing (C refuses it later).
    w[33] = MSG_INVALIDATE;
    assert_eq!(parse_write(&w).unwrap().size, 0);

    let miss = encode_miss(FORMAT_V2, 0xabc000, Access::Write);
    assert_eq!(&miss[..4], &FORMAT_V2.to_ne_bytes());
    assert_eq!(&miss[4..8], &[0; 4]);
    assert_eq!(&miss[8..16], &0xabc000u64.to_ne_bytes());
    assert_eq!(&miss[16..32], &[0; 16]);
    assert_eq!((miss[32], miss[33]), (ACCESS_WO, MSG_MISS));
    assert!(miss[34..].iter().all(|&b| b == 0));
}

fn miss(iova: u64) -> Miss {
    Miss {
        iova,
        access: Access::Read,
        format: FORMAT_V2,
    }
}

#[test]
fn one_miss_per_queue_answered_once_read() {
    let mut m = Misses::<2>::new();
    assert!(!m.readable());
    assert!(m.post(1, miss(0x5000)));
    assert!(!m.post(1, miss(0x6000)), "a queue has one miss outstanding");
    assert!(m.post(0, miss(0x9000)));
    assert!(!m.post(2, miss(0)), "no such queue");
    // An update before the read answers nothing: C answers its pending
    // list only.
    assert_eq!(m.answer(0x5000, 0x1000), 0);
    assert_eq!(m.read(), Some((1, miss(0x5000))), "oldest first");
    assert!(m.readable());
    assert_eq!(m.read(), Some((0, miss(0x9000))));
    assert!(!m.readable());
    assert_eq!(m.read(), None);
    assert_eq!(m.answer(0x4000, 0x1000), 0, "ends below the miss");
    // An update whose last byte is the miss answers it.
    assert_eq!(m.answer(0x4001, 0x1000), 0b10);
    assert_eq!(m.answer(0x9000, 1), 0b01);
    // Both queues missed the same address; queue 1's read failed: queue
    // 1 may post again.
    assert!(m.post(0, miss(0x6000)) && m.post(1, miss(0x6000)));
    assert_eq!(m.read(), Some((0, miss(0x6000))));
    assert_eq!(m.read(), Some((1, miss(0x6000))));
    m.drop_read(1);
    assert!(m.post(1, miss(0x7000)), "a dropped read frees its queue");
    assert!(
        !m.post(1, miss(0x8000)),
        "an unread miss is not posted twice"
    );
    assert_eq!(m.answer(0x6000, 1), 0b01);
    // Nor a read one that is not answered yet.
    assert_eq!(m.read(), Some((1, miss(0x7000))));
    assert!(!m.post(1, miss(0x9000)), "a read miss waits for its answer");
    assert!(!m.readable());
    assert_eq!(m.answer(0x7000, 1), 0b10);
    assert!(
        m.post(1, miss(0x9000)),
        "answered, the queue may miss again"
    );
    m.clear();
    assert!(!m.readable());
}

#[test]
fn translated_memory_maps_ring_accesses() {
    use crate::testmem::TestMem;
    use crate::vring::{UserMemory, VringError};
    let mem = TestMem::new(0x10000, 0x4000);
    let mut t = table(8);
    // Two IOVA pages backed by owner pages in the reverse order, and a
    // read-only one.
    t.update(0x8000_0000, 0x1000, 0x11000, RW, USER_LIMIT)
        .unwrap();
    t.update(0x8000_1000, 0x1000, 0x10000, RW, USER_LIMIT)
        .unwrap();
    t.update(0x8000_2000, 0x1000, 0x12000, ACCESS_RO, USER_LIMIT)
        .unwrap();
    let view = Translated::new(&mem, &t);
    view.write_u16(0x8000_0ffe, 0xbeef).unwrap();
    assert_eq!(mem.get_u16(0x11ffe), 0xbeef);
    assert_eq!(view.read_u16(0x8000_0ffe).unwrap(), 0xbeef);
    // A copy across the two mappings lands in both owner pages.
    view.write(
        0x8000_0ff8,
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
    )
    .unwrap();
    assert_eq!(mem.get(0x11ff8, 8), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(mem.get(0x10000, 8), vec![9, 10, 11, 12, 13, 14, 15, 16]);
    assert_eq!(
        view.read_16(0x8000_0ff8).unwrap(),
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    );
    let mut buf = [0u8; 4];
    view.read(0x8000_0ffe, &mut buf).unwrap();
    assert_eq!(buf, [7, 8, 9, 10]);
    // A 16-bit or 8-byte access split over two mappings cannot be atomic.
    assert_eq!(
        view.read_u16(0x8000_0fff),
        Err(Stop::Error(VringError::NotMapped))
    );
    assert_eq!(
        view.write_8(0x8000_0ffc, [0; 8]),
        Err(Stop::Error(VringError::NotMapped))
    );
    // Permissions: the read-only page takes reads only.
    assert!(view.read_u16(0x8000_2000).is_ok());
    assert_eq!(
        view.write_u16(0x8000_2000, 1),
        Err(Stop::Error(VringError::AccessDenied))
    );
    assert_eq!(
        t.last_fault(),
        Some(TranslateError::Denied {
            iova: 0x8000_2000,
            access: Access::Write
        })
    );
    // An unmapped page is a miss, named by its first byte.
    assert_eq!(view.read(0x8000_2ff0, &mut [0u8; 32]), Err(Stop::Miss));
    assert_eq!(
        t.last_fault(),
        Some(TranslateError::Miss {
            iova: 0x8000_3000,
            access: Access::Read
        })
    );
    assert_eq!(check_range(&t, 0x8000_0000, 0x3000, Access::Read), Ok(()));
    assert_eq!(
        check_range(&t, 0x8000_0000, 0x3000, Access::Write),
        Err(TranslateError::Denied {
            iova: 0x8000_2000,
            access: Access::Write
        })
    );
}

#[test]
fn log_aliases_of_owner_memory() {
    use crate::vring::mem_table::{for_each_alias, validate, Region};
    let mut regions = vec![
        Region::new(0x0, 0x10000, 0x7000_0000, USER_LIMIT).unwrap(),
        // An alias of the first region's second half.
        Region::new(0x100000, 0x8000, 0x7000_8000, USER_LIMIT).unwrap(),
        Region::new(0x200000, 0x1000, 0x7100_0000, USER_LIMIT).unwrap(),
    ];
    validate(&mut regions, 8).unwrap();
    let mut got = vec![];
    for_each_alias::<TranslateError>(&regions, 0x7000_7ff0, 0x20, |gpa, len| {
        got.push((gpa, len));
        Ok(())
    })
    .unwrap();
    assert_eq!(got, vec![(0x7ff0, 0x20), (0x100000, 0x10)]);
    assert_eq!(
        for_each_alias::<TranslateError>(&regions, 0x6000_0000, 8, |_, _| Ok(())),
        Err(TranslateError::NotMapped)
    );
    assert_eq!(
        for_each_alias::<TranslateError>(&regions, u64::MAX, 2, |_, _| Ok(())),
        Err(TranslateError::NotMapped)
    );
}

/// A remembered lookup answers only where the search would give the same
/// mapping: below the address that found it, an older overlapping mapping
/// with a lower start may hold the address, and wins. Any change to the
/// table forgets what was remembered.
#[test]
fn remembered_lookups_agree_with_the_search() {
    let mut t = table(16);
    t.update(0x0, 0x3000, 0x7000_0000, RW, USER_LIMIT).unwrap();
    t.update(0x1000, 0x4000, 0x7100_0000, RW, USER_LIMIT)
        .unwrap();
    // 0x3800 is in the second mapping only; 0x1800 in both, and the first
    // (lowest start) translates it.
    assert_eq!(t.find(0x3800).map(|m| m.uaddr()), Some(0x7100_0000));
    assert_eq!(t.find(0x1800).map(|m| m.uaddr()), Some(0x7000_0000));
    assert_eq!(t.find(0x2fff).map(|m| m.uaddr()), Some(0x7000_0000));
    assert_eq!(t.find(0x3000).map(|m| m.uaddr()), Some(0x7100_0000));
    // Six one-page mappings looked up in turn, more than are remembered,
    // three times over: each lookup evicts one, and every answer stays
    // right.
    for page in 0..6u64 {
        t.update(
            0x10_0000 + (page << 12),
            0x1000,
            0x7300_0000 + (page << 16),
            RW,
            USER_LIMIT,
        )
        .unwrap();
    }
    for _ in 0..3 {
        for page in 0..6u64 {
            let got = t.find(0x10_0000 + (page << 12) + 0x10).map(|m| m.uaddr());
            assert_eq!(got, Some(0x7300_0000 + (page << 16)), "page {page}");
        }
        assert_eq!(t.find(0x1800).map(|m| m.uaddr()), Some(0x7000_0000));
        assert_eq!(t.find(0x10_6000), None);
    }
    // Gone at once after an invalidation, and a new mapping is seen.
    assert_eq!(t.invalidate(0x0, 1), 1);
    assert_eq!(t.find(0x1800).map(|m| m.uaddr()), Some(0x7100_0000));
    assert_eq!(t.find(0x800), None);
    t.update(0x0, 0x2000, 0x7200_0000, ACCESS_RO, USER_LIMIT)
        .unwrap();
    assert_eq!(t.find(0x1800).map(|m| m.uaddr()), Some(0x7200_0000));
    t.clear();
    assert_eq!(t.find(0x1800), None);
}

#[test]
fn a_growing_table_allocates_as_mappings_arrive_and_keeps_its_bound() {
    // The module's tables (issue 33): nothing allocated up front, the
    // storage grown when an update needs room, never past the capacity.
    let mut t = Iotlb::with_capacity(Vec::new(), 40);
    let grown = std::cell::RefCell::new(Vec::new());
    let grow = |slots: &mut Vec<Mapping>, len: usize| -> Result<(), ()> {
        grown.borrow_mut().push(len);
        slots.resize(len, Mapping::default());
        Ok(())
    };
    // Without room an update is refused, the table unchanged.
    assert_eq!(
        t.update(0, 0x1000, 0x1000, RW, USER_LIMIT),
        Err(UpdateError::NoRoom)
    );
    for page in 0..100u64 {
        t.make_room(grow).unwrap();
        t.update(page << 12, 0x1000, 0x10_0000 + (page << 12), RW, USER_LIMIT)
            .unwrap();
        assert!(t.len() <= 40);
    }
    // 16, then twice the mappings held, then the capacity; a full table
    // retires its oldest instead of growing.
    assert_eq!(*grown.borrow(), vec![16, 32, 40]);
    assert_eq!(t.len(), 40);
    assert!(t.find(59 << 12).is_none());
    assert!(t.find(60 << 12).is_some());
    // A failed allocation leaves the table as it was, and the update
    // without the room it asked for is refused.
    let mut t = Iotlb::with_capacity(Vec::new(), 40);
    for page in 0..16u64 {
        t.make_room(grow).unwrap();
        t.update(page << 12, 0x1000, 0x1000, RW, USER_LIMIT)
            .unwrap();
    }
    assert_eq!(
        t.make_room(|_: &mut Vec<Mapping>, _| Err::<(), _>("no memory")),
        Err("no memory")
    );
    assert_eq!(
        t.update(16 << 12, 0x1000, 0x1000, RW, USER_LIMIT),
        Err(UpdateError::NoRoom)
    );
    assert_eq!(t.len(), 16);
    assert!(t.find(15 << 12).is_some());
    // No capacity at all is refused as before.
    let mut none = Iotlb::with_capacity(Vec::<Mapping>::new(), 0);
    none.make_room(grow).unwrap();
    assert_eq!(
        none.update(0, 1, 0, RW, USER_LIMIT),
        Err(UpdateError::NoCapacity)
    );
}
