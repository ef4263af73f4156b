// SPDX-License-Identifier: GPL-2.0

//! The split virtqueue (virtio 1.x, section 2.7), seen from the device side.
//!
//! Everything here reads memory that the guest writes, so nothing read is
//! trusted: every index is bounded by the ring size, every chain is bounded
//! in length, every address goes through the memory table, and every sum is
//! checked. A malformed ring yields a [`VringError`]; the caller signals the
//! vq's error eventfd and stops processing that ring.
//!
//! This file uses only `core`. Guest memory is reached through the
//! [`GuestMemory`] trait, implemented over the owner's address space in the
//! module (`uaccess.rs`) and over a plain buffer in the host tests, so the
//! same parser runs under `cargo test` and cargo-fuzz.
//!
//! Ring indices and flags are read and written with single-copy-atomic
//! 16-bit accesses ([`GuestMemory::read_u16`]/[`GuestMemory::write_u16`]),
//! ordered by the barriers the virtio spec requires.

use crate::dirtylog::{LogError, WriteLog};
use crate::memory::{Access, Translate, TranslateError};
use crate::staged::Staged;

/// `VRING_DESC_F_NEXT`.
pub(crate) const DESC_F_NEXT: u16 = 1;
/// `VRING_DESC_F_WRITE`: the device writes this buffer.
pub(crate) const DESC_F_WRITE: u16 = 2;
/// `VRING_DESC_F_INDIRECT`: the buffer holds a table of descriptors.
pub(crate) const DESC_F_INDIRECT: u16 = 4;
/// `VRING_USED_F_NO_NOTIFY`: the device asks not to be kicked.
pub(crate) const USED_F_NO_NOTIFY: u16 = 1;
/// `VRING_AVAIL_F_NO_INTERRUPT`: the driver asks not to be interrupted.
pub(crate) const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Size of one descriptor in the table.
pub(crate) const DESC_SIZE: u64 = 16;
/// Size of one used-ring element.
const USED_ELEM_SIZE: u64 = 8;
/// Used elements written in one user copy (256 bytes of stack).
const USED_CHUNK: usize = 32;
/// Avail-ring heads read ahead in one user copy (see [`AvailHeads`]).
const HEAD_AHEAD: usize = 16;

/// Largest ring: a split ring's `num` is a power of two that fits the
/// 16-bit indices, a packed ring's fits the 15 bits of a position.
pub(crate) const MAX_NUM: u32 = 32768;

/// Most segments one chain may have once translated (`UIO_MAXIOV`).
pub(crate) const MAX_SEGMENTS: usize = 1024;

/// Largest total length of one chain. Packets are at most 64 KiB plus a
/// header, so 4 GiB leaves no room for a 32-bit wrap anywhere downstream.
const MAX_CHAIN_LEN: u64 = u32::MAX as u64;

/// Why a ring was found malformed (or could not be accessed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VringError {
    /// An access to the owner's memory faulted.
    Fault,
    /// `avail->idx` moved more than `num` entries past `last_avail_idx`.
    AvailJump,
    /// A head index from the avail ring (a packed chain's buffer id) is
    /// `>= num`.
    BadHead,
    /// A `next` index is `>= num` (or past the end of an indirect table).
    BadNext,
    /// A chain longer than its table (a descriptor loop), or in a packed
    /// ring longer than the ring's free positions.
    Loop,
    /// An indirect descriptor inside an indirect table.
    NestedIndirect,
    /// An indirect table whose length is 0 or not a multiple of 16, or that
    /// is larger than the ring allows.
    BadIndirectLen,
    /// An indirect descriptor without `VIRTIO_RING_F_INDIRECT_DESC`, or with
    /// `NEXT` also set.
    IndirectNotAllowed,
    /// A device-readable descriptor after a device-writable one.
    OutAfterIn,
    /// The total length of a chain overflows.
    LenOverflow,
    /// A buffer address not covered by the memory table (or the IOTLB's
    /// range check).
    NotMapped,
    /// The device IOTLB has no mapping for an address yet: not the guest's
    /// error. Nothing was consumed; the queue waits until userspace maps
    /// it. The address is the IOTLB's `last_fault`: an error with fields
    /// made every parse step slower (about 35% per chain on the host),
    /// since every result carries it.
    IotlbMiss,
    /// The device IOTLB maps an address without the access the device
    /// needs (a writable buffer in a read-only mapping); see `IotlbMiss`
    /// for where the address is.
    AccessDenied,
    /// A chain that translates into more than [`MAX_SEGMENTS`] pieces.
    TooManySegments,
    /// A chain with the wrong kind of buffers for this queue (a TX chain
    /// with writable buffers, an RX chain with readable ones).
    WrongDirection,
    /// An RX chain with no writable bytes: it cannot hold any part of a
    /// packet, and must not be counted in `num_buffers`.
    EmptyRxBuffer,
    /// A TX chain shorter than the virtio-net header it must start with.
    ShortPacket,
    /// More used entries returned than chains were taken (a packed ring
    /// counts them; this is the device's own bug, never the guest's).
    BadUsed,
    /// The ring cannot run in its format as configured: a split ring's
    /// size that is not a power of two, a packed ring's base outside the
    /// ring or misaligned parts, a dirty log without room for the packed
    /// descriptor ring (userspace changed one setting after another was
    /// checked against it).
    BadLayout,
    /// Writing a packed ring's used descriptors faulted midway: what the
    /// driver sees of the batch is no longer known, so the ring stops.
    UsedWriteFailed,
}

