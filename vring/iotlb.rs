// SPDX-License-Identifier: GPL-2.0

//! The device IOTLB: I/O virtual to owner-virtual translation for guests
//! with a virtual IOMMU (`VIRTIO_F_ACCESS_PLATFORM`).
//!
//! With that feature acked, every address the guest gives (descriptors,
//! ring parts, buffers) is an I/O virtual address (IOVA). QEMU, which runs
//! the guest's IOMMU, sends the translations on demand: the device reports
//! a miss, QEMU answers with an update; it withdraws them with
//! invalidations. They travel as `struct vhost_msg`/`vhost_msg_v2` through
//! `read()` and `write()` on the vhost fd. This file holds the three parts
//! that are pure data, with the C driver's (`drivers/vhost/iotlb.c`,
//! `vhost.c`) semantics:
//!
//! - [`Iotlb`]: the table of mappings, each with its permissions, bounded:
//!   when full, an update retires the oldest mapping, as the C driver's
//!   `VHOST_IOTLB_FLAG_RETIRE` does, so userspace cannot grow it;
//! - [`parse_write`]/[`encode_miss`]: the message formats;
//! - [`Misses`]: the outstanding misses, one per queue at most, from the
//!   moment a worker posts one to the update that answers it.
//!
//! Like `mem_table.rs`, this file uses only `core`: the host test crate
//! (`tests/host`) compiles it for `cargo test` and cargo-fuzz. The storage
//! of the table is the caller's (a `KVec` in the module, a `Vec` on the
//! host), allocated once at its full size.

pub(crate) mod message;

pub(crate) use message::{
    encode_miss, parse_write, Message, Miss, Misses, FORMAT_V1, FORMAT_V2, MIN_WRITE,
    MSG_BATCH_BEGIN, MSG_BATCH_END, MSG_INVALIDATE, MSG_LEN, MSG_UPDATE,
};

use crate::vring::mem_table::{Access, Segment, Translate, TranslateError};
use crate::vring::{read_16_flags_first, Stop, UserMemory, VringError};
use core::cell::Cell;
use core::ops::DerefMut;

/// `VHOST_ACCESS_RO`: the device may read through the mapping.
pub(crate) const ACCESS_RO: u8 = 0x1;
/// `VHOST_ACCESS_WO`: the device may write through the mapping.
pub(crate) const ACCESS_WO: u8 = 0x2;

/// The `VHOST_ACCESS_*` bit of `access`, as mappings and miss messages
/// name it.
pub(crate) fn access_bits(access: Access) -> u8 {
    match access {
        Access::Read => ACCESS_RO,
        Access::Write => ACCESS_WO,
    }
}

/// One mapping of `[start, last]` (inclusive, as the C driver keeps them,
/// so that a mapping may end at 2^64 - 1).
///
/// # Invariants
///
/// `start <= last`, and `uaddr + (last - start)` does not overflow.
/// (`seq`, the mapping's place in the order of insertion, is the table's
/// to keep unique; see [`Iotlb`].)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mapping {
    start: u64,
    last: u64,
    uaddr: u64,
    perm: u8,
    seq: u64,
    /// The largest `last` of this mapping and of every mapping sorted
    /// before it, which makes the lookup a binary search although mappings
    /// may overlap (as in `mem_table.rs`).
    reach: u64,
}

// The accessors serve the host tests and fuzzers (tests/host), which check
// the table against a model; the module only translates through it.
#[cfg(any(test, feature = "fuzz"))]
impl Mapping {
    /// First IOVA.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// Last IOVA (inclusive).
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// Owner-virtual address of `start`.
    pub(crate) fn uaddr(&self) -> u64 {
        self.uaddr
    }

    /// `VHOST_ACCESS_*` bits.
    pub(crate) fn perm(&self) -> u8 {
        self.perm
    }
}

impl Mapping {
    fn contains(&self, iova: u64) -> bool {
        self.start <= iova && iova <= self.last
    }
}

/// Why an update was refused. The C driver reports every one of these as
/// `-EFAULT` to the writer; they are kept apart for the debug log and the
/// tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateError {
    /// `size` is 0 (the writer's framing error, `-EINVAL` in C), or
    /// `iova + size - 1` wraps around 2^64.
    BadRange,
    /// `uaddr + size` wraps around 2^64, or a readable or writable mapping
    /// reaches past the user address space (C's `umem_access_ok`).
    BadUserAddr,
    /// The table has no room at all (`max_iotlb_entries` of 0).
    NoCapacity,
    /// The table is below its capacity but its storage is full: the
    /// caller did not make room first ([`Iotlb::make_room`]).
    NoRoom,
}

