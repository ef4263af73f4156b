// SPDX-License-Identifier: GPL-2.0

//! The packed virtqueue (virtio 1.x, section 2.8), seen from the device side.
//!
//! One descriptor ring carries both directions: the driver makes a
//! descriptor available by writing its flags with `AVAIL` equal to its wrap
//! counter and `USED` the opposite, and the device returns a buffer by
//! writing a used descriptor (buffer id, length, `AVAIL` = `USED` = the
//! device's wrap counter) at its next used position, then skipping the
//! positions of the rest of the chain. Two 4-byte event suppression areas,
//! one written by each side, replace the split ring's flags and event
//! indices.
//!
//! The same rules for untrusted input as [`crate::vring`]: every index is
//! bounded by the ring size, a chain by the free part of the ring, every
//! buffer goes through the memory table and [`ChainBuilder`], and a
//! malformed ring yields a [`VringError`] with nothing consumed. Like the
//! rest of the ring layer, this file uses only `core` and is tested and
//! fuzzed on the host (`tests/host`).
//!
//! Flags are read with single-copy-atomic 16-bit accesses: the device reads
//! a descriptor's flags, then (after a read barrier) the rest of it. It
//! writes a used descriptor's length, id and flags in one single-copy-atomic
//! 8-byte store, so the id and length can never be seen behind the flags
//! (section 2.8.21), and its event flags with 16-bit stores. The driver's
//! event area it reads whole, in one single-copy-atomic 32-bit load.

mod used;

use crate::vring::chain::desc_fields;
use crate::vring::dirty_log::{LogError, WriteLog};
use crate::vring::mem_table::Translate;
use crate::vring::staged::Staged;
use crate::vring::{
    positions, Chain, ChainBuilder, Features, IndirectTable, Iov, RingLayout, Stop, Store8,
    UsedElem, UserMemory, VringError, DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_WRITE, DESC_SIZE,
    MAX_NUM,
};

/// `VRING_PACKED_DESC_F_AVAIL`.
pub(crate) const DESC_F_AVAIL: u16 = 1 << 7;
/// `VRING_PACKED_DESC_F_USED`.
pub(crate) const DESC_F_USED: u16 = 1 << 15;
/// `VRING_PACKED_EVENT_FLAG_ENABLE`: notify on every buffer.
pub(crate) const EVENT_FLAG_ENABLE: u16 = 0;
/// `VRING_PACKED_EVENT_FLAG_DISABLE`: do not notify.
pub(crate) const EVENT_FLAG_DISABLE: u16 = 1;
/// `VRING_PACKED_EVENT_FLAG_DESC`: notify at one position (event-idx).
pub(crate) const EVENT_FLAG_DESC: u16 = 2;
/// The wrap counter's bit in an event's `off_wrap` and in each half of the
/// packed `VHOST_*_VRING_BASE` value (`VRING_PACKED_EVENT_F_WRAP_CTR`).
const WRAP_BIT: u16 = 1 << 15;

/// Byte offsets inside a packed descriptor (`struct vring_packed_desc`).
const DESC_LEN_OFFSET: u64 = 8;
const DESC_FLAGS_OFFSET: u64 = 14;
/// Used descriptors after a batch's first written in one user access
/// ([`UserMemory::write_8_each`], or [`UserMemory::write_8_spaced`],
/// whose runs also end at the ring's end).
const USED_STORES: usize = 32;
/// Byte offsets inside an event suppression area
/// (`struct vring_packed_desc_event`).
const EVENT_OFF_WRAP_OFFSET: u64 = 0;
const EVENT_FLAGS_OFFSET: u64 = 2;
/// Size of an event suppression area.
pub(crate) const EVENT_SIZE: u64 = 4;
/// Alignment of the descriptor ring and of the event areas (2.8.10).
const DESC_ALIGN: u64 = 16;
const EVENT_ALIGN: u64 = 4;

/// One packed descriptor as the guest wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PackedDesc {
    addr: u64,
    len: u32,
    id: u16,
    flags: u16,
}

impl PackedDesc {
    /// A packed ring's descriptor (virtio 1.x, 2.8.13).
    fn parse(b: &[u8; 16]) -> Self {
        let (addr, len, id, flags) = desc_fields(b);
        PackedDesc {
            addr,
            len,
            id,
            flags,
        }
    }

