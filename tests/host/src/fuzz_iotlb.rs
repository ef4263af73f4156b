//! Fuzzing the device IOTLB by operation: a table of random capacity takes
//! a sequence of updates, invalidations, translations and miss-queue steps
//! chosen by the fuzzer, and after each one must agree with the plain model
//! (`iotlb_model.rs`), whose rules are the C driver's. The writes go through
//! the message parser first, as userspace's would. Driven by
//! `fuzz/fuzz_targets/iotlb.rs` (cargo fuzz).
use crate::vring::iotlb::message::MSG_MISS;
use arbitrary::Arbitrary;

use crate::iotlb_model::*;
use crate::vring::iotlb::*;
use crate::vring::mem_table::Access;

#[derive(Arbitrary, Debug)]
pub enum IotlbOp {
    /// A `write()` of these bytes (a message, well formed or not).
    Write(Vec<u8>),
    /// An update near the interesting addresses.
    Update {
        iova: u16,
        size: u16,
        uaddr: u16,
        perm: u8,
        high: u8,
    },
    Invalidate {
        iova: u16,
        size: u64,
        high: u8,
    },
    /// A range to translate, for reads and writes, after every later step.
    Translate {
        iova: u16,
        len: u16,
        high: u8,
    },
    Post {
        queue: u8,
        iova: u16,
    },
    Read,
    Clear,
}

#[derive(Arbitrary, Debug)]
pub struct IotlbInput {
    pub capacity: u8,
    pub ops: Vec<IotlbOp>,
}

/// Spreads a 16-bit value over the edges that matter: low IOVAs, the top of
/// the 64-bit space, the user address-space limit.
fn place(value: u16, high: u8) -> u64 {
    let v = u64::from(value) << 4;
    match high % 4 {
        0 => v,
        1 => u64::MAX - v,
        2 => USER_LIMIT.wrapping_sub(v),
        _ => v << 20,
    }
}

pub fn run(input: IotlbInput) {
    let capacity = usize::from(input.capacity % 40);
    let mut table = Iotlb::new(vec![Mapping::default(); capacity]);
    let mut model = Model::new(capacity);
    let mut misses = Misses::<2>::new();
    let mut probes = Vec::new();
    for op in input.ops.into_iter().take(256) {
        match op {
            IotlbOp::Write(bytes) => {
                if let Ok(m) = parse_write(&bytes) {
                    assert!(bytes.len() >= MIN_WRITE);
                    match m.kind {
                        MSG_UPDATE => {
                            let ours = table.update(m.iova, m.size, m.uaddr, m.perm, USER_LIMIT);
                            assert_eq!(ours, model.update(m.iova, m.size, m.uaddr, m.perm));
                            if ours.is_ok() {
                                misses.answer(m.iova, m.size);
                            }
                        }
                        MSG_INVALIDATE if m.size != 0 => {
                            assert_eq!(
                                table.invalidate(m.iova, m.size),
                                model.invalidate(m.iova, m.size)
                            );
                        }
                        _ => {}
                    }
                    probes.push((m.iova, m.size.min(1 << 20)));
                }
            }
            IotlbOp::Update {
                iova,
                size,
                uaddr,
                perm,
                high,
            } => {
                let (iova, uaddr) = (place(iova, high), place(uaddr, high >> 2));
                let size = u64::from(size) << (high >> 4);
                let ours = table.update(iova, size, uaddr, perm, USER_LIMIT);
                assert_eq!(ours, model.update(iova, size, uaddr, perm));
                probes.push((iova, size.min(1 << 20)));
            }
            IotlbOp::Invalidate { iova, size, high } => {
                let iova = place(iova, high);
                if size != 0 {
                    assert_eq!(table.invalidate(iova, size), model.invalidate(iova, size));
                }
            }
            IotlbOp::Translate { iova, len, high } => {
                probes.push((place(iova, high), u64::from(len) << (high >> 4)));
            }
            IotlbOp::Post { queue, iova } => {
                misses.post(
                    usize::from(queue % 3),
                    Miss {
                        iova: u64::from(iova),
                        access: Access::Read,
                        format: FORMAT_V2,
                    },
                );
            }
            IotlbOp::Read => {
                if let Some((_, miss)) = misses.read() {
                    assert_eq!(
                        encode_miss(miss.format, miss.iova, miss.access)[33],
                        MSG_MISS
                    );
                }
            }
            IotlbOp::Clear => {
                table.clear();
                model.maps.clear();
                misses.clear();
            }
        }
        if probes.len() > 8 {
            probes.remove(0);
        }
        agree(&table, &model, &probes);
    }
}