/// The device IOTLB: at most `capacity` mappings, in a storage the caller
/// allocated at that size, or that grows as mappings arrive
/// ([`Iotlb::with_capacity`], [`Iotlb::make_room`]).
///
/// Mappings are kept sorted by `start`, and by insertion among equal
/// starts, so that a lookup finds what the C driver's interval tree finds:
/// of the mappings that hold an address, the one with the lowest start,
/// the oldest on a tie. Like C, overlapping mappings coexist (an update
/// never trims or replaces another), an invalidation removes every mapping
/// that overlaps its range, whole, and a full table retires its oldest
/// mapping to take a new one.
///
/// Lookups remember where they landed ([`Hit`]): a run of a worker
/// touches a few pages over and over (the avail ring, the descriptor
/// table, the used ring and the current buffer), which the C driver keeps
/// in its per-queue `meta_iotlb` cache.
///
/// # Invariants
///
/// `slots[..len]` are valid [`Mapping`]s, sorted by `(start, seq)`, each
/// with its `reach`; `len <= slots.len()` and `len <= capacity`; every
/// `seq` is below `next_seq`.
/// Every [`Hit`] in `hits` is empty or holds an index below `len` and a
/// range of addresses for which [`Iotlb::find`]'s search gives that
/// mapping.
pub(crate) struct Iotlb<S> {
    slots: S,
    len: usize,
    /// The most mappings the table holds: a full table retires its oldest.
    capacity: usize,
    next_seq: u64,
    /// The miss or refusal the last failed translation stopped at.
    last_fault: Cell<Option<TranslateError>>,
    /// Recent lookups, the most recent first.
    hits: [Cell<Hit>; HITS],
}

/// How many lookups [`Iotlb`] remembers: the four pages a run touches
/// most.
const HITS: usize = 4;

/// A lookup [`Iotlb`] remembers: every address in `[low, high]` finds the
/// mapping at `index`. Empty when `low > high`.
#[derive(Clone, Copy)]
struct Hit {
    low: u64,
    high: u64,
    index: usize,
}

impl Hit {
    const EMPTY: Hit = Hit {
        low: 1,
        high: 0,
        index: 0,
    };
}

impl<S: DerefMut<Target = [Mapping]>> Iotlb<S> {
    /// An empty table over `slots`, whose length is its capacity (the
    /// contents are overwritten): the host tests' tables.
    #[cfg(any(test, feature = "fuzz"))]
    pub(crate) fn new(slots: S) -> Self {
        let capacity = slots.len();
        Self::with_capacity(slots, capacity)
    }

    /// An empty table of at most `capacity` mappings over `slots`, which
    /// may be shorter (empty, even): the caller lengthens it when
    /// [`Iotlb::make_room`] asks, as mappings arrive, rather than
    /// allocating for the whole capacity up front (C allocates each
    /// mapping as it arrives).
    pub(crate) fn with_capacity(slots: S, capacity: usize) -> Self {
        // INVARIANT: no mapping yet.
        Iotlb {
            slots,
            len: 0,
            capacity,
            next_seq: 0,
            last_fault: Cell::new(None),
            hits: [const { Cell::new(Hit::EMPTY) }; HITS],
        }
    }

    /// The miss or refusal ([`TranslateError::Miss`] or
    /// [`TranslateError::Denied`], with its address) that the last failed
    /// translation stopped at: the ring parsers' errors do not carry it.
    pub(crate) fn last_fault(&self) -> Option<TranslateError> {
        self.last_fault.get()
    }

    /// The mappings, sorted by start.
    pub(crate) fn mappings(&self) -> &[Mapping] {
        &self.slots[..self.len]
    }

    /// How many mappings the table holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no mapping.
    #[cfg(any(test, feature = "fuzz"))]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every mapping.
    #[cfg(any(test, feature = "fuzz"))]
    pub(crate) fn clear(&mut self) {
        // INVARIANT: no mapping is left to be out of order, and no hit.
        self.len = 0;
        self.forget_hits();
    }

