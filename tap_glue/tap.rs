// SPDX-License-Identifier: GPL-2.0

//! The tap backend: the socket behind a `/dev/net/tun` tap file or a
//! macvtap file (`/dev/tapN`, libvirt's `<interface type='direct'>`).
//!
//! Packets go straight between the owner's buffers (described by user
//! iovecs) and the tun socket, without a copy into userspace in between:
//! one `sendmsg` per batch of small TX packets (`TxBatch`, in
//! `tx_batch.rs`), one per large packet ([`TapSocket::send`]), and one
//! `recvmsg` per RX packet, taken off tun's queue in batches (`RxBatch`,
//! in `rx_batch.rs`).

use crate::tap_glue::compat::errno;
use crate::tap_glue::file_poll::PollableFile;
use crate::tap_glue::shim::{self};

use core::{ffi::c_void, ptr::NonNull};
use kernel::{bindings, ffi::c_int, fs::File, prelude::*, sync::aref::ARef};

/// A user iovec handed to the socket layer: `struct iovec` with the user
/// address kept as an integer, so it is plain data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct UserIov {
    pub(crate) base: usize,
    pub(crate) len: usize,
}

const _: () = assert!(core::mem::size_of::<UserIov>() == core::mem::size_of::<bindings::iovec>());
const _: () = assert!(core::mem::align_of::<UserIov>() == core::mem::align_of::<bindings::iovec>());
const _: () =
    assert!(core::mem::offset_of!(UserIov, len) == core::mem::offset_of!(bindings::iovec, iov_len));

/// The file behind a backend fd. Like the C driver, a closed fd (as any fd
/// that is not a usable backend) is `-ENOTSOCK`.
pub(crate) fn backend_file(fd: i32) -> Result<ARef<File>> {
    let fd = u32::try_from(fd).map_err(|_| errno!(ENOTSOCK))?;
    let file = kernel::fs::LocalFile::fget(fd).map_err(|_| errno!(ENOTSOCK))?;
    // SAFETY: Called from an ioctl, which does not hold an `fdget_pos` on
    // this thread.
    Ok(unsafe { kernel::fs::LocalFile::assume_no_fdget_pos(file) })
}

/// Why a send did not go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendError {
    /// The tap has no room or memory now (`EAGAIN`, `ENOBUFS`, `ENOMEM`):
    /// try again when it signals space.
    Busy,
    /// Anything else: the packet is lost (detached tap, malformed packet).
    Dropped,
}

impl SendError {
    fn from_errno(errno: c_int) -> Self {
        let err = Error::from_errno(errno);
        if err == EAGAIN || err == errno!(ENOBUFS) || err == ENOMEM {
            SendError::Busy
        } else {
            SendError::Dropped
        }
    }
}

/// A tap (tun with `IFF_TAP`) or macvtap file used as a backend.
///
/// # Invariants
///
/// `sock` is the socket of `file`, returned by `tun_get_socket` or
/// `tap_get_socket`; it lives as long as the file, on which we hold a
/// reference.
pub(crate) struct TapSocket {
    pub(super) file: ARef<File>,
    pub(super) sock: NonNull<bindings::socket>,
}

// SAFETY: The tun socket's operations may be called from any thread; the
// socket itself serialises concurrent senders and receivers. (Not `Sync`:
// a socket is used under its queue's lock.)
unsafe impl Send for TapSocket {}

