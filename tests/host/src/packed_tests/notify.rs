//! The packed ring: layouts, used-descriptor ordering and event suppression.

use super::*;

#[test]
fn layouts_past_the_end_of_the_64_bit_space_are_refused() {
    // Each part in turn placed so that it ends exactly at 2^64 (its start
    // plus its size overflows: refused), or 16 bytes lower (taken). With
    // the device IOTLB nothing else checks these addresses, and the
    // parsers add offsets inside a part to its start (a descriptor ring
    // at 2^64 - 16 overflowed a packed pop).
    let top = |size: u64| 0u64.wrapping_sub(size);
    let split = |desc, avail, used| RingLayout {
        num: 8,
        desc,
        avail,
        used,
        used_log: None,
    };
    let (desc, avail, used) = SplitRing::sizes(8, true);
    let fits = |layout| SplitRing::resume(layout, 0, 0, f().into()).is_some();
    assert!(fits(split(DESC, DRIVER, DEVICE)));
    assert!(!fits(split(top(desc), DRIVER, DEVICE)));
    assert!(!fits(split(DESC, top(avail), DEVICE)));
    assert!(!fits(split(DESC, DRIVER, top(used))));
    assert!(fits(split(top(desc + 16), DRIVER, DEVICE)));
    assert!(fits(split(DESC, top(avail + 16), DEVICE)));
    assert!(fits(split(DESC, DRIVER, top(used + 16))));
    let packed = |desc, driver, device| RingLayout {
        num: 8,
        desc,
        avail: driver,
        used: device,
        used_log: None,
    };
    let (desc, driver, device) = PackedRing::sizes(8);
    let fits = |layout| PackedRing::resume(layout, None, FRESH_BASE, f().into()).is_some();
    assert!(!fits(packed(top(desc), DRIVER, DEVICE)));
    assert!(!fits(packed(top(16), DRIVER, DEVICE)));
    assert!(!fits(packed(DESC, top(driver), DEVICE)));
    assert!(!fits(packed(DESC, DRIVER, top(device))));
    assert!(fits(packed(top(desc + 16), DRIVER, DEVICE)));
    assert!(fits(packed(DESC, top(driver + 16), DEVICE)));
    assert!(fits(packed(DESC, DRIVER, top(device + 16))));
}

#[test]
fn first_used_flags_are_written_last() {
    let mut r = rig(8, f());
    let mut used = Vec::new();
    for bufs in [
        vec![(0x8000, 1, false)],
        vec![(0x8000, 1, false), (0x9000, 1, false)],
        vec![(0x8000, 1, false)],
    ] {
        r.post(&bufs);
        let chain = r.pop().unwrap().unwrap();
        used.push(UsedElem::of(&chain, 0));
    }
    r.mem.writes.borrow_mut().clear();
    r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
    // One 8-byte store (length, id, flags) per used descriptor, at
    // positions 1 and 3 (the second chain took two), then at 0.
    let entry_at = |index: u64| (DESC + 16 * index + 8, 8usize);
    assert_eq!(
        *r.mem.writes.borrow(),
        vec![entry_at(1), entry_at(3), entry_at(0)]
    );
    for _ in 0..3 {
        assert!(r.driver.take_used(&r.mem).is_some());
    }
}