    /// `VHOST_IOTLB_UPDATE`: maps `[iova, iova + size)` to `uaddr` with the
    /// `VHOST_ACCESS_*` bits `perm`, retiring the oldest mapping if the
    /// table is full. `user_limit` is the first address past the user
    /// address space. The C driver stores `perm` as given: a mapping
    /// without permissions is taken, and refuses every access.
    pub(crate) fn update(
        &mut self,
        iova: u64,
        size: u64,
        uaddr: u64,
        perm: u8,
        user_limit: u64,
    ) -> Result<(), UpdateError> {
        if size == 0 {
            return Err(UpdateError::BadRange);
        }
        let span = size - 1;
        let last = iova.checked_add(span).ok_or(UpdateError::BadRange)?;
        // `uaddr + size` may be exactly 2^64, as in C's `vhost_overflow`.
        let ulast = uaddr.checked_add(span).ok_or(UpdateError::BadUserAddr)?;
        if perm & (ACCESS_RO | ACCESS_WO) != 0 && ulast >= user_limit {
            return Err(UpdateError::BadUserAddr);
        }
        if self.capacity == 0 {
            return Err(UpdateError::NoCapacity);
        }
        if self.len >= self.capacity {
            let oldest = self
                .mappings()
                .iter()
                .enumerate()
                .min_by_key(|(_, m)| m.seq)
                .map(|(i, _)| i);
            if let Some(index) = oldest {
                self.remove_at(index);
            }
        }
        if self.len >= self.slots.len() {
            return Err(UpdateError::NoRoom);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        // After every mapping that starts at or before `iova`: those with
        // an equal start are older.
        let at = self.mappings().partition_point(|m| m.start <= iova);
        self.slots.copy_within(at..self.len, at + 1);
        // INVARIANT: `start <= last` and `uaddr + span` were checked above;
        // the order is kept by the choice of `at`, `reach` by `fix_reach`.
        self.slots[at] = Mapping {
            start: iova,
            last,
            uaddr,
            perm,
            seq,
            reach: last,
        };
        self.len += 1;
        self.fix_reach(at);
        Ok(())
    }

    /// Makes room for one more mapping, so that the next
    /// [`Iotlb::update`] needs no memory: when the storage is full below
    /// the capacity, `grow` is called with the storage and the length it
    /// must reach (twice the mappings held, at least 16, at most the
    /// capacity), and must lengthen it to that or fail. A full table needs
    /// no room: an update retires its oldest mapping.
    pub(crate) fn make_room<E>(
        &mut self,
        grow: impl FnOnce(&mut S, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.len < self.slots.len() || self.len >= self.capacity {
            return Ok(());
        }
        let want = self.len.saturating_mul(2).clamp(16, self.capacity);
        grow(&mut self.slots, want)
    }

    /// `VHOST_IOTLB_INVALIDATE`: removes every mapping that overlaps
    /// `[iova, iova + size - 1]`, whole. As in C, the end wraps around
    /// 2^64 unchecked (the caller refuses a size of 0); returns how many
    /// mappings went.
    pub(crate) fn invalidate(&mut self, iova: u64, size: u64) -> usize {
        let last = iova.wrapping_add(size.wrapping_sub(1));
        let before = self.len;
        let mut kept = 0;
        for index in 0..self.len {
            let m = self.slots[index];
            if !(m.start <= last && iova <= m.last) {
                self.slots[kept] = m;
                kept += 1;
            }
        }
        // INVARIANT: the kept mappings stay in their order; `fix_reach`
        // recomputes every `reach`.
        self.len = kept;
        self.fix_reach(0);
        before - kept
    }

    fn remove_at(&mut self, index: usize) {
        // INVARIANT: the others keep their order; `fix_reach` recomputes
        // `reach` from the gap on.
        self.slots.copy_within(index + 1..self.len, index);
        self.len -= 1;
        self.fix_reach(index);
    }

    /// Recomputes `reach` from `from` on. Every change to the table ends
    /// here, so the remembered lookups go too.
    fn fix_reach(&mut self, from: usize) {
        // INVARIANT: no hit is left to name a moved or removed mapping.
        self.forget_hits();
        let mut reach = if from == 0 {
            0
        } else {
            self.slots[from - 1].reach
        };
        for m in &mut self.slots[from..self.len] {
            reach = core::cmp::max(reach, m.last);
            m.reach = reach;
        }
    }

    /// The mapping that translates `iova`: of those that hold it, the one
    /// with the lowest start, the oldest on a tie. That is the first
    /// mapping whose `reach` gets to `iova` (every mapping before it ends
    /// below `iova`), if it starts at or below `iova`.
    ///
    /// A recent lookup that covers `iova` answers first; a search that
    /// finds a mapping is remembered, the least recent one forgotten.
    pub(crate) fn find(&self, iova: u64) -> Option<&Mapping> {
        let mappings = self.mappings();
        for (at, cell) in self.hits.iter().enumerate() {
            let hit = cell.get();
            if hit.low <= iova && iova <= hit.high {
                self.remember(at, hit);
                // The index is below `len` (type invariant); `get` keeps
                // a broken invariant a miss, not a panic.
                return mappings.get(hit.index);
            }
        }
        let index = mappings.partition_point(|m| m.reach < iova);
        let mapping = mappings.get(index)?;
        if !mapping.contains(iova) {
            return None;
        }
        // The search gives this mapping for every address from `low` to
        // its last: every mapping before it reaches below `low`, and from
        // `iova` on its own `reach` covers its last. Below `iova`, one
        // before it may reach further down than `iova` but not to `low`.
        let low = match index.checked_sub(1).and_then(|before| mappings.get(before)) {
            Some(before) => core::cmp::max(mapping.start, before.reach.saturating_add(1)),
            None => mapping.start,
        };
        // INVARIANT: `index < len`, and the range is the one argued above.
        self.remember(
            HITS - 1,
            Hit {
                low,
                high: mapping.last,
                index,
            },
        );
        Some(mapping)
    }

    /// Puts `hit` first, moving the hits before position `from` one down
    /// (the one at `from` goes: `hit` itself, or the least recent).
    fn remember(&self, from: usize, hit: Hit) {
        for later in (1..=from).rev() {
            self.hits[later].set(self.hits[later - 1].get());
        }
        self.hits[0].set(hit);
    }

    /// Forgets the remembered lookups.
    fn forget_hits(&self) {
        for cell in &self.hits {
            cell.set(Hit::EMPTY);
        }
    }
}

/// The device IOTLB as the ring parsers see it. A segment's `gpa` is then
/// the I/O virtual address: a dirty log, which is kept by guest-physical
/// page, must map the owner address back through the memory table (as the
/// C driver's `log_write_hva` does).
impl<S: DerefMut<Target = [Mapping]>> Translate for Iotlb<S> {
    /// Translates `[iova, iova + len)` for `access`, calling `f` with each
    /// contiguous piece in order. Stops at the first address that has no
    /// mapping ([`TranslateError::Miss`], naming that address, as the C driver's
    /// miss message does) or whose mapping refuses `access`
    /// ([`TranslateError::Denied`]); `f` may then already have seen the first
    /// pieces. A range past 2^64 is [`TranslateError::NotMapped`].
    fn for_each_piece<E: From<TranslateError>>(
        &self,
        mut iova: u64,
        len: u64,
        access: Access,
        mut f: impl FnMut(Segment) -> Result<(), E>,
    ) -> Result<(), E> {
        // The last byte must exist: `iova + len` may be 2^64, not more.
        if len > 0 && iova.checked_add(len - 1).is_none() {
            return Err(TranslateError::NotMapped.into());
        }
        let mut left = len;
        while left > 0 {
            let Some(m) = self.find(iova) else {
                let fault = TranslateError::Miss { iova, access };
                self.last_fault.set(Some(fault));
                return Err(fault.into());
            };
            if m.perm & access_bits(access) == 0 {
                let fault = TranslateError::Denied { iova, access };
                self.last_fault.set(Some(fault));
                return Err(fault.into());
            }
            let offset = iova - m.start;
            // Bytes from `iova` to the mapping's end: at least 1, and at
            // most 2^64 - 1 unless the mapping covers all of it.
            let room = (m.last - iova).saturating_add(1);
            let n = core::cmp::min(left, room);
            // `uaddr + offset` is inside the mapping (type invariant).
            f(Segment {
                gpa: iova,
                uaddr: m.uaddr + offset,
                len: n,
            })?;
            left -= n;
            // Past the mapping's last byte; wraps only when nothing is left.
            iova = iova.wrapping_add(n);
        }
        Ok(())
    }
}

/// The owner's memory `M` seen through the address space `T` (the device
/// IOTLB): what the ring parsers read and write when the ring's own
/// addresses (descriptor table, avail and used rings) are I/O virtual
/// addresses. Every access is translated and checked for its direction
/// first; a 16-bit or 8-byte access must land in one mapping, since it has
/// to be single-copy atomic (the C driver refuses a "non atomic userspace
/// memory access" too).
pub(crate) struct Translated<'a, M, T: ?Sized> {
    mem: &'a M,
    space: &'a T,
}

impl<'a, M: UserMemory, T: Translate + ?Sized> Translated<'a, M, T> {
    /// The owner address of the 16 bytes at `addr`, if one mapping holds
    /// them all (nearly always, for a descriptor).
    fn one_piece_16(&self, addr: u64) -> Result<Option<u64>, Stop> {
        let mut uaddr = None;
        self.space
            .for_each_piece(addr, 16, Access::Read, |seg: Segment| {
                uaddr = (seg.len == 16).then_some(seg.uaddr);
                Ok::<(), Stop>(())
            })?;
        Ok(uaddr)
    }

