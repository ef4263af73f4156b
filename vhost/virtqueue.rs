// SPDX-License-Identifier: GPL-2.0

//! One virtqueue: its configuration, its running ring, the eventfds it is
//! bound to, its backend, its statistics, and the rules that tie them
//! together.
//!
//! Every rule of the `VHOST_SET_VRING_*` ioctls and of `SET_MEM_TABLE`,
//! `SET_FEATURES` and `NET_SET_BACKEND` as they touch one queue is a method
//! of [`VqState`], the state under the queue's lock, so a caller cannot
//! break one by writing a field, and a method can only be given the guard
//! of the queue it works on. The data path borrows a running ring through
//! [`VqState::active`].
//!
//! # When the ring runs
//!
//! The ring runs while a backend is attached, the ring addresses and the
//! memory table are set, the guest has not corrupted it, and
//! `GET_VRING_BASE` has not stopped it. `GET_VRING_BASE` stops it so that
//! the index it reports cannot move afterwards; only attaching a backend
//! (or `SET_VRING_BASE`, which needs the backend detached) lets it run
//! again. `SET_MEM_TABLE` and `SET_FEATURES` never restart a stopped ring.
//!
//! # The device IOTLB
//!
//! With `VIRTIO_F_ACCESS_PLATFORM` acked, the queue holds its copy of the
//! device IOTLB (see `device_iotlb.rs`), and every address it is given, the
//! ring's own included, is an I/O virtual address translated through it. A
//! run first checks that the ring's parts are mapped (C's
//! `vq_meta_prefetch`); a miss, there or in a buffer, ends the run with
//! nothing consumed and posts the miss for userspace, and the update that
//! answers it wakes the worker. A miss is not the guest's fault: the queue
//! keeps running. A mapping that refuses the device's access is, and stops
//! it like any malformed ring.
//!
//! # Lock order
//!
//! `VhostNet::state` (the device) before `VirtQueue::state` (this queue),
//! before the device's `MissChannel`. The worker takes only its queue's
//! lock, and the channel's to post a miss. Wait-queue callbacks take no
//! lock: they set an atomic flag and wake the worker.

use crate::tap_glue::eventfd::EventFd;
use crate::tap_glue::file_poll::FilePoll;
use crate::tap_glue::file_poll::PollableFile;
use crate::tap_glue::uaccess::OwnerMem;
use crate::vhost::device_iotlb::MessageError;
use crate::vhost::device_iotlb::{PostMiss, QueueIotlb};
use crate::vhost::uapi::VringAddr;
use crate::vring::dirty_log::DirtyLog;
use crate::vring::Features;
use kernel::seq_file::SeqFile;

use crate::tap_glue::uaccess::user_limit;
use crate::vring::mem_table::Region;
use crate::vring::packed::PackedRing;
use crate::vring::ring::Ring;

use crate::vring::mem_table::Translate;
use crate::vring::split::parts_end_below;
use crate::vring::{Iov, SplitRing, Stop, UsedElem, UserMemory, VringError};
mod config;
mod run;

pub(crate) use run::{with_ring_memory, ActiveRing, OnRingMemory};

use crate::tap_glue::worker::{Waker, Work};

use kernel::{
    fs::File,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex, MutexGuard},
};

/// The memory table, shared by the queues of a device.
pub(crate) type MemTable = KVec<Region>;

/// Alignment the C driver requires of the avail and used rings (and of the
/// used ring's log address): `VRING_AVAIL_ALIGN_SIZE`,
/// `VRING_USED_ALIGN_SIZE`. The descriptor table is read with byte copies,
/// so, as in C, its address needs no alignment.
const AVAIL_ALIGN: u64 = 2;
const USED_ALIGN: u64 = 4;

/// The data path of a backend kind (RX or TX on a tap).
pub(crate) trait Backend: Send + Sized + Unpin {
    /// Used elements of scratch one run needs.
    const HEADS: usize;