impl From<TranslateError> for VringError {
    fn from(err: TranslateError) -> Self {
        match err {
            TranslateError::NotMapped => VringError::NotMapped,
            TranslateError::Miss { .. } => VringError::IotlbMiss,
            TranslateError::Denied { .. } => VringError::AccessDenied,
        }
    }
}

/// Access to the memory of the process that owns the rings.
///
/// Addresses are the owner's virtual addresses, or, for the ring's own
/// parts behind the device IOTLB, I/O virtual addresses that the memory
/// translates (`iotlb::Translated`). Implementations check them (the module
/// through the uaccess helpers, which refuse kernel addresses).
pub(crate) trait GuestMemory {
    /// The owner's memory itself, which the parsers read at addresses they
    /// translated already (an indirect table's).
    type Owner: GuestMemory;
    /// See [`GuestMemory::Owner`]: `self`, unless this memory translates.
    fn owner(&self) -> &Self::Owner;
    /// One single-copy-atomic 16-bit load of a little-endian value.
    fn read_u16(&self, addr: u64) -> Result<u16, VringError>;
    /// One single-copy-atomic 32-bit load of a little-endian value at a
    /// 4-byte-aligned `addr`: a packed ring's event suppression area
    /// (offset and flags) as one snapshot.
    fn read_u32(&self, addr: u64) -> Result<u32, VringError>;
    /// One single-copy-atomic 16-bit store of a little-endian value.
    fn write_u16(&self, addr: u64, val: u16) -> Result<(), VringError>;
    /// One single-copy-atomic store of the 8 bytes `bytes`, in that order,
    /// at an 8-byte-aligned `addr`: what a packed ring's used descriptor
    /// needs to appear whole, flags included.
    fn write_8(&self, addr: u64, bytes: [u8; 8]) -> Result<(), VringError>;
    /// The stores of `stores`, in order, each a [`GuestMemory::write_8`]
    /// at `area + offset`, every one inside the `area_len` bytes at `area`
    /// (the rest of a packed ring's used batch, inside its descriptor
    /// ring). This default makes them one by one; the owner's memory makes
    /// them in one user access.
    fn write_8_each(&self, area: u64, area_len: u64, stores: &[Store8]) -> Result<(), VringError> {
        for store in stores {
            let offset = u64::from(store.offset);
            if offset.checked_add(8).is_none_or(|end| end > area_len) {
                return Err(VringError::Fault);
            }
            self.write_8(area.checked_add(offset).ok_or(VringError::Fault)?, store.bytes)?;
        }
        Ok(())
    }
    /// Stores of `vals`, in order, at `addr`, `addr + spacing`, and so on,
    /// each a [`GuestMemory::write_8`] of the value's bytes in native order
    /// (a packed ring's used descriptors at adjacent positions). This
    /// default makes them one by one; the owner's memory makes them in one
    /// user access.
    fn write_8_spaced(&self, addr: u64, spacing: u64, vals: &[u64]) -> Result<(), VringError> {
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
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), VringError>;
    /// The 16 bytes at `addr` (a descriptor): [`GuestMemory::read`], unless
    /// the memory has a cheaper way for this one size.
    fn read_16(&self, addr: u64) -> Result<[u8; 16], VringError> {
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
    fn read_16_acquire(&self, addr: u64) -> Result<[u8; 16], VringError> {
        read_16_flags_first(self, addr)
    }
    /// Copies `buf` to `addr`.
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), VringError>;
    /// Full barrier (`smp_mb`).
    fn mb(&self);
    /// Read barrier (`smp_rmb`).
    fn rmb(&self);
    /// Write barrier (`smp_wmb`).
    fn wmb(&self);
}

/// One store of [`GuestMemory::write_8_each`]: `bytes` at byte `offset`
/// of its area. Laid out as the shim's `struct vnr_store8` (12 bytes, the
/// bytes at 4), which reads an array of them in place.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Store8 {
    pub(crate) offset: u32,
    pub(crate) bytes: [u8; 8],
}

