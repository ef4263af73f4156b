//! Structure-aware fuzzing of the ring parsers: the input is a ring (size,
//! features, format, descriptor table, avail ring, indices) plus a sequence
//! of device operations, with the guest allowed to scribble between them.
//! Bit 5 of `feats` translates through the device IOTLB instead of the
//! memory table: the same guest memory mapped page by page, some pages
//! missing and some read-only, so that misses and refused writes happen
//! mid-chain.
//! Bit 4 of `feats` negotiates `IN_ORDER`; bit 3 makes it a packed ring (the descriptors in packed
//! layout, bits 3 and 4 of their flags byte AVAIL and USED, `next` their
//! id, `base` both positions).
//! Bit 6 moves the three ring parts to the top of the 64-bit space, each
//! ending up to 32 bytes before or after 2^64 (`base` picks how far): the
//! ring must be refused, or every operation must fail without a panic (the
//! buffer there holds nothing, so each access faults), as the parsers add
//! offsets to the parts' starts.
//! Every accepted chain must stay inside guest memory and the iov array.
//! Driven by `fuzz/fuzz_targets/vring.rs` (cargo fuzz).
use crate::testmem::RingFeatures;
use crate::vring::iotlb::{Iotlb, Mapping, ACCESS_RO, ACCESS_WO};
use crate::vring::mem_table::{validate, Region};
use arbitrary::Arbitrary;

use crate::testmem::{NoLog, TestMem};
use crate::vring::packed::{PackedRing, DESC_F_AVAIL, DESC_F_USED, FRESH_BASE};
use crate::vring::ring::Ring;
use crate::vring::*;

#[derive(Arbitrary, Debug)]
pub struct D {
    pub addr: u32,
    pub len: u16,
    pub flags: u8,
    pub next: u8,
    pub wild: bool,
}

#[derive(Arbitrary, Debug)]
pub enum Op {
    Pop,
    AddUsed(u8),
    Notify,
    EnableNotify,
    DisableNotify,
    Unpop(u8),
    /// The guest writes a 16-bit value somewhere in the ring area.
    Scribble(u16, u16),
    /// The guest moves avail->idx.
    Avail(u8),
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    pub num_shift: u8,
    pub feats: u8,
    pub base: u16,
    pub iov_len: u16,
    pub descs: Vec<D>,
    pub avail: Vec<u8>,
    pub indirect: Vec<D>,
    pub ops: Vec<Op>,
}

const BASE: u64 = 0x1000_0000;
const MEM: usize = 1 << 20;

fn put_desc(mem: &TestMem, at: u64, d: &D, packed: bool) {
    let addr = if d.wild {
        u64::from(d.addr) << 20
    } else {
        u64::from(d.addr) % 0xc0000
    };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&addr.to_le_bytes());
    b[8..12].copy_from_slice(&u32::from(d.len).to_le_bytes());
    if packed {
        let mut flags = u16::from(d.flags & 7);
        if d.flags & 8 != 0 {
            flags |= DESC_F_AVAIL;
        }
        if d.flags & 16 != 0 {
            flags |= DESC_F_USED;
        }
        b[12..14].copy_from_slice(&u16::from(d.next).to_le_bytes());
        b[14..].copy_from_slice(&flags.to_le_bytes());
    } else {
        b[12..14].copy_from_slice(&u16::from(d.flags & 7).to_le_bytes());
        b[14..].copy_from_slice(&u16::from(d.next).to_le_bytes());
    }
    mem.put(at, &b);
}

