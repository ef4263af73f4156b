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
//! - `EBADFD` in `kernel::error::code`;
//! - an owner in the misc device's file operations: without it an open file
//!   does not pin the module, and `rmmod` unloads it under the file.
//!   `misc_node.rs` registers every node with its own copy of the
//!   operations, and [`own_fops`] names the owner there on 7.2.
//!
//! The one C difference, 7.2's tun without `tun_wake_queue`, is at the top
//! of `vnr_shim.c`.

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
/// The error code `$code` (`errno!(ENOBUFS)`) on either release: 7.2's
/// kernel crate lacks the networking codes and `EBADFD`, and has no const
/// way to make them.
macro_rules! errno {
    ($code:ident) => {{
        #[cfg(not(vnr_kernel_7_2))]
        let err = kernel::error::code::$code;
        #[cfg(vnr_kernel_7_2)]
        let err = kernel::error::Error::from_errno(-(kernel::bindings::$code as i32));
        err
    }};
}
pub(crate) use errno;

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

/// Names this module as the owner of file operations copied from the
/// kernel crate's misc vtable (see `misc_node.rs`): 7.3's names it
/// already, 7.2's none.
pub(crate) fn own_fops(fops: &mut kernel::bindings::file_operations) {
    #[cfg(vnr_kernel_7_2)]
    {
        fops.owner = crate::THIS_MODULE.as_ptr();
    }
    #[cfg(not(vnr_kernel_7_2))]
    let _ = fops;
}
