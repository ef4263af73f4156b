// SPDX-License-Identifier: GPL-2.0

//! The differences between the kernel crates of the releases the module
//! builds against, Linux 7.2 and 7.3, in one place.
//!
//! The rest of the module is written against 7.3. `Kbuild` passes
//! `--cfg vnr_kernel_7_2` when the tree is a 7.2 one, and this file gives
//! 7.2 the same names; no other file tests that cfg. What 7.2 lacks:
//!
//! - barriers that take their ordering as an argument (`smp_mb(Read)`);
//!   7.2 has `smp_mb()`, `smp_rmb()` and `smp_wmb()`;
//! - the networking error codes (`ENOTSOCK`, `ENOBUFS`, `EOPNOTSUPP`) in
//!   `kernel::error::code`;
//! - `kernel::sync::rcu::synchronize_rcu`;
//! - module parameters read by value: 7.2's `value()` returns a reference;
//! - an owner in the misc device's file operations: without it an open file
//!   does not pin the module, and `rmmod` unloads it under the file. On 7.2
//!   the module registers its nodes itself (`dropin::MiscNode`) with a copy
//!   of the operations that names the owner.
//!
//! The one C difference, 7.2's tun without `tun_wake_queue`, is at the top
//! of `vnr_shim.c`.

use kernel::prelude::*;

/// A full memory barrier (`smp_mb`).
#[inline(always)]
pub(crate) fn smp_mb() {
    #[cfg(not(vnr_kernel_7_2))]
    kernel::sync::barrier::smp_mb(kernel::sync::barrier::Full);
    #[cfg(vnr_kernel_7_2)]
    kernel::sync::barrier::smp_mb();
}

/// A read barrier (`smp_rmb`).
#[inline(always)]
pub(crate) fn smp_rmb() {
    #[cfg(not(vnr_kernel_7_2))]
    kernel::sync::barrier::smp_mb(kernel::sync::barrier::Read);
    #[cfg(vnr_kernel_7_2)]
    kernel::sync::barrier::smp_rmb();
}

/// A write barrier (`smp_wmb`).
#[inline(always)]
pub(crate) fn smp_wmb() {
    #[cfg(not(vnr_kernel_7_2))]
    kernel::sync::barrier::smp_mb(kernel::sync::barrier::Write);
    #[cfg(vnr_kernel_7_2)]
    kernel::sync::barrier::smp_wmb();
}

/// Error codes that 7.2's `kernel::error::code` does not name. They are
/// functions because 7.2 offers no `const` way to make an `Error` outside
/// the kernel crate.
pub(crate) mod code {
    use super::*;

    macro_rules! net_errors {
        ($($fn:ident => $code:ident),* $(,)?) => {$(
            #[doc = concat!("`-", stringify!($code), "`.")]
            #[inline]
            pub(crate) fn $fn() -> Error {
                #[cfg(not(vnr_kernel_7_2))]
                return kernel::error::code::$code;
                #[cfg(vnr_kernel_7_2)]
                return Error::from_errno(-(kernel::bindings::$code as i32));
            }
        )*};
    }
    net_errors!(enotsock => ENOTSOCK, enobufs => ENOBUFS, eopnotsupp => EOPNOTSUPP);
}

/// Waits for every RCU read-side critical section in progress to end.
pub(crate) fn synchronize_rcu() {
    #[cfg(not(vnr_kernel_7_2))]
    kernel::sync::rcu::synchronize_rcu();
    // SAFETY: `synchronize_rcu` has no memory-safety precondition; it may
    // sleep, which every caller of this function (process context, outside
    // an RCU read-side critical section) allows.
    #[cfg(vnr_kernel_7_2)]
    unsafe {
        kernel::bindings::synchronize_rcu()
    };
}

/// The main node's registration: the kernel crate's on 7.3, the module's
/// own on 7.2 (see the file's documentation).
#[cfg(not(vnr_kernel_7_2))]
pub(crate) type MiscRegistration<T> = kernel::miscdevice::MiscDeviceRegistration<T>;
/// The main node's registration: the kernel crate's on 7.3, the module's
/// own on 7.2 (see the file's documentation).
#[cfg(vnr_kernel_7_2)]
pub(crate) type MiscRegistration<T> = crate::dropin::MiscNode<T>;

/// Registers `/dev/NAME` for `T` on a dynamic minor.
pub(crate) fn register_misc<T: kernel::miscdevice::MiscDevice>(
    name: &'static CStr,
) -> impl PinInit<MiscRegistration<T>, Error> {
    #[cfg(not(vnr_kernel_7_2))]
    return kernel::miscdevice::MiscDeviceRegistration::register(
        kernel::miscdevice::MiscDeviceOptions { name },
    );
    #[cfg(vnr_kernel_7_2)]
    return crate::dropin::MiscNode::register(name, kernel::bindings::MISC_DYNAMIC_MINOR);
}

/// The file operations a misc node is registered with: the kernel crate's
/// vtable `fops` where it names this module as its owner (7.3); on 7.2,
/// where it does not, a copy of it in `copy` with the owner set.
///
/// # Safety
///
/// `fops` points to valid file operations, and `copy` is valid for writes
/// and outlives every use of the pointer returned.
pub(crate) unsafe fn misc_fops(
    fops: *const kernel::bindings::file_operations,
    copy: *mut kernel::bindings::file_operations,
) -> *const kernel::bindings::file_operations {
    #[cfg(not(vnr_kernel_7_2))]
    {
        let _ = copy;
        fops
    }
    #[cfg(vnr_kernel_7_2)]
    {
        // SAFETY: `fops` is valid for reads and `copy` for writes, by the
        // function's safety requirements.
        unsafe {
            let mut own = core::ptr::read(fops);
            own.owner = crate::THIS_MODULE.as_ptr();
            copy.write(own);
        }
        copy
    }
}

/// A module parameter's value, as 7.3 returns it (`T`) or 7.2 does (`&T`).
pub(crate) trait ParamValue<T: Copy> {
    /// The value itself.
    fn get(self) -> T;
}

impl<T: Copy> ParamValue<T> for T {
    fn get(self) -> T {
        self
    }
}

impl<T: Copy> ParamValue<T> for &T {
    fn get(self) -> T {
        *self
    }
}

/// Reads a module parameter on either release:
/// `compat::param(module_parameters::NAME.value())`.
pub(crate) fn param<T: Copy>(value: impl ParamValue<T>) -> T {
    value.get()
}
