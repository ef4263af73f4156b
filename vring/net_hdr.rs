// SPDX-License-Identifier: GPL-2.0

//! The virtio-net header (`include/uapi/linux/virtio_net.h`), which the
//! guest writes before every TX packet and the device before every RX one.
//!
//! Its length follows the negotiated features ([`VirtioNetHdr::len_for`]):
//! 10 bytes (`struct virtio_net_hdr`), 12 with `num_buffers`
//! (`virtio_net_hdr_mrg_rxbuf`), or 24 with UDP-tunnel GSO
//! (`virtio_net_hdr_v1_hash_tunnel`: the 12, the hash report's 8 bytes,
//! then `outer_th_offset` and `inner_nh_offset`).
//!
//! The data path reads only the first 10 bytes of a guest's header, for
//! the one rule vhost itself applies (the checksum must lie inside
//! `hdr_len`, `vhost_net_build_xdp`). The tunnel fields go to tun
//! untouched, as in C: tun checks them against the packet
//! (`virtio_net_hdr_tnl_to_skb`: one tunnel type, an inner GSO type that
//! is not UFO, `NEEDS_CSUM`, and offsets in order, outer transport
//! header, inner network header, inner transport header) and drops the
//! packet if they are wrong.

use super::features::Features;

/// `struct virtio_net_hdr_mrg_rxbuf`, little-endian on the wire (virtio 1.x
/// and, on x86, legacy guests too). The legacy header without mergeable
/// buffers is its first [`VirtioNetHdr::LEN_LEGACY`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VirtioNetHdr {
    pub(crate) flags: u8,
    pub(crate) gso_type: u8,
    pub(crate) hdr_len: u16,
    pub(crate) gso_size: u16,
    pub(crate) csum_start: u16,
    pub(crate) csum_offset: u16,
    pub(crate) num_buffers: u16,
}

impl VirtioNetHdr {
    /// Length with `num_buffers` (mergeable buffers or virtio 1.x).
    pub(crate) const LEN: usize = 12;
    /// Length of the legacy header, without `num_buffers`.
    pub(crate) const LEN_LEGACY: usize = 10;
    /// Length of `struct virtio_net_hdr_v1_hash_tunnel`, the header with
    /// UDP-tunnel GSO.
    pub(crate) const LEN_TUNNEL: usize = 24;
    /// Offset of `num_buffers`.
    pub(crate) const NUM_BUFFERS_OFFSET: usize = 10;
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
    pub(crate) const F_NEEDS_CSUM: u8 = 1;

    /// The header's length under `features`, C's rule
    /// (`vhost_net_set_features`): `LEN` with mergeable buffers or
    /// virtio 1.x, else `LEN_LEGACY`; `LEN_TUNNEL` with either UDP-tunnel
    /// GSO bit, whatever else is negotiated. The same whether vhost or
    /// the tap adds and strips it.
    pub(crate) const fn len_for(features: Features) -> usize {
        if features.udp_tunnel_gso() {
            Self::LEN_TUNNEL
        } else if features.mrg_rxbuf() || features.version_1() {
            Self::LEN
        } else {
            Self::LEN_LEGACY
        }
    }

    /// Parses the first `LEN_LEGACY` bytes of `bytes` (`num_buffers` is read
    /// only if there are `LEN`). `None` if `bytes` is shorter.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let at = |off: usize| -> Option<u16> {
            Some(u16::from_le_bytes([*bytes.get(off)?, *bytes.get(off + 1)?]))
        };
        Some(Self {
            flags: *bytes.first()?,
            gso_type: *bytes.get(1)?,
            hdr_len: at(2)?,
            gso_size: at(4)?,
            csum_start: at(6)?,
            csum_offset: at(8)?,
            num_buffers: at(Self::NUM_BUFFERS_OFFSET).unwrap_or(0),
        })
    }

    /// The header as the guest sees it, zeroes after `num_buffers` (no
    /// hash report, no tunnel: what a device that fills neither writes);
    /// the caller takes the first [`VirtioNetHdr::len_for`] bytes.
    pub(crate) fn to_bytes(self) -> [u8; Self::LEN_TUNNEL] {
        // Built whole (once per RX packet): slice copies would be
        // out-of-line calls.
        let [h0, h1] = self.hdr_len.to_le_bytes();
        let [g0, g1] = self.gso_size.to_le_bytes();
        let [s0, s1] = self.csum_start.to_le_bytes();
        let [o0, o1] = self.csum_offset.to_le_bytes();
        let [n0, n1] = self.num_buffers.to_le_bytes();
        [
            self.flags,
            self.gso_type,
            h0,
            h1,
            g0,
            g1,
            s0,
            s1,
            o0,
            o1,
            n0,
            n1,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]
    }
}
