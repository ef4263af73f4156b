//! The split ring: dirty logging of used-ring writes, in-order batches, and the rest.

use super::*;

#[test]
fn used_ring_writes_are_logged_at_the_log_address() {
    // The used ring's log address is its guest-physical address (USED - BASE
    // here); QEMU may give any, and only it is logged.
    const LOG_AT: u64 = 0x77_0000;
    for event_idx in [false, true] {
        let feats = RingFeatures { event_idx, ..f() };
        let mut r = rig(8, feats);
        let layout = RingLayout {
            num: 8,
            desc: DESC,
            avail: AVAIL,
            used: USED,
            used_log: Some(LOG_AT),
        };
        r.ring = SplitRing::resume(layout, 6, 6, feats.into()).unwrap();
        r.mem.put_u16(AVAIL + 2, 6);
        let marks = Marks::default();
        // Three elements from slot 6: they wrap, so two copies, each logged,
        // then used->idx.
        let elem = UsedElem {
            head: 0,
            len: 1,
            positions: 1,
            complete: false,
        };
        r.ring
            .add_used(&r.mem, &marks, &[elem, elem, elem])
            .unwrap();
        assert_eq!(
            *marks.0.borrow(),
            vec![(LOG_AT + 4 + 8 * 6, 16), (LOG_AT + 4, 8), (LOG_AT + 2, 2)]
        );
        marks.0.borrow_mut().clear();
        r.ring.enable_notify(&r.mem, &marks).unwrap();
        r.ring.disable_notify(&r.mem, &marks).unwrap();
        if event_idx {
            // avail_event, after the 8 elements; disabling writes nothing.
            assert_eq!(*marks.0.borrow(), vec![(LOG_AT + 4 + 8 * 8, 2)]);
        } else {
            // used->flags, twice.
            assert_eq!(*marks.0.borrow(), vec![(LOG_AT, 2), (LOG_AT, 2)]);
        }
        // Without VHOST_VRING_F_LOG nothing is logged.
        let mut r = rig(8, feats);
        let marks = Marks::default();
        r.ring.add_used(&r.mem, &marks, &[elem]).unwrap();
        r.ring.enable_notify(&r.mem, &marks).unwrap();
        assert!(marks.0.borrow().is_empty());
    }
}

/// A split ring at `base` with `IN_ORDER`, its used ring poisoned so that
/// the slots the device leaves alone can be told from the ones it wrote.
fn in_order_rig(num: u32, base: u16, event_idx: bool) -> Rig {
    let feats = RingFeatures {
        in_order: true,
        event_idx,
        ..f()
    };
    let mut r = rig(num, feats);
    let layout = RingLayout {
        num,
        desc: DESC,
        avail: AVAIL,
        used: USED,
        used_log: Some(USED - BASE),
    };
    r.ring = SplitRing::resume(layout, base, base, feats.into()).unwrap();
    for slot in 0..u64::from(num) {
        r.mem.put(USED + 4 + 8 * slot, &[0xee; 8]);
    }
    r
}

impl Rig {
    /// Makes chains available in ring order, one descriptor each, as an
    /// in-order driver does: `lens[i]` bytes, writable if `write`.
    fn post_in_order(&self, first: u16, lens: &[u32], write: bool) {
        for (i, &len) in lens.iter().enumerate() {
            let slot = first.wrapping_add(i as u16);
            let head = slot % self.num;
            self.desc(
                DESC,
                head,
                0x8000 + 0x1000 * u64::from(head),
                len,
                if write { DESC_F_WRITE } else { 0 },
                0,
            );
            self.avail(slot, head, slot.wrapping_add(1));
        }
    }
    fn used_slot(&self, slot: u16) -> Vec<u8> {
        self.mem.get(USED + 4 + 8 * u64::from(slot % self.num), 8)
    }
}

fn entry(head: u16, len: u32) -> Vec<u8> {
    let mut e = u32::from(head).to_le_bytes().to_vec();
    e.extend_from_slice(&len.to_le_bytes());
    e
}

