//! Randomized ring states against the parser: whatever the guest writes,
//! `pop` must either refuse the ring or return a chain whose every segment
//! lies inside guest memory, within the iov array, with consistent counts.
use crate::testmem::RingFeatures;
use crate::vring::iotlb::{access_bits, Iotlb, Mapping, Translated, ACCESS_RO, ACCESS_WO};
use crate::vring::mem_table::{validate, Region, TranslateError};
use crate::vring::Stop;

use crate::testmem::{NoLog, TestMem};
use crate::vring::*;

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(2685821657736338717)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const BASE: u64 = 0x1000_0000;
const MEM: usize = 1 << 20;

/// The 16 bytes of a descriptor: the split layout puts `flags` then
/// `next` after the length, the packed layout the `id` then `flags`.
fn desc_bytes(addr: u64, len: u32, flags: u16, next_or_id: u16, packed: bool) -> [u8; 16] {
    let (third, fourth) = if packed {
        (next_or_id, flags)
    } else {
        (flags, next_or_id)
    };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&addr.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[12..14].copy_from_slice(&third.to_le_bytes());
    b[14..].copy_from_slice(&fourth.to_le_bytes());
    b
}

/// Random bytes over the ring area, then 64 plausible indirect-table
/// entries at guest-physical 0x8000.
fn junk_and_tables(r: &mut Rng, mem: &TestMem, ring_bytes: usize, packed: bool) {
    let junk: Vec<u8> = (0..ring_bytes).map(|_| r.next() as u8).collect();
    mem.put(BASE + 0x1000, &junk);
    for i in 0..64u64 {
        let flags = [0, DESC_F_WRITE, DESC_F_NEXT, DESC_F_INDIRECT][r.below(4) as usize];
        let b = desc_bytes(
            r.below(0xc0000),
            r.below(0x800) as u32,
            flags,
            r.below(10) as u16,
            packed,
        );
        mem.put(BASE + 0x8000 + 16 * i, &b);
    }
}

/// A random buffer: anywhere, near the hole between the regions, an
/// indirect table, or inside guest memory; of a wild, table-like or
/// plausible length.
fn random_buffer(r: &mut Rng) -> (u64, u32) {
    let addr = match r.below(4) {
        0 => r.next(),
        1 => 0x3f000 + r.below(0x2000),
        2 if r.below(2) == 0 => 0x8000 + 16 * r.below(64),
        _ => r.below(0xc0000),
    };
    let len = match r.below(5) {
        0 => r.next() as u32,
        1 => 16 * r.below(8) as u32,
        _ => r.below(0x3000) as u32,
    };
    (addr, len)
}

/// Random descriptor flags, chains and indirect ones more likely.
fn random_flags(r: &mut Rng) -> u16 {
    let wild = r.next() as u16;
    [
        0,
        DESC_F_WRITE,
        DESC_F_NEXT,
        DESC_F_NEXT,
        DESC_F_NEXT | DESC_F_WRITE,
        DESC_F_INDIRECT,
        wild,
    ][r.below(7) as usize]
}

/// What every accepted chain of either format must be: its head (buffer
/// id) inside the ring, at least one ring position, its segments inside
/// the iov array and adding up to its lengths, and each inside one region,
/// at the same offset in guest-physical and owner memory (the dirty log
/// marks `gpa`).
fn check_chain(c: &Chain, num: u32, iov: &[Iov], regions: &[Region]) {
    assert!(u32::from(c.head) < num);
    assert!(c.positions >= 1);
    assert!(c.readable + c.writable <= iov.len());
    let total: u64 = iov[..c.readable + c.writable].iter().map(|s| s.len).sum();
    assert_eq!(total, c.readable_len + c.writable_len);
    for s in &iov[..c.readable + c.writable] {
        let inside = regions.iter().any(|g| {
            s.addr >= g.uaddr()
                && s.addr + s.len <= g.uaddr() + g.size()
                && s.gpa.checked_sub(g.gpa()) == Some(s.addr - g.uaddr())
        });
        assert!(
            inside,
            "segment {s:?} outside guest memory, or its gpa does not match"
        );
    }
}

