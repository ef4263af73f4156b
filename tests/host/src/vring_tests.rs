use crate::testmem::RingFeatures;
use crate::vring::mem_table::{validate, Region};
use crate::vring::Stop;

use crate::testmem::{Marks, NoLog, TestMem};
use crate::vring::split::{need_event, AVAIL_F_NO_INTERRUPT};
use crate::vring::*;

mod logging_and_order;

const BASE: u64 = 0x10_0000; // owner address of guest-physical 0
const MEM: usize = 0x40_0000;
const DESC: u64 = BASE + 0x1000; // rings live in guest RAM, as with QEMU
const AVAIL: u64 = BASE + 0x10_000;
const USED: u64 = BASE + 0x20_000;

struct Rig {
    mem: TestMem,
    regions: Vec<Region>,
    ring: SplitRing,
    num: u16,
    iov: Vec<Iov>,
}

fn rig(num: u32, feats: RingFeatures) -> Rig {
    let mem = TestMem::new(BASE, MEM);
    let mut regions = vec![Region::new(0, MEM as u64, BASE, 1 << 47).unwrap()];
    validate(&mut regions, 64).unwrap();
    let ring = SplitRing::resume(
        RingLayout {
            num,
            desc: DESC,
            avail: AVAIL,
            used: USED,
            used_log: None,
        },
        0,
        0,
        feats.into(),
    )
    .unwrap();
    Rig {
        mem,
        regions,
        ring,
        num: num as u16,
        iov: vec![Iov::default(); MAX_SEGMENTS],
    }
}

impl Rig {
    fn desc(&self, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..14].copy_from_slice(&flags.to_le_bytes());
        b[14..].copy_from_slice(&next.to_le_bytes());
        self.mem.put(table + 16 * u64::from(i), &b);
    }
    /// Publishes `head` at avail slot `slot` and sets avail->idx to `idx`.
    fn avail(&self, slot: u16, head: u16, idx: u16) {
        let n = self.num;
        self.mem.put_u16(AVAIL + 4 + 2 * u64::from(slot % n), head);
        self.mem.put_u16(AVAIL + 2, idx);
    }
    fn pop(&mut self) -> Result<Option<Chain>, Stop> {
        self.ring.pop(&self.mem, &self.regions[..], &mut self.iov)
    }
}

/// Head 0 returned with nothing written.
const RETURNED: UsedElem = UsedElem {
    head: 0,
    len: 0,
    positions: 1,
    complete: true,
};

fn f() -> RingFeatures {
    RingFeatures {
        event_idx: false,
        indirect: true,
        notify_on_empty: false,
        in_order: false,
    }
}

#[test]
fn pops_a_chain_and_publishes_used() {
    let mut r = rig(256, f());
    r.desc(DESC, 0, 0x8000, 100, DESC_F_NEXT, 1);
    r.desc(DESC, 1, 0x9000, 200, DESC_F_WRITE, 0);
    r.avail(0, 0, 1);
    let c = r.pop().unwrap().unwrap();
    assert_eq!(
        (
            c.head,
            c.readable,
            c.writable,
            c.readable_len,
            c.writable_len
        ),
        (0, 1, 1, 100, 200)
    );
    assert_eq!(
        r.iov[0],
        Iov {
            gpa: 0x8000,
            addr: BASE + 0x8000,
            len: 100
        }
    );
    assert_eq!(
        r.iov[1],
        Iov {
            gpa: 0x9000,
            addr: BASE + 0x9000,
            len: 200
        }
    );
    assert_eq!(r.pop().unwrap(), None);
    r.ring
        .add_used(&r.mem, &NoLog, &[UsedElem::of(&c, 200)])
        .unwrap();
    assert_eq!(r.mem.get_u16(USED + 2), 1);
    assert_eq!(r.mem.get(USED + 4, 8), [0, 0, 0, 0, 200, 0, 0, 0]);
}

#[test]
fn descriptor_loop_is_detected() {
    let mut r = rig(8, f());
    r.desc(DESC, 0, 0x8000, 1, DESC_F_NEXT, 1);
    r.desc(DESC, 1, 0x8000, 1, DESC_F_NEXT, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::Loop)));
    // Nothing was consumed.
    assert_eq!(r.ring.last_avail_idx(), 0);
}

#[test]
fn nested_indirect_is_refused() {
    let mut r = rig(8, f());
    let table = 0x30_000u64;
    r.desc(DESC, 0, table, 32, DESC_F_INDIRECT, 0);
    r.desc(BASE + table, 0, 0x8000, 10, DESC_F_NEXT, 1);
    r.desc(BASE + table, 1, table, 16, DESC_F_INDIRECT, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::NestedIndirect)));
}

