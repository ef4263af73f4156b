// SPDX-License-Identifier: GPL-2.0

//! Access to the ring owner's memory from its worker.
//!
//! The workers are vhost_tasks: threads of the owner process, so the owner's
//! address space is `current->mm` and ordinary user accesses reach it. Bulk
//! copies use the kernel's `UserSlice`; ring indices and flags go through the
//! C shim's `get_user`/`put_user`, which are single 16-bit accesses.

use crate::shim;
use crate::vring::{GuestMemory, VringError};
use kernel::{
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
