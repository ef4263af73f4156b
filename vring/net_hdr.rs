// SPDX-License-Identifier: GPL-2.0

//! The virtio-net header (`include/uapi/linux/virtio_net.h`), which the
//! guest writes before every TX packet and the device before every RX one.

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
    /// Offset of `num_buffers`.
    pub(crate) const NUM_BUFFERS_OFFSET: usize = 10;
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
    pub(crate) const F_NEEDS_CSUM: u8 = 1;

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

    /// The header as the guest sees it; the caller takes the first
    /// `LEN_LEGACY` or `LEN` bytes.
    pub(crate) fn to_bytes(self) -> [u8; Self::LEN] {
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
        ]
    }
}
