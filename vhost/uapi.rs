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
use kernel::prelude::*;
use kernel::uaccess::{UserPtr, UserSlice, UserSliceReader, UserSliceWriter};

pub(crate) use crate::vring::features::mask;

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
// Field offsets; vnr_shim.c asserts the same numbers against <linux/vhost.h>.
const _: () = assert!(core::mem::offset_of!(VringState, num) == 4);
const _: () = assert!(core::mem::offset_of!(VringFile, fd) == 4);
const _: () = assert!(core::mem::offset_of!(VringAddr, flags) == 4);
const _: () = assert!(core::mem::offset_of!(VringAddr, desc_user_addr) == 8);
const _: () = assert!(core::mem::offset_of!(VringAddr, used_user_addr) == 16);
const _: () = assert!(core::mem::offset_of!(VringAddr, avail_user_addr) == 24);
const _: () = assert!(core::mem::offset_of!(VringAddr, log_guest_addr) == 32);
const _: () = assert!(core::mem::offset_of!(MemoryHeader, padding) == 4);
const _: () = assert!(core::mem::offset_of!(MemoryRegion, memory_size) == 8);
const _: () = assert!(core::mem::offset_of!(MemoryRegion, userspace_addr) == 16);
const _: () = assert!(core::mem::offset_of!(MemoryRegion, flags_padding) == 24);

/// A value of the ioctl ABI, read from and written to userspace as bytes
/// in the CPU's byte order, field by field: no unsafe reinterpretation of
/// user bytes as a struct.
pub(crate) trait UserAbi: Sized {
    /// Its size in the ABI.
    const SIZE: usize;
    /// Decodes it from `bytes`, [`UserAbi::SIZE`] of them.
    fn decode(bytes: &[u8; MAX_ABI_SIZE]) -> Self;
    /// Encodes it into the first [`UserAbi::SIZE`] of `bytes`.
    fn encode(&self, bytes: &mut [u8; MAX_ABI_SIZE]);
}

/// The largest [`UserAbi::SIZE`] (of `struct vhost_vring_addr`).
pub(crate) const MAX_ABI_SIZE: usize = 40;

/// Implements [`UserAbi`] for a struct of integers, its fields in ABI order,
/// and checks that their sizes add up to the struct's (no padding).
macro_rules! user_abi {
    ($name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        impl UserAbi for $name {
            const SIZE: usize = 0 $(+ core::mem::size_of::<$ty>())*;

            fn decode(bytes: &[u8; MAX_ABI_SIZE]) -> Self {
                let mut at = 0;
                $(
                    let $field = {
                        const LEN: usize = core::mem::size_of::<$ty>();
                        let mut field = [0u8; LEN];
                        field.copy_from_slice(&bytes[at..at + LEN]);
                        at += LEN;
                        <$ty>::from_ne_bytes(field)
                    };
                )*
                let _ = at;
                Self { $($field),* }
            }

            fn encode(&self, bytes: &mut [u8; MAX_ABI_SIZE]) {
                let mut at = 0;
                $(
                    let field = self.$field.to_ne_bytes();
                    bytes[at..at + field.len()].copy_from_slice(&field);
                    at += field.len();
                )*
                let _ = at;
            }
        }
        const _: () = assert!(<$name as UserAbi>::SIZE == core::mem::size_of::<$name>());
        const _: () = assert!(<$name as UserAbi>::SIZE <= MAX_ABI_SIZE);
    };
}

/// Implements [`UserAbi`] for integers.
macro_rules! user_abi_int {
    ($($ty:ty),*) => {$(
        impl UserAbi for $ty {
            const SIZE: usize = core::mem::size_of::<$ty>();

            fn decode(bytes: &[u8; MAX_ABI_SIZE]) -> Self {
                const LEN: usize = core::mem::size_of::<$ty>();
                let mut value = [0u8; LEN];
                value.copy_from_slice(&bytes[..LEN]);
                <$ty>::from_ne_bytes(value)
            }

            fn encode(&self, bytes: &mut [u8; MAX_ABI_SIZE]) {
                let value = self.to_ne_bytes();
                bytes[..value.len()].copy_from_slice(&value);
            }
        }
    )*};
}

user_abi_int!(u8, u32, i32, u64);
user_abi!(VringState {
    index: u32,
    num: u32
});
user_abi!(VringFile {
    index: u32,
    fd: i32
});
user_abi!(VringAddr {
    index: u32,
    flags: u32,
    desc_user_addr: u64,
    used_user_addr: u64,
    avail_user_addr: u64,
    log_guest_addr: u64,
});
user_abi!(MemoryHeader {
    nregions: u32,
    padding: u32
});
user_abi!(MemoryRegion {
    guest_phys_addr: u64,
    memory_size: u64,
    userspace_addr: u64,
    flags_padding: u64
});

/// Reads a `T` from `reader`.
pub(crate) fn read_abi<T: UserAbi>(reader: &mut UserSliceReader) -> Result<T> {
    let mut bytes = [0u8; MAX_ABI_SIZE];
    reader.read_slice(&mut bytes[..T::SIZE])?;
    Ok(T::decode(&bytes))
}

/// Writes `value` to `writer`.
pub(crate) fn write_abi<T: UserAbi>(writer: &mut UserSliceWriter, value: &T) -> Result {
    let mut bytes = [0u8; MAX_ABI_SIZE];
    value.encode(&mut bytes);
    writer.write_slice(&bytes[..T::SIZE])
}

