// SPDX-License-Identifier: GPL-2.0

//! RX from tun in batches: packets taken off tun's queue (its `ptr_ring`)
//! up to [`RX_BATCH`] at a time, then received one `recvmsg` each.

use crate::tap_glue::compat::errno;

use crate::tap_glue::shim::{self, PtrRing};

use super::tap::{TapSocket, UserIov};
use core::{ffi::c_void, ptr::NonNull};
use kernel::{ffi::c_int, prelude::*};

/// What [`RxBatch::recv`] did with the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// The whole packet is in the buffers.
    Whole,
    /// It was truncated or tun failed: it is gone, the buffers hold nothing
    /// of use.
    Lost,
}

/// Packets an [`RxBatch`] takes off tun's ring at once (`VHOST_NET_BATCH`).
const RX_BATCH: usize = 64;

/// Packets taken off the tap's RX ring up to 64 at a time, under one lock,
/// and handed back to tun's `recvmsg` one by one: the C driver's
/// `vhost_net_buf`. Without it, every packet costs a locked peek and a
/// locked consume of tun's ring.
///
/// # Invariants
///
/// `ring` is the `ptr_ring` of `sock`'s tun file, which `sock` keeps alive.
/// `queue[head..tail]` are entries taken from it and owned by this batch;
/// they go back to the ring (or are freed) on drop.
pub(crate) struct RxBatch {
    sock: TapSocket,
    ring: NonNull<PtrRing>,
    queue: [*mut c_void; RX_BATCH],
    head: usize,
    tail: usize,
}

// SAFETY: The queued entries are owned by the batch, not tied to a task or
// CPU; the batch is only used under its queue's lock.
unsafe impl Send for RxBatch {}

impl RxBatch {
    /// The batch of the tap `sock`.
    pub(crate) fn new(sock: TapSocket) -> Result<Self> {
        // SAFETY: The file is live (held by `sock`); the shim returns its
        // tun or macvtap ring, or null for anything else.
        let raw = unsafe { shim::vnr_backend_rx_ring(sock.file.as_ptr()) };
        let ring = NonNull::new(raw).ok_or(errno!(ENOTSOCK))?;
        // INVARIANT: the ring of `sock`'s file; nothing taken yet.
        Ok(Self {
            sock,
            ring,
            queue: [core::ptr::null_mut(); RX_BATCH],
            head: 0,
            tail: 0,
        })
    }

    /// Length of the next packet without the tap's vnet header, or `None`
    /// if the tap has none queued.
    pub(crate) fn peek_len(&mut self) -> Option<usize> {
        if self.head == self.tail {
            // SAFETY: `ring` is valid by the type invariant, and `queue` has
            // room for RX_BATCH entries, which become ours. The shim lets a
            // tap stopped by IFF_BACKPRESSURE queue again.
            let got = unsafe {
                shim::vnr_rx_ring_consume(
                    self.sock.file.as_ptr(),
                    self.ring.as_ptr(),
                    self.queue.as_mut_ptr(),
                    RX_BATCH as c_int,
                )
            };
            self.head = 0;
            self.tail = usize::try_from(got).unwrap_or(0).min(RX_BATCH);
            if self.tail == 0 {
                return None;
            }
        }
        // SAFETY: `queue[head]` is an entry we own (head < tail).
        let len = unsafe { shim::vnr_rx_ptr_len(self.queue[self.head]) };
        usize::try_from(len).ok()
    }

    #[inline]
    fn take(&mut self) -> Option<*mut c_void> {
        if self.head == self.tail {
            return None;
        }
        let entry = self.queue[self.head];
        self.head += 1;
        Some(entry)
    }

    /// The tap this batch reads.
    pub(crate) fn sock(&self) -> &TapSocket {
        &self.sock
    }

    /// Receives the packet `peek_len` reported into `iov`, which has room
    /// for `len` bytes.
    pub(crate) fn recv(&mut self, iov: &[UserIov], len: usize) -> Received {
        let Some(entry) = self.take() else {
            return Received::Lost;
        };
        // SAFETY: `entry` came from this tap's ring and is ours; tun
        // consumes it.
        match unsafe { self.sock.recv_entry(iov, len, entry) } {
            Ok(got) if got == len => Received::Whole,
            _ => Received::Lost,
        }
    }

    /// Drops the packet `peek_len` reported.
    pub(crate) fn discard(&mut self) {
        if let Some(entry) = self.take() {
            // SAFETY: `entry` came from this tap's ring and is ours.
            unsafe { shim::tun_ptr_free(entry) };
        }
    }
}

impl Drop for RxBatch {
    fn drop(&mut self) {
        if self.head < self.tail {
            let count = (self.tail - self.head) as c_int;
            // SAFETY: `queue[head..tail]` are ours and came from `ring`, which
            // is alive; unconsume puts them back in order or frees them.
            unsafe {
                shim::vnr_rx_ring_unconsume(
                    self.ring.as_ptr(),
                    self.queue[self.head..].as_mut_ptr(),
                    count,
                )
            };
        }
    }
}
