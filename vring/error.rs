// SPDX-License-Identifier: GPL-2.0

//! What a malformed ring is: the parsers' errors.

use super::mem_table::TranslateError;

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