#[test]
fn event_suppression() {
    // Without event-idx: the driver's ENABLE and DISABLE.
    let mut r = rig(8, f());
    let use_one = |r: &mut Rig| {
        r.post(&[(0x8000, 1, false)]);
        let chain = r.pop().unwrap().unwrap();
        r.ring
            .add_used(&r.mem, &NoLog, &[UsedElem::of(&chain, 0)])
            .unwrap();
        r.driver.take_used(&r.mem).unwrap();
    };
    use_one(&mut r);
    assert!(r.ring.should_notify(&r.mem).unwrap());
    r.mem.put_u16(DRIVER + 2, EVENT_FLAG_DISABLE);
    use_one(&mut r);
    assert!(!r.ring.should_notify(&r.mem).unwrap());
    // DESC means nothing without event-idx: notify.
    r.mem.put_u16(DRIVER + 2, EVENT_FLAG_DESC);
    use_one(&mut r);
    assert!(r.ring.should_notify(&r.mem).unwrap());

    // With event-idx: an interrupt when the named position is used, across
    // the wrap, and after a whole lap whatever it names.
    let ev = RingFeatures {
        event_idx: true,
        ..f()
    };
    let mut r = rig(8, ev);
    use_one(&mut r);
    assert!(
        r.ring.should_notify(&r.mem).unwrap(),
        "the first check always notifies"
    );
    for round in 0..40 {
        // Ask for the 3rd used descriptor from here.
        r.driver.event_at(&r.mem, 2);
        use_one(&mut r);
        assert!(!r.ring.should_notify(&r.mem).unwrap(), "round {round}: 1st");
        use_one(&mut r);
        assert!(!r.ring.should_notify(&r.mem).unwrap(), "round {round}: 2nd");
        use_one(&mut r);
        assert!(r.ring.should_notify(&r.mem).unwrap(), "round {round}: 3rd");
    }
    // A batch that passes the position notifies once; the next does not.
    r.driver.event_at(&r.mem, 1);
    let mut batch = Vec::new();
    for _ in 0..3 {
        r.post(&[(0x8000, 1, false)]);
        batch.push(UsedElem::of(&r.pop().unwrap().unwrap(), 0));
    }
    r.ring.add_used(&r.mem, &NoLog, &batch).unwrap();
    assert!(r.ring.should_notify(&r.mem).unwrap());
    use_one(&mut r);
    assert!(!r.ring.should_notify(&r.mem).unwrap());
    // A whole lap in one batch: notify, whatever the event names (the
    // ring indices are back where they were).
    let mut r = rig(8, ev);
    use_one(&mut r);
    r.ring.should_notify(&r.mem).unwrap();
    r.driver.event_at(&r.mem, 20);
    let mut batch = Vec::new();
    for _ in 0..8 {
        r.post(&[(0x8000, 1, false)]);
        batch.push(UsedElem::of(&r.pop().unwrap().unwrap(), 0));
    }
    r.ring.add_used(&r.mem, &NoLog, &batch).unwrap();
    assert!(r.ring.should_notify(&r.mem).unwrap());
}

#[test]
fn enable_notify_reports_only_new_chains() {
    for event_idx in [false, true] {
        let mut r = rig(8, RingFeatures { event_idx, ..f() });
        // The guest's junk in the device area, which the device overwrites.
        r.mem.put_u16(DEVICE + 2, 0x5a5a);
        r.ring.disable_notify(&r.mem, &NoLog).unwrap();
        // Disabling replaces whatever the driver left there, with event-idx
        // too: a driver's flags 0 (ENABLE) would have it kick every chain.
        assert_eq!(r.mem.get_u16(DEVICE + 2), EVENT_FLAG_DISABLE);
        r.mem.put_u16(DEVICE + 2, 0);
        r.ring.disable_notify(&r.mem, &NoLog).unwrap();
        // Written once: the ring knows the flags it wrote.
        assert_eq!(r.mem.get_u16(DEVICE + 2), 0);
        r.mem.put_u16(DEVICE + 2, EVENT_FLAG_DISABLE);
        assert!(!r.ring.enable_notify(&r.mem, &NoLog).unwrap());
        let want_flags = if event_idx {
            EVENT_FLAG_DESC
        } else {
            EVENT_FLAG_ENABLE
        };
        assert_eq!(r.mem.get_u16(DEVICE + 2), want_flags);
        // Flags already in place are not written again.
        r.mem.writes.borrow_mut().clear();
        r.ring.enable_notify(&r.mem, &NoLog).unwrap();
        let want_writes = if event_idx { vec![(DEVICE, 2)] } else { vec![] };
        assert_eq!(*r.mem.writes.borrow(), want_writes);
        r.ring.disable_notify(&r.mem, &NoLog).unwrap();
        assert_eq!(
            r.mem.get_u16(DEVICE + 2),
            if event_idx {
                EVENT_FLAG_DESC
            } else {
                EVENT_FLAG_DISABLE
            }
        );
        r.ring.enable_notify(&r.mem, &NoLog).unwrap();
        // Two chains seen and put back (a packet that needed more
        // buffers): not news.
        r.post(&[(0x8000, 1, true), (0x9000, 1, true)]);
        r.post(&[(0x8000, 1, true)]);
        let first = r.pop().unwrap().unwrap();
        let second = r.pop().unwrap().unwrap();
        r.ring.unpop(positions(&[
            UsedElem::of(&first, 0),
            UsedElem::of(&second, 0),
        ]));
        assert!(
            !r.ring.enable_notify(&r.mem, &NoLog).unwrap(),
            "event_idx {event_idx}"
        );
        if event_idx {
            // The device wants a kick for position 3, lap 1.
            assert_eq!(r.mem.get_u16(DEVICE), 3 | 1 << 15);
        }
        // A new one is.
        r.post(&[(0x8000, 1, true)]);
        assert!(r.ring.enable_notify(&r.mem, &NoLog).unwrap());
        // The put-back chains come again, in order.
        assert_eq!(r.pop().unwrap().unwrap(), first);
        assert_eq!(r.pop().unwrap().unwrap(), second);
    }
}