/// Runs one fuzz input; panics on any broken invariant.
pub fn run(inp: Input) {
    let mem = TestMem::new(BASE, MEM);
    let mut regions = vec![
        Region::new(0, 0x40000, BASE, 1 << 47).unwrap(),
        Region::new(0x80000, 0x40000, BASE + 0x80000, 1 << 47).unwrap(),
    ];
    validate(&mut regions, 64).unwrap();
    let packed = inp.feats & 8 != 0;
    // The IOTLB of bit 5: each 4 KiB page of both regions at its
    // guest-physical address, except every 13th; every 5th read-only.
    let through_iotlb = inp.feats & 32 != 0;
    let mut tlb = Iotlb::new(vec![Mapping::default(); 256]);
    if through_iotlb {
        for (page, gpa) in (0..0x40000u64)
            .chain(0x80000..0xc0000)
            .step_by(0x1000)
            .enumerate()
        {
            let perm = if page % 5 == 0 {
                ACCESS_RO
            } else {
                ACCESS_RO | ACCESS_WO
            };
            if page % 13 != 7 {
                tlb.update(gpa, 0x1000, BASE + gpa, perm, 1 << 47).unwrap();
            }
        }
    }
    // A packed ring may have any size: the top bit of num_shift picks one
    // that is not a power of two.
    let num = if packed && inp.num_shift >= 128 {
        1 + u32::from(inp.num_shift) % 100
    } else {
        1u32 << (inp.num_shift % 8)
    };
    let feats = RingFeatures {
        event_idx: inp.feats & 1 != 0,
        indirect: inp.feats & 2 != 0,
        notify_on_empty: inp.feats & 4 != 0,
        in_order: inp.feats & 16 != 0,
    };
    let (desc, avail, used) = (BASE + 0x1000, BASE + 0x3000, BASE + 0x5000);
    for (i, d) in inp.descs.iter().take(num as usize).enumerate() {
        put_desc(&mem, desc + 16 * i as u64, d, packed);
    }
    for (i, d) in inp.indirect.iter().take(64).enumerate() {
        put_desc(&mem, BASE + 0x8000 + 16 * i as u64, d, packed);
    }
    for (i, h) in inp.avail.iter().take(num as usize).enumerate() {
        mem.put_u16(avail + 4 + 2 * i as u64, u16::from(*h));
    }
    mem.put_u16(avail + 2, inp.base);
    let layout = RingLayout {
        num,
        desc,
        avail,
        used,
        used_log: None,
    };
    if inp.feats & 64 != 0 {
        run_at_the_top(&inp, layout, packed, feats, &regions);
        return;
    }
    let mut ring = if packed {
        // Both positions from `base`, forced inside the ring; a used
        // position more than a lap behind is refused, then both start at
        // the avail one.
        let pos = |bits: u16| u32::from(bits & 0x8000) | u32::from(bits & 0x7fff) % num;
        let base = pos(inp.base) | pos(inp.base.rotate_left(5)) << 16;
        let ring = PackedRing::resume(layout, None, base, feats.into()).or_else(|| {
            PackedRing::resume(
                layout,
                None,
                pos(inp.base) << 16 | pos(inp.base),
                feats.into(),
            )
        });
        Ring::Packed(ring.unwrap())
    } else {
        Ring::Split(SplitRing::resume(layout, inp.base, inp.base, feats.into()).unwrap())
    };
    let mut iov = vec![Iov::default(); 1 + usize::from(inp.iov_len) % MAX_SEGMENTS];
    // Chains popped and not yet returned, oldest first.
    let mut outstanding: Vec<UsedElem> = Vec::new();
    for op in inp.ops.iter().take(256) {
        match *op {
            Op::Pop => {
                let before = ring.base();
                let popped = if through_iotlb {
                    ring.pop(&mem, &tlb, &mut iov)
                } else {
                    ring.pop(&mem, &regions[..], &mut iov)
                };
                match popped {
                    Ok(None) => {}
                    Err(_) => assert_eq!(ring.base(), before),
                    Ok(Some(c)) => {
                        assert!(u32::from(c.head) < num);
                        assert!(c.readable + c.writable <= iov.len());
                        let total: u64 = iov[..c.readable + c.writable].iter().map(|s| s.len).sum();
                        assert_eq!(total, c.readable_len + c.writable_len);
                        for s in &iov[..c.readable + c.writable] {
                            assert!(regions
                                .iter()
                                .any(|g| s.addr >= g.uaddr()
                                    && s.addr + s.len <= g.uaddr() + g.size()));
                        }
                        // Through the IOTLB, each segment lies in one
                        // mapping that allows its access.
                        for (i, s) in iov[..c.readable + c.writable]
                            .iter()
                            .enumerate()
                            .filter(|_| through_iotlb)
                        {
                            let m = tlb.find(s.gpa).expect("a segment outside the IOTLB");
                            assert!(
                                s.gpa + s.len - 1 <= m.last()
                                    && s.addr == m.uaddr() + (s.gpa - m.start())
                            );
                            let want = if i < c.readable { ACCESS_RO } else { ACCESS_WO };
                            assert!(
                                m.perm() & want != 0,
                                "segment {i} in a mapping without its access"
                            );
                        }
                        outstanding.push(UsedElem::of(&c, 0));
                        if packed {
                            assert!(
                                positions(&outstanding) <= num,
                                "more in flight than the ring holds"
                            );
                        }
                    }
                }
            }
            Op::AddUsed(n) => {
                // Returns the oldest `n % 4` chains taken (a split ring
                // takes any heads; a packed ring counts what it gave out).
                let n = usize::from(n % 4).min(outstanding.len());
                let heads: Vec<UsedElem> = outstanding.drain(..n).collect();
                let _ = ring.add_used(&mem, &NoLog, &heads);
            }
            Op::Notify | Op::EnableNotify | Op::DisableNotify => notify_op(&mut ring, &mem, op),
            Op::Unpop(n) => {
                // Puts back the newest chains, as the data path does.
                let keep = outstanding.len() - usize::from(n).min(outstanding.len());
                ring.unpop(positions(&outstanding[keep..]));
                outstanding.truncate(keep);
            }
            Op::Scribble(at, v) => {
                let at = BASE + 0x1000 + (u64::from(at) % 0x6000) & !1;
                mem.put_u16(at, v);
            }
            Op::Avail(d) => {
                let cur = mem.get_u16(avail + 2);
                mem.put_u16(avail + 2, cur.wrapping_add(u16::from(d)));
            }
        }
    }
}

