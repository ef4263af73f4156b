// SPDX-License-Identifier: GPL-2.0

//! Virtio-net (C's `drivers/vhost/net.c`): the device and its data path,
//! guest TX ring to tap ([`tx::TxBackend`]), tap to guest RX ring
//! ([`rx::RxBackend`]).
//!
//! Both run in their queue's worker with the queue's lock held, do at most
//! a weight of work per run (so one busy queue cannot monopolise its
//! worker), batch used-ring updates, and signal the guest only when its
//! notification-suppression state asks for it. Each per-packet step returns
//! a typed outcome; a malformed ring is the only error, and it stops the
//! queue.
//!
//! - [`device`]: the misc device, its ioctls and `VHOST_NET_SET_BACKEND`;
//! - [`tx`] and [`rx`]: the two backends of the queue pair;
//! - [`datapath`]: what they share.

pub(crate) mod datapath;
pub(crate) mod device;
pub(crate) mod rx;
pub(crate) mod tx;

use crate::vhost::virtqueue::{Ended, RunError};
use crate::vring::features::{bit, mask, Features};
use crate::vring::{Stop, VringError, MAX_SEGMENTS};

/// The queues of a device: vq 0 receives, vq 1 transmits.
pub(crate) const RX_INDEX: u32 = 0;
pub(crate) const TX_INDEX: u32 = 1;
/// The number of queues of a device.
pub(crate) const QUEUES: usize = 2;

/// Most used elements gathered before one `used->idx` update.
pub(crate) const MAX_BATCH: usize = 64;

/// Most RX buffers one packet may be merged over: as many as it has iov
/// segments, like the C driver's `UIO_MAXIOV`, so that a 64 KB GSO frame
/// fits even in 512-byte mergeable buffers (129 of them).
pub(crate) const MAX_RX_HEADS: usize = MAX_SEGMENTS;

/// The virtio features this driver really implements. Nothing is offered
/// before its data path exists and is tested. The packed ring is, though
/// the C driver never had it.
pub(crate) const NET_FEATURES: Features = Features::from_bits(
    mask(bit::VHOST_NET_F_VIRTIO_NET_HDR)
    | mask(bit::VIRTIO_NET_F_MRG_RXBUF)
    | mask(bit::VIRTIO_RING_F_INDIRECT_DESC)
    | mask(bit::VIRTIO_RING_F_EVENT_IDX)
    | mask(bit::VIRTIO_F_NOTIFY_ON_EMPTY)
    | mask(bit::VIRTIO_F_ANY_LAYOUT)
    | mask(bit::VIRTIO_F_VERSION_1)
    // The packed virtqueue (`vring/packed.rs`), dirty logging included.
    | mask(bit::VIRTIO_F_RING_PACKED)
    // Every queue uses buffers in the order they came (TX and RX both take
    // and return chains in ring order); a split ring then returns a run of
    // them with one used element (`SplitRing::add_used`).
    | mask(bit::VIRTIO_F_IN_ORDER)
    // A queue reset is the driver stopping and restarting one queue through
    // the vring ioctls while the other runs, which every queue supports.
    | mask(bit::VIRTIO_F_RING_RESET)
    // Dirty-page logging for live migration (`vring/dirty_log.rs`).
    | mask(bit::VHOST_F_LOG_ALL)
    // Guests behind a virtual IOMMU: every address is translated through
    // the device IOTLB (`vring/iotlb.rs`, `vhost/device_iotlb.rs`).
    | mask(bit::VIRTIO_F_ACCESS_PLATFORM),
)
// GSO over UDP tunnels, in the second word, as C's `vhost_net_bits`
// offers them: all they ask of vhost is the longer header
// (`VirtioNetHdr::len_for`); tun segments and checksums. Their `_CSUM`
// variants change nothing here, and neither C nor QEMU's
// `kernel_feature_bits` takes them to vhost.
.with(bit::VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO)
.with(bit::VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO);

/// Why a run of the net data path stopped before it was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetError {
    /// The ring stopped it: malformed, faulted, or a device IOTLB miss.
    Ring(Stop),
    /// A chain with the wrong kind of buffers for its queue: a TX chain
    /// with writable buffers, an RX chain with readable ones.
    WrongDirection,
    /// An RX chain with no writable bytes: it cannot hold any part of a
    /// packet, and must not be counted in `num_buffers`.
    EmptyRxBuffer,
    /// A TX chain shorter than the virtio-net header it must start with.
    ShortPacket,
}

impl From<Stop> for NetError {
    fn from(stop: Stop) -> Self {
        NetError::Ring(stop)
    }
}

impl From<VringError> for NetError {
    fn from(err: VringError) -> Self {
        NetError::Ring(Stop::Error(err))
    }
}

impl RunError for NetError {
    fn ended(&self) -> Ended {
        match self {
            NetError::Ring(stop) => stop.ended(),
            // The guest put the wrong buffers on the ring: as malformed as
            // a bad descriptor, as in C ("unexpected descriptor format").
            NetError::WrongDirection | NetError::EmptyRxBuffer | NetError::ShortPacket => {
                Ended::Broken
            }
        }
    }
}
