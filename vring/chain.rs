// SPDX-License-Identifier: GPL-2.0

//! Descriptors and the chains they form, in either ring format: the
//! vocabulary the rings hand to the device (`Chain`, `Iov`, `UsedElem`) and
//! the bounded walk that builds a chain from guest descriptors
//! (`ChainBuilder`, `IndirectTable`).

use super::error::{Stop, VringError};
use super::mem_table::{Access, Translate};
use super::split::USED_ELEM_SIZE;
use super::user_memory::UserMemory;

/// `VRING_DESC_F_NEXT`.
pub(crate) const DESC_F_NEXT: u16 = 1;
/// `VRING_DESC_F_WRITE`: the device writes this buffer.
pub(crate) const DESC_F_WRITE: u16 = 2;
/// `VRING_DESC_F_INDIRECT`: the buffer holds a table of descriptors.
pub(crate) const DESC_F_INDIRECT: u16 = 4;

/// Size of one descriptor in the table.
pub(crate) const DESC_SIZE: u64 = 16;

/// Most segments one chain may have once translated (`UIO_MAXIOV`).
pub(crate) const MAX_SEGMENTS: usize = 1024;

/// Largest total length of one chain. Packets are at most 64 KiB plus a
/// header, so 4 GiB leaves no room for a 32-bit wrap anywhere downstream.
const MAX_CHAIN_LEN: u64 = u32::MAX as u64;

/// One descriptor as the guest wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desc {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) flags: u16,
    pub(crate) next: u16,
}

/// The fields of a 16-byte descriptor of either ring format, little-endian:
/// a 64-bit address, a 32-bit length and two 16-bit fields (a split
/// ring's flags and next, a packed ring's id and flags).
#[inline(always)]
pub(super) fn desc_fields(b: &[u8; 16]) -> (u64, u32, u16, u16) {
    // Element by element, not a slice copy: `copy_from_slice` is an
    // out-of-line call here, once per descriptor.
    (
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
        u16::from_le_bytes([b[12], b[13]]),
        u16::from_le_bytes([b[14], b[15]]),
    )
}

impl Desc {
    /// A split ring's descriptor (virtio 1.x, 2.7.5).
    pub(super) fn parse(b: &[u8; 16]) -> Self {
        let (addr, len, flags, next) = desc_fields(b);
        Desc {
            addr,
            len,
            flags,
            next,
        }
    }
}

/// A used-ring element: the head of a chain (the buffer id of a packed
/// chain) and the bytes written to it, with the ring positions the chain
/// took (1 in a split ring, its descriptor count in a packed ring).
/// `complete` says that `len` is every writable byte of the chain (a
/// chain without writable bytes is complete at length 0): with
/// `VIRTIO_F_IN_ORDER` such an element may go unwritten, since the driver
/// takes a skipped buffer as used completely.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UsedElem {
    pub(crate) head: u16,
    pub(crate) len: u32,
    pub(crate) positions: u16,
    pub(crate) complete: bool,
}

impl UsedElem {
    /// The used element that returns `chain` with `len` bytes written.
    pub(crate) fn of(chain: &Chain, len: u32) -> Self {
        UsedElem {
            head: chain.head,
            len,
            positions: chain.positions,
            complete: u64::from(len) == chain.writable_len,
        }
    }

    /// `struct vring_used_elem` in a split ring: the head as a 32-bit id,
    /// then the length, both little-endian.
    pub(super) fn split_bytes(&self) -> [u8; USED_ELEM_SIZE as usize] {
        (u64::from(self.head) | u64::from(self.len) << 32).to_le_bytes()
    }
}

/// The ring positions `elems` took: what [`SplitRing::unpop`] (or the packed
/// ring's) must move back to put them all back.
#[inline]
pub(crate) fn positions(elems: &[UsedElem]) -> u32 {
    // A loop, not `Iterator::sum`, which stays an out-of-line fold.
    let mut total = 0u32;
    for elem in elems {
        // No overflow: a batch of a ring's chains is at most 32768
        // elements of fewer than 2^16 positions each, below 2^31.
        total = total.wrapping_add(u32::from(elem.positions));
    }
    total
}

/// One translated piece of a chain: in the owner's address space (`addr`),
/// and where it is in guest-physical memory (`gpa`), for the dirty log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Iov {
    pub(crate) gpa: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

