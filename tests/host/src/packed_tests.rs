//! The packed ring against a mock driver that follows the virtio spec
//! (section 2.8) as Linux's `virtio_ring.c` does: wrap counters, chains,
//! indirect tables, buffer ids, event suppression.
use crate::testmem::RingFeatures;
use crate::testmem::{Marks, NoLog, TestMem};
use crate::vring::mem_table::{validate, Region};
use crate::vring::packed::*;
use crate::vring::ring::{Ring, RingBase};
use crate::vring::Stop;
use crate::vring::*;
use std::collections::HashMap;

mod notify;
mod ordering;

const BASE: u64 = 0x10_0000; // owner address of guest-physical 0
const MEM: usize = 0x40_0000;
const DESC: u64 = BASE + 0x1000;
const DRIVER: u64 = BASE + 0x10_000; // driver event area
const DEVICE: u64 = BASE + 0x10_100; // device event area
const TABLES: u64 = 0x30_000; // indirect tables (guest-physical)

/// One buffer of a chain: guest address, length, device-writable.
type Buf = (u64, u32, bool);

/// The driver side of a packed ring.
struct Driver {
    num: u16,
    /// Next descriptor the driver fills, and its lap.
    avail_index: u16,
    avail_wrap: bool,
    /// Next descriptor the driver expects the device to use.
    used_index: u16,
    used_wrap: bool,
    free_ids: Vec<u16>,
    /// Descriptors (ring positions) each outstanding id took.
    positions: HashMap<u16, u16>,
}

impl Driver {
    fn new(num: u16) -> Self {
        Driver {
            num,
            avail_index: 0,
            avail_wrap: true,
            used_index: 0,
            used_wrap: true,
            free_ids: (0..num).rev().collect(),
            positions: HashMap::new(),
        }
    }

    fn free_positions(&self) -> u16 {
        self.num - self.positions.values().sum::<u16>()
    }

    fn put_desc(mem: &TestMem, at: u64, addr: u64, len: u32, id: u16, flags: u16) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..14].copy_from_slice(&id.to_le_bytes());
        b[14..].copy_from_slice(&flags.to_le_bytes());
        mem.put(at, &b);
    }

    fn avail_flags(&self, wrap: bool) -> u16 {
        if wrap {
            DESC_F_AVAIL
        } else {
            DESC_F_USED
        }
    }

    /// Makes one chain of `bufs` available (descriptors in ring order, the
    /// first one's flags written last). Returns its buffer id.
    fn post(&mut self, mem: &TestMem, bufs: &[Buf]) -> u16 {
        assert!(bufs.len() as u16 <= self.free_positions());
        let id = self.free_ids.pop().expect("a free id");
        let (first_index, first_wrap) = (self.avail_index, self.avail_wrap);
        let mut first_flags = 0;
        for (i, &(addr, len, writable)) in bufs.iter().enumerate() {
            let mut flags = self.avail_flags(self.avail_wrap);
            if i + 1 < bufs.len() {
                flags |= DESC_F_NEXT;
            }
            if writable {
                flags |= DESC_F_WRITE;
            }
            let at = DESC + 16 * u64::from(self.avail_index);
            if i == 0 {
                // Not available yet: the other lap's flags.
                Self::put_desc(mem, at, addr, len, id, self.avail_flags(!first_wrap));
                first_flags = flags;
            } else {
                Self::put_desc(mem, at, addr, len, id, flags);
            }
            self.step_avail();
        }
        // The first descriptor becomes available last.
        mem.put_u16(DESC + 16 * u64::from(first_index) + 14, first_flags);
        self.positions.insert(id, bufs.len() as u16);
        id
    }

    /// Makes one indirect chain available: the table at guest-physical
    /// `table` holds `bufs` (with junk in the reserved fields, which the
    /// device must ignore).
    fn post_indirect(&mut self, mem: &TestMem, table: u64, bufs: &[Buf]) -> u16 {
        for (i, &(addr, len, writable)) in bufs.iter().enumerate() {
            let flags = if writable { DESC_F_WRITE } else { 0 }
                | DESC_F_NEXT
                | DESC_F_INDIRECT
                | DESC_F_AVAIL;
            Self::put_desc(mem, BASE + table + 16 * i as u64, addr, len, 0xbeef, flags);
        }
        let id = self.free_ids.pop().expect("a free id");
        let flags = self.avail_flags(self.avail_wrap) | DESC_F_INDIRECT;
        Self::put_desc(
            mem,
            DESC + 16 * u64::from(self.avail_index),
            table,
            16 * bufs.len() as u32,
            id,
            flags,
        );
        self.step_avail();
        self.positions.insert(id, 1);
        id
    }

    fn step_avail(&mut self) {
        self.avail_index += 1;
        if self.avail_index == self.num {
            self.avail_index = 0;
            self.avail_wrap = !self.avail_wrap;
        }
    }

    /// Takes the next used descriptor, if the device wrote one: (id, len).
    fn take_used(&mut self, mem: &TestMem) -> Option<(u16, u32)> {
        let at = DESC + 16 * u64::from(self.used_index);
        let flags = mem.get_u16(at + 14);
        let used = (flags & DESC_F_USED != 0) == self.used_wrap
            && (flags & DESC_F_AVAIL != 0) == self.used_wrap;
        if !used {
            return None;
        }
        let b = mem.get(at + 8, 6);
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let id = u16::from_le_bytes([b[4], b[5]]);
        // The length counts only with WRITE (2.8.5); the device sets it
        // exactly when it wrote something.
        assert_eq!(
            flags & DESC_F_WRITE != 0,
            len > 0,
            "used descriptor {id}: flags {flags:#x}, len {len}"
        );
        let positions = self
            .positions
            .remove(&id)
            .expect("the device used an id it was not given");
        for _ in 0..positions {
            self.used_index += 1;
            if self.used_index == self.num {
                self.used_index = 0;
                self.used_wrap = !self.used_wrap;
            }
        }
        self.free_ids.push(id);
        Some((id, len))
    }

    /// Asks for an interrupt at the used position `n` descriptors ahead.
    fn event_at(&self, mem: &TestMem, ahead: u16) {
        let mut index = u32::from(self.used_index) + u32::from(ahead);
        let mut wrap = self.used_wrap;
        if index >= u32::from(self.num) {
            index -= u32::from(self.num);
            wrap = !wrap;
        }
        mem.put_u16(DRIVER, index as u16 | if wrap { 1 << 15 } else { 0 });
        mem.put_u16(DRIVER + 2, EVENT_FLAG_DESC);
    }
}