    pub(crate) fn new(mem: &'a M, space: &'a T) -> Self {
        Translated { mem, space }
    }

    /// The owner address of `[addr, addr + len)`, which must be one piece.
    fn whole(&self, addr: u64, len: u64, access: Access) -> Result<u64, Stop> {
        let mut found = None;
        self.space
            .for_each_piece(addr, len, access, |seg: Segment| {
                if seg.len != len {
                    return Err(Stop::Error(VringError::NotMapped));
                }
                found = Some(seg.uaddr);
                Ok(())
            })?;
        found.ok_or(Stop::Error(VringError::NotMapped))
    }
}

impl<M: UserMemory, T: Translate + ?Sized> UserMemory for Translated<'_, M, T> {
    type Owner = M;

    fn owner(&self) -> &M {
        self.mem
    }

    fn read_u16(&self, addr: u64) -> Result<u16, Stop> {
        self.mem.read_u16(self.whole(addr, 2, Access::Read)?)
    }

    fn read_u32(&self, addr: u64) -> Result<u32, Stop> {
        self.mem.read_u32(self.whole(addr, 4, Access::Read)?)
    }

    fn write_u16(&self, addr: u64, val: u16) -> Result<(), Stop> {
        self.mem.write_u16(self.whole(addr, 2, Access::Write)?, val)
    }