/// [`GuestMemory::read_16_acquire`] in two reads: the flags on their own,
/// a read barrier, then all 16 bytes, the flags kept from the first read.
pub(crate) fn read_16_flags_first<M: GuestMemory + ?Sized>(mem: &M, addr: u64) -> Result<[u8; 16], VringError> {
    let flags = mem.read_u16(addr.checked_add(14).ok_or(VringError::Fault)?)?;
    mem.rmb();
    let mut bytes = mem.read_16(addr)?;
    bytes[14..].copy_from_slice(&flags.to_le_bytes());
    Ok(bytes)
}

/// One descriptor as the guest wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desc {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) flags: u16,
    pub(crate) next: u16,
}

impl Desc {
    fn parse(b: &[u8; 16]) -> Self {
        // Element by element, not a slice copy: `copy_from_slice` is an
        // out-of-line call here (scripts/profile --insns), once per
        // descriptor.
        Desc {
            addr: u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            len: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            flags: u16::from_le_bytes([b[12], b[13]]),
            next: u16::from_le_bytes([b[14], b[15]]),
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
        UsedElem { head: chain.head, len, positions: chain.positions, complete: u64::from(len) == chain.in_len }
    }

    /// `struct vring_used_elem` in a split ring: the head as a 32-bit id,
    /// then the length, both little-endian.
    fn split_bytes(&self) -> [u8; USED_ELEM_SIZE as usize] {
        (u64::from(self.head) | u64::from(self.len) << 32).to_le_bytes()
    }
}

/// The ring positions `elems` took: what [`Vring::unpop`] (or the packed
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
    SegmentsFrom { rest: iov.iter(), skip }
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
            return Some(Iov { gpa: seg.gpa + skip, addr: seg.addr + skip, len: seg.len - skip });
        }
        None
    }
}

/// A chain taken from the avail ring.
///
/// `iov[..out]` are the device-readable segments and `iov[out..out + inn]` the
/// device-writable ones, in chain order. `positions` is how many ring
/// positions it took (1 in a split ring, its descriptors in a packed one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Chain {
    pub(crate) head: u16,
    pub(crate) positions: u16,
    pub(crate) out: usize,
    pub(crate) inn: usize,
    pub(crate) out_len: u64,
    pub(crate) in_len: u64,
}

/// Negotiated features that change how the ring is parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingFeatures {
    pub(crate) event_idx: bool,
    pub(crate) indirect: bool,
    pub(crate) notify_on_empty: bool,
    /// `VIRTIO_F_IN_ORDER`: buffers are used in the order they were made
    /// available (this device always does), so a split ring may return a
    /// run of them with one used element.
    pub(crate) in_order: bool,
}

/// Avail-ring entries read ahead: the heads at avail positions
/// `at..at + len` (modulo 2^16), all below the `avail->idx` that was read
/// before them. The driver does not rewrite an entry it made available
/// until the device has used it, so these stay what the ring holds; one
/// user copy replaces a 16-bit load per chain (C reads each head on its
/// own, `vhost_get_avail_head`).
///
/// # Invariants
///
/// `len <= HEAD_AHEAD`. The window is replaced by every read of heads
/// from the ring, and `last_avail_idx` moves forward only through it (a
/// hit) or past its end (the next pop reads, replacing it), and backward
/// by less than a ring (`unpop`): so it never re-enters a window a lap of
/// the 16-bit indices after it was read.
#[derive(Clone, Copy, Debug, Default)]
struct AvailHeads {
    heads: [u16; HEAD_AHEAD],
    at: u16,
    len: u16,
}

impl AvailHeads {
    /// The head at avail position `idx`, if it was read ahead.
    #[inline(always)]
    fn get(&self, idx: u16) -> Option<u16> {
        let offset = idx.wrapping_sub(self.at);
        if offset < self.len {
            self.heads.get(usize::from(offset)).copied()
        } else {
            None
        }
    }
}

/// The device side of one split virtqueue.
///
/// # Invariants
///
/// `mask + 1` is a power of two in `1..=32768`; `desc`, `avail` and `used` are the
/// owner-virtual (or I/O virtual) addresses of the three ring parts, aligned
/// as the spec requires (checked by `VHOST_SET_VRING_ADDR`), each part
/// ending inside the 64-bit space, so that an offset inside a part added to
/// its start cannot overflow. `last_avail_idx` only moves past entries that
/// were parsed without error.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Vring {
    /// `num - 1`: ring positions are indices masked with it.
    mask: u16,
    desc: u64,
    avail: u64,
    used: u64,
    features: RingFeatures,
    /// Next avail entry the device will take.
    last_avail_idx: u16,
    /// The last `avail->idx` read from the guest.
    avail_idx: u16,
    /// Next used entry the device will fill.
    last_used_idx: u16,
    /// `used->idx` when the guest was last signalled (event-idx).
    signalled_used: u16,
    signalled_used_valid: bool,
    /// The used ring's guest-physical address, if its writes are logged
    /// (`VHOST_VRING_F_LOG`, `log_guest_addr`).
    used_log: Option<u64>,
    /// Heads from `last_avail_idx` on, read ahead of `pop`.
    ahead: AvailHeads,
}