/// The segments of a buffer from its byte `skip` on: the segment that byte
/// falls in shortened by what is skipped, the ones before it and empty ones
/// left out. TX reads a packet after the vhost header this way, RX writes a
/// header field.
pub(crate) struct SegmentsFrom<'a> {
    rest: core::slice::Iter<'a, Iov>,
    skip: u64,
}

/// See [`SegmentsFrom`].
pub(crate) fn segments_from(iov: &[Iov], skip: u64) -> SegmentsFrom<'_> {
    SegmentsFrom {
        rest: iov.iter(),
        skip,
    }
}

impl Iterator for SegmentsFrom<'_> {
    type Item = Iov;

    #[inline]
    fn next(&mut self) -> Option<Iov> {
        for seg in self.rest.by_ref() {
            if self.skip >= seg.len {
                self.skip -= seg.len;
                continue;
            }
            let skip = core::mem::take(&mut self.skip);
            // No overflow: `skip < seg.len`, and a translated segment's
            // addresses plus its length do not pass 2^64.
            return Some(Iov {
                gpa: seg.gpa + skip,
                addr: seg.addr + skip,
                len: seg.len - skip,
            });
        }
        None
    }
}

/// A chain taken from the avail ring.
///
/// `iov[..readable]` are the device-readable segments and
/// `iov[readable..readable + writable]` the device-writable ones, in chain
/// order. `positions` is how many ring
/// positions it took (1 in a split ring, its descriptors in a packed one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Chain {
    pub(crate) head: u16,
    pub(crate) positions: u16,
    /// Device-readable segments: `iov[..readable]`.
    pub(crate) readable: usize,
    /// Device-writable segments: `iov[readable..readable + writable]`.
    pub(crate) writable: usize,
    /// Bytes in the readable segments.
    pub(crate) readable_len: u64,
    /// Bytes in the writable segments.
    pub(crate) writable_len: u64,
}

/// An indirect table, checked once per chain: its descriptor count and,
/// when the whole table lies in one piece of owner memory (the usual
/// case), where, so that its entries are read without translating again.
pub(crate) struct IndirectTable {
    addr: u64,
    count: u64,
    /// The owner address of the whole table, if it is one piece.
    owner: Option<u64>,
}

impl IndirectTable {
    /// Checks the table of `len` bytes at guest address `addr`: a
    /// non-empty whole number of descriptors, at most [`MAX_SEGMENTS`], all
    /// of them translatable through `space` for reading. Like the C
    /// driver, the whole table is translated before any entry is read, so
    /// a table that is not all mapped is refused (or, through the device
    /// IOTLB, missed at its first unmapped byte) before any of its buffers
    /// are looked at.
    pub(crate) fn new<T: Translate + ?Sized>(space: &T, addr: u64, len: u32) -> Result<Self, Stop> {
        let len = u64::from(len);
        if len == 0 || len % DESC_SIZE != 0 || len / DESC_SIZE > MAX_SEGMENTS as u64 {
            return Err(VringError::BadIndirectLen.into());
        }
        let mut owner = None;
        let mut pieces = 0u32;
        space.for_each_piece(addr, len, Access::Read, |seg| -> Result<(), Stop> {
            owner.get_or_insert(seg.uaddr);
            pieces += 1;
            Ok(())
        })?;
        Ok(IndirectTable {
            addr,
            count: len / DESC_SIZE,
            owner: owner.filter(|_| pieces == 1),
        })
    }

    /// How many descriptors the table holds.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The 16 bytes of descriptor `i` (below [`IndirectTable::count`]).
    pub(crate) fn entry<M: UserMemory, T: Translate + ?Sized>(
        &self,
        mem: &M,
        space: &T,
        i: u64,
    ) -> Result<[u8; 16], Stop> {
        if i >= self.count {
            return Err(VringError::BadNext.into());
        }
        match self.owner {
            // Inside the one piece checked in `new`: `i * 16` is below the
            // table's length, and the piece's owner range does not wrap.
            Some(base) => mem
                .owner()
                .read_16(base + i * DESC_SIZE)
                .map_err(|_| Stop::Error(VringError::NotMapped)),
            None => read_indirect_bytes(mem, space, self.addr, i),
        }
    }
}