#[test]
fn in_order_tx_batch_is_one_used_element_at_its_first_slot() {
    // Five TX chains from slot 6 of 8: the batch wraps the used ring.
    let mut r = in_order_rig(8, 6, false);
    r.post_in_order(6, &[60; 5], false);
    let batch: Vec<UsedElem> = (0..5)
        .map(|_| UsedElem::of(&r.pop().unwrap().unwrap(), 0))
        .collect();
    assert!(
        batch.iter().all(|e| e.complete),
        "a TX chain has no writable byte to report"
    );
    let marks = Marks::default();
    r.ring.add_used(&r.mem, &marks, &batch).unwrap();
    // One element, in the batch's first slot, naming its last chain.
    assert_eq!(r.used_slot(6), entry(2, 0));
    for slot in [7, 0, 1, 2] {
        assert_eq!(r.used_slot(slot), [0xee; 8], "slot {slot} was written");
    }
    // The index counts every chain; the log covers the element and the index.
    assert_eq!(r.mem.get_u16(USED + 2), 11);
    assert_eq!(
        *marks.0.borrow(),
        vec![(USED - BASE + 4 + 8 * 6, 8), (USED - BASE + 2, 2)]
    );
}

#[test]
fn in_order_rx_runs_end_at_each_partly_written_buffer() {
    let mut r = in_order_rig(8, 0, false);
    r.post_in_order(0, &[1000; 6], true);
    let chains: Vec<Chain> = (0..6).map(|_| r.pop().unwrap().unwrap()).collect();
    // Packet 1 fills buffer 0 and part of 1; packet 2 part of 2; packet 3
    // fills 3 and 4 exactly; packet 4 part of 5, in a later batch.
    let first = [
        UsedElem::of(&chains[0], 1000),
        UsedElem::of(&chains[1], 300),
        UsedElem::of(&chains[2], 64),
        UsedElem::of(&chains[3], 1000),
        UsedElem::of(&chains[4], 1000),
    ];
    r.ring.add_used(&r.mem, &NoLog, &first).unwrap();
    assert_eq!(r.used_slot(0), entry(1, 300));
    assert_eq!(r.used_slot(1), [0xee; 8]);
    assert_eq!(r.used_slot(2), entry(2, 64));
    // A complete chain that ends the batch is still written: nothing
    // after it in this call can carry it.
    assert_eq!(r.used_slot(3), entry(4, 1000));
    assert_eq!(r.used_slot(4), [0xee; 8]);
    assert_eq!(r.mem.get_u16(USED + 2), 5);
    r.ring
        .add_used(&r.mem, &NoLog, &[UsedElem::of(&chains[5], 70)])
        .unwrap();
    assert_eq!(r.used_slot(5), entry(5, 70));
    assert_eq!(r.mem.get_u16(USED + 2), 6);
}

#[test]
fn in_order_used_event_inside_a_skipped_run_still_notifies() {
    let mut r = in_order_rig(16, 0, true);
    r.post_in_order(0, &[60; 8], false);
    let take = |r: &mut Rig, n: usize| -> Vec<UsedElem> {
        (0..n)
            .map(|_| UsedElem::of(&r.pop().unwrap().unwrap(), 0))
            .collect()
    };
    let batch = take(&mut r, 4);
    r.ring.add_used(&r.mem, &NoLog, &batch).unwrap();
    assert!(
        r.ring.should_notify(&r.mem).unwrap(),
        "the first check always notifies"
    );
    // used_event names chain 5, which the next batch (4..8) skips over.
    r.mem.put_u16(AVAIL + 4 + 2 * 16, 5);
    let batch = take(&mut r, 4);
    r.ring.add_used(&r.mem, &NoLog, &batch).unwrap();
    assert_eq!(r.used_slot(4), entry(7, 0));
    assert_eq!(r.used_slot(5), [0xee; 8]);
    assert!(
        r.ring.should_notify(&r.mem).unwrap(),
        "used_event 5 lies in 4..8"
    );
    // And one that lies past the batch does not.
    r.post_in_order(8, &[60; 2], false);
    r.mem.put_u16(AVAIL + 4 + 2 * 16, 12);
    let batch = take(&mut r, 2);
    r.ring.add_used(&r.mem, &NoLog, &batch).unwrap();
    assert!(
        !r.ring.should_notify(&r.mem).unwrap(),
        "used_event 12 lies past 8..10"
    );
}

