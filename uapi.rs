// SPDX-License-Identifier: GPL-2.0

//! The vhost and virtio-net userspace ABI, written out by hand.
//!
//! Mirrors `include/uapi/linux/vhost.h`, `vhost_types.h`, `virtio_config.h`,
//! `virtio_ring.h` and `virtio_net.h` of Linux 7.3. Every struct carries a
//! compile-time size assertion so that a typo cannot silently change the ABI.
//!
//! Ioctls are matched on their exact command number. Several vhost commands
//! carry the "wrong" direction bits (`VHOST_GET_VRING_BUSYLOOP_TIMEOUT` and
//! `VHOST_GET_VRING_ENDIAN` are `_IOW` although they write to userspace), and
//! the `_IOC_SIZE` of `VHOST_SET_MEM_TABLE` covers only its 8-byte header, so
//! neither the direction nor the size bits are trusted for anything.

use kernel::ioctl::{_IO, _IOR, _IOW, _IOWR};
use kernel::transmute::{AsBytes, FromBytes};

const VHOST_VIRTIO: u32 = 0xAF;

/// `struct vhost_vring_state`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct VringState {
    pub(crate) index: u32,
    pub(crate) num: u32,
}

/// `struct vhost_vring_file`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct VringFile {
    pub(crate) index: u32,
    pub(crate) fd: i32,
}

/// `struct vhost_vring_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct VringAddr {
    pub(crate) index: u32,
    pub(crate) flags: u32,
    pub(crate) desc_user_addr: u64,
    pub(crate) used_user_addr: u64,
    pub(crate) avail_user_addr: u64,
    pub(crate) log_guest_addr: u64,
}

/// The header of `struct vhost_memory`; `nregions` regions follow it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MemoryHeader {
    pub(crate) nregions: u32,
    pub(crate) padding: u32,
}

/// `struct vhost_memory_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MemoryRegion {
    pub(crate) guest_phys_addr: u64,
    pub(crate) memory_size: u64,
    pub(crate) userspace_addr: u64,
    pub(crate) flags_padding: u64,
}

const _: () = assert!(core::mem::size_of::<VringState>() == 8);
const _: () = assert!(core::mem::size_of::<VringFile>() == 8);
const _: () = assert!(core::mem::size_of::<VringAddr>() == 40);
const _: () = assert!(core::mem::size_of::<MemoryHeader>() == 8);
const _: () = assert!(core::mem::size_of::<MemoryRegion>() == 32);

// SAFETY: All of these are `repr(C)` structs of plain integers without padding
// (checked by the size assertions above), so every bit pattern is valid and
// every byte is initialised.
unsafe impl FromBytes for VringState {}
// SAFETY: See above.
unsafe impl AsBytes for VringState {}
// SAFETY: See above.
unsafe impl FromBytes for VringFile {}
// SAFETY: See above.
unsafe impl FromBytes for VringAddr {}
// SAFETY: See above.
unsafe impl FromBytes for MemoryHeader {}
// SAFETY: See above.
unsafe impl FromBytes for MemoryRegion {}

pub(crate) const VHOST_GET_FEATURES: u32 = _IOR::<u64>(VHOST_VIRTIO, 0x00);
pub(crate) const VHOST_SET_FEATURES: u32 = _IOW::<u64>(VHOST_VIRTIO, 0x00);
pub(crate) const VHOST_SET_OWNER: u32 = _IO(VHOST_VIRTIO, 0x01);
pub(crate) const VHOST_RESET_OWNER: u32 = _IO(VHOST_VIRTIO, 0x02);
pub(crate) const VHOST_SET_MEM_TABLE: u32 = _IOW::<MemoryHeader>(VHOST_VIRTIO, 0x03);
pub(crate) const VHOST_SET_LOG_BASE: u32 = _IOW::<u64>(VHOST_VIRTIO, 0x04);
pub(crate) const VHOST_SET_LOG_FD: u32 = _IOW::<i32>(VHOST_VIRTIO, 0x07);
pub(crate) const VHOST_SET_VRING_NUM: u32 = _IOW::<VringState>(VHOST_VIRTIO, 0x10);
pub(crate) const VHOST_SET_VRING_ADDR: u32 = _IOW::<VringAddr>(VHOST_VIRTIO, 0x11);
pub(crate) const VHOST_SET_VRING_BASE: u32 = _IOW::<VringState>(VHOST_VIRTIO, 0x12);
pub(crate) const VHOST_GET_VRING_BASE: u32 = _IOWR::<VringState>(VHOST_VIRTIO, 0x12);
pub(crate) const VHOST_SET_VRING_KICK: u32 = _IOW::<VringFile>(VHOST_VIRTIO, 0x20);
pub(crate) const VHOST_SET_VRING_CALL: u32 = _IOW::<VringFile>(VHOST_VIRTIO, 0x21);
pub(crate) const VHOST_SET_VRING_ERR: u32 = _IOW::<VringFile>(VHOST_VIRTIO, 0x22);
pub(crate) const VHOST_SET_VRING_BUSYLOOP_TIMEOUT: u32 =
    _IOW::<VringState>(VHOST_VIRTIO, 0x23);