/// The guest memory of `regions` in a device IOTLB, page by page at the
/// same addresses: every 13th page missing, every 5th read-only.
fn page_iotlb(regions: &[Region]) -> Iotlb<Vec<Mapping>> {
    let mut tlb = Iotlb::new(vec![Mapping::default(); 256]);
    let pages = regions.iter().flat_map(|g| {
        (g.gpa()..g.gpa() + g.size())
            .step_by(0x1000)
            .map(move |gpa| (gpa, g.uaddr() + (gpa - g.gpa())))
    });
    for (page, (gpa, uaddr)) in pages.enumerate() {
        let perm = if page % 5 == 0 {
            ACCESS_RO
        } else {
            ACCESS_RO | ACCESS_WO
        };
        if page % 13 != 7 {
            tlb.update(gpa, 0x1000, uaddr, perm, 1 << 47).unwrap();
        }
    }
    tlb
}

/// The owner byte ranges of `segments`, adjacent ones merged.
fn spans(segments: &[Iov]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for s in segments.iter().filter(|s| s.len > 0) {
        match out.last_mut() {
            Some(last) if last.0 + last.1 == s.addr => last.1 += s.len,
            _ => out.push((s.addr, s.len)),
        }
    }
    out
}

/// A pop through the page IOTLB against the same pop through the memory
/// table: a chain it accepts is the table's chain, its segments each in
/// one mapping that allows their access; a miss names an unmapped
/// address; other refusals are the table's, or come from the finer split.
fn compare_with_iotlb(
    tlb: &Iotlb<Vec<Mapping>>,
    via_table: &Result<Option<Chain>, Stop>,
    table_iov: &[Iov],
    via_tlb: &Result<Option<Chain>, Stop>,
    tlb_iov: &[Iov],
) {
    match via_tlb {
        Ok(Some(c)) => {
            let Ok(Some(t)) = via_table else {
                panic!("the IOTLB accepted {c:?}, the table gave {via_table:?}")
            };
            assert_eq!(
                (c.head, c.readable_len, c.writable_len, c.positions),
                (t.head, t.readable_len, t.writable_len, t.positions)
            );
            let (outs, ins) = tlb_iov[..c.readable + c.writable].split_at(c.readable);
            assert_eq!(spans(outs), spans(&table_iov[..t.readable]));
            assert_eq!(
                spans(ins),
                spans(&table_iov[t.readable..t.readable + t.writable])
            );
            for (segments, want) in [(outs, ACCESS_RO), (ins, ACCESS_WO)] {
                for s in segments.iter().filter(|s| s.len > 0) {
                    let m = tlb.find(s.gpa).expect("a segment outside the IOTLB");
                    assert!(
                        s.gpa + (s.len - 1) <= m.last() && m.perm() & want != 0,
                        "{s:?} in {m:?}"
                    );
                }
            }
        }
        Ok(None) => assert!(matches!(via_table, Ok(None))),
        Err(Stop::Miss) => {
            let Some(TranslateError::Miss { iova, .. }) = tlb.last_fault() else {
                panic!("a miss without its address")
            };
            assert!(tlb.find(iova).is_none(), "a miss at mapped {iova:#x}");
        }
        Err(Stop::Error(VringError::AccessDenied)) => {
            let Some(TranslateError::Denied { iova, access }) = tlb.last_fault() else {
                panic!("a refusal without its address")
            };
            let m = tlb.find(iova).expect("refused at an unmapped address");
            assert_eq!(
                m.perm() & access_bits(access),
                0,
                "refused {access:?} at {iova:#x} in {m:?}"
            );
        }
        Err(Stop::Error(VringError::TooManySegments)) => {}
        // The IOTLB splits at every page, so it runs out of segments no
        // later than the table; past that point the two walks differ.
        Err(e) => assert!(
            matches!(via_table, Err(t) if t == e || *t == Stop::Error(VringError::TooManySegments)),
            "the IOTLB refused with {e:?}, the table gave {via_table:?}"
        ),
    }
}

