//! A micro-benchmark of the split-ring parser on the host, not a test: it
//! asserts nothing about time and is ignored by default. It pops 256
//! one-descriptor chains and returns them, 100,000 times, and prints the
//! nanoseconds per chain:
//!
//!     cd tests/host && cargo test --release parse_bench -- --ignored --nocapture
//!
//! Compare builds by running it several times each, interleaved: single
//! runs spread by a third on the 2-core test machine.
use crate::testmem::RingFeatures;
use crate::testmem::{NoLog, TestMem};
use crate::vring::mem_table::{validate, Region};
use crate::vring::*;

#[test]
#[ignore]
fn parse_bench() {
    const BASE: u64 = 0x10_0000;
    let mem = TestMem::new(BASE, 0x40_0000);
    let mut regions = vec![Region::new(0, 0x40_0000, BASE, 1 << 47).unwrap()];
    validate(&mut regions, 64).unwrap();
    let feats = RingFeatures {
        event_idx: true,
        indirect: true,
        notify_on_empty: false,
        in_order: false,
    };
    let (desc, avail, used) = (BASE + 0x1000, BASE + 0x10_000, BASE + 0x20_000);
    let num = 256u32;
    let mut ring = SplitRing::resume(
        RingLayout {
            num,
            desc,
            avail,
            used,
            used_log: None,
        },
        0,
        0,
        feats.into(),
    )
    .unwrap();
    for i in 0..num as u64 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&(0x8000 + i * 128).to_le_bytes());
        b[8..12].copy_from_slice(&76u32.to_le_bytes());
        mem.put(desc + 16 * i, &b);
        mem.put_u16(avail + 4 + 2 * i, i as u16);
    }
    let mut iov = vec![Iov::default(); 64];
    let mut idx: u16 = 0;
    let start = std::time::Instant::now();
    let rounds = 100_000u32;
    for _ in 0..rounds {
        idx = idx.wrapping_add(num as u16);
        mem.put_u16(avail + 2, idx);
        let mut heads = Vec::with_capacity(256);
        while let Some(c) = ring.pop(&mem, &regions[..], &mut iov).unwrap() {
            heads.push(UsedElem::of(&c, 0));
        }
        ring.add_used(&mem, &NoLog, &heads).unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64 / (rounds as f64 * num as f64);
    eprintln!("parse_bench: {ns:.1} ns per chain (pop and return, split ring)");
}

/// The same pops with the ring and the buffers at I/O virtual addresses,
/// through a device IOTLB of 2048 one-page mappings in shuffled pages
/// (`scripts/bench`'s `iotlb` flag maps every page on its own, as a guest
/// behind intel-iommu does): each ring access and each buffer is
/// translated.
#[test]
#[ignore]
fn parse_bench_iotlb() {
    use crate::vring::iotlb::{Iotlb, Mapping, Translated, ACCESS_RO, ACCESS_WO};
    const ACCESS_RW: u8 = ACCESS_RO | ACCESS_WO;
    const BASE: u64 = 0x10_0000;
    const IOVA: u64 = 0x8000_0000;
    const PAGES: u64 = 0x400;
    let mem = TestMem::new(BASE, (PAGES << 12) as usize);
    let mut tlb = Iotlb::new(vec![Mapping::default(); 2048]);
    // IOVA page p is owner page (p * 389) % PAGES: a shuffle (389 is
    // prime to 1024), so no two neighbours are contiguous.
    for page in 0..PAGES {
        let owner = BASE + (((page * 389) % PAGES) << 12);
        tlb.update(IOVA + (page << 12), 0x1000, owner, ACCESS_RW, 1 << 47)
            .unwrap();
    }
    // 1024 more, beyond the ring's pages, so that the table is full.
    for page in PAGES..2048 {
        tlb.update(IOVA + (page << 12), 0x1000, BASE, ACCESS_RO, 1 << 47)
            .unwrap();
    }
    let owner_of =
        |iova: u64| BASE + ((((iova - IOVA) >> 12) * 389 % PAGES) << 12) + (iova & 0xfff);
    let feats = RingFeatures {
        event_idx: true,
        indirect: true,
        notify_on_empty: false,
        in_order: false,
    };
    let (desc, avail, used) = (IOVA + 0x1000, IOVA + 0x10_000, IOVA + 0x20_000);
    let num = 256u32;
    let mut ring = SplitRing::resume(
        RingLayout {
            num,
            desc,
            avail,
            used,
            used_log: None,
        },
        0,
        0,
        feats.into(),
    )
    .unwrap();
    for i in 0..num as u64 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&(IOVA + 0x30_000 + i * 128).to_le_bytes());
        b[8..12].copy_from_slice(&76u32.to_le_bytes());
        mem.put(owner_of(desc + 16 * i), &b);
        mem.put_u16(owner_of(avail + 4 + 2 * i), i as u16);
    }
    let ring_mem = Translated::new(&mem, &tlb);
    let mut iov = vec![Iov::default(); 64];
    let mut idx: u16 = 0;
    let start = std::time::Instant::now();
    let rounds = 20_000u32;
    for _ in 0..rounds {
        idx = idx.wrapping_add(num as u16);
        mem.put_u16(owner_of(avail + 2), idx);
        let mut heads = Vec::with_capacity(256);
        while let Some(c) = ring.pop(&ring_mem, &tlb, &mut iov).unwrap() {
            heads.push(UsedElem::of(&c, 0));
        }
        ring.add_used(&ring_mem, &NoLog, &heads).unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64 / (rounds as f64 * num as f64);
    eprintln!("parse_bench: {ns:.1} ns per chain (pop and return, split ring, through a 2048-entry IOTLB)");
}
