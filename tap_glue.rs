// SPDX-License-Identifier: GPL-2.0

//! The tap backend: the socket behind a `/dev/net/tun` file.
//!
//! Packets go straight between the owner's buffers (described by user
//! iovecs) and the tun socket through its `sendmsg`/`recvmsg`, without a copy
//! into userspace in between.

use crate::virtqueue::UserIov;
use core::ptr::NonNull;
use kernel::{
    bindings,
    fs::File,
    prelude::*,
    sync::aref::ARef,
};

extern "C" {
    // include/linux/if_tun.h: `struct socket *tun_get_socket(struct file *)`.
    // Declared with opaque pointers: the real types are not FFI-safe to
    // spell in an extern block.
    fn tun_get_socket(file: *mut core::ffi::c_void) -> *mut core::ffi::c_void;
}

/// A tap (tun with `IFF_TAP`) file used as a backend.
///
/// # Invariants
///
/// `sock` is the socket of `file`, returned by `tun_get_socket`; it lives as
/// long as the file, on which we hold a reference.
pub(crate) struct TapSocket {
    file: ARef<File>,
    sock: NonNull<bindings::socket>,
}

// SAFETY: The tun socket's operations may be called from any thread; the
// socket itself serialises concurrent senders and receivers.
unsafe impl Send for TapSocket {}
// SAFETY: See above.
unsafe impl Sync for TapSocket {}

impl TapSocket {
    /// The tap behind `file`. Anything that is not a tun/tap file (a pipe,
    /// an eventfd, a regular file, another kind of socket) is `-ENOTSOCK`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        // SAFETY: `file` is a live file; `tun_get_socket` only checks its
        // `f_op` and returns ERR_PTR for anything that is not tun.
        let s = unsafe { tun_get_socket(file.as_ptr().cast()) };
        let s = kernel::error::from_err_ptr(s.cast::<bindings::socket>()).map_err(|_| ENOTSOCK)?;
        // INVARIANT: the socket of `file`.
        Ok(Self { file, sock: NonNull::new(s).ok_or(ENOTSOCK)? })
    }

    pub(crate) fn file(&self) -> &ARef<File> {
        &self.file
    }

    fn msg(iov: &[UserIov], len: usize, dir: u32, flags: u32) -> bindings::msghdr {
        // SAFETY: `msghdr` is plain data for which all-zeroes is the empty
        // message, as the C code's `struct msghdr msg = {}`.
        let mut m: bindings::msghdr = unsafe { core::mem::zeroed() };
        m.msg_flags = flags;
        // SAFETY: `UserIov` has the layout of `struct iovec` (asserted where
        // it is defined). The iovecs name user buffers: the iterator only
        // records them, and the socket copies through the user-access
        // helpers, which check and fault-handle every address.
        unsafe {
            bindings::iov_iter_init(&mut m.msg_iter, dir, iov.as_ptr().cast(), iov.len(), len);
        }
        m
    }

    /// Sends one packet gathered from the user buffers `iov` (`len` bytes in
    /// total). Returns the bytes sent, or `-EAGAIN` when the tap is full.
    pub(crate) fn send(&self, iov: &[UserIov], len: usize) -> Result<usize> {
        let mut m = Self::msg(iov, len, bindings::ITER_SOURCE, bindings::MSG_DONTWAIT);
        let s = self.sock.as_ptr();
        // SAFETY: `s` is valid by the type invariant; tun sockets always have
        // `ops->sendmsg`.
        let r = unsafe {
            match (*(*s).ops).sendmsg {
                Some(f) => f(s, &mut m, len),
                None => -(bindings::EOPNOTSUPP as i32),
            }
        };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(r as usize)
    }

    /// Receives one packet into the user buffers `iov` (room for `len`
    /// bytes). With `trunc`, a packet that does not fit is dropped and its
    /// full length returned.
    pub(crate) fn recv(&self, iov: &[UserIov], len: usize, trunc: bool) -> Result<usize> {
        let flags = bindings::MSG_DONTWAIT | if trunc { bindings::MSG_TRUNC } else { 0 };
        let mut m = Self::msg(iov, len, bindings::ITER_DEST, flags);
        let s = self.sock.as_ptr();
        // SAFETY: `s` is valid by the type invariant; tun sockets always have
        // `ops->recvmsg`.
        let r = unsafe {
            match (*(*s).ops).recvmsg {
                Some(f) => f(s, &mut m, len, flags as i32),
                None => -(bindings::EOPNOTSUPP as i32),
            }
        };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(r as usize)
    }

    /// Length of the next queued packet, without the tap's vnet header, or
    /// 0 if none is queued.
    pub(crate) fn peek_len(&self) -> usize {
        let s = self.sock.as_ptr();
        // SAFETY: `s` is valid by the type invariant.
        let r = unsafe {
            match (*(*s).ops).peek_len {
                Some(f) => f(s),
                None => 0,
            }
        };
        usize::try_from(r).unwrap_or(0)
    }
}
