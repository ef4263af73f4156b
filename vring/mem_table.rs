// SPDX-License-Identifier: GPL-2.0

//! The guest memory table: guest-physical to owner-virtual translation.
//!
//! This file uses only `core`, so the same code is compiled into the module
//! and into the host test crate (`tests/host`), where `cargo test` checks it.
//!
//! Ranges are checked once when the table is set (`validate`), and every
//! access is bounded again when it is translated (`for_each_piece`), including an
//! access that crosses from one region into the next.
//!
//! Like the C driver's interval tree, the table may hold overlapping
//! regions; an address then translates through the region with the lowest
//! guest-physical start that contains it (for equal starts, the one given
//! first), as `vhost_iotlb_itree_first` picks it.

/// One region, as userspace gave it, after validation.
///
/// # Invariants
///
/// `size > 0`, and `gpa + size` and `uaddr + size` do not overflow. Like the
/// C driver, which translates at byte granularity, no alignment is required:
/// a vhost client that `malloc`s its buffers gives regions of any size at
/// any address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Region {
    gpa: u64,
    size: u64,
    uaddr: u64,
    /// After [`validate`]: the largest end of this region and all regions
    /// sorted before it, which makes the lookup a binary search even when
    /// regions overlap.
    reach: u64,
}

/// How the device will use a translated range. The device IOTLB checks it
/// against each mapping's permissions; the memory table has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// The device reads (descriptors, indirect tables, TX buffers).
    Read,
    /// The device writes (RX buffers).
    Write,
}

/// Why a memory table was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemError {
    /// More regions than the module parameter allows.
    TooMany,
    /// A region of size 0, or one whose end wraps around 2^64.
    BadSize,
    /// A user address range above the user address-space limit.
    BadUserAddr,
}

/// Why a guest range could not be translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TranslateError {
    /// The range is not fully covered by regions (or wraps around 2^64).
    NotMapped,
    /// The device IOTLB has no mapping for `iova`, the first address left
    /// untranslated: the queue waits until userspace maps it.
    Miss { iova: u64, access: Access },
    /// The device IOTLB's mapping of `iova` does not allow `access` (a
    /// write into a read-only mapping).
    Denied { iova: u64, access: Access },
}

/// An address space that the guest's buffer addresses are translated
/// through into the owner's: the memory table (guest-physical addresses,
/// `[Region]`) or, with `VIRTIO_F_ACCESS_PLATFORM`, the device IOTLB (I/O
/// virtual addresses, `crate::vring::iotlb::Iotlb`). The ring parsers see both
/// the same way.
pub(crate) trait Translate {
    /// Calls `f` for each contiguous piece of `[addr, addr + len)`, in
    /// order, for a use of kind `access`. On error `f` may already have
    /// seen the first pieces: callers discard everything then. `f`'s own
    /// errors stop the walk and are returned as they are.
    fn for_each_piece<E: From<TranslateError>>(
        &self,
        addr: u64,
        len: u64,
        access: Access,
        f: impl FnMut(Segment) -> Result<(), E>,
    ) -> Result<(), E>;
}

impl Translate for [Region] {
    // Inlined, with `for_each_piece` below, into `ChainBuilder::push`,
    // itself inlined into the ring walks: once per descriptor.
    #[inline(always)]
    fn for_each_piece<E: From<TranslateError>>(
        &self,
        addr: u64,
        len: u64,
        _access: Access,
        f: impl FnMut(Segment) -> Result<(), E>,
    ) -> Result<(), E> {
        for_each_piece(self, addr, len, f)
    }
}

impl Region {
    /// Checks one region as userspace gave it. `user_limit` is the first
    /// address past the user address space (`TASK_SIZE_MAX`).
    pub(crate) fn new(gpa: u64, size: u64, uaddr: u64, user_limit: u64) -> Result<Self, MemError> {
        if size == 0 {
            return Err(MemError::BadSize);
        }
        gpa.checked_add(size).ok_or(MemError::BadSize)?;
        let uend = uaddr.checked_add(size).ok_or(MemError::BadSize)?;
        if uend > user_limit {
            return Err(MemError::BadUserAddr);
        }
        // INVARIANT: checked above.
        Ok(Region {
            gpa,
            size,
            uaddr,
            reach: gpa + size,
        })
    }

    /// Guest-physical start.
    pub(crate) fn gpa(&self) -> u64 {
        self.gpa
    }

    /// Length in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Owner-virtual start.
    pub(crate) fn uaddr(&self) -> u64 {
        self.uaddr
    }

    fn end(&self) -> u64 {
        // Cannot overflow by the type invariant.
        self.gpa + self.size
    }
}

