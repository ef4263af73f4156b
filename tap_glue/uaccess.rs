// SPDX-License-Identifier: GPL-2.0

//! Access to the ring owner's memory from its worker.
//!
//! The workers are vhost_tasks: threads of the owner process, so the owner's
//! address space is `current->mm` and ordinary user accesses reach it. Reads
//! go through the C shim's inlined `_copy_from_user` ([`OwnerMem::read_into`]),
//! bulk writes through the kernel's `UserSlice`; ring indices and flags go
//! through the shim's `get_user`/`put_user`, which are single 16-bit accesses
//! (a packed ring's event area one 32-bit load), little-endian as virtio's
//! rings are.

use crate::tap_glue::compat;
use crate::tap_glue::shim;
use crate::vring::dirty_log::{LogBitmap, LogError};
use crate::vring::{Stop, Store8, UserMemory, VringError};
use core::marker::PhantomData;
use core::{
    mem::MaybeUninit,
    sync::atomic::{AtomicUsize, Ordering},
};
use kernel::mm::Mm;
use kernel::{
    bindings,
    ffi::{c_int, c_uint},
    page::PAGE_SIZE,
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

/// The first address past the user address space (`TASK_SIZE_MAX`).
pub(crate) fn user_limit() -> u64 {
    // SAFETY: Reads a constant of the running kernel.
    unsafe { shim::vnr_task_size_max() }
}

/// One naturally aligned load of a `T` (`u16` or `u32`) at the user
/// address `addr` through the shim's `get`: single-copy atomic. The value
/// as the memory holds it (little-endian on the targets the module builds
/// for; the callers convert).
///
/// # Safety
///
/// `get` must be the shim's load of a `T` (`vnr_get_user_u16` for `u16`,
/// `vnr_get_user_u32` for `u32`), which takes any user address: it masks
/// or checks the address itself and handles faults.
#[inline(always)]
unsafe fn load<T: Default>(
    addr: u64,
    get: unsafe extern "C" fn(*const T, *mut T) -> c_int,
) -> Result<T, Stop> {
    if addr % core::mem::size_of::<T>() as u64 != 0 {
        return Err(VringError::Fault.into());
    }
    let p = uptr(addr)?;
    let mut val = T::default();
    // SAFETY: by the function's contract `get` loads a `T` from any user
    // address safely; `val` is a valid local to write to.
    let ret = unsafe { get(p.as_const_ptr().cast(), &mut val) };
    if ret != 0 {
        return Err(VringError::Fault.into());
    }
    Ok(val)
}

/// The capability to reach the device owner's memory with user accesses:
/// the current task's address space is the owner's.
///
/// Only two places can make one: [`OwnerMem::of_owner`], which checks it
/// (the owner's ioctls), and [`OwnerMem::assume`], for the workers, which
/// run in the owner's address space by construction. It is neither `Send`
/// nor `Sync`, so it cannot reach another task.
///
/// # Invariants
///
/// While it exists, the current task's `mm` is the owner's.
pub(crate) struct OwnerMem {
    _not_send: PhantomData<*const ()>,
}

fn uptr(addr: u64) -> Result<UserPtr, Stop> {
    usize::try_from(addr)
        .map(UserPtr::from_addr)
        .map_err(|_| Stop::Error(VringError::Fault))
}

impl UserMemory for OwnerMem {
    type Owner = Self;

    fn owner(&self) -> &Self {
        self
    }

    fn read_u16(&self, addr: u64) -> Result<u16, Stop> {
        // SAFETY: the shim's load of a u16.
        unsafe { load(addr, shim::vnr_get_user_u16) }.map(u16::from_le)
    }

    fn read_u32(&self, addr: u64) -> Result<u32, Stop> {
        // SAFETY: the shim's load of a u32.
        unsafe { load(addr, shim::vnr_get_user_u32) }.map(u32::from_le)
    }

    fn write_u16(&self, addr: u64, val: u16) -> Result<(), Stop> {
        if addr % 2 != 0 {
            return Err(VringError::Fault.into());
        }
        let p = uptr(addr)?;
        // SAFETY: the shim's user-access scope masks or checks the address
        // itself and handles faults.
        let ret = unsafe { shim::vnr_put_user_u16(p.as_mut_ptr().cast(), val.to_le()) };
        if ret != 0 {
            return Err(VringError::Fault.into());
        }
        Ok(())
    }

    fn write_8(&self, addr: u64, bytes: [u8; 8]) -> Result<(), Stop> {
        if addr % 8 != 0 {
            return Err(VringError::Fault.into());
        }
        let p = uptr(addr)?;
        // A native store of the bytes' native value writes them in order.
        let val = u64::from_ne_bytes(bytes);
        // SAFETY: `put_user` checks the address itself and handles faults.
        let ret = unsafe { shim::vnr_put_user_u64(p.as_mut_ptr().cast(), val) };
        if ret != 0 {
            return Err(VringError::Fault.into());
        }
        Ok(())
    }

    fn write_8_each(&self, area: u64, area_len: u64, stores: &[Store8]) -> Result<(), Stop> {
        // Nothing to store: no user access.
        if stores.is_empty() {
            return Ok(());
        }
        if area % 8 != 0 {
            return Err(VringError::Fault.into());
        }
        let base = uptr(area)?;
        let len = usize::try_from(area_len).map_err(|_| Stop::Error(VringError::Fault))?;
        let count = c_uint::try_from(stores.len()).map_err(|_| Stop::Error(VringError::Fault))?;
        // SAFETY: `Store8` has the layout of the shim's `struct vnr_store8`
        // (asserted in shim.rs and in the shim), and `stores` holds `count` of
        // them. The shim checks that every offset lies, 8-byte aligned,
        // inside the `len` bytes at `base`, and the whole area with
        // access_ok, and handles faults.
        let ret = unsafe {
            shim::vnr_put_user_u64_each(base.as_mut_ptr().cast(), len, stores.as_ptr(), count)
        };
        if ret != 0 {
            return Err(VringError::Fault.into());
        }
        Ok(())
    }

    fn write_8_spaced(&self, addr: u64, spacing: u64, vals: &[u64]) -> Result<(), Stop> {
        if vals.is_empty() {
            return Ok(());
        }
        if addr % 8 != 0 || spacing % 8 != 0 {
            return Err(VringError::Fault.into());
        }
        let base = uptr(addr)?;
        let spacing = usize::try_from(spacing).map_err(|_| Stop::Error(VringError::Fault))?;
        let count = c_uint::try_from(vals.len()).map_err(|_| Stop::Error(VringError::Fault))?;
        // SAFETY: `vals` holds `count` values. The shim checks the whole
        // span the stores cover with access_ok (refusing a span that
        // overflows) and handles faults.
        let ret = unsafe {
            shim::vnr_put_user_u64_spaced(base.as_mut_ptr().cast(), spacing, vals.as_ptr(), count)
        };
        if ret != 0 {
            return Err(VringError::Fault.into());
        }
        Ok(())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Stop> {
        let len = buf.len();
        // SAFETY: `[u8]` and `[MaybeUninit<u8>]` have the same layout, and
        // `read_into` only ever writes initialised bytes (the owner's, or
        // zeroes where a fault stopped the copy), so `buf` stays valid.
        let dst = unsafe {
            core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<MaybeUninit<u8>>(), len)
        };
        self.read_into(addr, dst)
            .map_err(|_| Stop::Error(VringError::Fault))
    }

    #[inline]
    fn read_16(&self, addr: u64) -> Result<[u8; 16], Stop> {
        let p = uptr(addr)?;
        let mut bytes = [0u8; 16];
        // SAFETY: The shim checks (masks) the address itself, in a scoped
        // user read access, and handles faults; `bytes` is a valid local of
        // 16 bytes.
        let ret = unsafe { shim::vnr_read_user_16(p.as_const_ptr().cast(), bytes.as_mut_ptr()) };
        if ret != 0 {
            return Err(VringError::Fault.into());
        }
        Ok(bytes)
    }

    #[inline]
    fn read_16_acquire(&self, addr: u64) -> Result<[u8; 16], Stop> {
        // The shim's two 64-bit loads are single-copy atomic when each is
        // aligned; a ring behind the device IOTLB may be mapped at any
        // 8-byte-aligned owner address.
        if addr % 8 != 0 {
            return crate::vring::read_16_flags_first(self, addr);
        }
        let p = uptr(addr)?;
        let mut bytes = [0u8; 16];
        // SAFETY: As in `read_16`; the shim loads the last 8 bytes (the
        // flags with them) first, single-copy atomically, then the rest
        // after a read barrier.
        let ret =
            unsafe { shim::vnr_read_user_16_acquire(p.as_const_ptr().cast(), bytes.as_mut_ptr()) };
        if ret != 0 {
            return Err(VringError::Fault.into());
        }
        Ok(bytes)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), Stop> {
        UserSlice::new(uptr(addr)?, buf.len())
            .writer()
            .write_slice(buf)
            .map_err(|_| Stop::Error(VringError::Fault))
    }

    fn mb(&self) {
        compat::smp_mb();
    }

    fn rmb(&self) {
        compat::smp_rmb();
    }

    fn wmb(&self) {
        compat::smp_wmb();
    }
}

impl OwnerMem {
    /// The capability, if the current task's address space is `owner`.
    pub(crate) fn of_owner(owner: &Mm) -> Option<Self> {
        let current = kernel::current!();
        // INVARIANT: The current task's `mm` is `owner`; the value cannot
        // leave this task (it is not `Send`).
        match current.mm() {
            Some(mm) if mm.as_raw() == owner.as_raw() => Some(Self {
                _not_send: PhantomData,
            }),
            _ => None,
        }
    }

    /// The capability, in a task that runs in the owner's address space.
    ///
    /// # Safety
    ///
    /// The current task's `mm` is the owner's, and stays so while the value
    /// exists: a vhost_task of the owner, or a kthread between
    /// `kthread_use_mm` of the owner's `mm` and its unuse.
    pub(crate) unsafe fn assume() -> Self {
        // INVARIANT: The caller guarantees it.
        Self {
            _not_send: PhantomData,
        }
    }

    /// The dirty-log bitmap in the owner's memory.
    pub(crate) fn bitmap(&self) -> OwnerBitmap<'_> {
        OwnerBitmap { _owner: self }
    }

    /// Copies `dst.len()` bytes from the owner's address `addr` into `dst`,
    /// with the C shim's inlined `_copy_from_user`: the TX path's packet
    /// copy, and [`UserMemory::read`]'s, where the `UserSlice` path goes
    /// through two more calls (see `vnr_copy_from_user`).
    /// `EFAULT` if any byte could not be read; the rest of `dst` is then
    /// zeroed. Only written to, never read: `dst` may be uninitialised.
    #[inline]
    pub(crate) fn read_into(&self, addr: u64, dst: &mut [MaybeUninit<u8>]) -> Result {
        let p = uptr(addr).map_err(|_| EFAULT)?;
        // SAFETY: `dst` is valid for writes of `dst.len()` bytes and not
        // read by the copy; `_inline_copy_from_user` checks (masks) the user
        // range and handles faults. By the type invariant the current `mm`
        // is the owner's.
        let left = unsafe {
            shim::vnr_copy_from_user(dst.as_mut_ptr().cast(), p.as_const_ptr().cast(), dst.len())
        };
        if left != 0 {
            return Err(EFAULT);
        }
        Ok(())
    }
}

