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
    sync::{aref::ARef, Arc},
};

use core::ffi::{c_int, c_uint, c_void};

extern "C" {
    // include/linux/if_tun.h: `void tun_ptr_free(void *ptr)`.
    fn tun_ptr_free(ptr: *mut c_void);

    // include/linux/if_tun.h: `struct socket *tun_get_socket(struct file *)`.
    // Declared with opaque pointers: the real types are not FFI-safe to
    // spell in an extern block.
    fn tun_get_socket(file: *mut c_void) -> *mut c_void;

    // vnr_shim.c: TX batching (no bindings for xdp_buff / tun_msg_ctl).
    fn vnr_xdp_buff_size() -> usize;
    fn vnr_xdp_shinfo_size() -> c_uint;
    fn vnr_xdp_rx_pad() -> c_uint;
    fn vnr_xdp_prepare(xdp: *mut c_void, buf: *mut c_void, buflen: c_uint, pad: c_uint, datalen: c_uint);
    fn vnr_xdp_data(xdp: *mut c_void) -> *mut c_void;
    fn vnr_sock_can_batch(sock: *mut c_void) -> bool;
    fn vnr_tun_send_batch(sock: *mut c_void, xdp: *mut c_void, n: c_uint) -> c_int;

    // vnr_shim.c: RX batching from tun's ring.
    fn vnr_tun_rx_ring(file: *mut c_void) -> *mut c_void;
    fn vnr_rx_ring_consume(ring: *mut c_void, q: *mut *mut c_void, n: c_int) -> c_int;
    fn vnr_rx_ring_unconsume(ring: *mut c_void, q: *mut *mut c_void, n: c_int);
    fn vnr_rx_ptr_len(ptr: *mut c_void) -> c_int;
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
    /// bytes); a packet that does not fit is dropped and its full length
    /// returned (`MSG_TRUNC`).
    ///
    /// # Safety
    ///
    /// `ptr` is an entry taken from this tap's RX ring and owned by the
    /// caller; tun consumes it whatever the outcome.
    unsafe fn recv_ptr(&self, iov: &[UserIov], len: usize, ptr: *mut c_void) -> Result<usize> {
        let flags = bindings::MSG_DONTWAIT | bindings::MSG_TRUNC;
        let mut m = Self::msg(iov, len, bindings::ITER_DEST, flags);
        // tun_recvmsg() takes a queued packet from msg_control, as vhost does.
        m.__bindgen_anon_1.msg_control = ptr;
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

    /// Whether tun takes batches of prebuilt buffers (its default).
    pub(crate) fn can_batch(&self) -> bool {
        // SAFETY: `sock` is valid by the type invariant.
        unsafe { vnr_sock_can_batch(self.sock.as_ptr().cast()) }
    }
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
    sock: Arc<TapSocket>,
    ring: NonNull<c_void>,
    queue: [*mut c_void; RX_BATCH],
    head: usize,
    tail: usize,
}

// SAFETY: The queued entries are owned by the batch, not tied to a task or
// CPU; the batch is only used under its queue's lock.
unsafe impl Send for RxBatch {}

impl RxBatch {
    /// The batch of the tap `sock`.
    pub(crate) fn new(sock: Arc<TapSocket>) -> Result<Self> {
        // SAFETY: The file is live (held by `sock`); the shim returns its tun
        // ring, or null for anything that is not tun.
        let r = unsafe { vnr_tun_rx_ring(sock.file.as_ptr().cast()) };
        let ring = NonNull::new(r).ok_or(ENOTSOCK)?;
        // INVARIANT: the ring of `sock`'s file; nothing taken yet.
        Ok(Self { sock, ring, queue: [core::ptr::null_mut(); RX_BATCH], head: 0, tail: 0 })
    }

    /// Length of the next packet without the tap's vnet header, or 0 if the
    /// tap has none queued.
    pub(crate) fn peek_len(&mut self) -> usize {
        if self.head == self.tail {
            // SAFETY: `ring` is valid by the type invariant and `queue` has
            // room for RX_BATCH entries, which become ours.
            let n = unsafe { vnr_rx_ring_consume(self.ring.as_ptr(), self.queue.as_mut_ptr(), RX_BATCH as c_int) };
            self.head = 0;
            self.tail = usize::try_from(n).unwrap_or(0).min(RX_BATCH);
            if self.tail == 0 {
                return 0;
            }
        }
        // SAFETY: `queue[head]` is an entry we own (head < tail).
        let len = unsafe { vnr_rx_ptr_len(self.queue[self.head]) };
        usize::try_from(len).unwrap_or(0)
    }

    fn take(&mut self) -> Option<*mut c_void> {
        if self.head == self.tail {
            return None;
        }
        let p = self.queue[self.head];
        self.head += 1;
        Some(p)
    }

    /// Receives the packet `peek_len` reported into `iov`; as
    /// [`TapSocket::recv_ptr`]. `Ok(0)` if none is queued.
    pub(crate) fn recv(&mut self, iov: &[UserIov], len: usize) -> Result<usize> {
        let Some(p) = self.take() else { return Ok(0) };
        // SAFETY: `p` came from this tap's ring and is ours; tun consumes it.
        unsafe { self.sock.recv_ptr(iov, len, p) }
    }

    /// Drops the packet `peek_len` reported.
    pub(crate) fn discard(&mut self) {
        if let Some(p) = self.take() {
            // SAFETY: `p` came from this tap's ring and is ours.
            unsafe { tun_ptr_free(p) };
        }
    }
}

impl Drop for RxBatch {
    fn drop(&mut self) {
        if self.head < self.tail {
            let n = (self.tail - self.head) as c_int;
            // SAFETY: `queue[head..tail]` are ours and came from `ring`, which
            // is alive; unconsume puts them back in order or frees them.
            unsafe { vnr_rx_ring_unconsume(self.ring.as_ptr(), self.queue[self.head..].as_mut_ptr(), n) };
        }
    }
}

/// Packets a [`TxBatch`] holds before it must be sent (`VHOST_NET_BATCH`).
pub(crate) const TX_BATCH: usize = 64;

const SMP_CACHE_BYTES: usize = 64;
const PAGE_SIZE: usize = 4096;

const fn cache_align(x: usize) -> usize {
    (x + SMP_CACHE_BYTES - 1) & !(SMP_CACHE_BYTES - 1)
}

/// Guest TX packets copied into page fragments and handed to tun in one
/// `sendmsg` (`TUN_MSG_PTR`), which builds each skb around its fragment: the
/// C driver's fast path for packets that fit in a page.
///
/// # Invariants
///
/// `xdp` holds `TX_BATCH` zero-initialised `struct xdp_buff`s of
/// `xdp_size` bytes each; the first `n` describe fragments allocated from
/// `frag` and owned by this batch until they are sent or freed.
pub(crate) struct TxBatch {
    frag: bindings::page_frag_cache,
    xdp: KVec<u64>,
    xdp_size: usize,
    n: usize,
    shinfo: usize,
    rx_pad: usize,
}

// SAFETY: The fragment cache and the buffers are only touched by the worker
// that holds the queue lock; nothing here is tied to a CPU or a task.
unsafe impl Send for TxBatch {}

impl TxBatch {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: Pure functions returning compile-time constants of C.
        let (xdp_size, shinfo, rx_pad) =
            unsafe { (vnr_xdp_buff_size(), vnr_xdp_shinfo_size() as usize, vnr_xdp_rx_pad() as usize) };
        let words = (xdp_size * TX_BATCH).div_ceil(8);
        let mut xdp = KVec::with_capacity(words, GFP_KERNEL)?;
        xdp.resize(words, 0u64, GFP_KERNEL)?;
        Ok(Self {
            // An all-zero cache is an empty one (`page_frag_cache_init`).
            frag: bindings::page_frag_cache { encoded_page: 0, offset: 0, pagecnt_bias: 0 },
            xdp,
            xdp_size,
            n: 0,
            shinfo,
            rx_pad,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.n
    }

    fn slot(&mut self, i: usize) -> *mut c_void {
        // In bounds: i < TX_BATCH and `xdp` holds TX_BATCH buffs.
        self.xdp.as_mut_ptr().cast::<u8>().wrapping_add(i * self.xdp_size).cast()
    }

    /// Copies one packet of `len` bytes (the tap's vnet header of
    /// `sock_hlen` bytes first) from the user buffers `iov` into a fragment.
    /// `-ENOSPC` if it does not fit in a page: send it the slow way.
    pub(crate) fn add(&mut self, iov: &[UserIov], len: usize, sock_hlen: usize) -> Result {
        if self.n >= TX_BATCH {
            return Err(ENOSPC);
        }
        if len < sock_hlen || len < sock_hlen + 14 {
            return Err(EINVAL);
        }
        let pad = cache_align(self.rx_pad + sock_hlen);
        let data = cache_align(len + pad);
        if data + self.shinfo > PAGE_SIZE {
            return Err(ENOSPC);
        }
        let buflen = data + self.shinfo;
        // SAFETY: `frag` is a valid (possibly empty) cache owned by us; the
        // mask asks for cache-line alignment, as the C driver does.
        let buf = unsafe {
            bindings::__page_frag_alloc_align(
                &mut self.frag,
                buflen as c_uint,
                bindings::GFP_KERNEL,
                !(SMP_CACHE_BYTES as c_uint - 1),
            )
        };
        if buf.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: `buf` is a fresh fragment of `buflen` bytes, ours alone.
        let frag = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), buflen) };
        let r = Self::fill(frag, iov, len, sock_hlen, pad);
        if let Err(e) = r {
            // SAFETY: `buf` came from `__page_frag_alloc_align`.
            unsafe { bindings::page_frag_free(buf) };
            return Err(e);
        }
        let slot = self.slot(self.n);
        // SAFETY: `slot` is a zeroed xdp_buff of ours; the fragment layout is
        // the one tun_xdp_one expects (header at the start, data at `pad`).
        unsafe {
            vnr_xdp_prepare(slot, buf, buflen as c_uint, pad as c_uint, (len - sock_hlen) as c_uint)
        };
        self.n += 1;
        Ok(())
    }

    /// Lays one packet out in `frag`: the data at `pad`, the vnet header
    /// (zeroes if the tap has none) at the start.
    fn fill(frag: &mut [u8], iov: &[UserIov], len: usize, sock_hlen: usize, pad: usize) -> Result {
        let mut off = pad - sock_hlen;
        let end = off + len;
        for v in iov {
            if off == end {
                break;
            }
            let n = core::cmp::min(v.len, end - off);
            kernel::uaccess::UserSlice::new(kernel::uaccess::UserPtr::from_addr(v.base), n)
                .reader()
                .read_slice(&mut frag[off..off + n])?;
            off += n;
        }
        if off != end {
            return Err(EFAULT);
        }
        if sock_hlen == 0 {
            frag[..pad].fill(0);
            return Ok(());
        }
        let h = pad - sock_hlen;
        // VIRTIO_NET_HDR_F_NEEDS_CSUM: the checksum must lie inside the
        // headers tun will look at; widen hdr_len as the C driver does.
        let rd = |f: &[u8], o: usize| u16::from_le_bytes([f[h + o], f[h + o + 1]]);
        if frag[h] & 1 != 0 {
            let need = u32::from(rd(frag, 6)) + u32::from(rd(frag, 8)) + 2;
            if need > u32::from(rd(frag, 2)) {
                if need as usize > len {
                    return Err(EINVAL);
                }
                frag[h + 2..h + 4].copy_from_slice(&(need as u16).to_le_bytes());
            }
        }
        frag.copy_within(h..h + sock_hlen, 0);
        Ok(())
    }

    /// Hands the batch to tun. On failure the fragments are freed.
    pub(crate) fn send(&mut self, sock: &TapSocket) -> Result {
        if self.n == 0 {
            return Ok(());
        }
        let n = self.n;
        self.n = 0;
        let base = self.slot(0);
        // SAFETY: `base` points at `n` prepared xdp_buffs; tun takes
        // ownership of their fragments whatever it returns.
        let r = unsafe { vnr_tun_send_batch(sock.sock.as_ptr().cast(), base, n as c_uint) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(())
    }
}

impl Drop for TxBatch {
    fn drop(&mut self) {
        for i in 0..self.n {
            let slot = self.slot(i);
            // SAFETY: Unsent buffs still own their fragments.
            unsafe { bindings::page_frag_free(vnr_xdp_data(slot)) };
        }
        // SAFETY: `frag` is ours; draining releases its cached page.
        unsafe { bindings::page_frag_cache_drain(&mut self.frag) };
    }
}
