//! A `UserMemory` over a plain buffer, for tests and fuzzing.
use crate::vring::Stop;
use crate::vring::{UserMemory, VringError};
use std::cell::RefCell;

/// Owner memory `[base, base + len)`, zero-filled.
pub struct TestMem {
    pub base: u64,
    pub buf: RefCell<Vec<u8>>,
    /// Every write the device made, as (address, length), in order: what
    /// the ordering tests look at.
    pub writes: RefCell<Vec<(u64, usize)>>,
    /// Every store and barrier the device made, in order: what the memory
    /// ordering tests look at (a store visible before the barrier that
    /// should precede it is what a weakly ordered host would show).
    pub ops: RefCell<Vec<MemOp>>,
}

/// One entry of [`TestMem::ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOp {
    /// A store of `len` bytes at the address.
    Store(u64, usize),
    /// `smp_wmb`.
    Wmb,
    /// `smp_rmb`.
    Rmb,
    /// `smp_mb`.
    Mb,
}

impl TestMem {
    pub fn new(base: u64, len: usize) -> Self {
        TestMem {
            base,
            buf: RefCell::new(vec![0; len]),
            writes: RefCell::new(Vec::new()),
            ops: RefCell::new(Vec::new()),
        }
    }
    fn range(&self, addr: u64, len: usize) -> Result<std::ops::Range<usize>, Stop> {
        let off = addr.checked_sub(self.base).ok_or(VringError::Fault)? as usize;
        let end = off.checked_add(len).ok_or(VringError::Fault)?;
        if end > self.buf.borrow().len() {
            return Err(Stop::Error(VringError::Fault));
        }
        Ok(off..end)
    }
    pub fn put(&self, addr: u64, data: &[u8]) {
        let r = self.range(addr, data.len()).unwrap();
        self.buf.borrow_mut()[r].copy_from_slice(data);
    }
    pub fn get(&self, addr: u64, len: usize) -> Vec<u8> {
        let r = self.range(addr, len).unwrap();
        self.buf.borrow()[r].to_vec()
    }
    pub fn put_u16(&self, addr: u64, v: u16) {
        self.put(addr, &v.to_le_bytes());
    }
    pub fn get_u16(&self, addr: u64) -> u16 {
        let b = self.get(addr, 2);
        u16::from_le_bytes([b[0], b[1]])
    }
}

impl UserMemory for TestMem {
    type Owner = Self;

    fn owner(&self) -> &Self {
        self
    }

    fn read_u16(&self, addr: u64) -> Result<u16, Stop> {
        if addr % 2 != 0 {
            return Err(Stop::Error(VringError::Fault));
        }
        let r = self.range(addr, 2)?;
        let b = &self.buf.borrow()[r];
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn read_u32(&self, addr: u64) -> Result<u32, Stop> {
        if addr % 4 != 0 {
            return Err(Stop::Error(VringError::Fault));
        }
        let r = self.range(addr, 4)?;
        let b = &self.buf.borrow()[r];
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn write_u16(&self, addr: u64, val: u16) -> Result<(), Stop> {
        if addr % 2 != 0 {
            return Err(Stop::Error(VringError::Fault));
        }
        let r = self.range(addr, 2)?;
        self.buf.borrow_mut()[r].copy_from_slice(&val.to_le_bytes());
        self.writes.borrow_mut().push((addr, 2));
        self.ops.borrow_mut().push(MemOp::Store(addr, 2));
        Ok(())
    }
    fn write_8(&self, addr: u64, bytes: [u8; 8]) -> Result<(), Stop> {
        if addr % 8 != 0 {
            return Err(Stop::Error(VringError::Fault));
        }
        let r = self.range(addr, 8)?;
        self.buf.borrow_mut()[r].copy_from_slice(&bytes);
        self.writes.borrow_mut().push((addr, 8));
        self.ops.borrow_mut().push(MemOp::Store(addr, 8));
        Ok(())
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Stop> {
        let r = self.range(addr, out.len())?;
        out.copy_from_slice(&self.buf.borrow()[r]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Stop> {
        let r = self.range(addr, data.len())?;
        self.buf.borrow_mut()[r].copy_from_slice(data);
        self.writes.borrow_mut().push((addr, data.len()));
        self.ops.borrow_mut().push(MemOp::Store(addr, data.len()));
        Ok(())
    }
    fn mb(&self) {
        self.ops.borrow_mut().push(MemOp::Mb);
    }
    fn rmb(&self) {
        self.ops.borrow_mut().push(MemOp::Rmb);
    }
    fn wmb(&self) {
        self.ops.borrow_mut().push(MemOp::Wmb);
    }
}

/// A run with logging off: what the module passes when no log is set.
pub struct NoLog;

impl crate::vring::dirty_log::WriteLog for NoLog {
    fn mark(&self, _gpa: u64, _len: u64) -> Result<(), crate::vring::dirty_log::LogError> {
        Ok(())
    }
}

/// Records what the ring asks to be logged.
#[derive(Default)]
pub struct Marks(pub RefCell<Vec<(u64, u64)>>);

impl crate::vring::dirty_log::WriteLog for Marks {
    fn mark(&self, gpa: u64, len: u64) -> Result<(), crate::vring::dirty_log::LogError> {
        self.0.borrow_mut().push((gpa, len));
        Ok(())
    }
}

/// The ring-parsing features a test sets, as named booleans.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingFeatures {
    pub event_idx: bool,
    pub indirect: bool,
    pub notify_on_empty: bool,
    pub in_order: bool,
}

impl From<RingFeatures> for crate::vring::Features {
    fn from(f: RingFeatures) -> Self {
        use crate::vring::features::{bit, mask};
        let mut bits = 0;
        for (on, n) in [
            (f.event_idx, bit::VIRTIO_RING_F_EVENT_IDX),
            (f.indirect, bit::VIRTIO_RING_F_INDIRECT_DESC),
            (f.notify_on_empty, bit::VIRTIO_F_NOTIFY_ON_EMPTY),
            (f.in_order, bit::VIRTIO_F_IN_ORDER),
        ] {
            if on {
                bits |= mask(n);
            }
        }
        crate::vring::Features::from_bits(bits)
    }
}