    fn writable(&self) -> bool {
        self.flags & DESC_F_WRITE != 0
    }
}

/// Whether descriptor flags `flags` mark it available in the lap whose
/// wrap counter is `wrap`.
#[inline]
fn is_avail(flags: u16, wrap: bool) -> bool {
    // AVAIL equal to the wrap counter and USED its inverse: of the two
    // bits, exactly the one the lap calls for.
    let want = if wrap { DESC_F_AVAIL } else { DESC_F_USED };
    flags & (DESC_F_AVAIL | DESC_F_USED) == want
}

/// The last 8 bytes of a used descriptor (length, id, flags) returning
/// `elem` in the lap `wrap`: what [`UserMemory::write_8`] stores.
fn used_entry(elem: &UsedElem, wrap: bool) -> [u8; 8] {
    LapFlags::of(wrap).entry(elem).to_ne_bytes()
}

/// Where a used descriptor's flags go in the 8 bytes [`used_entry`] makes
/// (length, id, flags, little-endian).
const USED_FLAGS_SHIFT: u32 = 48;

/// The flags of the used descriptors written in one lap, `AVAIL` and
/// `USED` equal to its wrap counter, placed at [`USED_FLAGS_SHIFT`]: made
/// once per run of a batch, not per descriptor.
#[derive(Clone, Copy)]
struct LapFlags(u64);

impl LapFlags {
    fn of(wrap: bool) -> Self {
        let lap = if wrap { DESC_F_AVAIL | DESC_F_USED } else { 0 };
        LapFlags(u64::from(lap) << USED_FLAGS_SHIFT)
    }

    /// [`used_entry`] as the value whose native bytes it is: what
    /// [`UserMemory::write_8_spaced`] stores. `WRITE` is set if the device
    /// wrote `len > 0` bytes: a used descriptor's length means something
    /// only with it (section 2.8.5). Its bit comes from the comparison,
    /// without a branch.
    fn entry(self, elem: &UsedElem) -> u64 {
        let write = u64::from(elem.len != 0) * (u64::from(DESC_F_WRITE) << USED_FLAGS_SHIFT);
        (u64::from(elem.len) | u64::from(elem.head) << 32 | self.0 | write).to_le()
    }
}

/// A position in the ring: an index and the wrap counter of its lap.
///
/// # Invariants
///
/// `index` is below the ring's `num` (which is at most 32768, so the index
/// fits the 15 bits the encodings give it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    index: u16,
    wrap: bool,
}

impl Position {
    /// The position encoded as `off_wrap` encodes it (and each half of
    /// the packed ring base): the index in bits 0-14, the wrap counter in
    /// bit 15. `None` if the index is outside a ring of `num`.
    fn decode(bits: u16, num: u16) -> Option<Self> {
        let index = bits & !WRAP_BIT;
        (index < num).then_some(Position {
            index,
            wrap: bits & WRAP_BIT != 0,
        })
    }

    fn encode(self) -> u16 {
        self.index | if self.wrap { WRAP_BIT } else { 0 }
    }

    /// `n` positions further on, in a ring of `num`, with `n <= num`.
    fn advance(self, n: u16, num: u16) -> Self {
        // Below 2 * 32768: no overflow in u32.
        let sum = u32::from(self.index) + u32::from(n);
        if sum >= u32::from(num) {
            Position {
                index: (sum - u32::from(num)) as u16,
                wrap: !self.wrap,
            }
        } else {
            Position {
                index: sum as u16,
                wrap: self.wrap,
            }
        }
    }

    /// How many positions `self` is ahead of `from`, in a ring of `num`:
    /// `None` if more than one lap (the two cannot both be right).
    fn distance_from(self, from: Position, num: u16) -> Option<u16> {
        let (index, from_index) = (u32::from(self.index), u32::from(from.index));
        let ahead = if self.wrap == from.wrap {
            index.checked_sub(from_index)?
        } else {
            index + u32::from(num) - from_index
        };
        u16::try_from(ahead).ok().filter(|&ahead| ahead <= num)
    }

