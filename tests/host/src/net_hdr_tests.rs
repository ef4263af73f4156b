//! The virtio-net header's byte layout.

use crate::vring::net_hdr::VirtioNetHdr;

#[test]
fn header_round_trips_little_endian() {
    let hdr = VirtioNetHdr {
        flags: VirtioNetHdr::F_NEEDS_CSUM,
        gso_type: 4,
        hdr_len: 0x0102,
        gso_size: 0x0304,
        csum_start: 0x0506,
        csum_offset: 0x0708,
        num_buffers: 0x090a,
    };
    let bytes = hdr.to_bytes();
    assert_eq!(
        bytes[..VirtioNetHdr::LEN],
        [1, 4, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9]
    );
    // No hash report and no tunnel offsets: zeroes to the tunnel header's end.
    assert_eq!(bytes.len(), VirtioNetHdr::LEN_TUNNEL);
    assert!(bytes[VirtioNetHdr::LEN..].iter().all(|&b| b == 0));
    assert_eq!(VirtioNetHdr::parse(&bytes), Some(hdr));
}

#[test]
fn legacy_header_has_no_num_buffers_and_short_is_refused() {
    let bytes = [0u8, 0, 1, 0, 2, 0, 3, 0, 4, 0];
    let hdr = VirtioNetHdr::parse(&bytes).expect("a 10-byte header parses");
    assert_eq!((hdr.hdr_len, hdr.csum_offset, hdr.num_buffers), (1, 4, 0));
    assert_eq!(
        VirtioNetHdr::parse(&bytes[..VirtioNetHdr::LEN_LEGACY - 1]),
        None
    );
}

/// The header's length under each combination of the features that set it,
/// as C's `vhost_net_set_features` picks it.
#[test]
fn header_length_follows_the_features() {
    use crate::vring::features::{bit, mask, Features};
    let tunnel_bits = [
        None,
        Some(bit::VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO),
        Some(bit::VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO),
    ];
    for mrg in [false, true] {
        for v1 in [false, true] {
            for vhost_hdr in [false, true] {
                for tunnel in tunnel_bits {
                    let mut f = Features::from_bits(
                        if mrg {
                            mask(bit::VIRTIO_NET_F_MRG_RXBUF)
                        } else {
                            0
                        } | if v1 { mask(bit::VIRTIO_F_VERSION_1) } else { 0 }
                            | if vhost_hdr {
                                mask(bit::VHOST_NET_F_VIRTIO_NET_HDR)
                            } else {
                                0
                            },
                    );
                    if let Some(n) = tunnel {
                        f = f.with(n);
                    }
                    let want = match (tunnel, mrg || v1) {
                        (Some(_), _) => 24,
                        (None, true) => 12,
                        (None, false) => 10,
                    };
                    assert_eq!(VirtioNetHdr::len_for(f), want, "{f:?}");
                }
            }
        }
    }
    // Both tunnel bits: still the one tunnel header.
    let both = Features::from_bits(0)
        .with(bit::VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO)
        .with(bit::VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO);
    assert_eq!(VirtioNetHdr::len_for(both), VirtioNetHdr::LEN_TUNNEL);
    // The checksum variants (GUEST_ and HOST_UDP_TUNNEL_GSO_CSUM) alone
    // change nothing: they are not header bits.
    for n in [66, 68] {
        let f = Features::from_bits(mask(bit::VIRTIO_F_VERSION_1)).with(n);
        assert_eq!(VirtioNetHdr::len_for(f), VirtioNetHdr::LEN);
    }
}

/// The tunnel header is `struct virtio_net_hdr_v1_hash_tunnel`: the 12-byte
/// header, the hash report (value 4, report 2, padding 2), then the two
/// tunnel offsets, 2 bytes each.
#[test]
fn tunnel_header_is_c_sized() {
    assert_eq!(VirtioNetHdr::LEN_TUNNEL, 12 + 4 + 2 + 2 + 2 + 2);
    // A header the guest wrote whole still parses from its first 10 or 12
    // bytes: the tunnel fields are tun's to read.
    let mut bytes = [0u8; VirtioNetHdr::LEN_TUNNEL];
    bytes[0] = VirtioNetHdr::F_NEEDS_CSUM;
    bytes[1] = 0x21; // TCPV4 | UDP_TUNNEL_IPV4
    bytes[20..22].copy_from_slice(&34u16.to_le_bytes());
    bytes[22..24].copy_from_slice(&64u16.to_le_bytes());
    let hdr = VirtioNetHdr::parse(&bytes).expect("parses");
    assert_eq!((hdr.flags, hdr.gso_type), (1, 0x21));
}

/// Feature bits past 63 live in the second word, which `VHOST_SET_FEATURES`
/// (one word) clears; bits past 127 exist in neither.
#[test]
fn features_have_two_words() {
    use crate::vring::features::{bit, mask, Features, FEATURE_WORDS};
    assert_eq!(FEATURE_WORDS, 2);
    let f = Features::from_bits(mask(bit::VIRTIO_F_VERSION_1))
        .with(bit::VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO)
        .with(bit::VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO);
    assert_eq!(f.words(), [1 << 32, 1 << 1 | 1 << 3]);
    assert_eq!(f.bits(), 1 << 32);
    assert!(f.has(65) && f.has(67) && !f.has(66) && !f.has(68) && !f.has(1));
    assert!(!f.has(128) && !f.has(u32::MAX));
    assert!(f.udp_tunnel_gso());
    assert!(!Features::from_bits(u64::MAX).udp_tunnel_gso());
    assert_eq!(Features::from_words([0, 1 << 2]).has(66), true);
    // What a word beyond the offered ones holds is refused.
    let offered = f;
    assert!(Features::from_words([1 << 32, 1 << 1])
        .beyond(offered)
        .is_empty());
    let extra = Features::from_words([0, 1 << 2]).beyond(offered);
    assert_eq!(extra.words(), [0, 1 << 2]);
    assert!(!extra.is_empty());
    assert_eq!(Features::from_words(f.words()), f);
}