/// Where a ring lives and where it resumes: what `Vring::new` needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingLayout {
    /// Entries: up to 32768 (a power of two for a split ring).
    pub(crate) num: u32,
    pub(crate) desc: u64,
    pub(crate) avail: u64,
    pub(crate) used: u64,
    /// The used ring's guest-physical address, if the device must log its
    /// writes to it (`VHOST_VRING_F_LOG`).
    pub(crate) used_log: Option<u64>,
}

impl RingLayout {
    /// Whether parts of the byte sizes `sizes` (descriptors, driver area,
    /// device area) at this layout's addresses end inside the 64-bit
    /// space. The parsers add offsets inside a part to its start; the
    /// owner checks the parts against its address space too, but I/O
    /// virtual addresses are checked only access by access.
    pub(crate) fn parts_fit(&self, sizes: (u64, u64, u64)) -> bool {
        parts_end_below((self.desc, self.avail, self.used), sizes, u64::MAX)
    }
}

/// Whether ring parts at `starts` of the byte sizes `sizes` (descriptors,
/// driver area, device area) each end at or below `limit`.
pub(crate) fn parts_end_below(starts: (u64, u64, u64), sizes: (u64, u64, u64), limit: u64) -> bool {
    let fits = |start: u64, size: u64| start.checked_add(size).is_some_and(|end| end <= limit);
    fits(starts.0, sizes.0) && fits(starts.1, sizes.1) && fits(starts.2, sizes.2)
}

impl Vring {
    /// A ring at `layout`, resuming at avail index `base`, with the guest's
    /// used index at `used_idx` (read when the backend was attached, as
    /// `vhost_vq_init_access` does). `None` unless `layout.num` is a power of
    /// two up to 32768 and the three parts end inside the 64-bit space.
    pub(crate) fn resume(
        layout: RingLayout,
        base: u16,
        used_idx: u16,
        features: RingFeatures,
    ) -> Option<Self> {
        let num = layout.num;
        if num == 0 || num > MAX_NUM || !num.is_power_of_two() || !layout.parts_fit(Self::sizes(num, true)) {
            return None;
        }
        let mask = (num - 1) as u16;
        Some(Vring {
            mask,
            desc: layout.desc,
            avail: layout.avail,
            used: layout.used,
            features,
            last_avail_idx: base,
            avail_idx: base,
            last_used_idx: used_idx,
            signalled_used: 0,
            signalled_used_valid: false,
            used_log: layout.used_log,
            ahead: AvailHeads::default(),
        })
    }

    /// Logs a write of `len` bytes at byte `offset` of the used ring, if its
    /// writes are logged, after the write itself is visible (C's
    /// `log_used`). As in C, a log that cannot be written does not stop
    /// the ring: the bitmap's room was checked when it was set, so only the
    /// owner unmapping it makes this fail, and the owner then reads no log.
    fn log_used<M: GuestMemory, L: WriteLog>(&self, mem: &M, log: &L, offset: u64, len: u64) -> Result<(), VringError> {
        let Some(used_gpa) = self.used_log else { return Ok(()) };
        mem.wmb();
        if let Some(gpa) = used_gpa.checked_add(offset) {
            let _unwritable: Result<(), LogError> = log.mark(gpa, len);
        }
        Ok(())
    }

    /// Next avail entry the device will take (what `GET_VRING_BASE` reports).
    pub(crate) fn last_avail_idx(&self) -> u16 {
        self.last_avail_idx
    }

    /// Next used entry the device will fill.
    pub(crate) fn last_used_idx(&self) -> u16 {
        self.last_used_idx
    }

    /// Changes the negotiated features of a running ring, as the C driver's
    /// `SET_FEATURES` does: the next access follows them. A changed
    /// notification scheme invalidates the event-idx state.
    pub(crate) fn set_features(&mut self, features: RingFeatures) {
        if features.event_idx != self.features.event_idx {
            self.signalled_used_valid = false;
        }
        self.features = features;
    }

    /// The guest address of `used->idx`, read to resume a ring.
    pub(crate) fn used_idx_addr_of(used: u64) -> u64 {
        used + 2
    }

    /// The guest address of `used->flags`.
    pub(crate) fn used_flags_addr_of(used: u64) -> u64 {
        used
    }

    /// The guest address of `avail->idx`.
    pub(crate) fn avail_idx_addr_of(avail: u64) -> u64 {
        avail + 2
    }

    fn num64(&self) -> u64 {
        u64::from(self.mask) + 1
    }

