// SPDX-License-Identifier: GPL-2.0

//! One virtqueue ring, split or packed: the single interface the data path
//! sees. The format is fixed when the ring starts (from the acked
//! `VIRTIO_F_RING_PACKED`); every method dispatches inside this type, so
//! the data path (`net/`) never branches on it.
//!
//! Like the parsers it wraps, this file uses only `core` and is compiled
//! into the host tests.

use crate::vring::dirty_log::WriteLog;
use crate::vring::mem_table::Translate;
use crate::vring::packed::PackedRing;
use crate::vring::{Chain, Features, Iov, SplitRing, Stop, UsedElem, UserMemory};

/// A running ring of either format.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ring {
    Split(SplitRing),
    Packed(PackedRing),
}

/// Where a stopped ring resumes, in its format's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingBase {
    /// The next avail index, and the used index the device had reached.
    Split { avail: u16, used: u16 },
    /// `VHOST_GET_VRING_BASE`'s packed encoding of both positions.
    Packed(u32),
}

impl Ring {
    /// Where the ring stands.
    pub(crate) fn base(&self) -> RingBase {
        match self {
            Ring::Split(ring) => RingBase::Split {
                avail: ring.last_avail_idx(),
                used: ring.last_used_idx(),
            },
            Ring::Packed(ring) => RingBase::Packed(ring.base()),
        }
    }

    /// Whether this is a packed ring.
    pub(crate) fn is_packed(&self) -> bool {
        matches!(self, Ring::Packed(_))
    }

    /// Follows changed features from the next access.
    pub(crate) fn set_features(&mut self, features: Features) {
        match self {
            Ring::Split(ring) => ring.set_features(features),
            Ring::Packed(ring) => ring.set_features(features),
        }
    }

    /// Whether the guest has made buffers available that were not taken.
    pub(crate) fn has_avail<M: UserMemory>(&mut self, mem: &M) -> Result<bool, Stop> {
        match self {
            Ring::Split(ring) => Ok(ring.refresh_avail(mem)? != 0),
            Ring::Packed(ring) => ring.has_avail(mem),
        }
    }

    /// Takes the next available chain; see [`SplitRing::pop`]. Inlined into
    /// each backend's loop, its one caller per memory kind.
    #[inline(always)]
    pub(crate) fn pop<M: UserMemory, T: Translate + ?Sized>(
        &mut self,
        mem: &M,
        space: &T,
        iov: &mut [Iov],
    ) -> Result<Option<Chain>, Stop> {
        match self {
            Ring::Split(ring) => ring.pop(mem, space, iov),
            Ring::Packed(ring) => ring.pop(mem, space, iov),
        }
    }

    /// Puts back the last popped chains, which took `positions` ring
    /// positions (their [`Chain::positions`] summed; see
    /// [`crate::vring::positions`]).
    pub(crate) fn unpop(&mut self, positions: u32) {
        match self {
            Ring::Split(ring) => ring.unpop(positions),
            Ring::Packed(ring) => ring.unpop(positions),
        }
    }

    /// Returns popped chains to the guest.
    pub(crate) fn add_used<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
        elems: &[UsedElem],
    ) -> Result<(), Stop> {
        match self {
            Ring::Split(ring) => ring.add_used(mem, log, elems),
            Ring::Packed(ring) => ring.add_used(mem, log, elems),
        }
    }

    /// Whether the guest wants an interrupt for what was used since the
    /// last check.
    pub(crate) fn should_notify<M: UserMemory>(&mut self, mem: &M) -> Result<bool, Stop> {
        match self {
            Ring::Split(ring) => ring.should_notify(mem),
            Ring::Packed(ring) => ring.should_notify(mem),
        }
    }

    /// Asks the guest to kick again; true if buffers it had not seen arrived
    /// meanwhile (see [`SplitRing::enable_notify`]).
    pub(crate) fn enable_notify<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
    ) -> Result<bool, Stop> {
        match self {
            Ring::Split(ring) => ring.enable_notify(mem, log),
            Ring::Packed(ring) => ring.enable_notify(mem, log),
        }
    }

    /// Asks the guest not to kick while the device polls the ring.
    pub(crate) fn disable_notify<M: UserMemory, L: WriteLog>(
        &mut self,
        mem: &M,
        log: &L,
    ) -> Result<(), Stop> {
        match self {
            Ring::Split(ring) => ring.disable_notify(mem, log),
            Ring::Packed(ring) => ring.disable_notify(mem, log),
        }
    }
}
