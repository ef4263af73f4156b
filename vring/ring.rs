// SPDX-License-Identifier: GPL-2.0

//! One virtqueue ring, split or packed: the single interface the data path
//! sees. The format is fixed when the ring starts (from the acked
//! `VIRTIO_F_RING_PACKED`); every method dispatches inside this type, so
//! the data path (`net/`) never branches on it.
//!
//! Like the parsers it wraps, this file uses only `core` and is compiled
//! into the host tests.
//!
//! # Memory ordering
//!
//! Every place the device publishes to the guest or reads what the guest
//! publishes, with the barrier that orders it and the rule it follows
//! (virtio 1.x; C's `drivers/vhost/vhost.c` for the split ring; QEMU's
//! `hw/virtio/virtio.c` for the packed ring, which C does not have). The
//! host tests' memory (`tests/host/src/testmem.rs`) records stores and
//! barriers in order, and `packed_tests/ordering.rs` and
//! `vring_tests/logging_and_order.rs` check the used batches' rows.
//!
//! | Path | Order | Rule |
//! |------|-------|------|
//! | split pop: `avail->idx`, then ring entries and descriptors | `rmb` between | 2.7.13.3.1; `vhost_get_vq_desc` |
//! | split used: elements (and the buffers' data), then `used->idx` | `wmb` between, any batch size | 2.7.8.2; `vhost_add_used_n` |
//! | split enable notify: `used->flags` or `avail_event`, then `avail->idx` again | `mb` between | 2.7.10; `vhost_enable_notify` |
//! | split should-notify: `used->idx`, then `avail->flags` or `used_event` | `mb` between; a read that faults means signal | 2.7.10; `vhost_notify` |
//! | packed pop: a descriptor's flags, then its other fields and the chain | `rmb` between (`read_16_acquire`) | 2.8.21.1; `vring_packed_desc_read` |
//! | packed used: the rest of a batch and the buffers' data, then the first used descriptor (its flags in the same 8-byte store) | `wmb` between, any batch size, 1 included | 2.8.21.2; `virtqueue_packed_fill_desc` |
//! | packed enable notify: device event `off_wrap`, then its flags | `wmb` between | 2.8.21.3.1; `vring_packed_event_write` |
//! | packed enable notify: device event flags, then the next descriptor's flags | `mb` between | 2.8.21.3.1; `virtio_queue_packed_set_notification` |
//! | packed should-notify: used descriptors, then the driver event area (one 32-bit load) | `mb` between; a read that faults means signal | 2.8.21.3.2; `virtio_packed_should_notify` |
//! | dirty log: a write, then its log bit | `wmb` between | C's `log_used`/`vhost_log_write` |
//!
//! The device event flags a packed ring last wrote are cached; the cache
//! is dropped whenever the memory behind them may have changed (a device
//! IOTLB update or invalidation, a new memory table), so that they are
//! written again rather than assumed ([`Ring::forget_written`]).

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

    /// The memory behind the ring's addresses may have changed: state the
    /// ring caches about what it wrote there is dropped (see
    /// [`PackedRing::forget_device_flags`]; a split ring caches none).
    pub(crate) fn forget_written(&mut self) {
        if let Ring::Packed(ring) = self {
            ring.forget_device_flags();
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