    /// Scratch space of this backend kind's data path, allocated once with
    /// the queue and kept across attaches, so that neither a packet nor a
    /// `SET_BACKEND` allocates it.
    type Scratch: Send + Unpin;

    /// The queue's scratch space.
    fn new_scratch() -> Result<Self::Scratch>;

    /// What the data path needs to know of the negotiated features,
    /// decoded once, at `VHOST_SET_FEATURES` (as C's
    /// `vhost_net_set_features` computes the header lengths).
    type Config: Copy + Default + Send + Unpin;

    /// Decodes the negotiated `features`.
    fn config(features: Features) -> Self::Config;

    /// Whether this backend is the file `file`.
    fn is_file(&self, file: &File) -> bool;

    /// Starts listening to the backend's file, once it is sure to be
    /// attached (vhost_net_enable_vq); an error leaves it unattached.
    fn enable(&mut self, waker: &Arc<Waker>) -> Result;

    /// Why a run of this backend's data path can stop early.
    type Error: RunError;

    /// Runs the data path once over a running ring, whose memory is `mem`
    /// with buffer addresses translated through `translate` (see
    /// [`with_ring_memory`]). Returns true if it stopped because its weight
    /// ran out and work remains; an error says why it stopped before it was
    /// done (see [`RunError`]).
    fn run<M: UserMemory, T: Translate + ?Sized>(
        active: &mut ActiveRing<'_, Self>,
        mem: &M,
        translate: &T,
    ) -> Result<bool, Self::Error>;
}

/// What a run that stopped early leaves the queue to do.
pub(crate) enum Ended {
    /// An address missed in the device IOTLB: the miss is posted for
    /// userspace, whose update wakes the queue. Not an error.
    Missed,
    /// The owner's memory faulted: not the guest's doing; the queue asks the
    /// guest for a kick and tries again then.
    Faulted,
    /// The ring, or what the guest put on it, is malformed: the queue stops
    /// until userspace reconfigures it.
    Broken,
}

/// Why a run of the data path stopped early.
pub(crate) trait RunError: core::fmt::Debug {
    /// What the queue must do about it.
    fn ended(&self) -> Ended;
}

impl RunError for Stop {
    fn ended(&self) -> Ended {
        match self {
            Stop::Miss => Ended::Missed,
            Stop::Error(VringError::Fault) => Ended::Faulted,
            Stop::Error(_) => Ended::Broken,
        }
    }
}