    /// `n` positions back, in a ring of `num`, with `n <= num`.
    fn back(self, n: u16, num: u16) -> Self {
        if n <= self.index {
            Position {
                index: self.index - n,
                wrap: self.wrap,
            }
        } else {
            Position {
                index: self.index + num - n,
                wrap: !self.wrap,
            }
        }
    }
}

/// The packed encoding of `VHOST_SET/GET_VRING_BASE` (QEMU's and
/// vhost-vdpa's): the next avail position in bits 0-15, the next used
/// position in bits 16-31, each as `off_wrap` encodes a position.
pub(crate) const FRESH_BASE: u32 = (WRAP_BIT as u32) << 16 | WRAP_BIT as u32;

/// The device side of one packed virtqueue.
///
/// # Invariants
///
/// `num` is in `1..=32768` (a packed ring need not be a power of two);
/// `desc`, `driver` and `device` are the owner-virtual addresses of the
/// descriptor ring and the driver and device event areas (or their I/O
/// virtual addresses), aligned as section 2.8.10 requires (16, 4, 4), each
/// ending inside the 64-bit space. Positions are inside the ring.
/// `in_flight + seen_ahead <= num`: chains popped and not yet used, and
/// positions the device saw available and put back, never cover more than
/// the ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedRing {
    num: u16,
    desc: u64,
    driver: u64,
    device: u64,
    features: Features,
    /// Where the next available chain starts.
    next_avail: Position,
    /// Where the next used descriptor goes.
    next_used: Position,
    /// Positions of chains popped and not yet returned.
    in_flight: u16,
    /// Positions past `next_avail` that were seen available and put back
    /// ([`PackedRing::unpop`]): a kick for them is not news.
    seen_ahead: u16,
    /// Positions used since [`PackedRing::should_notify`] last looked.
    unsignalled: u32,
    /// `should_notify` has looked at least once since the event-idx state
    /// was last reset, so `unsignalled` counts from its last look.
    signalled_valid: bool,
    /// The descriptor ring's guest-physical address, if its writes are
    /// logged.
    desc_log: Option<u64>,
    /// The device event area's guest-physical address, if its writes are
    /// logged (`log_guest_addr`, as QEMU gives it for a packed ring).
    device_log: Option<u64>,
    /// The device event flags this ring last wrote, `None` before it wrote
    /// any (the area is the guest's memory: it starts unknown).
    device_flags: Option<u16>,
}

impl PackedRing {
    /// A packed ring at `layout` (whose `avail` and `used` are the driver
    /// and device event areas, as `VHOST_SET_VRING_ADDR` gives them),
    /// resuming at the packed-encoded `base`. `desc_log` is the descriptor
    /// ring's guest-physical address if its writes are logged. `None` if
    /// `layout.num` is not in `1..=32768`, the parts are misaligned or run
    /// past the end of the 64-bit space, or
    /// `base` holds a position outside the ring or a used position more
    /// than a lap behind the avail one.
    pub(crate) fn resume(
        layout: RingLayout,
        desc_log: Option<u64>,
        base: u32,
        features: Features,
    ) -> Option<Self> {
        if layout.num == 0 || layout.num > MAX_NUM || !layout.parts_fit(Self::sizes(layout.num)) {
            return None;
        }
        if layout.desc % DESC_ALIGN != 0
            || layout.avail % EVENT_ALIGN != 0
            || layout.used % EVENT_ALIGN != 0
        {
            return None;
        }
        let num = u16::try_from(layout.num).ok()?;
        let next_avail = Position::decode(base as u16, num)?;
        let next_used = Position::decode((base >> 16) as u16, num)?;
        // Chains between the two were taken and not returned (by whoever
        // ran the ring before): they occupy their positions.
        let in_flight = next_avail.distance_from(next_used, num)?;
        Some(PackedRing {
            num,
            desc: layout.desc,
            driver: layout.avail,
            device: layout.used,
            features,
            next_avail,
            next_used,
            in_flight,
            seen_ahead: 0,
            unsignalled: 0,
            signalled_valid: false,
            desc_log: layout.used_log.and(desc_log),
            device_log: layout.used_log,
            device_flags: None,
        })
    }

