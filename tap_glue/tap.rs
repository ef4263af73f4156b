// SPDX-License-Identifier: GPL-2.0

//! The tap backend: the socket behind a `/dev/net/tun` tap file or a
//! macvtap file (`/dev/tapN`, libvirt's `<interface type='direct'>`).
//!
//! Packets go straight between the owner's buffers (described by user
//! iovecs) and the tun socket, without a copy into userspace in between:
//! one `sendmsg` per batch of small TX packets ([`TxBatch`]), one per large
//! packet ([`TapSocket::send`]), and one `recvmsg` per RX packet, taken off
//! tun's queue in batches ([`RxBatch`]).

use crate::compat::code::{enobufs, enotsock};
use crate::file_poll::PollableFile;
use crate::shim::{self, PtrRing, XdpBuff};
use crate::uaccess::OwnerMem;
use crate::uapi::VirtioNetHdr;
use crate::vring::{segments_from, Iov};
use core::{
    ffi::c_void,
    ptr::NonNull,
};
use kernel::{
    bindings,
    ffi::{c_int, c_uint},
    fs::File,
    page::PAGE_SIZE,
    prelude::*,
    sync::aref::ARef,
};

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
const _: () = assert!(core::mem::offset_of!(UserIov, len) == core::mem::offset_of!(bindings::iovec, iov_len));

/// The file behind a backend fd. Like the C driver, a closed fd (as any fd
/// that is not a usable backend) is `-ENOTSOCK`.
pub(crate) fn backend_file(fd: i32) -> Result<ARef<File>> {
    let fd = u32::try_from(fd).map_err(|_| enotsock())?;
    let file = kernel::fs::LocalFile::fget(fd).map_err(|_| enotsock())?;
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
        if err == EAGAIN || err == enobufs() || err == ENOMEM {
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
    file: ARef<File>,
    sock: NonNull<bindings::socket>,
}

// SAFETY: The tun socket's operations may be called from any thread; the
// socket itself serialises concurrent senders and receivers.
unsafe impl Send for TapSocket {}
// SAFETY: See above.
unsafe impl Sync for TapSocket {}

impl TapSocket {
    /// The tap behind `file`. Anything that is not a tap or macvtap file (a
    /// pipe, an eventfd, a regular file, another kind of socket) is
    /// `-ENOTSOCK`.
    pub(crate) fn new(file: ARef<File>) -> Result<Self> {
        // SAFETY: `file` is a live file; `tun_get_socket` and
        // `tap_get_socket` only check its `f_op` and return ERR_PTR for
        // anything else.
        let raw = unsafe { shim::vnr_backend_socket(file.as_ptr()) };
        let raw = kernel::error::from_err_ptr(raw).map_err(|_| enotsock())?;
        // INVARIANT: the socket of `file`.
        Ok(Self { file, sock: NonNull::new(raw).ok_or_else(enotsock)? })
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
    /// copies skip the segment walk of an `ITER_IOVEC` one (fewer
    /// instructions per packet in tun's copies than C's vhost-net, which
    /// always builds the latter).
    fn with_msg<R>(iov: &[UserIov], len: usize, dir: u32, flags: u32, f: impl FnOnce(&mut bindings::msghdr) -> R) -> R {
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
                    shim::vnr_iov_iter_ubuf(&mut msg.msg_iter, dir, one.base as *mut c_void, len.min(one.len))
                }
                _ => bindings::iov_iter_init(&mut msg.msg_iter, dir, iov.as_ptr().cast(), iov.len(), len),
            }
        }
        f(&mut msg)
    }

    /// Sends one packet gathered from the user buffers `iov` (`len` bytes in
    /// total).
    pub(crate) fn send(&self, iov: &[UserIov], len: usize) -> Result<(), SendError> {
        let sock = self.sock.as_ptr();
        let ret = Self::with_msg(iov, len, bindings::ITER_SOURCE, bindings::MSG_DONTWAIT, |msg| {
            // SAFETY: `sock` is valid by the type invariant; tun sockets
            // always have `ops->sendmsg`.
            unsafe {
                match (*(*sock).ops).sendmsg {
                    Some(sendmsg) => sendmsg(sock, msg, len),
                    None => -(bindings::EOPNOTSUPP as c_int),
                }
            }
        });
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
    unsafe fn recv_entry(&self, iov: &[UserIov], len: usize, entry: *mut c_void) -> Result<usize> {
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
        let ring = NonNull::new(raw).ok_or_else(enotsock)?;
        // INVARIANT: the ring of `sock`'s file; nothing taken yet.
        Ok(Self { sock, ring, queue: [core::ptr::null_mut(); RX_BATCH], head: 0, tail: 0 })
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
        let Some(entry) = self.take() else { return Received::Lost };
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
                shim::vnr_rx_ring_unconsume(self.ring.as_ptr(), self.queue[self.head..].as_mut_ptr(), count)
            };
        }
    }
}