/// Sorts `regions` by guest-physical address, keeping the given order among
/// equal starts, and prepares them for [`for_each_piece`]. Overlaps are allowed.
pub(crate) fn validate(regions: &mut [Region], max: usize) -> Result<(), MemError> {
    if regions.len() > max {
        return Err(MemError::TooMany);
    }
    // Insertion sort: stable and `core`-only; at most a few hundred regions,
    // once per table.
    for i in 1..regions.len() {
        let mut j = i;
        while j > 0 && regions[j - 1].gpa > regions[j].gpa {
            regions.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut reach = 0;
    for region in regions.iter_mut() {
        reach = core::cmp::max(reach, region.end());
        region.reach = reach;
    }
    Ok(())
}

/// Finds the region that translates `gpa` in a table prepared by
/// [`validate`]: of the regions containing it, the first in sorted order.
/// That is the first region whose `reach` passes `gpa` (every region before
/// it ends at or below `gpa`), if it starts at or below `gpa`.
#[inline]
fn find(regions: &[Region], gpa: u64) -> Option<&Region> {
    let index = regions.partition_point(|r| r.reach <= gpa);
    let region = regions.get(index)?;
    // `reach` first passed `gpa` here, so this region's own end does.
    (region.gpa() <= gpa && gpa < region.end()).then_some(region)
}

/// One contiguous piece of a translated guest range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Where the piece starts in the guest's address space: guest-physical
    /// through the memory table, I/O virtual through the device IOTLB.
    pub(crate) gpa: u64,
    pub(crate) uaddr: u64,
    pub(crate) len: u64,
}

/// Translates the guest range `[gpa, gpa + len)` into owner-virtual
/// segments, calling `f` for each in order. A range that crosses regions is
/// split at each region boundary. A hole is [`TranslateError::NotMapped`], found
/// when the walk reaches it: `f` may already have been called for the
/// first pieces, so callers discard everything on error (the ring parsers
/// do).
#[inline(always)]
pub(crate) fn for_each_piece<E: From<TranslateError>>(
    regions: &[Region],
    mut gpa: u64,
    mut len: u64,
    mut f: impl FnMut(Segment) -> Result<(), E>,
) -> Result<(), E> {
    while len > 0 {
        let r = find(regions, gpa).ok_or(TranslateError::NotMapped)?;
        let off = gpa - r.gpa();
        let n = core::cmp::min(len, r.size() - off);
        f(Segment {
            gpa,
            uaddr: r.uaddr() + off,
            len: n,
        })?;
        gpa += n;
        len -= n;
    }
    Ok(())
}

/// The guest-physical address of the owner range `[uaddr, uaddr + len)`,
/// if one region holds all of it: the reverse of [`for_each_piece`], for the
/// dirty log of ring parts that userspace gave by their owner address only
/// (a packed ring's descriptor ring). Where regions alias the same owner
/// memory, the one with the lowest guest-physical start is taken: QEMU
/// syncs the log per guest-physical section, and aliases of one owner
/// range belong to one RAM block, whose dirty state it keeps once.
pub(crate) fn guest_address(regions: &[Region], uaddr: u64, len: u64) -> Option<u64> {
    let end = uaddr.checked_add(len)?;
    regions
        .iter()
        .find(|region| region.uaddr() <= uaddr && end <= region.uaddr() + region.size())
        .map(|region| region.gpa() + (uaddr - region.uaddr()))
}

/// Calls `f(gpa, len)` for every guest-physical range whose owner memory
/// overlaps `[uaddr, uaddr + len)`: the reverse of the table, for the dirty
/// log of writes the device addressed by I/O virtual address (the C
/// driver's `log_write_hva`). Every alias of the owner range is given, as
/// in C, since several guest ranges may be backed by the same memory.
/// [`TranslateError::NotMapped`] if no region overlaps it at all.
pub(crate) fn for_each_alias<E: From<TranslateError>>(
    regions: &[Region],
    uaddr: u64,
    len: u64,
    mut f: impl FnMut(u64, u64) -> Result<(), E>,
) -> Result<(), E> {
    if len == 0 {
        return Ok(());
    }
    let last = uaddr
        .checked_add(len - 1)
        .ok_or(TranslateError::NotMapped)?;
    let mut hit = false;
    for region in regions {
        // `uaddr + size` does not overflow (type invariant).
        let region_last = region.uaddr() + (region.size() - 1);
        if region.uaddr() > last || region_last < uaddr {
            continue;
        }
        let start = core::cmp::max(region.uaddr(), uaddr);
        let end = core::cmp::min(region_last, last);
        f(region.gpa() + (start - region.uaddr()), end - start + 1)?;
        hit = true;
    }
    if hit {
        Ok(())
    } else {
        Err(TranslateError::NotMapped.into())
    }
}
