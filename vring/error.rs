// SPDX-License-Identifier: GPL-2.0

//! What a malformed ring is (the parsers' errors), and why a ring operation
//! stops before it is done (an error, or a device IOTLB miss).

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
    /// The device IOTLB maps an address without the access the device
    /// needs (a writable buffer in a read-only mapping).
    AccessDenied,
    /// A chain that translates into more than [`MAX_SEGMENTS`] pieces.
    TooManySegments,
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

/// Why a ring operation stopped before it was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The ring is malformed, or its memory could not be accessed.
    Error(VringError),
    /// The device IOTLB has no mapping for an address yet. Not an error:
    /// nothing was consumed, and the operation is done again once userspace
    /// has mapped it. The address is the IOTLB's `last_fault` (a result
    /// that carried it would make every parse step carry it too).
    Miss,
}

impl From<VringError> for Stop {
    fn from(err: VringError) -> Self {
        Stop::Error(err)
    }
}

impl From<TranslateError> for Stop {
    fn from(err: TranslateError) -> Self {
        match err {
            TranslateError::NotMapped => Stop::Error(VringError::NotMapped),
            TranslateError::Miss { .. } => Stop::Miss,
            TranslateError::Denied { .. } => Stop::Error(VringError::AccessDenied),
        }
    }
}