/// Packets a [`TxBatch`] holds before it must be sent (`VHOST_NET_BATCH`).
pub(crate) const TX_BATCH: usize = 64;

/// The smallest frame the batch takes: an Ethernet header.
const ETH_HLEN: usize = bindings::ETH_HLEN as usize;

/// What became of a batch handed to tun.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchSent {
    /// Packets (and their bytes) tun took.
    pub(crate) packets: usize,
    pub(crate) bytes: usize,
    /// Packets tun refused, now freed.
    pub(crate) lost: usize,
}

/// What [`TxBatch::add`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batched {
    /// Copied into the batch.
    Added,
    /// The batch is full: send it first.
    Full,
    /// Larger than a page fragment takes: send it on its own.
    TooBig,
    /// No memory for a fragment now: try again later.
    NoMemory,
    /// Unreadable or malformed (a fault, a runt, a bad checksum offset):
    /// the packet is dropped.
    Malformed,
}

/// Guest TX packets copied into page fragments and handed to tun in one
/// `sendmsg` (`TUN_MSG_PTR`), which builds each skb around its fragment: the
/// C driver's fast path for packets that fit in a page.
///
/// # Invariants
///
/// `xdp` holds room for `TX_BATCH` `struct xdp_buff`s of `xdp_size` bytes
/// each; the first `count` were prepared by `vnr_xdp_prepare` and describe
/// fragments allocated from `frag`, owned by this batch until they are sent
/// or freed. `bytes` is the length of their frames.
pub(crate) struct TxBatch {
    frag: bindings::page_frag_cache,
    xdp: KVec<u64>,
    xdp_size: usize,
    count: usize,
    bytes: usize,
    shinfo: usize,
    rx_pad: usize,
}

/// The alignment of a TX fragment and of its data (`SMP_CACHE_BYTES`), a
/// power of two: a constant, so that aligning costs two instructions.
const CACHE_LINE: usize = bindings::SMP_CACHE_BYTES as usize;
const _: () = assert!(CACHE_LINE.is_power_of_two());

// SAFETY: The fragment cache and the buffers are only touched by the worker
// that holds the queue lock; nothing here is tied to a CPU or a task.
unsafe impl Send for TxBatch {}