    /// Byte sizes of the three parts, for access checks at setup.
    pub(crate) fn sizes(num: u32, event_idx: bool) -> (u64, u64, u64) {
        let n = u64::from(num);
        let ev = if event_idx { 2 } else { 0 };
        (DESC_SIZE * n, 4 + 2 * n + ev, 4 + USED_ELEM_SIZE * n + ev)
    }

    #[inline]
    fn avail_flags_addr(&self) -> u64 {
        self.avail
    }
    #[inline]
    fn avail_idx_addr(&self) -> u64 {
        Self::avail_idx_addr_of(self.avail)
    }
    #[inline]
    fn avail_ring_addr(&self, i: u16) -> u64 {
        self.avail + 4 + 2 * u64::from(i & self.mask)
    }
    #[inline]
    fn used_event_addr(&self) -> u64 {
        self.avail + 4 + 2 * self.num64()
    }
    #[inline]
    fn used_flags_addr(&self) -> u64 {
        Self::used_flags_addr_of(self.used)
    }
    #[inline]
    fn used_idx_addr(&self) -> u64 {
        Self::used_idx_addr_of(self.used)
    }
    #[inline]
    fn used_elem_addr(&self, i: u16) -> u64 {
        self.used + 4 + USED_ELEM_SIZE * u64::from(i & self.mask)
    }
    #[inline]
    fn avail_event_addr(&self) -> u64 {
        self.used + 4 + USED_ELEM_SIZE * self.num64()
    }

    /// Reads `avail->idx` and checks it. Returns how many entries are
    /// available. A jump of more than `num` is a malformed ring.
    pub(crate) fn refresh_avail<M: GuestMemory>(&mut self, mem: &M) -> Result<u16, VringError> {
        let idx = mem.read_u16(self.avail_idx_addr())?;
        let pending = idx.wrapping_sub(self.last_avail_idx);
        if u64::from(pending) > self.num64() {
            return Err(VringError::AvailJump);
        }
        self.avail_idx = idx;
        Ok(pending)
    }

    /// Takes the next available chain, translating its buffers through
    /// `space` (the memory table or the device IOTLB) into `iov`. Returns
    /// `Ok(None)` when the ring is empty.
    ///
    /// On error nothing is consumed: `last_avail_idx` is unchanged.
    #[inline(always)]
    pub(crate) fn pop<M: GuestMemory, T: Translate + ?Sized>(
        &mut self,
        mem: &M,
        space: &T,
        iov: &mut [Iov],
    ) -> Result<Option<Chain>, VringError> {
        if self.avail_idx == self.last_avail_idx {
            if self.refresh_avail(mem)? == 0 {
                return Ok(None);
            }
        }
        let head = self.avail_head(mem)?;
        if head > self.mask {
            return Err(VringError::BadHead);
        }
        let chain = self.walk(mem, space, head, iov)?;
        self.last_avail_idx = self.last_avail_idx.wrapping_add(1);
        Ok(Some(chain))
    }

    /// The head at avail position `last_avail_idx`, which `avail_idx`
    /// covers: read ahead earlier, or now with the ones after it, up to
    /// [`HEAD_AHEAD`], the last one `avail_idx` covers, and the end of the
    /// ring.
    #[inline(always)]
    fn avail_head<M: GuestMemory>(&mut self, mem: &M) -> Result<u16, VringError> {
        match self.ahead.get(self.last_avail_idx) {
            Some(head) => Ok(head),
            None => self.read_heads(mem),
        }
    }