struct Rig {
    mem: TestMem,
    regions: Vec<Region>,
    ring: PackedRing,
    driver: Driver,
    iov: Vec<Iov>,
}

fn layout(num: u32) -> RingLayout {
    RingLayout {
        num,
        desc: DESC,
        avail: DRIVER,
        used: DEVICE,
        used_log: None,
    }
}

fn f() -> RingFeatures {
    RingFeatures {
        event_idx: false,
        indirect: true,
        notify_on_empty: false,
        in_order: false,
    }
}

fn rig(num: u16, feats: RingFeatures) -> Rig {
    let mem = TestMem::new(BASE, MEM);
    let mut regions = vec![Region::new(0, MEM as u64, BASE, 1 << 47).unwrap()];
    validate(&mut regions, 64).unwrap();
    let ring = PackedRing::resume(layout(u32::from(num)), None, FRESH_BASE, feats.into()).unwrap();
    Rig {
        mem,
        regions,
        ring,
        driver: Driver::new(num),
        iov: vec![Iov::default(); MAX_SEGMENTS],
    }
}

impl Rig {
    fn pop(&mut self) -> Result<Option<Chain>, Stop> {
        self.ring.pop(&self.mem, &self.regions[..], &mut self.iov)
    }
    fn post(&mut self, bufs: &[Buf]) -> u16 {
        self.driver.post(&self.mem, bufs)
    }
}

/// Buffers of a 1..=3 descriptor chain, `seed` choosing lengths and
/// directions (readable ones first).
fn chain_of(seed: u64) -> Vec<Buf> {
    let count = 1 + (seed % 3) as usize;
    let writable_from = (seed / 3 % (count as u64 + 1)) as usize;
    (0..count)
        .map(|i| {
            (
                0x8_0000 + 0x1000 * i as u64,
                1 + (seed as u32 >> 4) % 1500,
                i >= writable_from,
            )
        })
        .collect()
}