#[test]
fn in_order_fault_publishes_nothing() {
    let mut r = in_order_rig(8, 0, false);
    r.post_in_order(0, &[60; 2], false);
    let batch: Vec<UsedElem> = (0..2)
        .map(|_| UsedElem::of(&r.pop().unwrap().unwrap(), 0))
        .collect();
    // The used ring moved outside guest memory: the element cannot be
    // written, and the index must not move.
    r.ring = SplitRing::resume(
        RingLayout {
            num: 8,
            desc: DESC,
            avail: AVAIL,
            used: BASE + MEM as u64 + 0x1000,
            used_log: None,
        },
        2,
        0,
        RingFeatures {
            in_order: true,
            ..f()
        }
        .into(),
    )
    .unwrap();
    assert!(r.ring.add_used(&r.mem, &NoLog, &batch).is_err());
    assert_eq!(r.ring.last_used_idx(), 0);
}

/// The split parser through the device IOTLB: descriptors and an indirect
/// table at I/O virtual addresses. A miss in the indirect table, then in a
/// buffer, consumes nothing and names the first unmapped address; once
/// mapped, the chain is the same as through the memory table.
#[test]
fn pops_through_the_device_iotlb() {
    use crate::vring::iotlb::{Iotlb, Mapping, ACCESS_RO, ACCESS_WO};
    use crate::vring::mem_table::{Access, TranslateError};
    const IOVA: u64 = 0xfee0_0000;
    let mut r = rig(8, f());
    let mut tlb = Iotlb::new(vec![Mapping::default(); 4]);
    // The indirect table at IOVA + 0x1000 (owner BASE + 0x5000): a
    // readable buffer across two mappings and a writable one.
    r.desc(BASE + 0x5000, 0, IOVA + 0xff8, 0x10, DESC_F_NEXT, 1);
    r.desc(BASE + 0x5000, 1, IOVA + 0x3000, 0x100, DESC_F_WRITE, 0);
    r.desc(DESC, 0, IOVA + 0x1000, 32, DESC_F_INDIRECT, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.ring.pop(&r.mem, &tlb, &mut r.iov), Err(Stop::Miss));
    assert_eq!(
        tlb.last_fault(),
        Some(TranslateError::Miss {
            iova: IOVA + 0x1000,
            access: Access::Read
        })
    );
    tlb.update(IOVA + 0x1000, 0x1000, BASE + 0x5000, ACCESS_RO, 1 << 47)
        .unwrap();
    tlb.update(IOVA, 0x1000, BASE + 0x9000, ACCESS_RO, 1 << 47)
        .unwrap();
    // The readable buffer's second half is in the table's mapping: read
    // only, which a readable buffer may be.
    assert_eq!(r.ring.pop(&r.mem, &tlb, &mut r.iov), Err(Stop::Miss));
    assert_eq!(
        tlb.last_fault(),
        Some(TranslateError::Miss {
            iova: IOVA + 0x3000,
            access: Access::Write
        })
    );
    assert_eq!(r.ring.last_avail_idx(), 0);
    tlb.update(IOVA + 0x3000, 0x1000, BASE + 0x7000, ACCESS_WO, 1 << 47)
        .unwrap();
    let c = r.ring.pop(&r.mem, &tlb, &mut r.iov).unwrap().unwrap();
    assert_eq!(
        (
            c.head,
            c.readable,
            c.writable,
            c.readable_len,
            c.writable_len
        ),
        (0, 2, 1, 0x10, 0x100)
    );
    assert_eq!(
        r.iov[0],
        Iov {
            gpa: IOVA + 0xff8,
            addr: BASE + 0x9ff8,
            len: 8
        }
    );
    assert_eq!(
        r.iov[1],
        Iov {
            gpa: IOVA + 0x1000,
            addr: BASE + 0x5000,
            len: 8
        }
    );
    assert_eq!(
        r.iov[2],
        Iov {
            gpa: IOVA + 0x3000,
            addr: BASE + 0x7000,
            len: 0x100
        }
    );
    // A writable buffer in a read-only mapping is the guest's error.
    r.desc(DESC, 1, IOVA + 0x10, 4, DESC_F_WRITE, 0);
    r.avail(1, 1, 2);
    assert_eq!(
        r.ring.pop(&r.mem, &tlb, &mut r.iov),
        Err(Stop::Error(VringError::AccessDenied))
    );
    assert_eq!(
        tlb.last_fault(),
        Some(TranslateError::Denied {
            iova: IOVA + 0x10,
            access: Access::Write
        })
    );
}

