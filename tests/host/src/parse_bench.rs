//! A micro-benchmark of the split-ring parser on the host, not a test: it
//! asserts nothing about time and is ignored by default. It pops 256
//! one-descriptor chains and returns them, 100,000 times, and prints the
//! nanoseconds per chain:
//!
//!     cd tests/host && cargo test --release parse_bench -- --ignored --nocapture
//!
//! Compare builds by running it several times each, interleaved: single
//! runs spread by a third on the 2-core test machine.
use crate::memory::{validate, Region};
use crate::testmem::{NoLog, TestMem};
use crate::vring::*;

#[test]
#[ignore]
fn parse_bench() {
    const BASE: u64 = 0x10_0000;
    let mem = TestMem::new(BASE, 0x40_0000);
    let mut regions = vec![Region::new(0, 0x40_0000, BASE, 1 << 47).unwrap()];
    validate(&mut regions, 64).unwrap();
    let feats = RingFeatures { event_idx: true, indirect: true, notify_on_empty: false, in_order: false };
    let (desc, avail, used) = (BASE + 0x1000, BASE + 0x10_000, BASE + 0x20_000);
    let num = 256u32;
    let mut ring = Vring::resume(RingLayout { num, desc, avail, used, used_log: None }, 0, 0, feats).unwrap();
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
