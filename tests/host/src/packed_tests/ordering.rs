//! Memory ordering of used batches: the store that makes a batch visible
//! to the driver comes after a write barrier, whatever the batch's size
//! (issue 33, defect 3), on the packed ring and, for the audit, the split
//! ring; and the device event flags are written again after the memory
//! behind them may have changed.

use super::*;
use crate::testmem::MemOp;

/// Whether a write barrier (`smp_wmb` or `smp_mb`) lies between the last
/// store at `visible` and every store before it. Returns the ops before
/// that store, newest first, up to the first barrier, for the message.
fn barrier_before(mem: &TestMem, visible: u64) -> Result<(), String> {
    let ops = mem.ops.borrow();
    let at = ops
        .iter()
        .rposition(|op| matches!(op, MemOp::Store(addr, _) if *addr == visible))
        .ok_or_else(|| format!("no store at {visible:#x}: {ops:?}"))?;
    for op in ops[..at].iter().rev() {
        match op {
            MemOp::Wmb | MemOp::Mb => return Ok(()),
            MemOp::Rmb => {}
            MemOp::Store(addr, len) => {
                return Err(format!(
                    "store of {len} at {addr:#x} may become visible after the one at {visible:#x}, \
                     which makes the batch visible: {:?}",
                    &ops[..=at]
                ))
            }
        }
    }
    Err(format!("nothing before the store at {visible:#x}"))
}

#[test]
fn packed_used_batches_of_1_2_and_32_have_a_write_barrier_before_their_first_flags() {
    // A ring of 64: the batches go round it twice, the second pass across
    // its end.
    let mut r = rig(64, f());
    for round in 0..2 {
        for n in [1usize, 2, 32] {
            let start = r.driver.used_index;
            let mut used = Vec::new();
            for i in 0..n {
                r.post(&[(0x8_0000 + 0x1000 * i as u64, 64, true)]);
            }
            r.mem.ops.borrow_mut().clear();
            for _ in 0..n {
                let chain = r.pop().unwrap().expect("a posted chain");
                // What tun's copy into the buffer does before the entry is
                // added, and RX's `num_buffers` write.
                r.mem.write(r.iov[0].addr, &[0xab; 64]).unwrap();
                used.push(UsedElem::of(&chain, 64));
            }
            r.ring.add_used(&r.mem, &NoLog, &used).unwrap();
            let first_flags = DESC + 16 * u64::from(start) + 8;
            if let Err(why) = barrier_before(&r.mem, first_flags) {
                panic!("round {round}, batch of {n}: {why}");
            }
            for _ in 0..n {
                assert_eq!(r.driver.take_used(&r.mem).map(|(_, len)| len), Some(64));
            }
        }
    }
}

#[test]
fn device_flags_are_written_again_once_the_memory_may_have_changed() {
    let mut r = rig(8, f());
    r.ring.disable_notify(&r.mem, &NoLog).unwrap();
    assert_eq!(r.mem.get_u16(DEVICE + 2), EVENT_FLAG_DISABLE);
    // The device area's memory is replaced (an IOTLB update maps its IOVA
    // to a fresh page): it reads ENABLE there now.
    r.mem.put_u16(DEVICE + 2, EVENT_FLAG_ENABLE);
    r.ring.disable_notify(&r.mem, &NoLog).unwrap();
    // The cache alone keeps the stale belief...
    assert_eq!(r.mem.get_u16(DEVICE + 2), EVENT_FLAG_ENABLE);
    // ...which the queue drops at every IOTLB or memory table change.
    r.ring.forget_device_flags();
    r.ring.disable_notify(&r.mem, &NoLog).unwrap();
    assert_eq!(r.mem.get_u16(DEVICE + 2), EVENT_FLAG_DISABLE);
}