/// Builds a random ring in fresh memory and pops until it is empty or
/// refused, checking every invariant. Returns the number of chains popped.
pub fn one_state(seed: u64) -> usize {
    let mut r = Rng(seed | 1);
    let mem = TestMem::new(BASE, MEM);
    // Two regions with a hole between them, in random order.
    let mut regions = vec![
        Region::new(0, 0x40000, BASE, 1 << 47).unwrap(),
        Region::new(0x80000, 0x40000, BASE + 0x80000, 1 << 47).unwrap(),
    ];
    validate(&mut regions, 64).unwrap();
    let num = 1u32 << r.below(6);
    let feats = RingFeatures {
        event_idx: r.below(2) == 1,
        indirect: r.below(2) == 1,
        notify_on_empty: r.below(2) == 1,
        in_order: r.below(2) == 1,
    };
    let (desc, avail, used) = (BASE + 0x1000, BASE + 0x3000, BASE + 0x5000);
    let base = r.next() as u16;
    let mut ring = SplitRing::resume(
        RingLayout {
            num,
            desc,
            avail,
            used,
            used_log: None,
        },
        base,
        base,
        feats.into(),
    )
    .unwrap();
    // Random bytes over the descriptor table, an indirect area and the
    // avail ring; then plausible-looking descriptors most of the time.
    junk_and_tables(&mut r, &mem, 0x3000, false);
    for i in 0..num as u64 {
        if r.below(3) != 0 {
            let (addr, len) = random_buffer(&mut r);
            let flags = random_flags(&mut r) & 7;
            let next = r.below(u64::from(num) + 2) as u16;
            mem.put(desc + 16 * i, &desc_bytes(addr, len, flags, next, false));
        }
    }
    for i in 0..u64::from(num) {
        if r.below(8) != 0 {
            mem.put_u16(avail + 4 + 2 * i, r.below(u64::from(num)) as u16);
        }
    }
    mem.put_u16(
        avail + 2,
        base.wrapping_add(r.below(u64::from(num) + 3) as u16),
    );
    let mut iov = vec![Iov::default(); 1 + r.below(MAX_SEGMENTS as u64) as usize];
    let mut tlb_iov = iov.clone();
    // Built once per thread: every state has the same regions.
    thread_local! {
        static TLB: Iotlb<Vec<Mapping>> = page_iotlb(&[
            Region::new(0, 0x40000, BASE, 1 << 47).unwrap(),
            Region::new(0x80000, 0x40000, BASE + 0x80000, 1 << 47).unwrap(),
        ]);
    }
    let mut popped = 0;
    loop {
        let before = ring.last_avail_idx();
        // The same pop through the device IOTLB, on a copy of the ring.
        let mut through_tlb = ring;
        let via_table = ring.pop(&mem, &regions[..], &mut iov);
        TLB.with(|tlb| {
            let via_tlb = through_tlb.pop(&mem, tlb, &mut tlb_iov);
            if via_tlb.is_err() {
                assert_eq!(
                    through_tlb.last_avail_idx(),
                    before,
                    "an error through the IOTLB must consume nothing"
                );
            }
            compare_with_iotlb(tlb, &via_table, &iov, &via_tlb, &tlb_iov);
            // Once more with the ring's own parts at their I/O virtual
            // addresses (the IOTLB maps each guest address to itself),
            // read through the IOTLB as the module reads them: the same
            // result, segment for segment.
            let layout = RingLayout {
                num,
                desc: desc - BASE,
                avail: avail - BASE,
                used: used - BASE,
                used_log: None,
            };
            let mut iova_ring =
                SplitRing::resume(layout, before, ring.last_used_idx(), feats.into()).unwrap();
            let mut iova_iov = vec![Iov::default(); tlb_iov.len()];
            let via_iova = iova_ring.pop(&Translated::new(&mem, tlb), tlb, &mut iova_iov);
            assert_eq!(via_iova, via_tlb, "the ring read through the IOTLB differs");
            if let Ok(Some(c)) = via_iova {
                assert_eq!(
                    iova_iov[..c.readable + c.writable],
                    tlb_iov[..c.readable + c.writable]
                );
            }
        });
        match via_table {
            Ok(None) => break,
            Err(_) => {
                assert_eq!(
                    ring.last_avail_idx(),
                    before,
                    "an error must consume nothing"
                );
                break;
            }
            Ok(Some(c)) => {
                assert_eq!(ring.last_avail_idx(), before.wrapping_add(1));
                check_chain(&c, num, &iov, &regions);
                popped += 1;
                assert!(popped <= num as usize, "popped more than the ring holds");
                let _ = ring.add_used(&mem, &NoLog, &[UsedElem::of(&c, 0)]);
                let _ = ring.should_notify(&mem);
            }
        }
    }
    popped
}