    /// Where the ring stands, in the packed encoding of
    /// `VHOST_GET_VRING_BASE`.
    pub(crate) fn base(&self) -> u32 {
        u32::from(self.next_used.encode()) << 16 | u32::from(self.next_avail.encode())
    }

    /// Whether a ring of `num` entries can resume at `base`: both
    /// positions inside it, the used one at most a lap behind.
    pub(crate) fn base_fits(base: u32, num: u32) -> bool {
        let Ok(num) = u16::try_from(num) else {
            return false;
        };
        let (Some(avail), Some(used)) = (
            Position::decode(base as u16, num),
            Position::decode((base >> 16) as u16, num),
        ) else {
            return false;
        };
        avail.distance_from(used, num).is_some()
    }

    /// See [`crate::vring::SplitRing::set_features`].
    pub(crate) fn set_features(&mut self, features: Features) {
        if features.event_idx() != self.features.event_idx() {
            self.signalled_valid = false;
            // The flags mean something else now: write them again.
            self.device_flags = None;
        }
        self.features = features;
    }

    /// The memory behind the device event area may have changed (a device
    /// IOTLB update or invalidation, a new memory table): the flags this
    /// ring remembers writing there are written again at the next enable
    /// or disable, rather than assumed to be in place. QEMU's packed ring
    /// writes them at every change (`vring_packed_event_write` from
    /// `virtio_queue_packed_set_notification`); the cache must not make
    /// the device keep a guest kicking, or silent, through a remap.
    pub(crate) fn forget_device_flags(&mut self) {
        self.device_flags = None;
    }

    /// Byte sizes of the descriptor ring and the two event areas.
    pub(crate) fn sizes(num: u32) -> (u64, u64, u64) {
        (DESC_SIZE * u64::from(num), EVENT_SIZE, EVENT_SIZE)
    }

    /// The guest address of the device event area's flags.
    pub(crate) fn device_flags_addr_of(device: u64) -> u64 {
        device + EVENT_FLAGS_OFFSET
    }

    /// The guest address of the driver event area's flags.
    pub(crate) fn driver_flags_addr_of(driver: u64) -> u64 {
        driver + EVENT_FLAGS_OFFSET
    }

    #[inline]
    fn desc_addr(&self, index: u16) -> u64 {
        self.desc + DESC_SIZE * u64::from(index)
    }

    /// Logs a write of `len` bytes at byte `offset` of the area whose
    /// guest-physical address is `gpa`, once the write is visible; as in
    /// the split ring, a log that cannot be written does not stop the ring.
    fn log<M: UserMemory, L: WriteLog>(mem: &M, log: &L, gpa: Option<u64>, offset: u64, len: u64) {
        let Some(gpa) = gpa.and_then(|gpa| gpa.checked_add(offset)) else {
            return;
        };
        mem.wmb();
        let _unwritable: Result<(), LogError> = log.mark(gpa, len);
    }

    /// Whether the descriptor at `at` is available.
    fn avail_at<M: UserMemory>(&self, mem: &M, at: Position) -> Result<bool, Stop> {
        let flags = mem.read_u16(self.desc_addr(at.index) + DESC_FLAGS_OFFSET)?;
        Ok(is_avail(flags, at.wrap))
    }

    /// Whether a chain is available at the next avail position.
    pub(crate) fn has_avail<M: UserMemory>(&self, mem: &M) -> Result<bool, Stop> {
        self.avail_at(mem, self.next_avail)
    }