#[test]
fn ring_writes_are_logged() {
    const DEVICE_LOG: u64 = 0x77_0000;
    const DESC_LOG: u64 = DESC - BASE;
    let mut r = rig(8, f());
    let logged = RingLayout {
        used_log: Some(DEVICE_LOG),
        ..layout(8)
    };
    // Both sides at position 6 of the first lap.
    let base = (6 | 1 << 15) << 16 | 6 | 1 << 15;
    r.ring = PackedRing::resume(logged, Some(DESC_LOG), base, f().into()).unwrap();
    (r.driver.avail_index, r.driver.used_index) = (6, 6);
    // Chains at 6-7 and 0: the used span wraps.
    r.post(&[(0x8000, 1, false), (0x9000, 1, false)]);
    r.post(&[(0x8000, 1, false)]);
    let used: Vec<_> = (0..2)
        .map(|_| UsedElem::of(&r.pop().unwrap().unwrap(), 0))
        .collect();
    let marks = Marks::default();
    r.ring.add_used(&r.mem, &marks, &used).unwrap();
    assert_eq!(
        *marks.0.borrow(),
        vec![(DESC_LOG + 16 * 6, 32), (DESC_LOG, 16)]
    );
    marks.0.borrow_mut().clear();
    r.ring.enable_notify(&r.mem, &marks).unwrap();
    r.ring.disable_notify(&r.mem, &marks).unwrap();
    assert_eq!(
        *marks.0.borrow(),
        vec![(DEVICE_LOG + 2, 2), (DEVICE_LOG + 2, 2)]
    );
    // With event-idx, the position the device asks a kick for, then the
    // flags the first time.
    let ev = RingFeatures {
        event_idx: true,
        ..f()
    };
    let mut ring = PackedRing::resume(logged, Some(DESC_LOG), FRESH_BASE, ev.into()).unwrap();
    let marks = Marks::default();
    ring.enable_notify(&r.mem, &marks).unwrap();
    ring.enable_notify(&r.mem, &marks).unwrap();
    assert_eq!(
        *marks.0.borrow(),
        vec![(DEVICE_LOG, 2), (DEVICE_LOG + 2, 2), (DEVICE_LOG, 2)]
    );
    // Without VHOST_VRING_F_LOG nothing is logged, whatever desc_log says.
    let mut ring = PackedRing::resume(layout(8), Some(DESC_LOG), FRESH_BASE, f().into()).unwrap();
    let marks = Marks::default();
    ring.enable_notify(&r.mem, &marks).unwrap();
    ring.add_used(&r.mem, &marks, &[]).unwrap();
    assert!(marks.0.borrow().is_empty());
}