    /// [`Vring::avail_head`] past the heads read ahead: reads the head at
    /// `last_avail_idx` and the ones after it. Out of line, so that the
    /// usual case, a head read ahead, stays a few inlined instructions.
    #[inline(never)]
    fn read_heads<M: GuestMemory>(&mut self, mem: &M) -> Result<u16, VringError> {
        let pending = usize::from(self.avail_idx.wrapping_sub(self.last_avail_idx));
        let to_end = self.num64() - u64::from(self.last_avail_idx & self.mask);
        let count = pending.min(HEAD_AHEAD).min(to_end as usize);
        // Read the ring entries only after seeing the index that covers
        // them.
        mem.rmb();
        let addr = self.avail_ring_addr(self.last_avail_idx);
        if count <= 1 {
            // Kept as a window of one: every read replaces the window, so
            // `last_avail_idx` never travels 2^16 positions past an old
            // window and lands in it again (which would hand out a head
            // read a lap of the indices ago).
            let head = mem.read_u16(addr)?;
            let mut heads = [0u16; HEAD_AHEAD];
            heads[0] = head;
            // INVARIANT: `1 <= HEAD_AHEAD`.
            self.ahead = AvailHeads { heads, at: self.last_avail_idx, len: 1 };
            return Ok(head);
        }
        let mut bytes = [0u8; 2 * HEAD_AHEAD];
        let bytes = bytes.get_mut(..2 * count).ok_or(VringError::Fault)?;
        mem.read(addr, bytes)?;
        let mut heads = [0u16; HEAD_AHEAD];
        for (k, head) in heads.iter_mut().enumerate().take(count) {
            *head = u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]]);
        }
        // INVARIANT: `count <= HEAD_AHEAD`.
        self.ahead = AvailHeads { heads, at: self.last_avail_idx, len: count as u16 };
        Ok(heads[0])
    }

    /// Puts the last popped chains back (for example when the backend could
    /// not take the packet yet): `positions` is their number, one position
    /// per split chain (see [`positions`]).
    pub(crate) fn unpop(&mut self, positions: u32) {
        // Modulo 2^16, as the indices are.
        self.last_avail_idx = self.last_avail_idx.wrapping_sub(positions as u16);
    }

    fn read_desc<M: GuestMemory>(&self, mem: &M, addr: u64) -> Result<Desc, VringError> {
        Ok(Desc::parse(&mem.read_16(addr)?))
    }

    /// Walks the chain starting at `head`, following `next` links and at most
    /// one level of indirection.
    #[inline(always)]
    fn walk<M: GuestMemory, T: Translate + ?Sized>(
        &self,
        mem: &M,
        space: &T,
        head: u16,
        iov: &mut [Iov],
    ) -> Result<Chain, VringError> {
        let mut builder = ChainBuilder::new(space, iov);
        let mut i = head;
        // A chain can visit each descriptor of the table at most once.
        let mut budget = self.num64();
        loop {
            if budget == 0 {
                return Err(VringError::Loop);
            }
            budget -= 1;
            let d = self.read_desc(mem, self.desc + DESC_SIZE * u64::from(i))?;
            if d.flags & DESC_F_INDIRECT != 0 {
                if !self.features.indirect || d.flags & DESC_F_NEXT != 0 {
                    return Err(VringError::IndirectNotAllowed);
                }
                let table = IndirectTable::new(space, d.addr, d.len)?;
                let count = table.count();
                let mut j: u64 = 0;
                let mut ibudget = count;
                loop {
                    if ibudget == 0 {
                        return Err(VringError::Loop);
                    }
                    ibudget -= 1;
                    let id = Desc::parse(&table.entry(mem, space, j)?);
                    if id.flags & DESC_F_INDIRECT != 0 {
                        return Err(VringError::NestedIndirect);
                    }
                    builder.push(id.addr, id.len, id.flags & DESC_F_WRITE != 0)?;
                    if id.flags & DESC_F_NEXT == 0 {
                        break;
                    }
                    j = u64::from(id.next);
                    if j >= count {
                        return Err(VringError::BadNext);
                    }
                }
                break;
            }
            builder.push(d.addr, d.len, d.flags & DESC_F_WRITE != 0)?;
            if d.flags & DESC_F_NEXT == 0 {
                break;
            }
            if d.next > self.mask {
                return Err(VringError::BadNext);
            }
            i = d.next;
        }
        Ok(builder.finish(head, 1))
    }

    /// Adds used elements for `heads` and publishes them with one
    /// `used->idx` store.
    pub(crate) fn add_used<M: GuestMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        heads: &[UsedElem],
    ) -> Result<(), VringError> {
        let idx = if self.features.in_order {
            self.write_used_in_order(mem, log, heads)?
        } else {
            self.write_used(mem, log, heads)?
        };
        // The elements must be visible before the index that exposes them.
        mem.wmb();
        mem.write_u16(self.used_idx_addr(), idx)?;
        self.log_used(mem, log, self.used_idx_addr() - self.used, 2)?;
        let old = self.last_used_idx;
        self.last_used_idx = idx;
        // If the guest's used_event fell inside the skipped range, the
        // event-idx check below must see it; an index wrap invalidates it.
        if self.signalled_used_valid && idx.wrapping_sub(self.signalled_used) < idx.wrapping_sub(old) {
            self.signalled_used_valid = false;
        }
        Ok(())
    }

    /// Writes one used element per chain in `heads` from `last_used_idx`
    /// on; returns the used index that publishes them.
    fn write_used<M: GuestMemory, L: WriteLog>(&self, mem: &M, log: &L, heads: &[UsedElem]) -> Result<u16, VringError> {
        // Elements adjacent in the ring go out in one copy, up to
        // USED_CHUNK at a time: one user access per batch instead of one
        // per packet, as C's __vhost_add_used_n does.
        let mut idx = self.last_used_idx;
        let mut rest = heads;
        let mut staged = Staged::<[u8; USED_ELEM_SIZE as usize], USED_CHUNK>::new();
        while !rest.is_empty() {
            let to_end = self.num64() - u64::from(idx & self.mask);
            let n = rest.len().min(USED_CHUNK).min(to_end as usize);
            // Whole elements, not slice copies into a byte buffer (an
            // out-of-line call per element).
            let elems = staged.fill(rest[..n].iter().map(UsedElem::split_bytes));
            mem.write(self.used_elem_addr(idx), elems.as_flattened())?;
            self.log_used(mem, log, self.used_elem_addr(idx) - self.used, n as u64 * USED_ELEM_SIZE)?;
            idx = idx.wrapping_add(n as u16);
            rest = &rest[n..];
        }
        Ok(idx)
    }

    /// With `VIRTIO_F_IN_ORDER` (virtio 2.7.9, "In-order use of
    /// descriptors"): one used element per run of chains, written at the
    /// slot of the run's first chain and naming the run's last one; the used
    /// index still counts every chain. A run ends at a chain that is not
    /// complete, since the driver must learn its length, and at the end of
    /// `heads`; the driver takes the chains skipped over as used completely.
    /// A TX batch is then one element and RX packets one each (a packet
    /// that fills its last buffer exactly runs on into the next one's
    /// element). Returns the used index that publishes them.
    fn write_used_in_order<M: GuestMemory, L: WriteLog>(
        &self,
        mem: &M,
        log: &L,
        heads: &[UsedElem],
    ) -> Result<u16, VringError> {
        let mut idx = self.last_used_idx;
        let mut run_start = idx;
        for (at, elem) in heads.iter().enumerate() {
            idx = idx.wrapping_add(1);
            if elem.complete && at + 1 < heads.len() {
                continue;
            }
            let addr = self.used_elem_addr(run_start);
            mem.write(addr, &elem.split_bytes())?;
            self.log_used(mem, log, addr - self.used, USED_ELEM_SIZE)?;
            run_start = idx;
        }
        Ok(idx)
    }

    /// Whether the guest wants an interrupt for what was just added, following
    /// `VRING_AVAIL_F_NO_INTERRUPT` or, with event-idx, `used_event`.
    pub(crate) fn should_notify<M: GuestMemory>(&mut self, mem: &M) -> Result<bool, VringError> {
        // The used index store must be visible before reading the guest's
        // suppression state (virtio 2.7.10).
        mem.mb();
        if self.features.notify_on_empty && self.avail_idx == self.last_avail_idx {
            return Ok(true);
        }
        if !self.features.event_idx {
            let flags = mem.read_u16(self.avail_flags_addr())?;
            return Ok(flags & AVAIL_F_NO_INTERRUPT == 0);
        }
        let old = self.signalled_used;
        let valid = self.signalled_used_valid;
        let new = self.last_used_idx;
        self.signalled_used = new;
        self.signalled_used_valid = true;
        if !valid {
            return Ok(true);
        }
        let event = mem.read_u16(self.used_event_addr())?;
        Ok(need_event(event, new, old))
    }

    /// Asks the guest to kick again (clears `NO_NOTIFY`, or publishes
    /// `avail_event`). Returns true if `avail->idx` moved since it was last
    /// read, in which case the caller must keep processing, and must charge
    /// that retry to its weight: a guest that keeps moving `avail->idx` must
    /// not keep the device looping. Entries seen before (and put back with
    /// [`Vring::unpop`] because a packet needed more) do not count: the
    /// device waits for the guest to add buffers, rather than spin on the
    /// ones that were not enough. The index read is checked and cached
    /// like any other.
    pub(crate) fn enable_notify<M: GuestMemory, L: WriteLog>(&mut self, mem: &M, log: &L) -> Result<bool, VringError> {
        if self.features.event_idx {
            mem.write_u16(self.avail_event_addr(), self.avail_idx)?;
            self.log_used(mem, log, self.avail_event_addr() - self.used, 2)?;
        } else {
            mem.write_u16(self.used_flags_addr(), 0)?;
            self.log_used(mem, log, 0, 2)?;
        }
        // The store above must be visible before we look at avail->idx, or a
        // kick could be lost.
        mem.mb();
        let seen = self.avail_idx;
        self.refresh_avail(mem)?;
        Ok(self.avail_idx != seen)
    }

    /// Asks the guest not to kick while the device is polling the ring.
    pub(crate) fn disable_notify<M: GuestMemory, L: WriteLog>(&mut self, mem: &M, log: &L) -> Result<(), VringError> {
        if !self.features.event_idx {
            mem.write_u16(self.used_flags_addr(), USED_F_NO_NOTIFY)?;
            self.log_used(mem, log, 0, 2)?;
        }
        Ok(())
    }
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
    pub(crate) fn new<T: Translate + ?Sized>(space: &T, addr: u64, len: u32) -> Result<Self, VringError> {
        let len = u64::from(len);
        if len == 0 || len % DESC_SIZE != 0 || len / DESC_SIZE > MAX_SEGMENTS as u64 {
            return Err(VringError::BadIndirectLen);
        }
        let mut owner = None;
        let mut pieces = 0u32;
        space.for_each_piece(addr, len, Access::Read, |seg| -> Result<(), VringError> {
            owner.get_or_insert(seg.uaddr);
            pieces += 1;
            Ok(())
        })?;
        Ok(IndirectTable { addr, count: len / DESC_SIZE, owner: owner.filter(|_| pieces == 1) })
    }

    /// How many descriptors the table holds.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The 16 bytes of descriptor `i` (below [`IndirectTable::count`]).
    pub(crate) fn entry<M: GuestMemory, T: Translate + ?Sized>(
        &self,
        mem: &M,
        space: &T,
        i: u64,
    ) -> Result<[u8; 16], VringError> {
        if i >= self.count {
            return Err(VringError::BadNext);
        }
        match self.owner {
            // Inside the one piece checked in `new`: `i * 16` is below the
            // table's length, and the piece's owner range does not wrap.
            Some(base) => mem.owner().read_16(base + i * DESC_SIZE).map_err(|_| VringError::NotMapped),
            None => read_indirect_bytes(mem, space, self.addr, i),
        }
    }
}