/// The dirty-log bitmap, in the owner's memory (`VHOST_SET_LOG_BASE`).
///
/// Reached through the owner's [`OwnerMem`], whose invariant it relies on.
/// [`LogBitmap::set_bit`] checks that the task has an `mm` at all, since
/// the pinning it does would dereference a null one.
pub(crate) struct OwnerBitmap<'a> {
    _owner: &'a OwnerMem,
}

impl LogBitmap for OwnerBitmap<'_> {
    /// Sets the bit as C's `set_bit_to_user` does: the page is pinned for
    /// writing (faulting it in if need be), mapped, and bit
    /// `offset * 8 + bit` of the page set with one atomic OR on its
    /// `unsigned long`, the unit QEMU clears the log in with atomic
    /// exchanges. A user access cannot do an atomic read-modify-write, so
    /// the page is reached through the kernel mapping. Numbering the bit
    /// within the word, as `set_bit` does, keeps the layout C's on either
    /// byte order.
    fn set_bit(&self, byte_addr: u64, bit: u32) -> Result<(), LogError> {
        let addr = usize::try_from(byte_addr).map_err(|_| LogError::Fault)?;
        if bit >= 8 || byte_addr >= user_limit() || kernel::current!().mm().is_none() {
            return Err(LogError::Fault);
        }
        let mut page: *mut bindings::page = core::ptr::null_mut();
        // SAFETY: The current task has an mm (checked above), and this pins
        // at most one page of it at a user address (checked above; gup
        // checks it again), writing one pointer to `page`.
        let pinned = unsafe {
            bindings::pin_user_pages_fast(
                addr as kernel::ffi::c_ulong,
                1,
                bindings::FOLL_WRITE,
                &mut page,
            )
        };
        if pinned != 1 || page.is_null() {
            return Err(LogError::Fault);
        }
        let bit_in_page = (addr % PAGE_SIZE) * 8 + bit as usize;
        let word_bits = usize::BITS as usize;
        let word_offset = bit_in_page / word_bits * core::mem::size_of::<usize>();
        let mask = 1usize << (bit_in_page % word_bits);
        // SAFETY: `page` is pinned until the unpin below, so its kernel
        // mapping is valid memory; `word_offset` is a multiple of the word
        // size below `PAGE_SIZE`, and the mapping is page aligned, so the
        // word is in the page and aligned. Every other writer of the word
        // (QEMU, other queues) uses atomic operations.
        unsafe {
            let base = bindings::kmap_local_page(page);
            let word = AtomicUsize::from_ptr(base.cast::<u8>().add(word_offset).cast::<usize>());
            word.fetch_or(mask, Ordering::Relaxed);
            bindings::kunmap_local(base);
            bindings::unpin_user_pages_dirty_lock(&mut page, 1, true);
        }
        Ok(())
    }
}
