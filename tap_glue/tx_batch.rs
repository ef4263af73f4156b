// SPDX-License-Identifier: GPL-2.0

//! TX to tun in batches: small packets copied into pages as `xdp_buff`s
//! and handed to tun in one `sendmsg`, as the C driver does
//! (`vhost_net_build_xdp`, `TUN_MSG_PTR`).

use super::tap::TapSocket;
use crate::tap_glue::shim::{self, XdpBuff};
use crate::tap_glue::uaccess::OwnerMem;
use crate::vring::net_hdr::VirtioNetHdr;
use crate::vring::{segments_from, Iov};
use core::ptr::NonNull;
use kernel::{bindings, ffi::c_uint, page::PAGE_SIZE, prelude::*};

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
            (
                shim::vnr_xdp_buff_size(),
                shim::vnr_xdp_shinfo_size() as usize,
                shim::vnr_xdp_rx_pad() as usize,
            )
        };
        let words = (xdp_size * TX_BATCH).div_ceil(8);
        let xdp = KVec::from_elem(0u64, words, GFP_KERNEL)?;
        Ok(Self {
            // An all-zero cache is an empty one (`page_frag_cache_init`).
            frag: bindings::page_frag_cache {
                encoded_page: 0,
                offset: 0,
                pagecnt_bias: 0,
            },
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
        self.xdp
            .as_mut_ptr()
            .cast::<u8>()
            .wrapping_add(index * self.xdp_size)
            .cast()
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
    pub(crate) fn add(
        &mut self,
        owner: &OwnerMem,
        iov: &[Iov],
        skip: u64,
        len: usize,
        sock_hlen: usize,
        headroom: usize,
    ) -> Batched {
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
        let Some(buf) = NonNull::new(buf.cast::<u8>()) else {
            return Batched::NoMemory;
        };
        if Self::fill(owner, buf, iov, skip, len, sock_hlen, pad).is_err() {
            // SAFETY: `buf` came from `__page_frag_alloc_align`.
            unsafe { bindings::page_frag_free(buf.as_ptr().cast()) };
            return Batched::Malformed;
        }
        let slot = self.slot(self.count);
        // SAFETY: `slot` is a zeroed xdp_buff of ours; the fragment layout is
        // the one tun_xdp_one expects (header at the start, data at `pad`).
        unsafe {
            shim::vnr_xdp_prepare(
                slot,
                buf.as_ptr().cast(),
                buflen as c_uint,
                pad as c_uint,
                (len - sock_hlen) as c_uint,
            )
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
    fn fill(
        owner: &OwnerMem,
        buf: NonNull<u8>,
        iov: &[Iov],
        skip: u64,
        len: usize,
        sock_hlen: usize,
        pad: usize,
    ) -> Result {
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
            owner.read_into(seg.addr, dst)?;
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
        // memcpy per packet.
        let mut raw = [0u8; VirtioNetHdr::LEN_LEGACY];
        if sock_hlen < raw.len() {
            return Err(EINVAL);
        }
        // SAFETY: `hdr_at + LEN_LEGACY <= hdr_at + sock_hlen = pad`, inside
        // the fragment, initialised by the copy above.
        unsafe {
            core::ptr::copy_nonoverlapping(buf.as_ptr().add(hdr_at), raw.as_mut_ptr(), raw.len())
        };
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
                unsafe {
                    core::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_ptr().add(hdr_at + 2), 2)
                };
            }
        }
        // The whole header goes to the start, where tun reads it
        // (`tun_xdp_one`): with UDP-tunnel GSO that is all 24 bytes, the
        // tunnel offsets included, which tun checks.
        // SAFETY: both ranges lie in the fragment; `copy` allows overlap.
        unsafe {
            if sock_hlen == VirtioNetHdr::LEN {
                core::ptr::copy(buf.as_ptr().add(hdr_at), buf.as_ptr(), VirtioNetHdr::LEN);
            } else if sock_hlen == VirtioNetHdr::LEN_TUNNEL {
                core::ptr::copy(
                    buf.as_ptr().add(hdr_at),
                    buf.as_ptr(),
                    VirtioNetHdr::LEN_TUNNEL,
                );
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
            return BatchSent {
                packets: 0,
                bytes: 0,
                lost: packets,
            };
        }
        // INVARIANT: tun owns the fragments now.
        self.count = 0;
        self.bytes = 0;
        BatchSent {
            packets,
            bytes,
            lost: 0,
        }
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