impl TapSocket {
    /// The tap behind `file`. Anything that is not a tap or macvtap file (a
    /// pipe, an eventfd, a regular file, another kind of socket) is
    /// `-ENOTSOCK`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        // SAFETY: `file` is a live file; `tun_get_socket` and
        // `tap_get_socket` only check its `f_op` and return ERR_PTR for
        // anything else.
        let raw = unsafe { shim::vnr_backend_socket(file.as_ptr()) };
        let raw = kernel::error::from_err_ptr(raw).map_err(|_| errno!(ENOTSOCK))?;
        // INVARIANT: the socket of `file`.
        Ok(Self {
            file,
            sock: NonNull::new(raw).ok_or(errno!(ENOTSOCK))?,
        })
    }

    pub(crate) fn file(&self) -> &ARef<File> {
        &self.file
    }

    /// The tap's file, to poll: a tun file's wait queue lives in its
    /// `tun_file`, a macvtap file's in its `tap_queue`, and both live as
    /// long as the file.
    pub(crate) fn pollable(&self) -> PollableFile {
        // SAFETY: See above; neither frees its wait queue while the file is
        // open (neither uses POLLFREE).
        unsafe { PollableFile::new(self.file.clone()) }
    }

    /// Runs `f` with a message over the user buffers `iov` (`len` bytes).
    /// The message points into `iov`, so it lives only inside this call.
    /// One buffer, the usual packet, becomes an `ITER_UBUF` message, whose
    /// copies skip the segment walk of an `ITER_IOVEC` one (C's vhost-net
    /// always builds the latter).
    fn with_msg<R>(
        iov: &[UserIov],
        len: usize,
        dir: u32,
        flags: u32,
        f: impl FnOnce(&mut bindings::msghdr) -> R,
    ) -> R {
        // SAFETY: `msghdr` is plain data for which all-zeroes is the empty
        // message, as the C code's `struct msghdr msg = {}`.
        let mut msg: bindings::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_flags = flags;
        // SAFETY: `UserIov` has the layout of `struct iovec` (asserted where
        // it is defined), and `iov`, which an ITER_IOVEC message points
        // into, outlives `msg`, which does not leave this function (an
        // ITER_UBUF one copies its one buffer's address). The iovecs name
        // user buffers: the iterator only records them, and the socket
        // copies through the user-access helpers, which check and
        // fault-handle every address.
        unsafe {
            match iov {
                [one] => {
                    // Callers pass the total of their iovecs or less.
                    debug_assert!(len <= one.len, "a message longer than its buffer");
                    shim::vnr_iov_iter_ubuf(
                        &mut msg.msg_iter,
                        dir,
                        one.base as *mut c_void,
                        len.min(one.len),
                    )
                }
                _ => bindings::iov_iter_init(
                    &mut msg.msg_iter,
                    dir,
                    iov.as_ptr().cast(),
                    iov.len(),
                    len,
                ),
            }
        }
        f(&mut msg)
    }

    /// Sends one packet gathered from the user buffers `iov` (`len` bytes in
    /// total).
    pub(crate) fn send(&self, iov: &[UserIov], len: usize) -> Result<(), SendError> {
        let sock = self.sock.as_ptr();
        let ret = Self::with_msg(
            iov,
            len,
            bindings::ITER_SOURCE,
            bindings::MSG_DONTWAIT,
            |msg| {
                // SAFETY: `sock` is valid by the type invariant; tun sockets
                // always have `ops->sendmsg`.
                unsafe {
                    match (*(*sock).ops).sendmsg {
                        Some(sendmsg) => sendmsg(sock, msg, len),
                        None => -(bindings::EOPNOTSUPP as c_int),
                    }
                }
            },
        );
        if ret < 0 {
            return Err(SendError::from_errno(ret));
        }
        Ok(())
    }

    /// Receives the queued packet `entry` into the user buffers `iov` (room
    /// for `len` bytes); a packet that does not fit is dropped and its full
    /// length returned (`MSG_TRUNC`).
    ///
    /// # Safety
    ///
    /// `entry` is an entry taken from this tap's RX ring and owned by the
    /// caller; tun consumes it whatever the outcome.
    pub(super) unsafe fn recv_entry(
        &self,
        iov: &[UserIov],
        len: usize,
        entry: *mut c_void,
    ) -> Result<usize> {
        let flags = bindings::MSG_DONTWAIT | bindings::MSG_TRUNC;
        let sock = self.sock.as_ptr();
        let ret = Self::with_msg(iov, len, bindings::ITER_DEST, flags, |msg| {
            // tun_recvmsg() takes a queued packet from msg_control, as vhost
            // does.
            msg.__bindgen_anon_1.msg_control = entry;
            // SAFETY: `sock` is valid by the type invariant; tun sockets
            // always have `ops->recvmsg`. `entry` is ours (the caller's
            // contract) and tun consumes it.
            unsafe {
                match (*(*sock).ops).recvmsg {
                    Some(recvmsg) => recvmsg(sock, msg, len, flags as c_int),
                    None => -(bindings::EOPNOTSUPP as c_int),
                }
            }
        });
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(ret as usize)
    }

    /// If tun takes batches of prebuilt buffers (its default: an unlimited
    /// send buffer), the headroom their frames need for the tap's XDP
    /// program (0 without one). Both can change at any time (TUNSETSNDBUF,
    /// an XDP attach): a TX run reads them once, and a change applies from
    /// the next run. C reads the send-buffer check once per run too, and
    /// the XDP headroom per packet.
    pub(crate) fn batch_headroom(&self) -> Option<usize> {
        // SAFETY: `sock` is valid by the type invariant.
        if !unsafe { shim::vnr_sock_can_batch(self.sock.as_ptr()) } {
            return None;
        }
        // SAFETY: As above.
        Some(unsafe { shim::vnr_sock_xdp_headroom(self.sock.as_ptr()) } as usize)
    }
}