/// Reads the 16 bytes of descriptor `i` of an indirect table at guest
/// address `table` (through `space`), for a table that crosses memory
/// regions or IOTLB mappings. Both ring formats use 16-byte descriptors,
/// laid out differently.
fn read_indirect_bytes<M: GuestMemory, T: Translate + ?Sized>(
    mem: &M,
    space: &T,
    table: u64,
    i: u64,
) -> Result<[u8; 16], VringError> {
    let at = i.checked_mul(DESC_SIZE).and_then(|off| table.checked_add(off)).ok_or(VringError::NotMapped)?;
    let mut bytes = [0u8; 16];
    let mut off = 0usize;
    // Into a local buffer: a translation that fails midway leaves nothing
    // behind that anyone reads.
    space.for_each_piece(at, DESC_SIZE, Access::Read, |seg| -> Result<(), VringError> {
        // The pieces add up to the 16 bytes asked for; a translation that
        // gave more would be refused, not trusted.
        let end = usize::try_from(seg.len).ok().and_then(|n| off.checked_add(n)).ok_or(VringError::NotMapped)?;
        let piece = bytes.get_mut(off..end).ok_or(VringError::NotMapped)?;
        mem.owner().read(seg.uaddr, piece).map_err(|_| VringError::NotMapped)?;
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
        ChainBuilder { space, iov, chain: Chain::default(), nseg: 0, total: 0, seen_in: false }
    }

    /// Adds the buffer of one descriptor: translated (for writing if it is
    /// writable), its length counted, and refused if it is readable after a
    /// writable one, overflows the chain's length, is not in guest memory
    /// (or not yet in the IOTLB, or not with that access), or does not fit
    /// the iov array. On error the chain is to be dropped. Inlined into
    /// the ring walks: a call per descriptor cost about 20 instructions
    /// (`scripts/profile --insns`).
    #[inline(always)]
    pub(crate) fn push(&mut self, addr: u64, len: u32, writable: bool) -> Result<(), VringError> {
        if writable {
            self.seen_in = true;
        } else if self.seen_in {
            return Err(VringError::OutAfterIn);
        }
        let len = u64::from(len);
        self.total = self.total.checked_add(len).ok_or(VringError::LenOverflow)?;
        if self.total > MAX_CHAIN_LEN {
            return Err(VringError::LenOverflow);
        }
        // The buffer's last byte must exist; it may be the last of the
        // 64-bit space (the IOTLB can map it; a memory region cannot).
        if len > 0 {
            addr.checked_add(len - 1).ok_or(VringError::NotMapped)?;
        }
        let before = self.nseg;
        let (iov, nseg) = (&mut *self.iov, &mut self.nseg);
        let access = if writable { Access::Write } else { Access::Read };
        self.space.for_each_piece(addr, len, access, |seg| -> Result<(), VringError> {
            let slot = iov.get_mut(*nseg).ok_or(VringError::TooManySegments)?;
            *slot = Iov { gpa: seg.gpa, addr: seg.uaddr, len: seg.len };
            *nseg += 1;
            Ok(())
        })?;
        let added = self.nseg - before;
        if writable {
            self.chain.inn += added;
            self.chain.in_len += len;
        } else {
            self.chain.out += added;
            self.chain.out_len += len;
        }
        Ok(())
    }

    /// The chain, returned to the ring as `head`, taking `positions` ring
    /// positions.
    pub(crate) fn finish(self, head: u16, positions: u16) -> Chain {
        Chain { head, positions, ..self.chain }
    }
}

/// `vring_need_event`: whether `event` lies in `(old, new]`, modulo 2^16.
pub(crate) fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}
