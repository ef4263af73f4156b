// SPDX-License-Identifier: GPL-2.0

//! The packed ring's used side: returning chains to the driver as used
//! descriptors, written in place of the available ones (virtio 1.x,
//! 2.8.9), in batches whose first flags go last.

use super::*;

impl PackedRing {
    /// Returns `elems` (popped chains, in any order) as used descriptors,
    /// at the next used positions. Each used descriptor's length, id and
    /// flags go out in one single-copy-atomic 8-byte store, so the driver
    /// sees it whole or not at all (the id and length are never behind the
    /// flags that expose them), the batch's rest in one user access per 32
    /// chains (and one more where the batch wraps the ring, or where its
    /// leading chains of one position each end); the first element's goes
    /// last, so that the driver, which looks at that one first, sees the
    /// whole batch at once. A write that faults leaves the batch unseen,
    /// and the ring stops ([`VringError::UsedWriteFailed`]). A batch that
    /// returns more positions than are in flight (a caller's bug) is
    /// refused ([`VringError::BadUsed`]), also unseen: only the used
    /// descriptors of its leading chains of one position may have been
    /// written by then, at positions still in flight.
    pub(crate) fn add_used<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        elems: &[UsedElem],
    ) -> Result<(), Stop> {
        self.write_used(mem, log, elems).map_err(|err| match err {
            Stop::Error(VringError::Fault) => Stop::Error(VringError::UsedWriteFailed),
            err => err,
        })
    }

    fn write_used<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        elems: &[UsedElem],
    ) -> Result<(), Stop> {
        let Some((first, rest)) = elems.split_first() else {
            return Ok(());
        };
        // Every chain takes at least one position: the batch takes at least
        // this many, exactly this many when the rest took one each.
        debug_assert!(
            elems.iter().all(|elem| elem.positions >= 1),
            "a used element of no position"
        );
        let least = u32::from(first.positions) + rest.len() as u32;
        if least > u32::from(self.in_flight) {
            // Returning more than was taken: a caller's bug, not the guest's.
            return Err(VringError::BadUsed.into());
        }
        let start = self.next_used;
        let after_first = start.advance(first.positions, self.num);
        let (at, total) = if rest.is_empty() {
            (after_first, least)
        } else {
            // The rest go first, at positions the driver looks at only once
            // it sees the first: those written before a chain of several
            // positions is found to overrun what was taken stay unseen.
            let (at, adjacent) = self.write_rest_adjacent(mem, after_first, rest)?;
            let (at, total) = if adjacent == rest.len() {
                (at, least)
            } else {
                let total = positions(elems);
                if total > u32::from(self.in_flight) {
                    return Err(VringError::BadUsed.into());
                }
                (self.write_rest(mem, at, &rest[adjacent..])?, total)
            };
            (at, total)
        };
        // Whatever the batch's size: the buffers' contents (tun's copy, the
        // `num_buffers` write) and the rest of the batch are visible before
        // the store that makes the first used descriptor, and with it the
        // batch, visible (virtio 1.x 2.8.21: the device writes the flags
        // after the rest, with a write barrier between; QEMU's
        // virtqueue_packed_fill_desc has smp_wmb before its flags store).
        mem.wmb();
        mem.write_8(
            self.desc_addr(start.index) + DESC_LEN_OFFSET,
            used_entry(first, start.wrap),
        )?;
        self.log_span(mem, log, start, at);
        self.next_used = at;
        // INVARIANT: `total` was in flight (checked above); it is no more.
        self.in_flight -= total as u16;
        self.unsignalled = self.unsignalled.saturating_add(total);
        Ok(())
    }

    /// Writes the used descriptors of `rest` from position `from` on, all
    /// but a batch's first; returns the position after them. They go out
    /// [`USED_STORES`] at a time, each store still one single-copy-atomic
    /// 8 bytes. The caller checked that they fit what is in flight.
    fn write_rest<M: UserMemory>(
        &self,
        mem: &M,
        from: Position,
        rest: &[UsedElem],
    ) -> Result<Position, Stop> {
        let ring_len = DESC_SIZE * u64::from(self.num);
        let mut stores = Staged::<Store8, USED_STORES>::new();
        let mut at = from;
        for chunk in rest.chunks(USED_STORES) {
            let staged = stores.fill(chunk.iter().map(|elem| {
                // INVARIANT of `Position`: `index < num <= 32768`, so the
                // offset fits in 32 bits.
                let offset = (DESC_SIZE * u64::from(at.index) + DESC_LEN_OFFSET) as u32;
                let store = Store8 {
                    offset,
                    bytes: used_entry(elem, at.wrap),
                };
                at = at.advance(elem.positions, self.num);
                store
            }));
            mem.write_8_each(self.desc, ring_len, staged)?;
        }
        Ok(at)
    }

    /// The used descriptors of the leading elements of `rest` whose chains
    /// took one position each, as a chain of one descriptor or an indirect
    /// one does (a Linux guest's RX buffers, and its TX packets with
    /// indirect descriptors), from position `from` on. Returns the position
    /// after them and how many they were: all of `rest` but for a chain of
    /// several positions, which [`PackedRing::write_rest`] takes from there.
    ///
    /// Such used descriptors are adjacent, 16 bytes apart, and go out as
    /// runs of values up to the ring's end, without an offset and a
    /// position step each, and without a pass over the batch to learn that
    /// they all are.
    /// The caller checked that `rest` fits what is in flight if they are.
    fn write_rest_adjacent<M: UserMemory>(
        &self,
        mem: &M,
        from: Position,
        rest: &[UsedElem],
    ) -> Result<(Position, usize), Stop> {
        let mut vals = Staged::<u64, USED_STORES>::new();
        let mut at = from;
        let mut done = 0;
        while done < rest.len() {
            // INVARIANT of `Position`: `at.index < num`, so a run has room.
            let to_end = usize::from(self.num - at.index);
            let run = &rest[done..rest.len().min(done + USED_STORES.min(to_end))];
            let flags = LapFlags::of(at.wrap);
            let staged = vals.fill_while(run, |elem| elem.positions == 1, |elem| flags.entry(elem));
            mem.write_8_spaced(
                self.desc_addr(at.index) + DESC_LEN_OFFSET,
                DESC_SIZE,
                staged,
            )?;
            // `staged.len() <= USED_STORES`, well inside a u16.
            at = at.advance(staged.len() as u16, self.num);
            done += staged.len();
            if staged.len() < run.len() {
                break;
            }
        }
        Ok((at, done))
    }

    /// Logs the descriptors from `from` up to (not including) `to`, a span
    /// of at most one lap.
    fn log_span<M: UserMemory, L: WriteLog>(&self, mem: &M, log: &L, from: Position, to: Position) {
        if self.desc_log.is_none() {
            return;
        }
        let start = DESC_SIZE * u64::from(from.index);
        if to.index > from.index {
            Self::log(
                mem,
                log,
                self.desc_log,
                start,
                DESC_SIZE * u64::from(to.index - from.index),
            );
        } else {
            Self::log(
                mem,
                log,
                self.desc_log,
                start,
                DESC_SIZE * u64::from(self.num - from.index),
            );
            Self::log(mem, log, self.desc_log, 0, DESC_SIZE * u64::from(to.index));
        }
    }
}
