// SPDX-License-Identifier: GPL-2.0

//! Access to the ring owner's memory from its worker.
//!
//! The workers are vhost_tasks: threads of the owner process, so the owner's
//! address space is `current->mm` and ordinary user accesses reach it. Bulk
//! copies use the kernel's `UserSlice`; ring indices and flags go through the
//! C shim's `get_user`/`put_user`, which are single 16-bit accesses.

use crate::dirtylog::{LogBitmap, LogError};
use crate::shim;
use crate::vring::{GuestMemory, VringError};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{
    bindings,
    page::PAGE_SIZE,
    prelude::*,
    sync::barrier::{smp_mb, Full, Read, Write},
    uaccess::{UserPtr, UserSlice},
};

/// The first address past the user address space (`TASK_SIZE_MAX`).
pub(crate) fn user_limit() -> u64 {
    // SAFETY: Reads a constant of the running kernel.
    unsafe { shim::vnr_task_size_max() }
}

/// The current task's user address space, as seen by a worker.
///
/// # Invariants
///
/// Only used from a task whose `mm` is the ring owner's (a vhost_task of the
/// owner, or the owner itself during an ioctl).
pub(crate) struct OwnerMem;

fn uptr(addr: u64) -> Result<UserPtr, VringError> {
    usize::try_from(addr).map(UserPtr::from_addr).map_err(|_| VringError::Fault)
}

impl GuestMemory for OwnerMem {
    fn read_u16(&self, addr: u64) -> Result<u16, VringError> {
        if addr % 2 != 0 {
            return Err(VringError::Fault);
        }
        let p = uptr(addr)?;
        let mut val = 0u16;
        // SAFETY: `get_user` checks the address itself (access_ok) and
        // handles faults; `val` is a valid local to write to.
        let ret = unsafe { shim::vnr_get_user_u16(p.as_const_ptr().cast(), &mut val) };
        if ret != 0 {
            return Err(VringError::Fault);
        }
        Ok(val)
    }

    fn write_u16(&self, addr: u64, val: u16) -> Result<(), VringError> {
        if addr % 2 != 0 {
            return Err(VringError::Fault);
        }
        let p = uptr(addr)?;
        // SAFETY: `put_user` checks the address itself and handles faults.
        let ret = unsafe { shim::vnr_put_user_u16(p.as_mut_ptr().cast(), val) };
        if ret != 0 {
            return Err(VringError::Fault);
        }
        Ok(())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), VringError> {
        UserSlice::new(uptr(addr)?, buf.len())
            .reader()
            .read_slice(buf)
            .map_err(|_| VringError::Fault)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), VringError> {
        UserSlice::new(uptr(addr)?, buf.len())
            .writer()
            .write_slice(buf)
            .map_err(|_| VringError::Fault)
    }

    fn mb(&self) {
        smp_mb(Full);
    }

    fn rmb(&self) {
        smp_mb(Read);
    }

    fn wmb(&self) {
        smp_mb(Write);
    }
}

/// The dirty-log bitmap, in the owner's memory (`VHOST_SET_LOG_BASE`).
///
/// # Invariants
///
/// As for [`OwnerMem`]: only used from a task whose `mm` is the owner's.
pub(crate) struct OwnerBitmap;

impl LogBitmap for OwnerBitmap {
    /// Sets the bit as C's `set_bit_to_user` does: the page is pinned for
    /// writing (faulting it in if need be), mapped, and the bit set with
    /// one atomic OR on its aligned 64-bit word, the `unsigned long` that
    /// QEMU clears with atomic exchanges. A user access cannot do an
    /// atomic read-modify-write, so the page is reached through the kernel
    /// mapping; the core atomic is for memory the kernel crate's atomics do
    /// not own.
    fn set_bit(&self, byte_addr: u64, bit: u32) -> Result<(), LogError> {
        let addr = usize::try_from(byte_addr).map_err(|_| LogError::Fault)?;
        if bit >= 8 || byte_addr >= user_limit() {
            return Err(LogError::Fault);
        }
        let mut page: *mut bindings::page = core::ptr::null_mut();
        // SAFETY: Pins at most one page of the current task's address space
        // at a user address (checked above; gup checks it again), writing
        // one pointer to `page`.
        let pinned = unsafe { bindings::pin_user_pages_fast(addr as kernel::ffi::c_ulong, 1, bindings::FOLL_WRITE, &mut page) };
        if pinned != 1 || page.is_null() {
            return Err(LogError::Fault);
        }
        let offset = addr % PAGE_SIZE;
        let word_offset = offset & !7;
        let shift = (offset & 7) * 8 + bit as usize;
        // SAFETY: `page` is pinned until the unpin below, so its kernel
        // mapping is valid memory; `word_offset + 8 <= PAGE_SIZE` and the
        // word is 8-byte aligned (the mapping is page aligned). Every other
        // writer of the word (QEMU, other queues) uses atomic operations.
        unsafe {
            let base = bindings::kmap_local_page(page);
            let word = AtomicU64::from_ptr(base.cast::<u8>().add(word_offset).cast::<u64>());
            word.fetch_or(1u64 << shift, Ordering::Relaxed);
            bindings::kunmap_local(base);
            bindings::unpin_user_pages_dirty_lock(&mut page, 1, true);
        }
        Ok(())
    }
}