#[test]
fn one_sequence_on_both_formats() {
    // The same operations through `Ring` on a split and a packed ring: the
    // data path sees no difference.
    let split_layout = RingLayout {
        num: 8,
        desc: DESC,
        avail: BASE + 0x10_000,
        used: BASE + 0x20_000,
        used_log: None,
    };
    let mut regions = vec![Region::new(0, MEM as u64, BASE, 1 << 47).unwrap()];
    validate(&mut regions, 64).unwrap();
    let mut iov = vec![Iov::default(); 16];
    for packed in [false, true] {
        let mem = TestMem::new(BASE, MEM);
        let mut driver = Driver::new(8);
        let mut ring = if packed {
            Ring::Packed(PackedRing::resume(layout(8), None, FRESH_BASE, f().into()).unwrap())
        } else {
            Ring::Split(SplitRing::resume(split_layout, 0, 0, f().into()).unwrap())
        };
        let mut split_idx = 0u16;
        let mut post = |mem: &TestMem, driver: &mut Driver| {
            if packed {
                driver.post(mem, &[(0x8000, 100, true)]);
            } else {
                // A split descriptor: flags at 12, next at 14.
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&0x8000u64.to_le_bytes());
                b[8..12].copy_from_slice(&100u32.to_le_bytes());
                b[12..14].copy_from_slice(&DESC_F_WRITE.to_le_bytes());
                mem.put(DESC, &b);
                mem.put_u16(split_layout.avail + 4 + 2 * u64::from(split_idx % 8), 0);
                split_idx = split_idx.wrapping_add(1);
                mem.put_u16(split_layout.avail + 2, split_idx);
            }
        };
        assert!(!ring.has_avail(&mem).unwrap());
        for _ in 0..20 {
            post(&mem, &mut driver);
            post(&mem, &mut driver);
            assert!(ring.has_avail(&mem).unwrap());
            let a = ring.pop(&mem, &regions[..], &mut iov).unwrap().unwrap();
            let b = ring.pop(&mem, &regions[..], &mut iov).unwrap().unwrap();
            assert_eq!((a.writable_len, b.writable_len), (100, 100));
            assert_eq!(ring.pop(&mem, &regions[..], &mut iov).unwrap(), None);
            let elems = [UsedElem::of(&a, 60), UsedElem::of(&b, 60)];
            ring.unpop(positions(&elems));
            assert!(!ring.enable_notify(&mem, &NoLog).unwrap());
            ring.disable_notify(&mem, &NoLog).unwrap();
            let a2 = ring.pop(&mem, &regions[..], &mut iov).unwrap().unwrap();
            let b2 = ring.pop(&mem, &regions[..], &mut iov).unwrap().unwrap();
            assert_eq!((a2, b2), (a, b));
            ring.add_used(&mem, &NoLog, &elems).unwrap();
            assert!(ring.should_notify(&mem).unwrap());
            if packed {
                assert_eq!(driver.take_used(&mem), Some((a.head, 60)));
                assert_eq!(driver.take_used(&mem), Some((b.head, 60)));
            }
        }
        match ring.base() {
            RingBase::Split { avail, used } => assert_eq!((packed, avail, used), (false, 40, 40)),
            // 40 positions on a ring of 8: index 0, the wrap counters
            // flipped five times (from 1 to 0).
            RingBase::Packed(base) => assert_eq!((packed, base), (true, 0)),
        }
    }
}

/// The packed parser through the device IOTLB: buffers at I/O virtual
/// addresses, a miss that consumes nothing and names the first unmapped
/// address, the same chain once mapped, and a writable buffer in a
/// read-only mapping refused.
#[test]
fn pops_through_the_device_iotlb() {
    use crate::vring::iotlb::{Iotlb, Mapping, ACCESS_RO, ACCESS_WO};
    use crate::vring::mem_table::{Access, TranslateError};
    const IOVA: u64 = 0x1_0000_0000;
    let mut r = rig(8, f());
    let mut tlb = Iotlb::new(vec![Mapping::default(); 8]);
    tlb.update(IOVA, 0x800, BASE + 0x8000, ACCESS_RO, 1 << 47)
        .unwrap();
    let id = r.post(&[(IOVA + 0x7f0, 0x20, false), (IOVA + 0x2000, 0x40, true)]);
    let want = Some(TranslateError::Miss {
        iova: IOVA + 0x800,
        access: Access::Read,
    });
    assert_eq!(r.ring.pop(&r.mem, &tlb, &mut r.iov), Err(Stop::Miss));
    assert_eq!(tlb.last_fault(), want);
    assert_eq!(
        r.ring.pop(&r.mem, &tlb, &mut r.iov),
        Err(Stop::Miss),
        "nothing consumed"
    );
    assert_eq!(tlb.last_fault(), want);
    tlb.update(
        IOVA + 0x800,
        0x800,
        BASE + 0x20000,
        ACCESS_RO | ACCESS_WO,
        1 << 47,
    )
    .unwrap();
    assert_eq!(r.ring.pop(&r.mem, &tlb, &mut r.iov), Err(Stop::Miss));
    assert_eq!(
        tlb.last_fault(),
        Some(TranslateError::Miss {
            iova: IOVA + 0x2000,
            access: Access::Write
        })
    );
    tlb.update(IOVA + 0x2000, 0x1000, BASE + 0x28000, ACCESS_RO, 1 << 47)
        .unwrap();
    assert_eq!(
        r.ring.pop(&r.mem, &tlb, &mut r.iov),
        Err(Stop::Error(VringError::AccessDenied))
    );
    assert_eq!(
        tlb.last_fault(),
        Some(TranslateError::Denied {
            iova: IOVA + 0x2000,
            access: Access::Write
        })
    );
    tlb.invalidate(IOVA + 0x2000, 1);
    tlb.update(IOVA + 0x2000, 0x1000, BASE + 0x28000, ACCESS_WO, 1 << 47)
        .unwrap();
    let chain = r.ring.pop(&r.mem, &tlb, &mut r.iov).unwrap().unwrap();
    assert_eq!((chain.head, chain.readable, chain.writable), (id, 2, 1));
    assert_eq!(
        r.iov[0],
        Iov {
            gpa: IOVA + 0x7f0,
            addr: BASE + 0x87f0,
            len: 0x10
        }
    );
    assert_eq!(
        r.iov[1],
        Iov {
            gpa: IOVA + 0x800,
            addr: BASE + 0x20000,
            len: 0x10
        }
    );
    assert_eq!(
        r.iov[2],
        Iov {
            gpa: IOVA + 0x2000,
            addr: BASE + 0x28000,
            len: 0x40
        }
    );
}