/// Reads the 16 bytes of descriptor `i` of an indirect table at guest
/// address `table` (through `space`), for a table that crosses memory
/// regions or IOTLB mappings. Both ring formats use 16-byte descriptors,
/// laid out differently.
fn read_indirect_bytes<M: UserMemory, T: Translate + ?Sized>(
    mem: &M,
    space: &T,
    table: u64,
    i: u64,
) -> Result<[u8; 16], Stop> {
    let at = i
        .checked_mul(DESC_SIZE)
        .and_then(|off| table.checked_add(off))
        .ok_or(VringError::NotMapped)?;
    let mut bytes = [0u8; 16];
    let mut off = 0usize;
    // Into a local buffer: a translation that fails midway leaves nothing
    // behind that anyone reads.
    space.for_each_piece(at, DESC_SIZE, Access::Read, |seg| -> Result<(), Stop> {
        // The pieces add up to the 16 bytes asked for; a translation that
        // gave more would be refused, not trusted.
        let end = usize::try_from(seg.len)
            .ok()
            .and_then(|n| off.checked_add(n))
            .ok_or(VringError::NotMapped)?;
        let piece = bytes.get_mut(off..end).ok_or(VringError::NotMapped)?;
        mem.owner()
            .read(seg.uaddr, piece)
            .map_err(|_| VringError::NotMapped)?;
        off = end;
        Ok(())
    })?;
    Ok(bytes)
}

/// Builds one chain from its descriptors, whatever the ring format: the
/// rules every buffer of a chain must follow are here, once.
///
/// # Invariants
///
/// `iov[..nseg]` holds the translated segments pushed so far, readable ones
/// before writable ones (none readable once `seen_in`). Until a push fails,
/// `total` is the sum of their lengths and at most [`MAX_CHAIN_LEN`].
pub(crate) struct ChainBuilder<'a, T: Translate + ?Sized> {
    space: &'a T,
    iov: &'a mut [Iov],
    chain: Chain,
    nseg: usize,
    total: u64,
    /// A writable descriptor was pushed (even an empty one).
    seen_in: bool,
}

impl<'a, T: Translate + ?Sized> ChainBuilder<'a, T> {
    /// An empty chain whose segments go to `iov`, its buffers translated
    /// through `space`.
    pub(crate) fn new(space: &'a T, iov: &'a mut [Iov]) -> Self {
        ChainBuilder {
            space,
            iov,
            chain: Chain::default(),
            nseg: 0,
            total: 0,
            seen_in: false,
        }
    }

    /// Adds the buffer of one descriptor: translated (for writing if it is
    /// writable), its length counted, and refused if it is readable after a
    /// writable one, overflows the chain's length, is not in guest memory
    /// (or not yet in the IOTLB, or not with that access), or does not fit
    /// the iov array. On error the chain is to be dropped. Inlined into
    /// the ring walks, which call it once per descriptor.
    #[inline(always)]
    pub(crate) fn push(&mut self, addr: u64, len: u32, writable: bool) -> Result<(), Stop> {
        if writable {
            self.seen_in = true;
        } else if self.seen_in {
            return Err(VringError::OutAfterIn.into());
        }
        let len = u64::from(len);
        self.total = self.total.checked_add(len).ok_or(VringError::LenOverflow)?;
        if self.total > MAX_CHAIN_LEN {
            return Err(VringError::LenOverflow.into());
        }
        // The buffer's last byte must exist; it may be the last of the
        // 64-bit space (the IOTLB can map it; a memory region cannot).
        if len > 0 {
            addr.checked_add(len - 1).ok_or(VringError::NotMapped)?;
        }
        let before = self.nseg;
        let (iov, nseg) = (&mut *self.iov, &mut self.nseg);
        let access = if writable {
            Access::Write
        } else {
            Access::Read
        };
        self.space
            .for_each_piece(addr, len, access, |seg| -> Result<(), Stop> {
                let slot = iov.get_mut(*nseg).ok_or(VringError::TooManySegments)?;
                *slot = Iov {
                    gpa: seg.gpa,
                    addr: seg.uaddr,
                    len: seg.len,
                };
                *nseg += 1;
                Ok(())
            })?;
        let added = self.nseg - before;
        if writable {
            self.chain.writable += added;
            self.chain.writable_len += len;
        } else {
            self.chain.readable += added;
            self.chain.readable_len += len;
        }
        Ok(())
    }

    /// The chain, returned to the ring as `head`, taking `positions` ring
    /// positions.
    pub(crate) fn finish(self, head: u16, positions: u16) -> Chain {
        Chain {
            head,
            positions,
            ..self.chain
        }
    }
}
