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
    assert_eq!(bytes, [1, 4, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9]);
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