/// A queue's configuration as the device's control plane sees it, whatever
/// its backend: the rules of the vring ioctls, and of the device-wide
/// ioctls as they touch one queue. Implemented by [`VqState`], the state
/// under the queue's lock (see `config.rs`).
pub(crate) trait QueueConfig {
    /// `VHOST_SET_VRING_NUM`.
    fn set_num(&mut self, num: u32) -> Result;
    /// `VHOST_SET_VRING_ADDR`.
    fn set_addr(&mut self, addr: &VringAddr) -> Result;
    /// `VHOST_SET_VRING_BASE`.
    fn set_base(&mut self, base: u32) -> Result;
    /// `VHOST_GET_VRING_BASE`: stops the ring, so that the index it reports cannot move.
    fn get_base(&mut self) -> u32;
    /// `VHOST_SET_VRING_KICK`; `None` unbinds.
    fn set_kick(&mut self, file: Option<PollableFile>) -> Result;
    /// `VHOST_SET_VRING_CALL`; `None` unbinds.
    fn set_call(&mut self, call: Option<EventFd>);
    /// `VHOST_SET_VRING_ERR`; `None` unbinds.
    fn set_err(&mut self, err: Option<EventFd>);
    /// `VHOST_SET_VRING_BUSYLOOP_TIMEOUT`.
    fn set_busyloop_timeout(&mut self, timeout: u32);
    /// `VHOST_GET_VRING_BUSYLOOP_TIMEOUT`.
    fn busyloop_timeout(&self) -> u32;
    /// `VHOST_SET_FEATURES` for this queue, with its new device IOTLB if `ACCESS_PLATFORM` is acked.
    fn set_features(&mut self, features: Features, iotlb: Option<QueueIotlb>);
    /// `VHOST_SET_MEM_TABLE` for this queue.
    fn set_mem(&mut self, mem: Arc<MemTable>);
    /// What `VHOST_NET_SET_BACKEND` checks before it looks at the fd (`vhost_vq_access_ok`).
    fn check_access(&self) -> Result;
    /// Whether `VHOST_SET_FEATURES` may set `features` on this queue.
    fn can_set_features(&self, features: Features) -> bool;
    /// `VHOST_SET_BACKEND_FEATURES`: the format of this queue's misses.
    fn set_iotlb_format(&mut self, format: u32);
    /// Before a `VHOST_IOTLB_UPDATE`: room for one more mapping in this
    /// queue's copy of the table, so that the update itself, applied to
    /// every copy, cannot fail on one for want of memory.
    fn iotlb_make_room(&mut self) -> Result<(), MessageError>;
    /// `VHOST_IOTLB_UPDATE` on this queue's copy of the table.
    fn iotlb_update(
        &mut self,
        iova: u64,
        size: u64,
        uaddr: u64,
        perm: u8,
    ) -> Result<(), MessageError>;
    /// `VHOST_IOTLB_INVALIDATE` on this queue's copy of the table.
    fn iotlb_invalidate(&mut self, iova: u64, size: u64) -> Result<(), MessageError>;
    /// `VHOST_SET_LOG_BASE` for this queue.
    fn set_log_base(&mut self, log: DirtyLog) -> Result;
    /// `VHOST_SET_LOG_FD` for this queue; `None` unbinds.
    fn set_log_eventfd(&mut self, eventfd: Option<Arc<EventFd>>);
    /// Whether `VHOST_SET_FEATURES` may turn `VHOST_F_LOG_ALL` on for this queue.
    fn can_log_all(&self) -> bool;
    /// Whether a new memory table can replace this queue's.
    fn can_take_mem(&self, mem: &MemTable) -> bool;
    /// The state of a freshly opened queue (`RESET_OWNER`, `close`).
    fn reset(&mut self);
    /// One line of `/proc/PID/fdinfo/FD`.
    fn show(&self, m: &SeqFile);
    /// Detaches and releases the backend, if any.
    fn unbind(&mut self);
}

/// Counters a user can read in `/proc/PID/fdinfo/FD`.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    pub(crate) calls: u64,
    pub(crate) errors: u64,
    pub(crate) drops: u64,
    /// Device IOTLB misses posted for userspace.
    pub(crate) iotlb_misses: u64,
}

impl Stats {
    /// Adds what one run of the data path did.
    pub(crate) fn add_run(&mut self, packets: u64, bytes: u64, drops: u64) {
        self.packets += packets;
        self.bytes += bytes;
        self.drops += drops;
    }
}

/// Ring addresses, as `VHOST_SET_VRING_ADDR` set them.
#[derive(Clone, Copy)]
struct RingAddr {
    desc: u64,
    avail: u64,
    used: u64,
}

impl RingAddr {
    /// Whether the three parts of a ring of `num` entries lie in the user
    /// address space (`vq_access_ok`); a packed ring's are the descriptor
    /// ring and the two event areas.
    fn in_user_space(&self, num: u32, packed: bool) -> bool {
        self.end_below(num, packed, user_limit())
    }

    /// Whether the three parts of a ring of `num` entries end at or below
    /// `limit`: the user address space's end, or for I/O virtual addresses,
    /// which the device IOTLB checks at each access, the end of the 64-bit
    /// space. The parsers add offsets inside a part to its start; a part
    /// that wraps past 2^64 would overflow them (a panic with the kernel's
    /// overflow checks), where C's sums would wrap.
    fn end_below(&self, num: u32, packed: bool, limit: u64) -> bool {
        let sizes = if packed {
            PackedRing::sizes(num)
        } else {
            SplitRing::sizes(num, true)
        };
        parts_end_below((self.desc, self.avail, self.used), sizes, limit)
    }
}