    fn write_8(&self, addr: u64, bytes: [u8; 8]) -> Result<(), Stop> {
        self.mem.write_8(self.whole(addr, 8, Access::Write)?, bytes)
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Stop> {
        let mut done = 0usize;
        self.space
            .for_each_piece(addr, buf.len() as u64, Access::Read, |seg: Segment| {
                // The pieces add up to the length asked for; one that would
                // not is refused, not trusted.
                let end = usize::try_from(seg.len)
                    .ok()
                    .and_then(|n| done.checked_add(n))
                    .ok_or(VringError::NotMapped)?;
                self.mem.read(
                    seg.uaddr,
                    buf.get_mut(done..end).ok_or(VringError::NotMapped)?,
                )?;
                done = end;
                Ok(())
            })
    }

    fn read_16(&self, addr: u64) -> Result<[u8; 16], Stop> {
        // A descriptor in one mapping (nearly always) takes the fast read.
        match self.one_piece_16(addr)? {
            Some(uaddr) => self.mem.read_16(uaddr),
            None => {
                let mut bytes = [0u8; 16];
                self.read(addr, &mut bytes)?;
                Ok(bytes)
            }
        }
    }

    fn read_16_acquire(&self, addr: u64) -> Result<[u8; 16], Stop> {
        match self.one_piece_16(addr)? {
            Some(uaddr) => self.mem.read_16_acquire(uaddr),
            // Across mappings: the flags on their own first.
            None => read_16_flags_first(self, addr),
        }
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), Stop> {
        let mut done = 0usize;
        self.space
            .for_each_piece(addr, buf.len() as u64, Access::Write, |seg: Segment| {
                let end = usize::try_from(seg.len)
                    .ok()
                    .and_then(|n| done.checked_add(n))
                    .ok_or(VringError::NotMapped)?;
                self.mem
                    .write(seg.uaddr, buf.get(done..end).ok_or(VringError::NotMapped)?)?;
                done = end;
                Ok(())
            })
    }

    fn mb(&self) {
        self.mem.mb();
    }

    fn rmb(&self) {
        self.mem.rmb();
    }

    fn wmb(&self) {
        self.mem.wmb();
    }
}

/// Whether the device may use `[addr, addr + len)` for `access` as the
/// table stands: the C driver's `iotlb_access_ok`, which each run checks
/// for the ring parts before it touches them (`vq_meta_prefetch`), so that
/// a run never stops halfway through publishing used entries.
pub(crate) fn check_range<T: Translate + ?Sized>(
    space: &T,
    addr: u64,
    len: u64,
    access: Access,
) -> Result<(), TranslateError> {
    space.for_each_piece(addr, len, access, |_: Segment| Ok::<(), TranslateError>(()))
}
