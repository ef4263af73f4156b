//! The dirty log's arithmetic: which bits a write sets, and which bitmaps
//! the C driver's access checks accept.
use crate::vring::dirty_log::{DirtyLog, LogBitmap, LogError, LOG_PAGE_SIZE};
use crate::vring::mem_table::Region;
use std::cell::RefCell;

const LIMIT: u64 = 0x7fff_ffff_f000; // x86-64 TASK_SIZE_MAX

/// A bitmap of `len` bytes at owner address `base`.
struct Bitmap {
    base: u64,
    bytes: RefCell<Vec<u8>>,
}

impl Bitmap {
    fn new(base: u64, len: usize) -> Self {
        Bitmap {
            base,
            bytes: RefCell::new(vec![0; len]),
        }
    }
    /// The pages whose bits are set, in order.
    fn pages(&self) -> Vec<u64> {
        let bytes = self.bytes.borrow();
        (0..bytes.len() as u64 * 8)
            .filter(|p| bytes[(p / 8) as usize] & (1 << (p % 8)) != 0)
            .collect()
    }
}

impl LogBitmap for Bitmap {
    fn set_bit(&self, byte_addr: u64, bit: u32) -> Result<(), LogError> {
        assert!(bit < 8);
        let off = byte_addr.checked_sub(self.base).ok_or(LogError::Fault)?;
        let mut bytes = self.bytes.borrow_mut();
        let byte = bytes.get_mut(off as usize).ok_or(LogError::Fault)?;
        *byte |= 1 << bit;
        Ok(())
    }
}

#[test]
fn marks_every_page_a_range_touches() {
    let bitmap = Bitmap::new(0x1000, 64);
    let log = DirtyLog::new(0x1000);
    log.mark(&bitmap, 0, 1).unwrap();
    assert_eq!(bitmap.pages(), vec![0]);
    // Two bytes across a page boundary: both pages.
    log.mark(&bitmap, 3 * LOG_PAGE_SIZE - 1, 2).unwrap();
    assert_eq!(bitmap.pages(), vec![0, 2, 3]);
    // Exactly one page, aligned: one bit.
    log.mark(&bitmap, 9 * LOG_PAGE_SIZE, LOG_PAGE_SIZE).unwrap();
    assert_eq!(bitmap.pages(), vec![0, 2, 3, 9]);
    // A 64 KiB packet at an odd offset: 17 pages.
    log.mark(&bitmap, 100 * LOG_PAGE_SIZE + 7, 0x10000).unwrap();
    assert_eq!(bitmap.pages().len(), 4 + 17);
    assert_eq!(*bitmap.pages().last().unwrap(), 116);
}

#[test]
fn empty_range_marks_nothing() {
    let bitmap = Bitmap::new(0x1000, 8);
    DirtyLog::new(0x1000)
        .mark(&bitmap, 5 * LOG_PAGE_SIZE, 0)
        .unwrap();
    assert!(bitmap.pages().is_empty());
}

#[test]
fn bits_keep_what_was_set_before() {
    let bitmap = Bitmap::new(0, 1);
    bitmap.bytes.borrow_mut()[0] = 0b1000_0001; // the owner's own bits
    DirtyLog::new(0)
        .mark(&bitmap, 2 * LOG_PAGE_SIZE, 1)
        .unwrap();
    assert_eq!(bitmap.bytes.borrow()[0], 0b1000_0101);
}

#[test]
fn overflowing_ranges_and_bases_fault() {
    let bitmap = Bitmap::new(0, 8);
    assert_eq!(
        DirtyLog::new(0).mark(&bitmap, u64::MAX, 2),
        Err(LogError::Fault)
    );
    let high = DirtyLog::new(u64::MAX - 1);
    assert_eq!(
        high.mark(&bitmap, u64::MAX - LOG_PAGE_SIZE + 1, 1),
        Err(LogError::Fault)
    );
    // A bit outside the bitmap's memory is the bitmap's fault to report.
    assert_eq!(
        DirtyLog::new(0).mark(&bitmap, 64 * LOG_PAGE_SIZE, 1),
        Err(LogError::Fault)
    );
}

#[test]
fn covers_follows_the_c_arithmetic() {
    let log = DirtyLog::new(0x10000);
    // 1 GiB of guest memory needs 32 KiB of bitmap.
    assert!(log.covers(0, 1 << 30, 0x10000 + 0x8000));
    assert!(!log.covers(0, 1 << 30, 0x10000 + 0x7fff));
    // A partial log byte counts as a whole one.
    assert!(!log.covers(0, 1, 0x10000));
    assert!(log.covers(0, 1, 0x10001));
    // The region's start selects the first byte.
    assert!(log.covers(1 << 30, 0x8000, 0x10000 + 0x8000 + 1));
    assert!(!log.covers(1 << 30, 0x8000 * 2, 0x10000 + 0x8000 + 1));
    // Overflow never passes.
    assert!(!DirtyLog::new(u64::MAX).covers(1 << 40, 1, u64::MAX));
    assert!(!DirtyLog::new(LIMIT).covers(0, 1, LIMIT));
}

#[test]
fn covers_table_checks_every_region() {
    let regions = [
        Region::new(0, 0x10_0000, 0x10_0000, LIMIT).unwrap(),
        Region::new(0x1_0000_0000, 0x10_0000, 0x20_0000, LIMIT).unwrap(),
    ];
    // The second region's bits sit 128 KiB into the bitmap, 32 bytes of
    // them for 1 MiB.
    let base = LIMIT - 0x2_0000 - 32;
    assert!(DirtyLog::new(base).covers_table(&regions, LIMIT));
    assert!(!DirtyLog::new(base + 1).covers_table(&regions, LIMIT));
}
