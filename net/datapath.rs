// SPDX-License-Identifier: GPL-2.0

//! What TX and RX share: the weight of a run, the virtio-net header's
//! lengths, and copying to and from the guest's buffers.

use crate::tap_glue::tap::UserIov;
use crate::vring::net_hdr::VirtioNetHdr;
use crate::vring::Features;

use crate::tap_glue::uaccess::OwnerMem;
use crate::vhost::virtqueue::{ActiveRing, Backend};

use crate::vring::{segments_from, Iov, Stop, UserMemory, VringError, MAX_SEGMENTS};

use kernel::prelude::*;

/// Packets per run before yielding (`VHOST_NET_PKT_WEIGHT`).
pub(super) const PKT_WEIGHT: u64 = 256;
/// Bytes per run before yielding (`VHOST_NET_WEIGHT`).
pub(super) const BYTE_WEIGHT: u64 = 0x80000;

/// Where the virtio-net header is added or stripped, and how long it is.
#[derive(Clone, Copy)]
pub(super) struct HeaderLens {
    /// Added/stripped by vhost (`VHOST_NET_F_VIRTIO_NET_HDR`).
    pub(super) vhost: usize,
    /// Added/stripped by the tap (`IFF_VNET_HDR`).
    pub(super) sock: usize,
}

/// What the data path needs of the negotiated features, decoded once at
/// `VHOST_SET_FEATURES` (C's `vhost_net_set_features`).
#[derive(Clone, Copy)]
pub(crate) struct NetConfig {
    pub(super) hdr: HeaderLens,
    /// `VIRTIO_NET_F_MRG_RXBUF`: an RX packet may span several buffers.
    pub(super) mergeable: bool,
    /// The header has `num_buffers`, which RX must set (to 1 without
    /// mergeable buffers): with mergeable buffers or virtio 1.x, as C's
    /// `set_num_buffers`.
    pub(super) set_num_buffers: bool,
}

impl NetConfig {
    /// Decodes `features`.
    pub(crate) fn of(features: Features) -> Self {
        // With UDP-tunnel GSO the tap's header is 24 bytes too: QEMU sets
        // its TUNSETVNETHDRSZ to the same length.
        let len = VirtioNetHdr::len_for(features);
        let hdr = if features.vhost_net_hdr() {
            HeaderLens {
                vhost: len,
                sock: 0,
            }
        } else {
            HeaderLens {
                vhost: 0,
                sock: len,
            }
        };
        Self {
            hdr,
            mergeable: features.mrg_rxbuf(),
            set_num_buffers: features.mrg_rxbuf() || features.version_1(),
        }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        Self::of(Features::default())
    }
}

/// The packets and bytes a run has done, against the weight.
#[derive(Default)]
pub(super) struct Weight {
    pub(super) packets: u64,
    pub(super) bytes: u64,
}

impl Weight {
    pub(super) fn exceeded(&self) -> bool {
        self.packets >= PKT_WEIGHT || self.bytes >= BYTE_WEIGHT
    }
}

/// The ring has no (more) buffers: asks the guest to kick. Returns true if
/// buffers arrived meanwhile: the run goes on, but the retry is charged to
/// its weight, so a guest flipping `avail->idx` cannot keep the worker
/// looping. False: the run ends until the kick.
pub(super) fn ring_ran_dry<B: Backend, M: UserMemory>(
    active: &mut ActiveRing<'_, B>,
    mem: &M,
    weight: &mut Weight,
) -> Result<bool, Stop> {
    let more = active.wait_for_kick(mem)?;
    if more {
        weight.packets += 1;
    }
    Ok(more)
}

/// Fills `uiov` with the segments `iov`, skipping the first `skip` bytes.
/// Returns the number of user iovecs written.
#[inline]
pub(super) fn to_user_iov(iov: &[Iov], skip: u64, uiov: &mut [UserIov]) -> usize {
    let mut count = 0;
    for seg in segments_from(iov, skip) {
        let Some(slot) = uiov.get_mut(count) else {
            break;
        };
        *slot = UserIov {
            base: seg.addr as usize,
            len: seg.len as usize,
        };
        count += 1;
    }
    count
}

/// Writes `data` at byte `offset` of the buffer described by `iov`.
pub(super) fn write_iov<M: UserMemory>(
    mem: &M,
    iov: &[Iov],
    offset: u64,
    data: &[u8],
) -> Result<(), Stop> {
    let mut done = 0usize;
    for seg in segments_from(iov, offset) {
        if done == data.len() {
            break;
        }
        let n = core::cmp::min(seg.len as usize, data.len() - done);
        mem.write(seg.addr, &data[done..done + n])?;
        done += n;
    }
    if done == data.len() {
        Ok(())
    } else {
        Err(VringError::Fault.into())
    }
}

/// Writes `num_buffers` (little-endian) into the virtio-net header at the
/// start of the buffers `iov`: one 16-bit store when the field lies in the
/// first segment, 2-byte aligned, as guests lay their buffers out; else
/// through [`write_iov`], whose copy goes through the kernel's out-of-line
/// `copy_to_user`: too much for two bytes of every RX packet.
#[inline]
pub(super) fn write_num_buffers(
    owner: &OwnerMem,
    iov: &[Iov],
    num_buffers: u16,
) -> Result<(), Stop> {
    let offset = VirtioNetHdr::NUM_BUFFERS_OFFSET as u64;
    let bytes = num_buffers.to_le_bytes();
    if let Some(first) = iov.first() {
        // No overflow: the segment was translated whole, and `offset + 2`
        // lies inside it.
        if first.len >= offset + 2 && (first.addr + offset) % 2 == 0 {
            // A native store of the bytes' native value writes them in order.
            return owner.write_u16(first.addr + offset, u16::from_ne_bytes(bytes));
        }
    }
    write_iov(owner, iov, offset, &bytes)
}

/// A user iovec array of `MAX_SEGMENTS` entries.
pub(super) fn user_iov_scratch() -> Result<KVec<UserIov>> {
    let uiov = KVec::from_elem(UserIov::default(), MAX_SEGMENTS, GFP_KERNEL)?;
    Ok(uiov)
}
