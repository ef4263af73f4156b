// SPDX-License-Identifier: GPL-2.0

//! The split virtqueue (virtio 1.x, section 2.7), seen from the device side.

use super::chain::*;
use super::dirty_log::{LogError, WriteLog};
use super::error::{Stop, VringError};
use super::features::Features;
use super::mem_table::Translate;
use super::staged::Staged;
use super::user_memory::*;

/// `VRING_USED_F_NO_NOTIFY`: the device asks not to be kicked.
pub(crate) const USED_F_NO_NOTIFY: u16 = 1;
/// `VRING_AVAIL_F_NO_INTERRUPT`: the driver asks not to be interrupted.
pub(crate) const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Size of one used-ring element.
pub(super) const USED_ELEM_SIZE: u64 = 8;
/// Used elements written in one user copy (256 bytes of stack).
const USED_CHUNK: usize = 32;
/// Avail-ring heads read ahead in one user copy (see [`AvailHeads`]).
const HEAD_AHEAD: usize = 16;

/// Largest ring: a split ring's `num` is a power of two that fits the
/// 16-bit indices, a packed ring's fits the 15 bits of a position.
pub(crate) const MAX_NUM: u32 = 32768;

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
pub(crate) struct SplitRing {
    /// `num - 1`: ring positions are indices masked with it.
    mask: u16,
    desc: u64,
    avail: u64,
    used: u64,
    features: Features,
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

/// Where a ring lives and where it resumes: what `SplitRing::new` needs.
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

impl SplitRing {
    /// A ring at `layout`, resuming at avail index `base`, with the guest's
    /// used index at `used_idx` (read when the backend was attached, as
    /// `vhost_vq_init_access` does). `None` unless `layout.num` is a power of
    /// two up to 32768 and the three parts end inside the 64-bit space.
    pub(crate) fn resume(
        layout: RingLayout,
        base: u16,
        used_idx: u16,
        features: Features,
    ) -> Option<Self> {
        let num = layout.num;
        if num == 0
            || num > MAX_NUM
            || !num.is_power_of_two()
            || !layout.parts_fit(Self::sizes(num, true))
        {
            return None;
        }
        let mask = (num - 1) as u16;
        Some(SplitRing {
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
    fn log_used<M: UserMemory, L: WriteLog>(
        &self,
        mem: &M,
        log: &L,
        offset: u64,
        len: u64,
    ) -> Result<(), Stop> {
        let Some(used_gpa) = self.used_log else {
            return Ok(());
        };
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
    pub(crate) fn set_features(&mut self, features: Features) {
        if features.event_idx() != self.features.event_idx() {
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
    pub(crate) fn refresh_avail<M: UserMemory>(&mut self, mem: &M) -> Result<u16, Stop> {
        let idx = mem.read_u16(self.avail_idx_addr())?;
        let pending = idx.wrapping_sub(self.last_avail_idx);
        if u64::from(pending) > self.num64() {
            return Err(VringError::AvailJump.into());
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
    pub(crate) fn pop<M: UserMemory, T: Translate + ?Sized>(
        &mut self,
        mem: &M,
        space: &T,
        iov: &mut [Iov],
    ) -> Result<Option<Chain>, Stop> {
        if self.avail_idx == self.last_avail_idx {
            if self.refresh_avail(mem)? == 0 {
                return Ok(None);
            }
        }
        let head = self.avail_head(mem)?;
        if head > self.mask {
            return Err(VringError::BadHead.into());
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
    fn avail_head<M: UserMemory>(&mut self, mem: &M) -> Result<u16, Stop> {
        match self.ahead.get(self.last_avail_idx) {
            Some(head) => Ok(head),
            None => self.read_heads(mem),
        }
    }

    /// [`SplitRing::avail_head`] past the heads read ahead: reads the head at
    /// `last_avail_idx` and the ones after it. Out of line, so that the
    /// usual case, a head read ahead, stays a few inlined instructions.
    #[inline(never)]
    fn read_heads<M: UserMemory>(&mut self, mem: &M) -> Result<u16, Stop> {
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
            self.ahead = AvailHeads {
                heads,
                at: self.last_avail_idx,
                len: 1,
            };
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
        self.ahead = AvailHeads {
            heads,
            at: self.last_avail_idx,
            len: count as u16,
        };
        Ok(heads[0])
    }

    /// Puts the last popped chains back (for example when the backend could
    /// not take the packet yet): `positions` is their number, one position
    /// per split chain (see [`positions`]).
    pub(crate) fn unpop(&mut self, positions: u32) {
        // Modulo 2^16, as the indices are.
        self.last_avail_idx = self.last_avail_idx.wrapping_sub(positions as u16);
    }

    fn read_desc<M: UserMemory>(&self, mem: &M, addr: u64) -> Result<Desc, Stop> {
        Ok(Desc::parse(&mem.read_16(addr)?))
    }

    /// Walks the chain starting at `head`, following `next` links and at most
    /// one level of indirection.
    #[inline(always)]
    fn walk<M: UserMemory, T: Translate + ?Sized>(
        &self,
        mem: &M,
        space: &T,
        head: u16,
        iov: &mut [Iov],
    ) -> Result<Chain, Stop> {
        let mut builder = ChainBuilder::new(space, iov);
        let mut i = head;
        // A chain can visit each descriptor of the table at most once.
        let mut budget = self.num64();
        loop {
            if budget == 0 {
                return Err(VringError::Loop.into());
            }
            budget -= 1;
            let d = self.read_desc(mem, self.desc + DESC_SIZE * u64::from(i))?;
            if d.flags & DESC_F_INDIRECT != 0 {
                if !self.features.indirect() || d.flags & DESC_F_NEXT != 0 {
                    return Err(VringError::IndirectNotAllowed.into());
                }
                let table = IndirectTable::new(space, d.addr, d.len)?;
                let count = table.count();
                let mut j: u64 = 0;
                let mut ibudget = count;
                loop {
                    if ibudget == 0 {
                        return Err(VringError::Loop.into());
                    }
                    ibudget -= 1;
                    let id = Desc::parse(&table.entry(mem, space, j)?);
                    if id.flags & DESC_F_INDIRECT != 0 {
                        return Err(VringError::NestedIndirect.into());
                    }
                    builder.push(id.addr, id.len, id.flags & DESC_F_WRITE != 0)?;
                    if id.flags & DESC_F_NEXT == 0 {
                        break;
                    }
                    j = u64::from(id.next);
                    if j >= count {
                        return Err(VringError::BadNext.into());
                    }
                }
                break;
            }
            builder.push(d.addr, d.len, d.flags & DESC_F_WRITE != 0)?;
            if d.flags & DESC_F_NEXT == 0 {
                break;
            }
            if d.next > self.mask {
                return Err(VringError::BadNext.into());
            }
            i = d.next;
        }
        Ok(builder.finish(head, 1))
    }

    /// Adds used elements for `heads` and publishes them with one
    /// `used->idx` store.
    pub(crate) fn add_used<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        heads: &[UsedElem],
    ) -> Result<(), Stop> {
        let idx = if self.features.in_order() {
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
        if self.signalled_used_valid
            && idx.wrapping_sub(self.signalled_used) < idx.wrapping_sub(old)
        {
            self.signalled_used_valid = false;
        }
        Ok(())
    }

    /// Writes one used element per chain in `heads` from `last_used_idx`
    /// on; returns the used index that publishes them.
    fn write_used<M: UserMemory, L: WriteLog>(
        &self,
        mem: &M,
        log: &L,
        heads: &[UsedElem],
    ) -> Result<u16, Stop> {
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
            self.log_used(
                mem,
                log,
                self.used_elem_addr(idx) - self.used,
                n as u64 * USED_ELEM_SIZE,
            )?;
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
    fn write_used_in_order<M: UserMemory, L: WriteLog>(
        &self,
        mem: &M,
        log: &L,
        heads: &[UsedElem],
    ) -> Result<u16, Stop> {
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
    pub(crate) fn should_notify<M: UserMemory>(&mut self, mem: &M) -> Result<bool, Stop> {
        // The used index store must be visible before reading the guest's
        // suppression state (virtio 2.7.10).
        mem.mb();
        if self.features.notify_on_empty() && self.avail_idx == self.last_avail_idx {
            return Ok(true);
        }
        if !self.features.event_idx() {
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
    /// [`SplitRing::unpop`] because a packet needed more) do not count: the
    /// device waits for the guest to add buffers, rather than spin on the
    /// ones that were not enough. The index read is checked and cached
    /// like any other.
    pub(crate) fn enable_notify<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
    ) -> Result<bool, Stop> {
        if self.features.event_idx() {
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
    pub(crate) fn disable_notify<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
    ) -> Result<(), Stop> {
        if !self.features.event_idx() {
            mem.write_u16(self.used_flags_addr(), USED_F_NO_NOTIFY)?;
            self.log_used(mem, log, 0, 2)?;
        }
        Ok(())
    }
}

/// `vring_need_event`: whether `event` lies in `(old, new]`, modulo 2^16.
pub(crate) fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}