#[test]
fn indirect_rules() {
    let mut r = rig(8, f());
    let table = 0x30_000u64;
    r.desc(BASE + table, 0, 0x8000, 10, DESC_F_NEXT, 1);
    r.desc(BASE + table, 1, 0x9000, 20, DESC_F_WRITE, 0);
    r.desc(DESC, 0, table, 32, DESC_F_INDIRECT, 0);
    r.avail(0, 0, 1);
    let c = r.pop().unwrap().unwrap();
    assert_eq!(
        (c.readable, c.writable, c.readable_len, c.writable_len),
        (1, 1, 10, 20)
    );
    for (len, flags, err) in [
        (24, DESC_F_INDIRECT, VringError::BadIndirectLen),
        (0, DESC_F_INDIRECT, VringError::BadIndirectLen),
        (
            32,
            DESC_F_INDIRECT | DESC_F_NEXT,
            VringError::IndirectNotAllowed,
        ),
    ] {
        let mut r = rig(8, f());
        r.desc(DESC, 0, table, len, flags, 1);
        r.avail(0, 0, 1);
        assert_eq!(r.pop(), Err(Stop::Error(err)), "len {len} flags {flags}");
    }
    let mut r = rig(
        8,
        RingFeatures {
            indirect: false,
            ..f()
        },
    );
    r.desc(DESC, 0, table, 32, DESC_F_INDIRECT, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::IndirectNotAllowed)));
    // An indirect `next` past the table.
    let mut r = rig(8, f());
    r.desc(BASE + table, 0, 0x8000, 10, DESC_F_NEXT, 2);
    r.desc(DESC, 0, table, 32, DESC_F_INDIRECT, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::BadNext)));
}

#[test]
fn address_outside_every_region() {
    let mut r = rig(8, f());
    r.desc(DESC, 0, MEM as u64 - 10, 20, 0, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::NotMapped)));
    let mut r = rig(8, f());
    r.desc(DESC, 0, u64::MAX - 4, 20, 0, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::NotMapped)));
}

#[test]
fn descriptor_crossing_regions_is_split_per_region() {
    let mut r = rig(8, f());
    r.regions = vec![
        Region::new(0, 0x10_0000, BASE, 1 << 47).unwrap(),
        Region::new(0x10_0000, 0x10_0000, BASE + 0x20_0000, 1 << 47).unwrap(),
    ];
    r.desc(DESC, 0, 0xf_fff0, 0x20, 0, 0);
    r.avail(0, 0, 1);
    let c = r.pop().unwrap().unwrap();
    assert_eq!(c.readable, 2);
    assert_eq!(
        r.iov[0],
        Iov {
            gpa: 0xf_fff0,
            addr: BASE + 0xf_fff0,
            len: 0x10
        }
    );
    assert_eq!(
        r.iov[1],
        Iov {
            gpa: 0x10_0000,
            addr: BASE + 0x20_0000,
            len: 0x10
        }
    );
}

#[test]
fn length_overflow_is_refused() {
    let mut r = rig(8, f());
    r.regions = vec![Region::new(0, 1 << 40, BASE, 1 << 47).unwrap()];
    r.desc(DESC, 0, 0, u32::MAX, DESC_F_NEXT, 1);
    r.desc(DESC, 1, 0, u32::MAX, 0, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::LenOverflow)));
}

#[test]
fn avail_jump_bad_head_bad_next() {
    let mut r = rig(8, f());
    r.avail(0, 0, 9);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::AvailJump)));
    let mut r = rig(8, f());
    r.avail(0, 8, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::BadHead)));
    let mut r = rig(8, f());
    r.desc(DESC, 0, 0x8000, 1, DESC_F_NEXT, 8);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::BadNext)));
}

#[test]
fn out_after_in_is_refused() {
    let mut r = rig(8, f());
    r.desc(DESC, 0, 0x8000, 1, DESC_F_WRITE | DESC_F_NEXT, 1);
    r.desc(DESC, 1, 0x8000, 1, 0, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::OutAfterIn)));
}

#[test]
fn zero_length_descriptors_are_harmless() {
    let mut r = rig(8, f());
    r.desc(DESC, 0, 0x8000, 0, DESC_F_NEXT, 1);
    r.desc(DESC, 1, u64::MAX, 0, 0, 0);
    r.avail(0, 0, 1);
    let c = r.pop().unwrap().unwrap();
    assert_eq!((c.readable, c.readable_len), (0, 0));
}

#[test]
fn too_many_segments() {
    let mut r = rig(8, f());
    r.iov.truncate(1);
    r.desc(DESC, 0, 0x8000, 1, DESC_F_NEXT, 1);
    r.desc(DESC, 1, 0x8000, 1, 0, 0);
    r.avail(0, 0, 1);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::TooManySegments)));
}