/// Reads a `T` from the ioctl argument.
pub(crate) fn read_arg<T: UserAbi>(arg: usize) -> Result<T> {
    read_abi(&mut UserSlice::new(UserPtr::from_addr(arg), T::SIZE).reader())
}

/// Writes a `T` to the ioctl argument.
pub(crate) fn write_arg<T: UserAbi>(arg: usize, value: &T) -> Result {
    write_abi(
        &mut UserSlice::new(UserPtr::from_addr(arg), T::SIZE).writer(),
        value,
    )
}

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
pub(crate) const VHOST_SET_VRING_BUSYLOOP_TIMEOUT: u32 = _IOW::<VringState>(VHOST_VIRTIO, 0x23);
/// Really a read, but the uapi header declares it `_IOW`.
pub(crate) const VHOST_GET_VRING_BUSYLOOP_TIMEOUT: u32 = _IOW::<VringState>(VHOST_VIRTIO, 0x24);
pub(crate) const VHOST_SET_BACKEND_FEATURES: u32 = _IOW::<u64>(VHOST_VIRTIO, 0x25);
pub(crate) const VHOST_GET_BACKEND_FEATURES: u32 = _IOR::<u64>(VHOST_VIRTIO, 0x26);
pub(crate) const VHOST_NET_SET_BACKEND: u32 = _IOW::<VringFile>(VHOST_VIRTIO, 0x30);
pub(crate) const VHOST_GET_FEATURES_ARRAY: u32 = _IOR::<u64>(VHOST_VIRTIO, 0x83);
pub(crate) const VHOST_SET_FEATURES_ARRAY: u32 = _IOW::<u64>(VHOST_VIRTIO, 0x83);
pub(crate) const VHOST_SET_FORK_FROM_OWNER: u32 = _IOW::<u8>(VHOST_VIRTIO, 0x84);
pub(crate) const VHOST_GET_FORK_FROM_OWNER: u32 = _IOR::<u8>(VHOST_VIRTIO, 0x85);

// The ioctl numbers, as vnr_shim.c asserts them against <linux/vhost.h>.
const _: () = {
    assert!(VHOST_GET_FEATURES == 0x8008af00 && VHOST_SET_FEATURES == 0x4008af00);
    assert!(VHOST_SET_OWNER == 0xaf01 && VHOST_RESET_OWNER == 0xaf02);
    assert!(VHOST_SET_MEM_TABLE == 0x4008af03);
    assert!(VHOST_SET_LOG_BASE == 0x4008af04 && VHOST_SET_LOG_FD == 0x4004af07);
    assert!(VHOST_SET_VRING_NUM == 0x4008af10 && VHOST_SET_VRING_ADDR == 0x4028af11);
    assert!(VHOST_SET_VRING_BASE == 0x4008af12 && VHOST_GET_VRING_BASE == 0xc008af12);
    assert!(VHOST_SET_VRING_KICK == 0x4008af20 && VHOST_SET_VRING_CALL == 0x4008af21);
    assert!(VHOST_SET_VRING_ERR == 0x4008af22);
    assert!(VHOST_SET_VRING_BUSYLOOP_TIMEOUT == 0x4008af23);
    assert!(VHOST_GET_VRING_BUSYLOOP_TIMEOUT == 0x4008af24);
    assert!(VHOST_SET_BACKEND_FEATURES == 0x4008af25 && VHOST_GET_BACKEND_FEATURES == 0x8008af26);
    assert!(VHOST_NET_SET_BACKEND == 0x4008af30);
    assert!(VHOST_GET_FEATURES_ARRAY == 0x8008af83 && VHOST_SET_FEATURES_ARRAY == 0x4008af83);
    assert!(VHOST_SET_FORK_FROM_OWNER == 0x4001af84 && VHOST_GET_FORK_FROM_OWNER == 0x8001af85);
};

/// `VHOST_FILE_UNBIND`: an fd of -1 detaches a backend or an eventfd.
pub(crate) const VHOST_FILE_UNBIND: i32 = -1;
/// `1 << VHOST_VRING_F_LOG`: the only defined `vhost_vring_addr.flags` bit,
/// as a mask (the C header defines its bit number, 0).
pub(crate) const VHOST_VRING_F_LOG_MASK: u32 = 1 << 0;
pub(crate) const VHOST_FORK_OWNER_KTHREAD: u8 = 0;
pub(crate) const VHOST_FORK_OWNER_TASK: u8 = 1;

/// Backend feature bit numbers (`VHOST_SET_BACKEND_FEATURES`).
pub(crate) mod backend_feature {
    /// Misses are read as `struct vhost_msg_v2`.
    pub(crate) const VHOST_BACKEND_F_IOTLB_MSG_V2: u32 = 1;
    /// `VHOST_IOTLB_BATCH_BEGIN`/`END` are taken.
    pub(crate) const VHOST_BACKEND_F_IOTLB_BATCH: u32 = 2;
}

/// Backend features: the v2 message format, as the C driver offers, and
/// batches of IOTLB updates, which it does not (QEMU's vhost-kernel backend
/// acks only the first; a batch's updates take effect one by one anyway,
/// and the queues they answer are woken once, at its end).
pub(crate) const BACKEND_FEATURES: u64 = mask(backend_feature::VHOST_BACKEND_F_IOTLB_MSG_V2)
    | mask(backend_feature::VHOST_BACKEND_F_IOTLB_BATCH);
