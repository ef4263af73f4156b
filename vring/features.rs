// SPDX-License-Identifier: GPL-2.0

//! The negotiated virtio and vhost feature bits, decoded once.
//!
//! `VHOST_SET_FEATURES` stores one [`Features`]; every rule that depends on
//! a feature asks it by name (`features.event_idx()`), not by testing bits.
//!
//! Feature bits run past 63: the UDP-tunnel GSO bits are 65 to 68, in the
//! second 64-bit word that `VHOST_GET_FEATURES_ARRAY` and
//! `VHOST_SET_FEATURES_ARRAY` carry. A [`Features`] holds
//! [`FEATURE_WORDS`] words, as C's `VIRTIO_FEATURES_U64S`
//! (`include/linux/virtio_features.h`); `VHOST_SET_FEATURES` sets only the
//! first and clears the second (`virtio_features_from_u64`).

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
    /// The driver can receive GSO packets carried in a UDP tunnel
    /// (`virtio_net.h`): with it, or [`VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO`],
    /// the virtio-net header is `struct virtio_net_hdr_v1_hash_tunnel`.
    /// Bit 66, `..._GSO_CSUM`, leaves the outer UDP checksum to the driver;
    /// it is not a vhost feature: the header does not change, and tun does
    /// the checksum (C's `vhost_net_bits` does not list it, nor QEMU's
    /// `kernel_feature_bits`).
    pub(crate) const VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO: u32 = 65;
    /// The device can take GSO packets carried in a UDP tunnel. Bit 68,
    /// its `_CSUM` variant, is not a vhost feature either.
    pub(crate) const VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO: u32 = 67;
}

/// The 64-bit words of a feature set (`VIRTIO_FEATURES_U64S`): bits
/// 0 to 127.
pub(crate) const FEATURE_WORDS: usize = 2;

/// Bit `n` (below 64) as a mask of the first feature word.
pub(crate) const fn mask(n: u32) -> u64 {
    1u64 << n
}

/// A set of negotiated feature bits, [`FEATURE_WORDS`] words of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Features([u64; FEATURE_WORDS]);

impl Features {
    /// The features whose bits are set in `bits`, the first word; none in
    /// the second (`VHOST_SET_FEATURES`).
    pub(crate) const fn from_bits(bits: u64) -> Self {
        let mut words = [0; FEATURE_WORDS];
        words[0] = bits;
        Self(words)
    }

    /// The features of the words `words`, the first one first
    /// (`VHOST_SET_FEATURES_ARRAY`).
    pub(crate) const fn from_words(words: [u64; FEATURE_WORDS]) -> Self {
        Self(words)
    }

    /// The features with bit `n` set as well; `n` must be below 128.
    pub(crate) const fn with(self, n: u32) -> Self {
        let mut words = self.0;
        words[(n / u64::BITS) as usize] |= 1u64 << (n % u64::BITS);
        Self(words)
    }

    /// The first word, as `VHOST_GET_FEATURES` reports it.
    pub(crate) const fn bits(self) -> u64 {
        self.0[0]
    }

    /// The words, as `VHOST_GET_FEATURES_ARRAY` reports them.
    pub(crate) const fn words(self) -> [u64; FEATURE_WORDS] {
        self.0
    }

    /// Whether feature bit `n` is set.
    pub(crate) const fn has(self, n: u32) -> bool {
        let word = (n / u64::BITS) as usize;
        word < FEATURE_WORDS && self.0[word] & (1u64 << (n % u64::BITS)) != 0
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

    /// `VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO` or
    /// `VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO`: the virtio-net header is the
    /// tunnel one, in either direction (C's `vhost_net_set_features` tests
    /// the two alike).
    pub(crate) const fn udp_tunnel_gso(self) -> bool {
        self.has(bit::VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO)
            || self.has(bit::VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO)
    }

    /// The features of `self` that `allowed` does not have.
    pub(crate) const fn beyond(self, allowed: Self) -> Self {
        let mut words = self.0;
        let mut i = 0;
        while i < FEATURE_WORDS {
            words[i] &= !allowed.0[i];
            i += 1;
        }
        Self(words)
    }

    /// Whether no bit is set.
    pub(crate) const fn is_empty(self) -> bool {
        let mut i = 0;
        while i < FEATURE_WORDS {
            if self.0[i] != 0 {
                return false;
            }
            i += 1;
        }
        true
    }
}
