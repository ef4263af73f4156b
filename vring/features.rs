// SPDX-License-Identifier: GPL-2.0

//! The negotiated features the rings need.

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