    /// Takes the next available chain, translating its buffers through
    /// `space` (the memory table or the device IOTLB) into `iov`. Returns
    /// `Ok(None)` when none is available.
    ///
    /// A chain is its descriptors up to the first without `NEXT`, or one
    /// descriptor with `INDIRECT` (and without `NEXT`) whose table's
    /// `len / 16` descriptors are all its buffers; its buffer id is the last
    /// descriptor's. On error nothing is consumed.
    #[inline(always)]
    pub(crate) fn pop<M: UserMemory, T: Translate + ?Sized>(
        &mut self,
        mem: &M,
        space: &T,
        iov: &mut [Iov],
    ) -> Result<Option<Chain>, Stop> {
        let first = self.next_avail;
        // The descriptor's other fields are read after the flags that made
        // it available, and so is the rest of the chain, which the driver
        // wrote before them.
        let mut desc = PackedDesc::parse(&mem.read_16_acquire(self.desc_addr(first.index))?);
        if !is_avail(desc.flags, first.wrap) {
            return Ok(None);
        }
        let mut builder = ChainBuilder::new(space, iov);
        // The usual chain, one direct descriptor (a network packet in one
        // buffer): no walk. A ring with a free position has room for it,
        // and `in_flight < num` leaves one.
        if desc.flags & (DESC_F_NEXT | DESC_F_INDIRECT) == 0 && self.in_flight < self.num {
            builder.push(desc.addr, desc.len, desc.writable())?;
            if desc.id >= self.num {
                return Err(VringError::BadHead.into());
            }
            self.take(first.advance(1, self.num), 1);
            return Ok(Some(builder.finish(desc.id, 1)));
        }
        // A chain cannot hold more positions than the ring has free: a
        // longer one never ends (NEXT all round the ring).
        let room = self.num - self.in_flight;
        let mut at = first;
        let mut count: u16 = 0;
        let id = loop {
            if count == room {
                return Err(VringError::Loop.into());
            }
            if count > 0 {
                desc = PackedDesc::parse(&mem.read_16(self.desc_addr(at.index))?);
            }
            count += 1;
            at = at.advance(1, self.num);
            if desc.flags & DESC_F_INDIRECT != 0 {
                if !self.features.indirect() || desc.flags & DESC_F_NEXT != 0 || count != 1 {
                    return Err(VringError::IndirectNotAllowed.into());
                }
                // Inside the table only WRITE counts; NEXT, INDIRECT and
                // the ids are reserved and ignored (section 2.8.19).
                let table = IndirectTable::new(space, desc.addr, desc.len)?;
                for i in 0..table.count() {
                    let entry = PackedDesc::parse(&table.entry(mem, space, i)?);
                    builder.push(entry.addr, entry.len, entry.writable())?;
                }
                break desc.id;
            }
            builder.push(desc.addr, desc.len, desc.writable())?;
            if desc.flags & DESC_F_NEXT == 0 {
                break desc.id;
            }
        };
        if id >= self.num {
            return Err(VringError::BadHead.into());
        }
        self.take(at, count);
        Ok(Some(builder.finish(id, count)))
    }

    /// Consumes a chain of `count` positions that [`PackedRing::pop`]
    /// found, `next` being the position after it.
    #[inline(always)]
    fn take(&mut self, next: Position, count: u16) {
        self.next_avail = next;
        // INVARIANT: the chain fitted the ring's free positions
        // (`count <= num - in_flight`, as `pop` checked), and positions taken
        // from `seen_ahead` leave the sum as it was.
        self.in_flight += count;
        // Nearly always none were seen ahead: no store then.
        if self.seen_ahead != 0 {
            self.seen_ahead = self.seen_ahead.saturating_sub(count);
        }
    }

    /// Puts back the last popped chains, which took `positions` positions
    /// (see [`positions`]).
    pub(crate) fn unpop(&mut self, positions: u32) {
        debug_assert!(
            positions <= u32::from(self.in_flight),
            "putting back chains that were not taken"
        );
        // INVARIANT: never more than is in flight, so the sum is kept.
        let back = u16::try_from(positions)
            .unwrap_or(u16::MAX)
            .min(self.in_flight);
        self.next_avail = self.next_avail.back(back, self.num);
        self.in_flight -= back;
        self.seen_ahead += back;
    }

