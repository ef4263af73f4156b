// SPDX-License-Identifier: GPL-2.0

//! Eventfds: the kick, call and error notifications between the device,
//! userspace and the guest.

use crate::tap_glue::file_poll::PollableFile;
use core::ptr::NonNull;
use kernel::{bindings, error::from_err_ptr, fs::File, prelude::*, sync::aref::ARef};

/// The eventfd file behind `fd`, for polling it (a kick); `-EBADF` or
/// `-EINVAL` if it is not one.
pub(crate) fn eventfd_file(fd: i32) -> Result<PollableFile> {
    // SAFETY: FFI call; any fd is accepted, errors come back as ERR_PTR.
    let raw = from_err_ptr(unsafe { bindings::eventfd_fget(fd) })?;
    let raw = NonNull::new(raw).ok_or(EBADF)?;
    // SAFETY: `eventfd_fget` returned a file with a reference that we take
    // over, and `File` is a transparent wrapper of `struct file`. `File`
    // requires that a reference taken by `fdget_pos` stay on its thread;
    // this one comes from `fget`, so it may go anywhere.
    let file = unsafe { ARef::from_raw(raw.cast::<File>()) };
    // SAFETY: An eventfd's wait queue lives in its context, which the file
    // holds until it is released; eventfds never use POLLFREE.
    Ok(unsafe { PollableFile::new(file) })
}

/// A reference to an eventfd context, used to signal userspace (call, err).
///
/// # Invariants
///
/// `ctx` is a valid `struct eventfd_ctx` on which this object owns one
/// reference.
pub(crate) struct EventFd {
    ctx: NonNull<bindings::eventfd_ctx>,
}

// SAFETY: An eventfd context may be signalled and released from any thread.
unsafe impl Send for EventFd {}
// SAFETY: `eventfd_signal_mask` may be called concurrently.
unsafe impl Sync for EventFd {}

impl EventFd {
    /// The eventfd behind `fd`; `-EBADF` or `-EINVAL` if it is not one.
    pub(crate) fn from_fd(fd: i32) -> Result<Self> {
        // SAFETY: FFI call; any fd is accepted, errors come back as ERR_PTR.
        let raw = from_err_ptr(unsafe { bindings::eventfd_ctx_fdget(fd) })?;
        // INVARIANT: `eventfd_ctx_fdget` returned a referenced context.
        Ok(Self {
            ctx: NonNull::new(raw).ok_or(EINVAL)?,
        })
    }

    /// Adds 1 to the counter and wakes readers.
    pub(crate) fn signal(&self) {
        // SAFETY: `ctx` is valid by the type invariant.
        unsafe { bindings::eventfd_signal_mask(self.ctx.as_ptr(), 0) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: We own one reference by the type invariant.
        unsafe { bindings::eventfd_ctx_put(self.ctx.as_ptr()) };
    }
}
