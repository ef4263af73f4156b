// SPDX-License-Identifier: GPL-2.0

//! One virtqueue of a device: its configuration, its running ring, the files
//! it is bound to (kick, call and error eventfds, the tap), its statistics,
//! and the worker that services it.
//!
//! # Lock order
//!
//! `VhostNet::state` (device) before `VirtQueue::inner` (this queue). The
//! worker takes only `inner`. Wait-queue callbacks take no lock: they set an
//! atomic flag and wake the worker.

use crate::glue::{EventFd, Poll, Waker, Work, EPOLLIN, EPOLLOUT};
use crate::memory::Region;
use crate::tap_glue::{RxBatch, TapSocket, TxBatch};
use crate::uaccess::OwnerMem;
use crate::uapi::{bit, feature};
use crate::vring::{GuestMemory, Iov, RingFeatures, Vring, VringError, MAX_SEGMENTS};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{
    bindings,
    fs::File,
    new_mutex,
    prelude::*,
    sync::{aref::ARef, Arc, Mutex},
};

/// Which way a queue moves packets.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// vq 0: tap to guest.
    Rx,
    /// vq 1: guest to tap.
    Tx,
}

/// The memory table, shared by both queues of a device.
pub(crate) type MemTable = KVec<Region>;

/// Counters a user can read in `/proc/PID/fdinfo/FD`.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) packets: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) drops: AtomicU64,
}

impl Stats {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Ring configuration, as the `VHOST_SET_VRING_*` ioctls set it.
#[derive(Clone, Copy)]
pub(crate) struct VqConfig {
    pub(crate) num: u32,
    pub(crate) desc: u64,
    pub(crate) avail: u64,
    pub(crate) used: u64,
    pub(crate) addr_set: bool,
    pub(crate) last_avail_idx: u16,
    pub(crate) busyloop_timeout: u32,
}

impl VqConfig {
    /// The state after open and after `RESET_OWNER`, as in the C driver.
    pub(crate) const RESET: Self = Self {
        num: 1,
        desc: 0,
        avail: 0,
        used: 0,
        addr_set: false,
        last_avail_idx: 0,
        busyloop_timeout: 0,
    };
}

/// A user iovec handed to the socket layer: `struct iovec` with the user
/// address kept as an integer, so it is plain data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct UserIov {
    pub(crate) base: usize,
    pub(crate) len: usize,
}

const _: () = assert!(core::mem::size_of::<UserIov>() == core::mem::size_of::<bindings::iovec>());
const _: () = assert!(core::mem::align_of::<UserIov>() == core::mem::align_of::<bindings::iovec>());

/// Everything about a queue that changes, under `VirtQueue::inner`.
pub(crate) struct VqInner {
    pub(crate) cfg: VqConfig,
    /// The running ring: set while a backend is attached and the ring was
    /// not stopped by `GET_VRING_BASE`.
    pub(crate) ring: Option<Vring>,
    /// Set when the guest corrupted the ring; cleared by reconfiguration.
    pub(crate) broken: bool,
    pub(crate) features: u64,
    pub(crate) mem: Option<Arc<MemTable>>,
    pub(crate) backend: Option<Arc<TapSocket>>,
    pub(crate) kick: Option<Pin<KBox<Poll>>>,
    pub(crate) sock_poll: Option<Pin<KBox<Poll>>>,
    pub(crate) call: Option<EventFd>,
    pub(crate) err: Option<EventFd>,
    /// Scratch space of the data path, allocated once so that no packet
    /// allocates.
    pub(crate) iov: KVec<Iov>,
    pub(crate) uiov: KVec<UserIov>,
    pub(crate) heads: KVec<(u16, u32)>,
    /// TX only: packets waiting to go to tun in one batch.
    pub(crate) txb: Option<TxBatch>,
    /// RX only, while a backend is attached: packets taken off its ring.
    pub(crate) rxb: Option<RxBatch>,
}

/// Most TX used elements gathered before one `used->idx` update.
pub(crate) const MAX_BATCH: usize = 64;

/// Most RX buffers one packet may be merged over: as many as it has iov
/// segments, like the C driver's `UIO_MAXIOV`, so that a 64 KB GSO frame
/// fits even in 512-byte mergeable buffers (129 of them).
pub(crate) const MAX_RX_HEADS: usize = MAX_SEGMENTS;

/// One virtqueue.
///
/// # Invariants
///
/// `waker` is registered with the queue's worker while the device has an
/// owner; `inner` is only locked after the device's state lock, if both are
/// taken.
#[pin_data]
pub(crate) struct VirtQueue {
    pub(crate) dir: Dir,
    pub(crate) waker: Waker,
    pub(crate) stats: Stats,
    #[pin]
    pub(crate) inner: Mutex<VqInner>,
}

impl VirtQueue {
    pub(crate) fn new(dir: Dir) -> Result<Arc<Self>> {
        let mut iov = KVec::with_capacity(MAX_SEGMENTS, GFP_KERNEL)?;
        iov.resize(MAX_SEGMENTS, Iov::default(), GFP_KERNEL)?;
        let mut uiov = KVec::with_capacity(MAX_SEGMENTS, GFP_KERNEL)?;
        uiov.resize(MAX_SEGMENTS, UserIov::default(), GFP_KERNEL)?;
        // RX gathers one packet's buffers after up to MAX_BATCH unpublished
        // ones; TX gathers one batch.
        let nheads = if dir == Dir::Rx { MAX_RX_HEADS + MAX_BATCH } else { MAX_BATCH };
        let mut heads = KVec::with_capacity(nheads, GFP_KERNEL)?;
        heads.resize(nheads, (0u16, 0u32), GFP_KERNEL)?;
        let txb = if dir == Dir::Tx { Some(TxBatch::new()?) } else { None };
        Arc::pin_init(
            pin_init!(VirtQueue {
                dir,
                waker: Waker::new(),
                stats: Stats::default(),
                inner <- new_mutex!(VqInner {
                    cfg: VqConfig::RESET,
                    ring: None,
                    broken: false,
                    features: 0,
                    mem: None,
                    backend: None,
                    kick: None,
                    sock_poll: None,
                    call: None,
                    err: None,
                    iov,
                    uiov,
                    heads,
                    txb,
                    rxb: None,
                }),
            }),
            GFP_KERNEL,
        )
    }

