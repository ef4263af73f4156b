// SPDX-License-Identifier: GPL-2.0

//! How the ring layer reaches memory: the owner's user memory in the module,
//! a plain buffer in the host tests.

use super::error::{Stop, VringError};

/// Access to the memory of the process that owns the rings.
///
/// Addresses are the owner's virtual addresses, or, for the ring's own
/// parts behind the device IOTLB, I/O virtual addresses that the memory
/// translates (`iotlb::Translated`). Implementations check them (the module
/// through the uaccess helpers, which refuse kernel addresses).
pub(crate) trait UserMemory {
    /// The owner's memory itself, which the parsers read at addresses they
    /// translated already (an indirect table's).
    type Owner: UserMemory;
    /// See [`UserMemory::Owner`]: `self`, unless this memory translates.
    fn owner(&self) -> &Self::Owner;
    /// One single-copy-atomic 16-bit load of a little-endian value.
    fn read_u16(&self, addr: u64) -> Result<u16, Stop>;
    /// One single-copy-atomic 32-bit load of a little-endian value at a
    /// 4-byte-aligned `addr`: a packed ring's event suppression area
    /// (offset and flags) as one snapshot.
    fn read_u32(&self, addr: u64) -> Result<u32, Stop>;
    /// One single-copy-atomic 16-bit store of a little-endian value.
    fn write_u16(&self, addr: u64, val: u16) -> Result<(), Stop>;
    /// One single-copy-atomic store of the 8 bytes `bytes`, in that order,
    /// at an 8-byte-aligned `addr`: what a packed ring's used descriptor
    /// needs to appear whole, flags included.
    fn write_8(&self, addr: u64, bytes: [u8; 8]) -> Result<(), Stop>;
    /// The stores of `stores`, in order, each a [`UserMemory::write_8`]
    /// at `area + offset`, every one inside the `area_len` bytes at `area`
    /// (the rest of a packed ring's used batch, inside its descriptor
    /// ring). This default makes them one by one; the owner's memory makes
    /// them in one user access.
    fn write_8_each(&self, area: u64, area_len: u64, stores: &[Store8]) -> Result<(), Stop> {
        for store in stores {
            let offset = u64::from(store.offset);
            if offset.checked_add(8).is_none_or(|end| end > area_len) {
                return Err(VringError::Fault.into());
            }
            self.write_8(
                area.checked_add(offset).ok_or(VringError::Fault)?,
                store.bytes,
            )?;
        }
        Ok(())
    }
    /// Stores of `vals`, in order, at `addr`, `addr + spacing`, and so on,
    /// each a [`UserMemory::write_8`] of the value's bytes in native order
    /// (a packed ring's used descriptors at adjacent positions). This
    /// default makes them one by one; the owner's memory makes them in one
    /// user access.
    fn write_8_spaced(&self, addr: u64, spacing: u64, vals: &[u64]) -> Result<(), Stop> {
        let mut at = addr;
        for (i, val) in vals.iter().enumerate() {
            if i > 0 {
                at = at.checked_add(spacing).ok_or(VringError::Fault)?;
            }
            self.write_8(at, val.to_ne_bytes())?;
        }
        Ok(())
    }
    /// Copies `buf.len()` bytes from `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Stop>;
    /// The 16 bytes at `addr` (a descriptor): [`UserMemory::read`], unless
    /// the memory has a cheaper way for this one size.
    fn read_16(&self, addr: u64) -> Result<[u8; 16], Stop> {
        let mut bytes = [0u8; 16];
        self.read(addr, &mut bytes)?;
        Ok(bytes)
    }
    /// The 16 bytes at `addr` (a packed descriptor), its last two (the
    /// flags) loaded single-copy atomically and before the rest, with a
    /// read barrier between: fields no older than the flags that made the
    /// descriptor available. This default loads the flags on their own;
    /// the owner's memory loads the last 8 bytes (length, id and flags)
    /// whole instead, which saves a user access per chain.
    fn read_16_acquire(&self, addr: u64) -> Result<[u8; 16], Stop> {
        read_16_flags_first(self, addr)
    }
    /// Copies `buf` to `addr`.
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), Stop>;
    /// Full barrier (`smp_mb`).
    fn mb(&self);
    /// Read barrier (`smp_rmb`).
    fn rmb(&self);
    /// Write barrier (`smp_wmb`).
    fn wmb(&self);
}

/// One store of [`UserMemory::write_8_each`]: `bytes` at byte `offset`
/// of its area. Laid out as the shim's `struct vnr_store8` (12 bytes, the
/// bytes at 4), which reads an array of them in place.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Store8 {
    pub(crate) offset: u32,
    pub(crate) bytes: [u8; 8],
}

/// [`UserMemory::read_16_acquire`] in two reads: the flags on their own,
/// a read barrier, then all 16 bytes, the flags kept from the first read.
pub(crate) fn read_16_flags_first<M: UserMemory + ?Sized>(
    mem: &M,
    addr: u64,
) -> Result<[u8; 16], Stop> {
    let flags = mem.read_u16(addr.checked_add(14).ok_or(VringError::Fault)?)?;
    mem.rmb();
    let mut bytes = mem.read_16(addr)?;
    bytes[14..].copy_from_slice(&flags.to_le_bytes());
    Ok(bytes)
}