/// A packed ring whose own parts are I/O virtual addresses, read and
/// written through the device IOTLB as the module does (`Translated`), for
/// a hundred laps: the same chains and used entries as through the memory
/// table (the IOTLB maps each guest address to the same owner byte).
#[test]
fn ring_parts_through_the_device_iotlb() {
    use crate::vring::iotlb::{Iotlb, Mapping, Translated, ACCESS_RO, ACCESS_WO};
    let mut r = rig(64, f());
    let mut tlb = Iotlb::new(vec![Mapping::default(); 8]);
    tlb.update(0, MEM as u64, BASE, ACCESS_RO | ACCESS_WO, 1 << 47)
        .unwrap();
    let iova = RingLayout {
        num: 64,
        desc: DESC - BASE,
        avail: DRIVER - BASE,
        used: DEVICE - BASE,
        used_log: None,
    };
    let mut ring = PackedRing::resume(iova, None, FRESH_BASE, f().into()).unwrap();
    let view = Translated::new(&r.mem, &tlb);
    let mut total = 0u64;
    while total < 6400 {
        let mut posted = Vec::new();
        loop {
            let bufs = chain_of(total.wrapping_mul(0x9e37_79b9));
            if bufs.len() as u16 > r.driver.free_positions() || posted.len() == 7 {
                break;
            }
            posted.push((r.driver.post(&r.mem, &bufs), bufs));
            total += 1;
        }
        let mut used = Vec::new();
        for (id, bufs) in &posted {
            let chain = ring
                .pop(&view, &tlb, &mut r.iov)
                .unwrap()
                .expect("a posted chain");
            assert_eq!((chain.head, chain.positions as usize), (*id, bufs.len()));
            for (seg, buf) in r.iov.iter().zip(bufs) {
                assert_eq!(
                    (seg.gpa, seg.addr, seg.len),
                    (buf.0, BASE + buf.0, u64::from(buf.1))
                );
            }
            used.push(UsedElem::of(&chain, chain.writable_len as u32));
        }
        assert_eq!(ring.pop(&view, &tlb, &mut r.iov).unwrap(), None);
        ring.add_used(&view, &NoLog, &used).unwrap();
        for elem in &used {
            assert_eq!(r.driver.take_used(&r.mem), Some((elem.head, elem.len)));
        }
    }
    // Unmapping the descriptor ring makes the next look a miss.
    tlb.invalidate(DESC - BASE, 1);
    r.driver.post(&r.mem, &chain_of(1));
    assert_eq!(
        ring.pop(&Translated::new(&r.mem, &tlb), &tlb, &mut r.iov),
        Err(Stop::Miss)
    );
}

