// SPDX-License-Identifier: GPL-2.0

//! Dirty-page logging for live migration (`VHOST_F_LOG_ALL`).
//!
//! While QEMU migrates a guest it asks the device to record every guest
//! page it writes, so that the page is sent again. The record is a bitmap
//! in QEMU's memory (`VHOST_SET_LOG_BASE`): an array of `unsigned long`
//! in which bit `n` stands for guest physical page `n` of
//! [`LOG_PAGE_SIZE`] bytes (word `n / BITS_PER_LONG`, bit
//! `n % BITS_PER_LONG`). Like C's `log_write`, this file names a bit by its
//! byte, `base + n / 8`, and `n % 8`; the setter turns that into the word
//! and bit of the `set_bit` numbering, which is the same on either byte
//! order. QEMU clears words while the device sets bits, so a bit is set
//! with one atomic OR on its word, never by a read-modify-write.
//!
//! This file uses only `core`, like the ring parser: the module sets bits
//! in the owner's memory (`tap_glue/uaccess.rs`), the host tests in a buffer.
//! Everything here is arithmetic on addresses from userspace and lengths
//! from the guest, so every sum is checked.

use crate::vring::mem_table::{Region, TranslateError};

/// `VHOST_PAGE_SIZE`: the guest bytes one bit of the log stands for. It is
/// part of the ABI (QEMU's `VHOST_LOG_PAGE`), not the host's page size.
pub(crate) const LOG_PAGE_SIZE: u64 = 0x1000;

/// Guest bytes one byte of the log stands for.
const LOG_BYTE_SPAN: u64 = LOG_PAGE_SIZE * 8;

/// Why a log write failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogError {
    /// The bit's address overflows, or the bitmap there cannot be written.
    Fault,
}

/// A write whose guest-physical address cannot be found (through the
/// device IOTLB and the memory table) cannot be logged either.
impl From<TranslateError> for LogError {
    fn from(_: TranslateError) -> Self {
        LogError::Fault
    }
}

/// The memory that holds the bitmap.
pub(crate) trait LogBitmap {
    /// Sets bit `bit` (`0..8`) of the byte at owner address `byte_addr`,
    /// atomically with respect to every other setter and to the owner.
    fn set_bit(&self, byte_addr: u64, bit: u32) -> Result<(), LogError>;
}

/// The log bitmap at owner address `base`, as `VHOST_SET_LOG_BASE` set it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirtyLog {
    base: u64,
}

impl DirtyLog {
    /// The bitmap at owner address `base`.
    pub(crate) fn new(base: u64) -> Self {
        Self { base }
    }

    /// Whether the bits of the guest range `[gpa, gpa + size)` lie below
    /// `user_limit`, with the C driver's arithmetic (`log_access_ok`): the
    /// byte of `gpa`'s page, then `size` rounded up to whole log bytes.
    pub(crate) fn covers(&self, gpa: u64, size: u64, user_limit: u64) -> bool {
        let Some(first) = self.base.checked_add(gpa / LOG_BYTE_SPAN) else {
            return false;
        };
        let bytes = size / LOG_BYTE_SPAN + u64::from(size % LOG_BYTE_SPAN != 0);
        first
            .checked_add(bytes)
            .is_some_and(|end| end <= user_limit)
    }

    /// Whether the bits of every region of a memory table lie below
    /// `user_limit` (`vq_memory_access_ok` with logging on).
    pub(crate) fn covers_table(&self, regions: &[Region], user_limit: u64) -> bool {
        regions
            .iter()
            .all(|region| self.covers(region.gpa(), region.size(), user_limit))
    }

    /// Marks every guest page that `[gpa, gpa + len)` touches as dirty
    /// (C's `log_write`). Nothing for an empty range.
    pub(crate) fn mark<B: LogBitmap>(
        &self,
        bitmap: &B,
        gpa: u64,
        len: u64,
    ) -> Result<(), LogError> {
        if len == 0 {
            return Ok(());
        }
        let last = gpa.checked_add(len - 1).ok_or(LogError::Fault)?;
        for page in gpa / LOG_PAGE_SIZE..=last / LOG_PAGE_SIZE {
            let byte_addr = self.base.checked_add(page / 8).ok_or(LogError::Fault)?;
            bitmap.set_bit(byte_addr, (page % 8) as u32)?;
        }
        Ok(())
    }
}

/// Where the device's writes to guest memory are logged during a run.
pub(crate) trait WriteLog {
    /// Marks the guest range `[gpa, gpa + len)` dirty.
    fn mark(&self, gpa: u64, len: u64) -> Result<(), LogError>;
}