    /// Whether the guest wants an interrupt for what was used since the
    /// last check, following the driver event area: `DISABLE`, `ENABLE`,
    /// or with event-idx `DESC`, an interrupt once the used descriptor at
    /// its position is written.
    pub(crate) fn should_notify<M: UserMemory>(&mut self, mem: &M) -> Result<bool, Stop> {
        // The used descriptors must be visible before reading the guest's
        // suppression state (section 2.8.21.3).
        mem.mb();
        if self.features.notify_on_empty() && self.in_flight == 0 && !self.has_avail(mem)? {
            return Ok(true);
        }
        let added = core::mem::replace(&mut self.unsignalled, 0);
        let valid = core::mem::replace(&mut self.signalled_valid, true);
        // The whole area in one single-copy-atomic load, as a Linux driver
        // reads the device's (virtqueue_kick_prepare_packed): a position no
        // older than the flags that say it is meant, since the guest writes
        // it first, without a second user access.
        let event = mem.read_u32(self.driver)?;
        let flags = (event >> (8 * EVENT_FLAGS_OFFSET)) as u16;
        let off_wrap = (event >> (8 * EVENT_OFF_WRAP_OFFSET)) as u16;
        if flags == EVENT_FLAG_DISABLE {
            return Ok(false);
        }
        if flags != EVENT_FLAG_DESC || !self.features.event_idx() {
            return Ok(true);
        }
        // A full lap or more passed every position the guest could name.
        if !valid || added >= u32::from(self.num) {
            return Ok(true);
        }
        // Positions as integers on the used lap's scale: the guest's event
        // in the previous lap (its wrap bit differs) lies below 0.
        let num = i64::from(self.num);
        let mut event = i64::from(off_wrap & !WRAP_BIT);
        if (off_wrap & WRAP_BIT != 0) != self.next_used.wrap {
            event -= num;
        }
        let new = i64::from(self.next_used.index);
        let old = new - i64::from(added);
        Ok(old <= event && event < new)
    }

    /// Asks the guest to kick again: `ENABLE` in the device event area, or
    /// with event-idx `DESC` at the first position the device has not seen
    /// available. Returns true if a chain is available there already (the
    /// caller must then go on, and charge the retry to its weight). Chains
    /// seen and put back do not count, as in the split ring.
    pub(crate) fn enable_notify<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
    ) -> Result<bool, Stop> {
        let unseen = self.next_avail.advance(self.seen_ahead, self.num);
        if self.features.event_idx() {
            mem.write_u16(self.device + EVENT_OFF_WRAP_OFFSET, unseen.encode())?;
            Self::log(mem, log, self.device_log, EVENT_OFF_WRAP_OFFSET, 2);
            // The position before the flags that point at it.
            mem.wmb();
            self.set_device_flags(mem, log, EVENT_FLAG_DESC)?;
        } else {
            self.set_device_flags(mem, log, EVENT_FLAG_ENABLE)?;
        }
        // The store above must be visible before looking at the ring, or a
        // kick could be lost.
        mem.mb();
        self.avail_at(mem, unseen)
    }

    /// Asks the guest not to kick while the device polls the ring.
    ///
    /// With event-idx, once this ring has asked for a kick at a position
    /// (`DESC`), nothing is written, as for a split ring: that position is
    /// behind the driver once the device runs, so the driver does not kick
    /// again. Until then the device area holds flags 0 (`ENABLE`, as the
    /// driver zeroed it, and as the module writes it when a backend is
    /// attached): a kick for every chain published, which is what a Linux
    /// guest's RX refills did to a ring that never ran dry, one wakeup of
    /// the RX worker per packet. So `DISABLE` is written, once: the flags
    /// written are remembered (QEMU's packed rings write it on every
    /// disable).
    pub(crate) fn disable_notify<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
    ) -> Result<(), Stop> {
        if self.features.event_idx() && self.device_flags == Some(EVENT_FLAG_DESC) {
            return Ok(());
        }
        self.set_device_flags(mem, log, EVENT_FLAG_DISABLE)
    }

    /// Writes the device event area's flags, unless this ring wrote the same
    /// value last: one user store fewer per run. The check is inlined into
    /// the callers, which nearly always find the flags written already
    /// (rather than a call per enable and disable).
    #[inline(always)]
    fn set_device_flags<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        flags: u16,
    ) -> Result<(), Stop> {
        if self.device_flags == Some(flags) {
            return Ok(());
        }
        self.write_device_flags(mem, log, flags)
    }

    #[inline(never)]
    fn write_device_flags<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        flags: u16,
    ) -> Result<(), Stop> {
        // Unknown until the write is done, should it fault.
        self.device_flags = None;
        mem.write_u16(self.device + EVENT_FLAGS_OFFSET, flags)?;
        Self::log(mem, log, self.device_log, EVENT_FLAGS_OFFSET, 2);
        self.device_flags = Some(flags);
        Ok(())
    }
}