#[test]
fn indices_wrap_past_65535() {
    let mut r = rig(4, f());
    r.ring = SplitRing::resume(
        RingLayout {
            num: 4,
            desc: DESC,
            avail: AVAIL,
            used: USED,
            used_log: None,
        },
        65533,
        65533,
        f().into(),
    )
    .unwrap();
    r.desc(DESC, 0, 0x8000, 1, 0, 0);
    let mut idx: u16 = 65533;
    for _ in 0..10 {
        idx = idx.wrapping_add(1);
        r.avail(idx.wrapping_sub(1), 0, idx);
        let c = r.pop().unwrap().unwrap();
        assert_eq!(c.head, 0);
        r.ring
            .add_used(&r.mem, &NoLog, &[UsedElem::of(&c, 0)])
            .unwrap();
        assert_eq!(r.mem.get_u16(USED + 2), idx);
    }
    assert_eq!(r.ring.last_avail_idx(), 65533u16.wrapping_add(10));
}

#[test]
fn every_ring_size() {
    for shift in 0..=15 {
        assert!(SplitRing::resume(
            RingLayout {
                num: 1 << shift,
                desc: DESC,
                avail: AVAIL,
                used: USED,
                used_log: None
            },
            0,
            0,
            f().into()
        )
        .is_some());
    }
    for n in [0, 3, 6, 65535, 65536, 1 << 20] {
        assert!(SplitRing::resume(
            RingLayout {
                num: n,
                desc: DESC,
                avail: AVAIL,
                used: USED,
                used_log: None
            },
            0,
            0,
            f().into()
        )
        .is_none());
    }
}

#[test]
fn need_event_matches_the_spec() {
    assert!(need_event(0, 1, 0));
    assert!(!need_event(1, 1, 0));
    assert!(need_event(5, 10, 0));
    assert!(!need_event(10, 10, 0));
    assert!(need_event(65535, 2, 65534));
}

#[test]
fn notification_suppression() {
    // Without event-idx: NO_INTERRUPT in avail->flags suppresses.
    let mut r = rig(8, f());
    r.mem.put_u16(AVAIL, AVAIL_F_NO_INTERRUPT);
    r.ring.add_used(&r.mem, &NoLog, &[RETURNED]).unwrap();
    assert!(!r.ring.should_notify(&r.mem).unwrap());
    r.mem.put_u16(AVAIL, 0);
    assert!(r.ring.should_notify(&r.mem).unwrap());
    // With event-idx: only when used_event is crossed.
    let ev = RingFeatures {
        event_idx: true,
        ..f()
    };
    let mut r = rig(8, ev);
    r.ring.add_used(&r.mem, &NoLog, &[RETURNED]).unwrap();
    assert!(r.ring.should_notify(&r.mem).unwrap()); // first one always
    r.mem.put_u16(AVAIL + 4 + 2 * 8, 5); // used_event = 5
    r.ring.add_used(&r.mem, &NoLog, &[RETURNED]).unwrap(); // used 2
    assert!(!r.ring.should_notify(&r.mem).unwrap());
    r.ring.add_used(&r.mem, &NoLog, &[RETURNED; 4]).unwrap(); // used 6
    assert!(r.ring.should_notify(&r.mem).unwrap());
    // enable_notify publishes avail_event, and reports only entries that
    // arrived since avail->idx was last read.
    r.avail(0, 0, 3);
    r.ring.refresh_avail(&r.mem).unwrap();
    assert!(!r.ring.enable_notify(&r.mem, &NoLog).unwrap());
    assert_eq!(r.mem.get_u16(USED + 4 + 8 * 8), 3);
    // Entries popped and put back (a packet that needed more buffers) are
    // not news: the device waits for the guest instead of spinning on them.
    let mut iov = [Iov::default(); 4];
    r.desc(DESC, 0, 0x8000, 1, 0, 0);
    for _ in 0..2 {
        r.ring
            .pop(&r.mem, &r.regions[..], &mut iov)
            .unwrap()
            .unwrap();
    }
    r.ring.unpop(2);
    assert!(!r.ring.enable_notify(&r.mem, &NoLog).unwrap());
    // A new entry is.
    r.avail(3, 0, 4);
    assert!(r.ring.enable_notify(&r.mem, &NoLog).unwrap());
    // A guest that moves avail->idx by more than the ring is caught here
    // too, not only by pop.
    r.mem.put_u16(AVAIL + 2, 9);
    assert_eq!(
        r.ring.enable_notify(&r.mem, &NoLog),
        Err(Stop::Error(VringError::AvailJump))
    );
}