/// The packed counterpart of `parse_bench` (a benchmark, ignored by
/// default; asserts nothing about time): 256 one-descriptor chains of 76
/// bytes popped and returned, 20,000 times; only the device's side is
/// timed, the mock driver's posting and reaping is not.
///
///     cd tests/host && cargo test --release parse_bench -- --ignored --nocapture
#[test]
#[ignore]
fn parse_bench_packed() {
    let num = 256u16;
    let mut r = rig(
        num,
        RingFeatures {
            event_idx: true,
            ..f()
        },
    );
    let rounds = 20_000u32;
    let mut device = std::time::Duration::ZERO;
    let mut heads = Vec::with_capacity(usize::from(num));
    for round in 0..rounds {
        for i in 0..u64::from(num) {
            r.post(&[(0x8000 + i * 128, 76, false)]);
        }
        heads.clear();
        let start = std::time::Instant::now();
        while let Some(chain) = r.pop().unwrap() {
            heads.push(UsedElem::of(&chain, 0));
        }
        r.ring.add_used(&r.mem, &NoLog, &heads).unwrap();
        device += start.elapsed();
        assert_eq!(heads.len(), usize::from(num), "round {round}");
        while r.driver.take_used(&r.mem).is_some() {}
    }
    let ns = device.as_nanos() as f64 / (f64::from(rounds) * f64::from(num));
    eprintln!("parse_bench: {ns:.1} ns per chain (pop and return, packed ring)");
}

#[test]
fn used_batches_past_one_store_chunk_and_the_ring_end() {
    // 128 positions, started 100 in: a batch of 70 chains wraps the ring
    // and needs three chunks of stores after the first entry. Chains of
    // one and two descriptors take the stores with offsets; chains of one
    // descriptor each, with lengths 0 and not (the WRITE flag), the
    // adjacent runs; with one chain of two descriptors among them (the
    // 41st), the adjacent runs up to it and the stores with offsets from
    // there.
    for (two_descs, one_of_two) in [(true, false), (false, false), (false, true)] {
        let mut r = rig(128, f());
        for _ in 0..100 {
            r.post(&[(0x8000, 1, false)]);
            let chain = r.pop().unwrap().unwrap();
            r.ring
                .add_used(&r.mem, &NoLog, &[UsedElem::of(&chain, 0)])
                .unwrap();
            assert!(r.driver.take_used(&r.mem).is_some());
        }
        let mut used = Vec::new();
        let mut slots = Vec::new();
        let mut at = 100u64;
        for k in 0..70u64 {
            let descs = if two_descs {
                1 + k % 2
            } else if one_of_two && k == 40 {
                2
            } else {
                1
            };
            let bufs: Vec<Buf> = (0..descs)
                .map(|i| (0x8000 + 0x1000 * i, 1, !two_descs))
                .collect();
            r.post(&bufs);
            let chain = r.pop().unwrap().unwrap();
            let len = if two_descs { 0 } else { (k % 2) as u32 };
            used.push(UsedElem::of(&chain, len));
            slots.push(at);
            at = (at + bufs.len() as u64) % 128;
        }
        r.mem.writes.borrow_mut().clear();
        r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
        let entry_at = |index: u64| (DESC + 16 * index + 8, 8usize);
        let mut want: Vec<_> = slots[1..].iter().map(|&slot| entry_at(slot)).collect();
        want.push(entry_at(slots[0]));
        assert_eq!(*r.mem.writes.borrow(), want);
        for elem in &used {
            assert_eq!(r.driver.take_used(&r.mem), Some((elem.head, elem.len)));
        }
        assert_eq!(r.driver.take_used(&r.mem), None);
    }
}

#[test]
fn stores_outside_their_area_are_refused() {
    let mem = TestMem::new(BASE, MEM);
    let store = |offset| Store8 {
        offset,
        bytes: [1; 8],
    };
    assert_eq!(mem.write_8_each(DESC, 64, &[store(0), store(56)]), Ok(()));
    assert_eq!(
        mem.write_8_each(DESC, 64, &[store(57)]),
        Err(Stop::Error(VringError::Fault))
    );
    assert_eq!(
        mem.write_8_each(DESC, 64, &[store(u32::MAX)]),
        Err(Stop::Error(VringError::Fault))
    );
}