    /// Reports a malformed ring: error eventfd, counter, one debug line. The
    /// ring stays stopped until userspace reconfigures it, so a hostile
    /// guest cannot make the worker spin or flood the log.
    pub(crate) fn fail(&self, s: &mut VqInner, e: VringError) {
        s.broken = true;
        Stats::add(&self.stats.errors, 1);
        if let Some(err) = &s.err {
            err.signal();
        }
        pr_debug!("vhost-net-rs: vq {} stopped: {:?}\n", self.dir as u32, e);
    }

    /// Sets `kick`; -1 unbinds.
    pub(crate) fn set_kick(&self, s: &mut VqInner, file: Option<ARef<File>>) -> Result {
        s.kick = None;
        if let Some(f) = file {
            // SAFETY: `self.waker` lives as long as this queue, and the poll
            // is dropped with `inner`, which is part of this queue.
            s.kick = Some(unsafe { Poll::start(f, EPOLLIN, &self.waker) }?);
        }
        Ok(())
    }

    /// Starts (or restarts) the ring from its configuration if everything it
    /// needs is there. Called in the owner's context.
    pub(crate) fn start_ring(&self, s: &mut VqInner) -> Result {
        s.ring = None;
        s.broken = false;
        if s.backend.is_none() || !s.cfg.addr_set || s.mem.is_none() {
            return Ok(());
        }
        let f = s.features;
        let feats = RingFeatures {
            event_idx: f & bit(feature::VIRTIO_RING_F_EVENT_IDX) != 0,
            indirect: f & bit(feature::VIRTIO_RING_F_INDIRECT_DESC) != 0,
            notify_on_empty: f & bit(feature::VIRTIO_F_NOTIFY_ON_EMPTY) != 0,
        };
        let c = s.cfg;
        let mut ring =
            Vring::new(c.num, c.desc, c.avail, c.used, c.last_avail_idx, feats).ok_or(EINVAL)?;
        // Check the ring parts are reachable, and pick up where the guest's
        // used index is (vhost_vq_init_access).
        let used_idx = OwnerMem.read_u16(c.used + 2).map_err(|_| EFAULT)?;
        OwnerMem.read_u16(c.avail + 2).map_err(|_| EFAULT)?;
        ring.last_used_idx = used_idx;
        s.ring = Some(ring);
        self.waker.wake();
        Ok(())
    }

    /// Stops the ring, keeping its position for `GET_VRING_BASE`.
    pub(crate) fn stop_ring(&self, s: &mut VqInner) {
        if let Some(r) = s.ring.take() {
            s.cfg.last_avail_idx = r.last_avail_idx;
        }
    }

    /// Attaches (or with `None` detaches) the tap.
    pub(crate) fn set_backend(&self, s: &mut VqInner, sock: Option<Arc<TapSocket>>) -> Result {
        self.stop_ring(s);
        s.sock_poll = None;
        // Packets taken off the old tap's ring go back to it.
        s.rxb = None;
        s.backend = sock;
        let Some(b) = s.backend.clone() else { return Ok(()) };
        if self.dir == Dir::Rx {
            match RxBatch::new(b.clone()) {
                Ok(r) => s.rxb = Some(r),
                Err(e) => {
                    s.backend = None;
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.start_ring(s) {
            s.rxb = None;
            s.backend = None;
            return Err(e);
        }
        if self.dir == Dir::Rx {
            self.poll_socket(s, &b, EPOLLIN)?;
        }
        Ok(())
    }

    pub(crate) fn poll_socket(&self, s: &mut VqInner, b: &TapSocket, mask: u32) -> Result {
        // SAFETY: As in `set_kick`.
        s.sock_poll = Some(unsafe { Poll::start(b.file().clone(), mask, &self.waker) }?);
        Ok(())
    }

    /// Waits until the TX tap has room again (after `-EAGAIN`).
    pub(crate) fn poll_tx_space(&self, s: &mut VqInner) {
        if let Some(b) = s.backend.clone() {
            if self.poll_socket(s, &b, EPOLLOUT).is_err() {
                s.sock_poll = None;
            }
        }
    }

    /// Drops every binding: the state of a freshly opened device.
    pub(crate) fn reset(&self, s: &mut VqInner) {
        s.kick = None;
        s.sock_poll = None;
        s.ring = None;
        s.rxb = None;
        s.backend = None;
        s.call = None;
        s.err = None;
        s.mem = None;
        s.features = 0;
        s.broken = false;
        s.cfg = VqConfig::RESET;
    }

    /// Stops every wakeup source (kick and socket polls).
    pub(crate) fn quiesce(&self) {
        let mut s = self.inner.lock();
        s.kick = None;
        s.sock_poll = None;
    }
}

impl Work for VirtQueue {
    fn waker(&self) -> &Waker {
        &self.waker
    }

    fn run(&self) {
        let mut s = self.inner.lock();
        let more = match self.dir {
            Dir::Tx => crate::net::handle_tx(self, &mut s),
            Dir::Rx => crate::net::handle_rx(self, &mut s),
        };
        drop(s);
        if more {
            // The weight was used up: yield, then continue.
            self.waker.wake();
        }
    }
}