#[test]
fn fresh_base_and_encoding() {
    assert_eq!(FRESH_BASE, 0x8000_8000);
    let r = rig(256, f());
    assert_eq!(r.ring.base(), FRESH_BASE);
    assert!(PackedRing::base_fits(0x8000_8000, 1));
    assert!(PackedRing::base_fits(0x00ff_80ff, 256));
    assert!(!PackedRing::base_fits(0x0100_0000, 256));
    assert!(!PackedRing::base_fits(0x0000_0100, 256));
    assert!(!PackedRing::base_fits(0, 65536));
    // The used position at most a lap behind the avail one.
    assert!(PackedRing::base_fits(0x0005_8003, 8)); // used 5 lap 0, avail 3 lap 1
    assert!(PackedRing::base_fits(0x0003_8003, 8)); // a whole lap
    assert!(!PackedRing::base_fits(0x0002_8003, 8)); // more
    assert!(!PackedRing::base_fits(0x8004_8003, 8)); // used ahead of avail
    assert!(PackedRing::resume(layout(256), None, 0x0000_0100, f().into()).is_none());
    assert!(PackedRing::resume(layout(65536), None, 0, f().into()).is_none());
    assert!(PackedRing::resume(layout(0), None, 0, f().into()).is_none());
    assert!(PackedRing::resume(layout(32768), None, 0xffff_ffff, f().into()).is_some());
    // Any size: a queue reset may make it 200.
    for num in [1, 3, 200, 32767] {
        assert!(
            PackedRing::resume(layout(num), None, FRESH_BASE, f().into()).is_some(),
            "num {num}"
        );
    }
    // Aligned parts only (16, 4, 4).
    for (desc, driver, device) in [
        (DESC + 8, DRIVER, DEVICE),
        (DESC, DRIVER + 2, DEVICE),
        (DESC, DRIVER, DEVICE + 2),
    ] {
        let misaligned = RingLayout {
            num: 8,
            desc,
            avail: driver,
            used: device,
            used_log: None,
        };
        assert!(PackedRing::resume(misaligned, None, FRESH_BASE, f().into()).is_none());
    }
}

#[test]
fn chains_across_a_thousand_wraps() {
    for num in [1u16, 2, 8, 64, 3, 100] {
        let mut r = rig(num, f());
        let mut seed = 0x1234_5678_u64;
        let mut laps = 0u32;
        let mut last_wrap = true;
        let mut total = 0u64;
        while laps < 1000 {
            // The driver fills what it can, up to a random batch.
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut posted = Vec::new();
            loop {
                let bufs = chain_of(seed >> 20 ^ total);
                if bufs.len() as u16 > r.driver.free_positions()
                    || posted.len() > (seed >> 40) as usize % 5
                {
                    break;
                }
                let id = r.post(&bufs);
                posted.push((id, bufs));
                total += 1;
            }
            // The device takes every posted chain, in order, and returns
            // them in one batch in reverse order.
            let mut used = Vec::new();
            for (id, bufs) in &posted {
                let chain = r.pop().unwrap().expect("a posted chain");
                assert_eq!(chain.head, *id);
                assert_eq!(chain.positions as usize, bufs.len());
                let out: u64 = bufs.iter().filter(|b| !b.2).map(|b| u64::from(b.1)).sum();
                let inn: u64 = bufs.iter().filter(|b| b.2).map(|b| u64::from(b.1)).sum();
                assert_eq!((chain.readable_len, chain.writable_len), (out, inn));
                used.push(UsedElem::of(&chain, chain.writable_len as u32));
            }
            assert_eq!(r.pop().unwrap(), None);
            used.reverse();
            r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
            for elem in used.iter() {
                assert_eq!(r.driver.take_used(&r.mem), Some((elem.head, elem.len)));
            }
            assert_eq!(r.driver.take_used(&r.mem), None);
            if r.driver.used_wrap != last_wrap {
                last_wrap = r.driver.used_wrap;
                laps += 1;
            }
        }
    }
}

#[test]
fn stop_and_resume_at_the_base() {
    let mut r = rig(16, f());
    for round in 0..100u64 {
        let id = r.post(&chain_of(round * 7));
        let chain = r.pop().unwrap().unwrap();
        assert_eq!(chain.head, id);
        r.ring
            .add_used(&r.mem, &NoLog, &[UsedElem::of(&chain, 0)])
            .unwrap();
        assert_eq!(r.driver.take_used(&r.mem).map(|u| u.0), Some(id));
        // Stop (GET_VRING_BASE) and resume (SET_VRING_BASE) every few
        // chains: the base says exactly where both sides are.
        if round % 3 == 0 {
            let base = r.ring.base();
            let avail = u32::from(r.driver.avail_index) | u32::from(r.driver.avail_wrap) << 15;
            let used = u32::from(r.driver.used_index) | u32::from(r.driver.used_wrap) << 15;
            assert_eq!(base, used << 16 | avail, "round {round}");
            r.ring = PackedRing::resume(layout(16), None, base, f().into()).unwrap();
        }
    }
    // Two chains posted, one taken: the base points at the second.
    r.post(&[(0x8000, 10, false)]);
    let second = r.post(&[(0x8000, 10, false)]);
    let first = r.pop().unwrap().unwrap();
    r.ring
        .add_used(&r.mem, &NoLog, &[UsedElem::of(&first, 0)])
        .unwrap();
    r.ring = PackedRing::resume(layout(16), None, r.ring.base(), f().into()).unwrap();
    assert_eq!(r.pop().unwrap().unwrap().head, second);
}

