// SPDX-License-Identifier: GPL-2.0

//! The negotiated virtio and vhost feature bits, decoded once.
//!
//! `VHOST_SET_FEATURES` stores one [`Features`]; every rule that depends on
//! a feature asks it by name (`features.event_idx()`), not by testing bits.

/// Feature bit numbers (`include/uapi/linux/virtio_config.h`,
/// `virtio_ring.h`, `virtio_net.h`, `vhost.h`).
pub(crate) mod bit {
    pub(crate) const VIRTIO_NET_F_MRG_RXBUF: u32 = 15;
    pub(crate) const VIRTIO_F_NOTIFY_ON_EMPTY: u32 = 24;
    pub(crate) const VHOST_F_LOG_ALL: u32 = 26;
    pub(crate) const VIRTIO_F_ANY_LAYOUT: u32 = 27;
    /// The same bit as `VIRTIO_F_ANY_LAYOUT`, as vhost-net reads it.
    pub(crate) const VHOST_NET_F_VIRTIO_NET_HDR: u32 = 27;
    pub(crate) const VIRTIO_RING_F_INDIRECT_DESC: u32 = 28;
    pub(crate) const VIRTIO_RING_F_EVENT_IDX: u32 = 29;
    pub(crate) const VIRTIO_F_VERSION_1: u32 = 32;
    pub(crate) const VIRTIO_F_ACCESS_PLATFORM: u32 = 33;
    pub(crate) const VIRTIO_F_RING_PACKED: u32 = 34;
    pub(crate) const VIRTIO_F_IN_ORDER: u32 = 35;
    pub(crate) const VIRTIO_F_RING_RESET: u32 = 40;
}

/// Bit `n` as a feature mask.
pub(crate) const fn mask(n: u32) -> u64 {
    1u64 << n
}

/// A set of negotiated feature bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Features(u64);

impl Features {
    /// The features whose bits are set in `bits`.
    pub(crate) const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The features as bits, as `VHOST_GET_FEATURES` reports them.
    pub(crate) const fn bits(self) -> u64 {
        self.0
    }

    /// Whether feature bit `n` is set.
    pub(crate) const fn has(self, n: u32) -> bool {
        n < u64::BITS && self.0 & mask(n) != 0
    }

    /// `VIRTIO_RING_F_EVENT_IDX`: notifications are suppressed with event
    /// indices, not flags.
    pub(crate) const fn event_idx(self) -> bool {
        self.has(bit::VIRTIO_RING_F_EVENT_IDX)
    }

    /// `VIRTIO_RING_F_INDIRECT_DESC`: descriptors may point to tables.
    pub(crate) const fn indirect(self) -> bool {
        self.has(bit::VIRTIO_RING_F_INDIRECT_DESC)
    }

    /// `VIRTIO_F_NOTIFY_ON_EMPTY`: the driver is notified when the ring runs
    /// empty, whatever it asked.
    pub(crate) const fn notify_on_empty(self) -> bool {
        self.has(bit::VIRTIO_F_NOTIFY_ON_EMPTY)
    }

    /// `VIRTIO_F_IN_ORDER`: buffers are used in the order they were made
    /// available (this device always does), so a split ring may return a
    /// run of them with one used element.
    pub(crate) const fn in_order(self) -> bool {
        self.has(bit::VIRTIO_F_IN_ORDER)
    }

    /// `VIRTIO_F_RING_PACKED`: the ring is a packed one.
    pub(crate) const fn packed(self) -> bool {
        self.has(bit::VIRTIO_F_RING_PACKED)
    }

    /// `VIRTIO_F_ACCESS_PLATFORM`: every address goes through the device
    /// IOTLB.
    pub(crate) const fn access_platform(self) -> bool {
        self.has(bit::VIRTIO_F_ACCESS_PLATFORM)
    }

    /// `VHOST_F_LOG_ALL`: the device logs the pages it writes.
    pub(crate) const fn log_all(self) -> bool {
        self.has(bit::VHOST_F_LOG_ALL)
    }

    /// `VIRTIO_F_VERSION_1`: a virtio 1.x device.
    pub(crate) const fn version_1(self) -> bool {
        self.has(bit::VIRTIO_F_VERSION_1)
    }

    /// `VIRTIO_NET_F_MRG_RXBUF`: an RX packet may span several buffers.
    pub(crate) const fn mrg_rxbuf(self) -> bool {
        self.has(bit::VIRTIO_NET_F_MRG_RXBUF)
    }

    /// `VHOST_NET_F_VIRTIO_NET_HDR`: the device, not the tap, adds and
    /// strips the virtio-net header.
    pub(crate) const fn vhost_net_hdr(self) -> bool {
        self.has(bit::VHOST_NET_F_VIRTIO_NET_HDR)
    }

    /// The features of `self` that `allowed` does not have.
    pub(crate) const fn beyond(self, allowed: Self) -> Self {
        Self(self.0 & !allowed.0)
    }

    /// Whether no bit is set.
    pub(crate) const fn is_empty(self) -> bool {
        self.0 == 0
    }
}