/// The notification operations: whatever they return, they must not
/// panic.
fn notify_op(ring: &mut Ring, mem: &TestMem, op: &Op) {
    let _ = match op {
        Op::Notify => ring.should_notify(mem).map(|_| ()),
        Op::EnableNotify => ring.enable_notify(mem, &NoLog).map(|_| ()),
        Op::DisableNotify => ring.disable_notify(mem, &NoLog),
        _ => Ok(()),
    };
}

/// Bit 6 of `feats`: the layout's parts moved to end near 2^64, aligned as
/// their format needs; see the module's doc.
fn run_at_the_top(
    inp: &Input,
    layout: RingLayout,
    packed: bool,
    feats: RingFeatures,
    regions: &[Region],
) {
    let mem = TestMem::new(BASE, MEM);
    let (desc_size, avail_size, used_size) = if packed {
        PackedRing::sizes(layout.num)
    } else {
        SplitRing::sizes(layout.num, true)
    };
    // From 32 bytes past the end to 32 bytes before it.
    let slack = u64::from(inp.base % 65);
    let top = |size: u64, align: u64| {
        0u64.wrapping_sub(size).wrapping_add(32).wrapping_sub(slack) & !(align - 1)
    };
    let layout = RingLayout {
        desc: top(desc_size, 16),
        avail: top(avail_size, if packed { 4 } else { 2 }),
        used: top(used_size, 4),
        ..layout
    };
    let ring = if packed {
        PackedRing::resume(layout, None, FRESH_BASE, feats.into()).map(Ring::Packed)
    } else {
        SplitRing::resume(layout, 0, 0, feats.into()).map(Ring::Split)
    };
    let Some(mut ring) = ring else { return };
    let mut iov = vec![Iov::default(); 16];
    for op in inp.ops.iter().take(64) {
        // Nothing is there: a pop faults, and takes nothing.
        match *op {
            Op::Pop => {
                let before = ring.base();
                assert!(ring.pop(&mem, regions, &mut iov).is_err());
                assert_eq!(ring.base(), before);
            }
            Op::Notify | Op::EnableNotify | Op::DisableNotify => notify_op(&mut ring, &mem, op),
            Op::AddUsed(_) | Op::Unpop(_) | Op::Scribble(..) | Op::Avail(_) => {}
        }
    }
}