impl TxBatch {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: Pure functions returning compile-time constants of C.
        let (xdp_size, shinfo, rx_pad) = unsafe {
            (shim::vnr_xdp_buff_size(), shim::vnr_xdp_shinfo_size() as usize, shim::vnr_xdp_rx_pad() as usize)
        };
        let words = (xdp_size * TX_BATCH).div_ceil(8);
        let mut xdp = KVec::with_capacity(words, GFP_KERNEL)?;
        xdp.resize(words, 0u64, GFP_KERNEL)?;
        Ok(Self {
            // An all-zero cache is an empty one (`page_frag_cache_init`).
            frag: bindings::page_frag_cache { encoded_page: 0, offset: 0, pagecnt_bias: 0 },
            xdp,
            xdp_size,
            count: 0,
            bytes: 0,
            shinfo,
            rx_pad,
        })
    }

    #[inline]
    fn cache_align(len: usize) -> usize {
        (len + CACHE_LINE - 1) & !(CACHE_LINE - 1)
    }

    fn slot(&mut self, index: usize) -> *mut XdpBuff {
        // In bounds: index < TX_BATCH and `xdp` holds TX_BATCH buffs.
        self.xdp.as_mut_ptr().cast::<u8>().wrapping_add(index * self.xdp_size).cast()
    }

    /// Whether [`TxBatch::add`] would refuse a packet as [`Batched::Full`].
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.count >= TX_BATCH
    }

    /// Copies one packet of `len` bytes (the tap's vnet header of
    /// `sock_hlen` bytes first) from the chain's readable segments `iov`,
    /// after their first `skip` bytes (the vhost header), into a fragment,
    /// with `headroom` bytes before it for the tap's XDP program
    /// ([`TapSocket::batch_headroom`]). The segments are read where they
    /// are: no user iovec array is built for a batched packet. Inlined
    /// into the TX loop, as `net::tx_one` is: a call per packet with six
    /// arguments was its own prologue and register shuffle.
    #[inline(always)]
    pub(crate) fn add(&mut self, iov: &[Iov], skip: u64, len: usize, sock_hlen: usize, headroom: usize) -> Batched {
        if self.is_full() {
            return Batched::Full;
        }
        if len < sock_hlen + ETH_HLEN {
            return Batched::Malformed;
        }
        // The frame's data starts at `pad`; the tap's XDP program, if any,
        // may grow it into the headroom (vhost_net_build_xdp).
        let pad = Self::cache_align(self.rx_pad + headroom + sock_hlen);
        let data = Self::cache_align(len + pad);
        if data + self.shinfo > PAGE_SIZE {
            return Batched::TooBig;
        }
        let buflen = data + self.shinfo;
        // SAFETY: `frag` is a valid (possibly empty) cache owned by us; the
        // mask asks for cache-line alignment, as the C driver does.
        let buf = unsafe {
            bindings::__page_frag_alloc_align(
                &mut self.frag,
                buflen as c_uint,
                bindings::GFP_KERNEL,
                !(CACHE_LINE as c_uint - 1),
            )
        };
        let Some(buf) = NonNull::new(buf.cast::<u8>()) else { return Batched::NoMemory };
        if Self::fill(buf, iov, skip, len, sock_hlen, pad).is_err() {
            // SAFETY: `buf` came from `__page_frag_alloc_align`.
            unsafe { bindings::page_frag_free(buf.as_ptr().cast()) };
            return Batched::Malformed;
        }
        let slot = self.slot(self.count);
        // SAFETY: `slot` is a zeroed xdp_buff of ours; the fragment layout is
        // the one tun_xdp_one expects (header at the start, data at `pad`).
        unsafe {
            shim::vnr_xdp_prepare(slot, buf.as_ptr().cast(), buflen as c_uint, pad as c_uint, (len - sock_hlen) as c_uint)
        };
        // INVARIANT: the new fragment is described by buff `count`.
        self.count += 1;
        self.bytes += len;
        Batched::Added
    }

    /// Lays one packet out in the fresh fragment `buf` (which has room for
    /// `pad` plus the data): the data at `pad`, the vnet header (zeroes if
    /// the tap has none) at the start, read from `iov` after its first
    /// `skip` bytes. Only writes go through `buf`: the fragment is
    /// uninitialised memory, so no reference to it is made.
    #[inline(always)]
    fn fill(buf: NonNull<u8>, iov: &[Iov], skip: u64, len: usize, sock_hlen: usize, pad: usize) -> Result {
        let hdr_at = pad - sock_hlen;
        let mut off = hdr_at;
        let end = hdr_at + len;
        for seg in segments_from(iov, skip) {
            if off == end {
                break;
            }
            // `seg.len` fits: the chain's length is bounded (MAX_CHAIN_LEN),
            // and `end - off` is at most a page.
            let n = core::cmp::min(seg.len as usize, end - off);
            // SAFETY: `off + n <= end <= buflen`: the range is inside the
            // fragment, which is ours; `read_into` writes it without reading.
            let dst = unsafe { core::slice::from_raw_parts_mut(buf.as_ptr().add(off).cast(), n) };
            OwnerMem.read_into(seg.addr, dst)?;
            off += n;
        }
        if off != end {
            return Err(EFAULT);
        }
        if sock_hlen == 0 {
            // SAFETY: `pad` bytes at the start of the fragment are ours.
            unsafe { core::ptr::write_bytes(buf.as_ptr(), 0, pad) };
            return Ok(());
        }
        // The header was just written from user memory, so it is
        // initialised and can be read. Its first `LEN_LEGACY` bytes are all
        // TX looks at; tun's header is never shorter. The copies below have
        // constant sizes where they can: a variable one is an out-of-line
        // memcpy per packet (scripts/profile --insns).
        let mut raw = [0u8; VirtioNetHdr::LEN_LEGACY];
        if sock_hlen < raw.len() {
            return Err(EINVAL);
        }
        // SAFETY: `hdr_at + LEN_LEGACY <= hdr_at + sock_hlen = pad`, inside
        // the fragment, initialised by the copy above.
        unsafe { core::ptr::copy_nonoverlapping(buf.as_ptr().add(hdr_at), raw.as_mut_ptr(), raw.len()) };
        let mut hdr = VirtioNetHdr::parse(&raw).ok_or(EINVAL)?;
        // VIRTIO_NET_HDR_F_NEEDS_CSUM: the checksum must lie inside the
        // headers tun will look at; widen hdr_len as the C driver does.
        if hdr.flags & VirtioNetHdr::F_NEEDS_CSUM != 0 {
            let need = u32::from(hdr.csum_start) + u32::from(hdr.csum_offset) + 2;
            if need > u32::from(hdr.hdr_len) {
                if need as usize > len {
                    return Err(EINVAL);
                }
                hdr.hdr_len = need as u16;
                let bytes = hdr.hdr_len.to_le_bytes();
                // SAFETY: bytes 2..4 of the header (`hdr_len`), inside the
                // fragment.
                unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_ptr().add(hdr_at + 2), 2) };
            }
        }
        // SAFETY: both ranges lie in the fragment; `copy` allows overlap.
        unsafe {
            if sock_hlen == VirtioNetHdr::LEN {
                core::ptr::copy(buf.as_ptr().add(hdr_at), buf.as_ptr(), VirtioNetHdr::LEN);
            } else {
                core::ptr::copy(buf.as_ptr().add(hdr_at), buf.as_ptr(), sock_hlen);
            }
        }
        Ok(())
    }

    /// Hands the batch to tun. If tun refuses the whole batch (a detached
    /// tap: `-EBADFD`), the fragments are freed here, as the C driver's
    /// `vhost_tx_batch` does.
    pub(crate) fn send(&mut self, sock: &TapSocket) -> BatchSent {
        if self.count == 0 {
            return BatchSent::default();
        }
        let (packets, bytes) = (self.count, self.bytes);
        let base = self.slot(0);
        // SAFETY: `base` points at `count` prepared xdp_buffs; when tun
        // accepts the message it takes ownership of their fragments.
        let ret = unsafe { shim::vnr_tun_send_batch(sock.sock.as_ptr(), base, packets as c_uint) };
        if ret < 0 {
            // Still ours: `free_all` releases them.
            self.free_all();
            return BatchSent { packets: 0, bytes: 0, lost: packets };
        }
        // INVARIANT: tun owns the fragments now.
        self.count = 0;
        self.bytes = 0;
        BatchSent { packets, bytes, lost: 0 }
    }

    /// Frees the fragments of the unsent packets.
    fn free_all(&mut self) {
        for index in 0..self.count {
            let slot = self.slot(index);
            // SAFETY: Unsent buffs own their fragments (type invariant);
            // `xdp->data` lies inside the fragment, and page_frag_free
            // works from any address in it.
            unsafe { bindings::page_frag_free(shim::vnr_xdp_data(slot)) };
        }
        // INVARIANT: nothing is owned any more.
        self.count = 0;
        self.bytes = 0;
    }
}

impl Drop for TxBatch {
    fn drop(&mut self) {
        self.free_all();
        // SAFETY: `frag` is ours; draining releases its cached page.
        unsafe { bindings::page_frag_cache_drain(&mut self.frag) };
    }
}