#[test]
fn malformed_chains_consume_nothing() {
    type Setup = fn(&mut Rig);
    let cases: [(&str, Setup, VringError); 9] = [
        (
            "chain around the whole ring",
            |r| {
                for i in 0..8u16 {
                    Driver::put_desc(
                        &r.mem,
                        DESC + 16 * u64::from(i),
                        0x8000,
                        1,
                        0,
                        DESC_F_AVAIL | DESC_F_NEXT,
                    );
                }
            },
            VringError::Loop,
        ),
        (
            "buffer id past the ring",
            |r| {
                Driver::put_desc(&r.mem, DESC, 0x8000, 1, 8, DESC_F_AVAIL);
            },
            VringError::BadHead,
        ),
        (
            "indirect with NEXT",
            |r| {
                Driver::put_desc(
                    &r.mem,
                    DESC,
                    TABLES,
                    32,
                    0,
                    DESC_F_AVAIL | DESC_F_INDIRECT | DESC_F_NEXT,
                );
            },
            VringError::IndirectNotAllowed,
        ),
        (
            "indirect after a plain descriptor",
            |r| {
                Driver::put_desc(
                    &r.mem,
                    DESC + 16,
                    TABLES,
                    32,
                    0,
                    DESC_F_AVAIL | DESC_F_INDIRECT,
                );
                Driver::put_desc(&r.mem, DESC, 0x8000, 1, 0, DESC_F_AVAIL | DESC_F_NEXT);
            },
            VringError::IndirectNotAllowed,
        ),
        (
            "indirect table of 24 bytes",
            |r| {
                Driver::put_desc(&r.mem, DESC, TABLES, 24, 0, DESC_F_AVAIL | DESC_F_INDIRECT);
            },
            VringError::BadIndirectLen,
        ),
        (
            "empty indirect table",
            |r| {
                Driver::put_desc(&r.mem, DESC, TABLES, 0, 0, DESC_F_AVAIL | DESC_F_INDIRECT);
            },
            VringError::BadIndirectLen,
        ),
        (
            "readable after writable",
            |r| {
                Driver::put_desc(&r.mem, DESC + 16, 0x8000, 1, 0, DESC_F_AVAIL);
                Driver::put_desc(
                    &r.mem,
                    DESC,
                    0x8000,
                    1,
                    0,
                    DESC_F_AVAIL | DESC_F_NEXT | DESC_F_WRITE,
                );
            },
            VringError::OutAfterIn,
        ),
        (
            "buffer outside guest memory",
            |r| {
                Driver::put_desc(&r.mem, DESC, MEM as u64 - 4, 16, 0, DESC_F_AVAIL);
            },
            VringError::NotMapped,
        ),
        (
            "length overflow",
            |r| {
                r.regions = vec![Region::new(0, 1 << 40, BASE, 1 << 47).unwrap()];
                Driver::put_desc(&r.mem, DESC + 16, 0, u32::MAX, 0, DESC_F_AVAIL);
                Driver::put_desc(&r.mem, DESC, 0, u32::MAX, 0, DESC_F_AVAIL | DESC_F_NEXT);
            },
            VringError::LenOverflow,
        ),
    ];
    for (what, setup, want) in cases {
        let mut r = rig(8, f());
        setup(&mut r);
        assert_eq!(r.pop(), Err(Stop::Error(want)), "{what}");
        // Nothing consumed: the same error again, and the base unmoved.
        assert_eq!(r.pop(), Err(Stop::Error(want)), "{what}");
        assert_eq!(r.ring.base(), FRESH_BASE, "{what}");
    }
    // Indirect descriptors without the feature.
    let mut r = rig(
        8,
        RingFeatures {
            indirect: false,
            ..f()
        },
    );
    r.driver
        .post_indirect(&r.mem, TABLES, &[(0x8000, 10, false)]);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::IndirectNotAllowed)));
}