/// Really a read, but the uapi header declares it `_IOW`.
pub(crate) const VHOST_GET_VRING_BUSYLOOP_TIMEOUT: u32 =
    _IOW::<VringState>(VHOST_VIRTIO, 0x24);
pub(crate) const VHOST_SET_BACKEND_FEATURES: u32 = _IOW::<u64>(VHOST_VIRTIO, 0x25);
pub(crate) const VHOST_GET_BACKEND_FEATURES: u32 = _IOR::<u64>(VHOST_VIRTIO, 0x26);
pub(crate) const VHOST_NET_SET_BACKEND: u32 = _IOW::<VringFile>(VHOST_VIRTIO, 0x30);
pub(crate) const VHOST_GET_FEATURES_ARRAY: u32 = _IOR::<u64>(VHOST_VIRTIO, 0x83);
pub(crate) const VHOST_SET_FEATURES_ARRAY: u32 = _IOW::<u64>(VHOST_VIRTIO, 0x83);
pub(crate) const VHOST_SET_FORK_FROM_OWNER: u32 = _IOW::<u8>(VHOST_VIRTIO, 0x84);
pub(crate) const VHOST_GET_FORK_FROM_OWNER: u32 = _IOR::<u8>(VHOST_VIRTIO, 0x85);

/// `VHOST_FILE_UNBIND`: an fd of -1 detaches a backend or an eventfd.
pub(crate) const VHOST_FILE_UNBIND: i32 = -1;
/// `VHOST_VRING_F_LOG`: the only defined `vhost_vring_addr.flags` bit.
pub(crate) const VHOST_VRING_F_LOG: u32 = 1 << 0;
pub(crate) const VHOST_FORK_OWNER_KTHREAD: u8 = 0;
pub(crate) const VHOST_FORK_OWNER_TASK: u8 = 1;

/// Feature bit numbers.
pub(crate) mod feature {
    pub(crate) const VIRTIO_NET_F_MRG_RXBUF: u32 = 15;
    pub(crate) const VIRTIO_F_NOTIFY_ON_EMPTY: u32 = 24;
    pub(crate) const VIRTIO_F_ANY_LAYOUT: u32 = 27;
    pub(crate) const VIRTIO_RING_F_INDIRECT_DESC: u32 = 28;
    pub(crate) const VIRTIO_RING_F_EVENT_IDX: u32 = 29;
    pub(crate) const VHOST_NET_F_VIRTIO_NET_HDR: u32 = 27;
    pub(crate) const VIRTIO_F_VERSION_1: u32 = 32;
}

/// Bit `n` as a feature mask.
pub(crate) const fn bit(n: u32) -> u64 {
    1u64 << n
}

/// The virtio features this driver really implements. Nothing is offered
/// before its data path exists and is tested; in particular `LOG_ALL` (dirty
/// logging for migration) and `ACCESS_PLATFORM` (IOTLB) are not offered.
pub(crate) const NET_FEATURES: u64 = bit(feature::VHOST_NET_F_VIRTIO_NET_HDR)
    | bit(feature::VIRTIO_NET_F_MRG_RXBUF)
    | bit(feature::VIRTIO_RING_F_INDIRECT_DESC)
    | bit(feature::VIRTIO_RING_F_EVENT_IDX)
    | bit(feature::VIRTIO_F_NOTIFY_ON_EMPTY)
    | bit(feature::VIRTIO_F_ANY_LAYOUT)
    | bit(feature::VIRTIO_F_VERSION_1);

/// Backend features: none. `IOTLB_MSG_V2` only matters with an IOTLB, which
/// needs `ACCESS_PLATFORM`, which is not offered.
pub(crate) const NET_BACKEND_FEATURES: u64 = 0;

/// How many 64-bit words of features the `_ARRAY` ioctls know of
/// (`VIRTIO_FEATURES_U64S` in Linux 7.3).
pub(crate) const FEATURES_U64S: usize = 2;