/// One readable descriptor per head `0..n`, each 16 bytes at its own page.
fn one_desc_chains(r: &Rig, n: u16) {
    for i in 0..n {
        r.desc(DESC, i, 0x8000 + 0x1000 * u64::from(i), 16, 0, 0);
    }
}

#[test]
fn heads_are_never_read_ahead_past_avail_idx() {
    let mut r = rig(64, f());
    one_desc_chains(&r, 64);
    // Three heads made available; the slots after them hold what a stale
    // read-ahead would return: a head out of range.
    for slot in 0..20 {
        r.avail(slot, 63, 0);
    }
    for (slot, head) in [(0u16, 5u16), (1, 6), (2, 7)] {
        r.avail(slot, head, 3);
    }
    for want in [5, 6, 7] {
        assert_eq!(r.pop().unwrap().unwrap().head, want);
    }
    assert_eq!(r.pop().unwrap(), None);
    // The driver publishes more; they must be read now, not taken from
    // before.
    for (slot, head) in [(3u16, 9u16), (4, 10), (5, 11), (6, 12)] {
        r.avail(slot, head, slot + 1);
    }
    for want in [9, 10, 11, 12] {
        assert_eq!(r.pop().unwrap().unwrap().head, want);
    }
    assert_eq!(r.pop().unwrap(), None);
}

#[test]
fn read_ahead_heads_wrap_the_ring_and_survive_unpop() {
    let num = 8u16;
    let mut r = rig(u32::from(num), f());
    one_desc_chains(&r, num);
    let start = 65530u16;
    r.ring = SplitRing::resume(
        RingLayout {
            num: u32::from(num),
            desc: DESC,
            avail: AVAIL,
            used: USED,
            used_log: None,
        },
        start,
        start,
        f().into(),
    )
    .unwrap();
    // Eight heads from position 65530: slots 2..8 then 0..2, crossing both
    // the ring's end and the 16-bit wrap.
    let heads: Vec<u16> = (0..num).map(|k| (k * 3) % num).collect();
    for (k, head) in heads.iter().enumerate() {
        let idx = start.wrapping_add(k as u16);
        r.avail(idx, *head, start.wrapping_add(num));
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(r.pop().unwrap().unwrap().head);
    }
    // Two go back (the backend could not take them), and come out again.
    r.ring.unpop(2);
    assert_eq!(r.ring.last_avail_idx(), start.wrapping_add(1));
    got.truncate(1);
    while let Some(chain) = r.pop().unwrap() {
        got.push(chain.head);
    }
    assert_eq!(got, heads);
    assert_eq!(r.ring.last_avail_idx(), start.wrapping_add(num));
}

#[test]
fn a_fault_reading_heads_ahead_consumes_nothing() {
    // The avail ring's entries past the first page of memory: the ring
    // starts 4 bytes before the end, so its entries fault.
    let avail = BASE + MEM as u64 - 4;
    let mem = TestMem::new(BASE, MEM);
    let mut regions = vec![Region::new(0, MEM as u64, BASE, 1 << 47).unwrap()];
    validate(&mut regions, 64).unwrap();
    let mut ring = SplitRing::resume(
        RingLayout {
            num: 8,
            desc: DESC,
            avail,
            used: USED,
            used_log: None,
        },
        0,
        0,
        f().into(),
    )
    .unwrap();
    mem.put_u16(avail + 2, 4);
    let mut iov = vec![Iov::default(); MAX_SEGMENTS];
    assert_eq!(
        ring.pop(&mem, &regions[..], &mut iov),
        Err(Stop::Error(VringError::Fault))
    );
    assert_eq!(ring.last_avail_idx(), 0);
}