/// Everything about a queue that changes, under `VirtQueue::state`.
///
/// # Invariants
///
/// `ring` is `Some` only while `backend`, `addr` and `mem` are, and neither
/// `stopped` nor `broken` is set; it is packed exactly when
/// `VIRTIO_F_RING_PACKED` is in `features`. `num` is in `1..=VRING_MAX_NUM`.
pub(crate) struct VqState<B: Backend> {
    index: u32,
    num: u32,
    addr: Option<RingAddr>,
    /// Where the ring resumes while it is not running: `last_avail_idx` of
    /// a split ring, both positions of a packed ring in the
    /// `VHOST_GET_VRING_BASE` encoding.
    base: u32,
    /// A split ring's `used->idx` as read when the backend was attached.
    used_idx: u16,
    busyloop_timeout: u32,
    ring: Option<Ring>,
    /// Stopped by `GET_VRING_BASE`.
    stopped: bool,
    /// The guest corrupted the ring; cleared by reconfiguration.
    broken: bool,
    features: Features,
    /// `features` as the backend decoded them.
    config: B::Config,
    mem: Option<Arc<MemTable>>,
    backend: Option<B>,
    kick: Option<Pin<KBox<FilePoll>>>,
    call: Option<EventFd>,
    err: Option<EventFd>,
    waker: Arc<Waker>,
    stats: Stats,
    /// `VHOST_SET_LOG_BASE`, as this queue was given it.
    log: DirtyLog,
    /// `VHOST_SET_LOG_FD`: signalled after the device logged writes. One
    /// eventfd, shared by the device's queues.
    log_eventfd: Option<Arc<EventFd>>,
    /// The used ring's guest-physical address for the log, if
    /// `VHOST_VRING_F_LOG` was set (`log_guest_addr`).
    used_log: Option<u64>,
    /// The device IOTLB, while `VIRTIO_F_ACCESS_PLATFORM` is acked.
    iotlb: Option<QueueIotlb>,
    /// The message format of this queue's misses: `VHOST_IOTLB_MSG_V2`
    /// once `VHOST_BACKEND_F_IOTLB_MSG_V2` is acked.
    iotlb_format: u32,
    /// Where misses go, shared with the device.
    channel: Arc<dyn PostMiss>,
    /// Scratch space of the data path, allocated once so that no packet
    /// allocates.
    iov: KVec<Iov>,
    heads: KVec<UsedElem>,
    scratch: B::Scratch,
}

/// One virtqueue and its worker's view of it.
///
/// # Invariants
///
/// `waker` is the waker of `state`.
#[pin_data]
pub(crate) struct VirtQueue<B: Backend> {
    waker: Arc<Waker>,
    #[pin]
    state: Mutex<VqState<B>>,
}

impl<B: Backend> VirtQueue<B> {
    /// Queue `index` of a device, posting its device IOTLB misses to
    /// `channel`.
    pub(crate) fn new(index: u32, channel: Arc<dyn PostMiss>) -> Result<Arc<Self>> {
        let waker = Waker::new()?;
        let state = VqState::new(index, waker.clone(), B::HEADS, channel)?;
        Arc::pin_init(
            pin_init!(VirtQueue { waker, state <- new_mutex!(state) }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VqState<B>> {
        self.state.lock()
    }

    /// Has the worker run the queue (an update answered its miss).
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }
}

impl<B: Backend> Work for VirtQueue<B> {
    const QUEUES: usize = 1;

    fn waker(&self, _i: usize) -> &Waker {
        &self.waker
    }

    fn run(&self, _i: usize, owner: &OwnerMem) -> bool {
        self.state.lock().service(owner)
    }
}