#[test]
fn hundred_thousand_random_ring_states() {
    let seed = std::env::var("VNR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut r = Rng(seed);
    let mut chains = 0;
    for _ in 0..100_000 {
        chains += one_state(r.next());
    }
    // The generator must reach the accepting paths too, or it tests little.
    assert!(chains > 5_000, "only {chains} chains accepted");
}

/// Builds a random packed ring in fresh memory and pops until nothing is
/// available or the ring is refused, returning chains now and then,
/// checking the same invariants as the split states. Returns the number
/// of chains popped.
pub fn one_packed_state(seed: u64) -> usize {
    use crate::vring::packed::{PackedRing, DESC_F_AVAIL, DESC_F_USED};
    let mut r = Rng(seed | 1);
    let mem = TestMem::new(BASE, MEM);
    let mut regions = vec![
        Region::new(0, 0x40000, BASE, 1 << 47).unwrap(),
        Region::new(0x80000, 0x40000, BASE + 0x80000, 1 << 47).unwrap(),
    ];
    validate(&mut regions, 64).unwrap();
    let num = if r.below(4) == 0 {
        1 + r.below(70) as u32
    } else {
        1u32 << r.below(6)
    };
    let feats = RingFeatures {
        event_idx: r.below(2) == 1,
        indirect: r.below(2) == 1,
        notify_on_empty: r.below(2) == 1,
        in_order: r.below(2) == 1,
    };
    let (desc, driver, device) = (BASE + 0x1000, BASE + 0x3000, BASE + 0x3100);
    // The avail position anywhere; the used one there too, or up to a lap
    // behind (chains someone else took and never returned).
    let avail_at = r.below(u64::from(num)) as u32 | if r.below(2) == 1 { 1 << 15 } else { 0 };
    let behind = if r.below(4) == 0 {
        r.below(u64::from(num) + 1) as u32
    } else {
        0
    };
    let (index, lap) = (avail_at & 0x7fff, avail_at & 0x8000);
    let used_at = if behind <= index {
        index - behind | lap
    } else {
        index + num - behind | (lap ^ 0x8000)
    };
    let base = used_at << 16 | avail_at;
    let layout = RingLayout {
        num,
        desc,
        avail: driver,
        used: device,
        used_log: None,
    };
    let mut ring = PackedRing::resume(layout, None, base, feats.into()).unwrap();
    junk_and_tables(&mut r, &mem, 0x2400, true);
    // Mostly descriptors available in the lap they sit in, so that chains
    // of several descriptors happen.
    let (mut index, mut lap) = (base & 0x7fff, base & 0x8000 != 0);
    for _ in 0..num {
        let (addr, len) = random_buffer(&mut r);
        let mut flags = random_flags(&mut r);
        if r.below(8) != 0 {
            flags = flags & !(DESC_F_AVAIL | DESC_F_USED)
                | if lap { DESC_F_AVAIL } else { DESC_F_USED };
        }
        let id = r.below(u64::from(num) + 2) as u16;
        mem.put(
            desc + 16 * u64::from(index),
            &desc_bytes(addr, len, flags, id, true),
        );
        index += 1;
        if index == num {
            index = 0;
            lap = !lap;
        }
    }
    let mut iov = vec![Iov::default(); 1 + r.below(MAX_SEGMENTS as u64) as usize];
    let mut popped = 0;
    let mut in_flight: Vec<UsedElem> = Vec::new();
    loop {
        let before = ring.base();
        match ring.pop(&mem, &regions[..], &mut iov) {
            Ok(None) => break,
            Err(_) => {
                assert_eq!(ring.base(), before, "an error must consume nothing");
                break;
            }
            Ok(Some(c)) => {
                check_chain(&c, num, &iov, &regions);
                in_flight.push(UsedElem::of(&c, 0));
                assert!(
                    positions(&in_flight) <= num,
                    "more in flight than the ring holds"
                );
                popped += 1;
                if r.below(3) == 0 {
                    ring.add_used(&mem, &NoLog, &in_flight).unwrap();
                    in_flight.clear();
                    let _ = ring.should_notify(&mem);
                }
                assert!(popped <= 4 * num as usize, "the device kept taking chains");
            }
        }
    }
    popped
}

#[test]
fn hundred_thousand_random_packed_ring_states() {
    let seed = std::env::var("VNR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut r = Rng(seed ^ 0x9ac);
    let mut chains = 0;
    for _ in 0..100_000 {
        chains += one_packed_state(r.next());
    }
    assert!(chains > 5_000, "only {chains} chains accepted");
}