#[test]
fn single_heads_replace_the_read_ahead_window_across_a_lap_of_the_indices() {
    // A burst fills the window; then one chain at a time for more than
    // 2^16 positions, each with its own head. A window left in place would
    // hand out its heads again when the indices come round to it.
    let num = 256u16;
    let mut r = rig(u32::from(num), f());
    one_desc_chains(&r, num);
    let mut idx = 0u16;
    for k in 0..16u16 {
        r.avail(idx.wrapping_add(k), k, idx.wrapping_add(16));
    }
    for k in 0..16u16 {
        assert_eq!(r.pop().unwrap().unwrap().head, k);
    }
    idx = idx.wrapping_add(16);
    for round in 0..(1u32 << 16) + 32 {
        let head = ((round * 7 + 100) % u32::from(num)) as u16;
        r.avail(idx, head, idx.wrapping_add(1));
        assert_eq!(r.pop().unwrap().unwrap().head, head, "round {round}");
        idx = idx.wrapping_add(1);
    }
}

#[test]
fn segments_from_skips_whole_and_partial_segments() {
    let seg = |gpa: u64, len: u64| Iov {
        gpa,
        addr: gpa + 0x1000_0000,
        len,
    };
    let iov = [seg(0x100, 4), seg(0x200, 0), seg(0x300, 10), seg(0x400, 6)];
    // Inside the first segment.
    let got: Vec<_> = segments_from(&iov, 1).collect();
    assert_eq!(got, vec![seg(0x101, 3), seg(0x300, 10), seg(0x400, 6)]);
    // Exactly past the first, then past the empty one: neither comes back.
    let got: Vec<_> = segments_from(&iov, 4).collect();
    assert_eq!(got, vec![seg(0x300, 10), seg(0x400, 6)]);
    // Spanning two segments into the third.
    let got: Vec<_> = segments_from(&iov, 16).collect();
    assert_eq!(got, vec![seg(0x402, 4)]);
    // Past the end, and nothing skipped.
    assert_eq!(segments_from(&iov, 20).count(), 0);
    assert_eq!(segments_from(&iov, 0).count(), 3);
}

/// Whether a write barrier lies between the last store at `visible` and
/// every store before it (see `packed_tests::ordering`).
fn barrier_before_idx(mem: &TestMem, visible: u64) -> bool {
    use crate::testmem::MemOp;
    let ops = mem.ops.borrow();
    let Some(at) = ops
        .iter()
        .rposition(|op| matches!(op, MemOp::Store(addr, _) if *addr == visible))
    else {
        return false;
    };
    ops[..at]
        .iter()
        .rev()
        .find(|op| !matches!(op, MemOp::Rmb))
        .is_some_and(|op| matches!(op, MemOp::Wmb | MemOp::Mb))
}

#[test]
fn split_used_batches_of_1_2_and_32_have_a_write_barrier_before_the_index() {
    // The audit's split half (issue 33, defect 3): used elements and the
    // buffers' contents, then a write barrier, then `used->idx` (virtio
    // 2.7.8.2, C's vhost_add_used_n).
    let mut r = rig(64, f());
    let mut next = 0u16;
    for _round in 0..2 {
        for n in [1u16, 2, 32] {
            for i in 0..n {
                let head = (next + i) % 64;
                r.desc(
                    DESC,
                    head,
                    0x8_0000 + 0x1000 * u64::from(i),
                    64,
                    DESC_F_WRITE,
                    0,
                );
                r.avail(next + i, head, next + i + 1);
            }
            r.mem.ops.borrow_mut().clear();
            let mut used = Vec::new();
            for _ in 0..n {
                let chain = r.pop().unwrap().expect("a posted chain");
                r.mem.write(r.iov[0].addr, &[0xab; 64]).unwrap();
                used.push(UsedElem::of(&chain, 64));
            }
            r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
            assert!(
                barrier_before_idx(&r.mem, USED + 2),
                "batch of {n}: {:?}",
                r.mem.ops.borrow()
            );
            next += n;
        }
    }
}