#[test]
fn chains_in_flight_never_exceed_the_ring() {
    // A guest that marks descriptors available again before the device
    // returned them cannot make it take more than the ring holds.
    let mut r = rig(4, f());
    for _ in 0..4 {
        r.post(&[(0x8000, 1, false)]);
    }
    for _ in 0..4 {
        r.pop().unwrap().unwrap();
    }
    // The driver's next lap, written over descriptors still in flight.
    Driver::put_desc(&r.mem, DESC, 0x8000, 1, 0, DESC_F_USED);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::Loop)));
    // Returning more than was taken is refused, not believed.
    let elem = UsedElem {
        head: 0,
        len: 0,
        positions: 5,
        complete: true,
    };
    assert_eq!(
        r.ring.add_used(&r.mem, &NoLog, &[elem]),
        Err(Stop::Error(VringError::BadUsed))
    );
}

#[test]
fn a_batch_returning_more_than_was_taken_stays_unseen() {
    // Two chains of one descriptor in flight, returned as a batch whose
    // second element claims three positions: one element per chain fits,
    // the positions do not. Refused, and the driver sees nothing used.
    let mut r = rig(8, f());
    let mut used = Vec::new();
    for _ in 0..2 {
        r.post(&[(0x8000, 1, false)]);
        used.push(UsedElem::of(&r.pop().unwrap().unwrap(), 0));
    }
    let claimed = [
        used[0],
        UsedElem {
            positions: 3,
            ..used[1]
        },
    ];
    assert_eq!(
        r.ring.add_used(&r.mem, &NoLog, &claimed),
        Err(Stop::Error(VringError::BadUsed))
    );
    // More elements than positions in flight: refused as well.
    assert_eq!(
        r.ring
            .add_used(&r.mem, &NoLog, &[used[0], used[1], used[1]]),
        Err(Stop::Error(VringError::BadUsed))
    );
    assert_eq!(r.driver.take_used(&r.mem), None);
    // The ring is where it was: the true batch goes out whole.
    r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
    for elem in &used {
        assert_eq!(r.driver.take_used(&r.mem), Some((elem.head, elem.len)));
    }

    // 41 chains of one descriptor in flight, returned with the last one
    // claiming three positions: the first 32 after the batch's first go
    // out as a run of adjacent stores before that chain is reached. Still
    // refused, still unseen, and the true batch goes out after it.
    let mut r = rig(64, f());
    let mut used = Vec::new();
    for _ in 0..41 {
        r.post(&[(0x8000, 1, false)]);
        used.push(UsedElem::of(&r.pop().unwrap().unwrap(), 0));
    }
    let mut claimed = used.clone();
    claimed[40].positions = 3;
    r.mem.writes.borrow_mut().clear();
    assert_eq!(
        r.ring.add_used(&r.mem, &NoLog, &claimed),
        Err(Stop::Error(VringError::BadUsed))
    );
    assert!(
        !r.mem.writes.borrow().is_empty(),
        "the run before the chain of three was not written"
    );
    assert_eq!(r.driver.take_used(&r.mem), None);
    r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
    for elem in &used {
        assert_eq!(r.driver.take_used(&r.mem), Some((elem.head, elem.len)));
    }
    assert_eq!(r.driver.take_used(&r.mem), None);
}

#[test]
fn indirect_tables_ignore_reserved_flags() {
    let mut r = rig(8, f());
    let bufs = [(0x8000, 10, false), (0x9000, 20, false), (0xa000, 30, true)];
    let id = r.driver.post_indirect(&r.mem, TABLES, &bufs);
    let chain = r.pop().unwrap().unwrap();
    // All three entries, though each says NEXT and INDIRECT.
    assert_eq!(
        (
            chain.head,
            chain.positions,
            chain.readable,
            chain.writable,
            chain.readable_len,
            chain.writable_len
        ),
        (id, 1, 2, 1, 30, 30)
    );
    assert_eq!(
        r.iov[2],
        Iov {
            gpa: 0xa000,
            addr: BASE + 0xa000,
            len: 30
        }
    );
    // Readable after writable inside a table is still refused.
    let mut r = rig(8, f());
    r.driver
        .post_indirect(&r.mem, TABLES, &[(0x8000, 10, true), (0x9000, 20, false)]);
    assert_eq!(r.pop(), Err(Stop::Error(VringError::OutAfterIn)));
}
