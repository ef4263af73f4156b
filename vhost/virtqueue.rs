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

use crate::compat::code::eopnotsupp;
use crate::device_iotlb::{MessageError, MissChannel, QueueIotlb};
use crate::dirtylog::{DirtyLog, LogError, WriteLog};
use crate::eventfd::EventFd;
use crate::file_poll::{FilePoll, PollableFile, POLLIN};
use crate::iotlb::{self, Miss, Translated};
use crate::memory::{self, Access, Region, Translate, TranslateError};
use crate::packed::{self, PackedRing};
use crate::ring::{Ring, RingBase};
use crate::uaccess::{user_limit, OwnerBitmap, OwnerMem};
use crate::uapi::{bit, feature, VringAddr, VHOST_VRING_F_LOG_MASK};
use crate::vring::{
    self, parts_end_below, GuestMemory, Iov, RingFeatures, RingLayout, UsedElem, Vring, VringError, MAX_SEGMENTS,
};
use crate::worker::{should_stop_polling, Waker, Work};
use core::cell::Cell;
use kernel::{
    fs::File,
    new_mutex,
    prelude::*,
    seq_file::SeqFile,
    seq_print,
    time::{Instant, Monotonic},
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

/// Most used elements gathered before one `used->idx` update.
pub(crate) const MAX_BATCH: usize = 64;

/// Most RX buffers one packet may be merged over: as many as it has iov
/// segments, like the C driver's `UIO_MAXIOV`, so that a 64 KB GSO frame
/// fits even in 512-byte mergeable buffers (129 of them).
pub(crate) const MAX_RX_HEADS: usize = MAX_SEGMENTS;

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

    /// Whether this backend is the file `file`.
    fn is_file(&self, file: &File) -> bool;

    /// Starts listening to the backend's file, once it is sure to be
    /// attached (vhost_net_enable_vq); an error leaves it unattached.
    fn enable(&mut self, waker: &Arc<Waker>) -> Result;

    /// Runs the data path once over a running ring. Returns true if it
    /// stopped because its weight ran out and work remains. An error is a
    /// malformed ring: the queue stops (see [`VqState::fail`]).
    fn run(active: &mut ActiveRing<'_, Self>) -> Result<bool, VringError>;
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
        let sizes = if packed { PackedRing::sizes(num) } else { Vring::sizes(num, true) };
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
    features: u64,
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
    channel: Arc<MissChannel>,
    /// Scratch space of the data path, allocated once so that no packet
    /// allocates.
    iov: KVec<Iov>,
    heads: KVec<UsedElem>,
    scratch: B::Scratch,
}

/// A running ring, borrowed by the data path for one run.
pub(crate) struct ActiveRing<'a, B: Backend> {
    pub(crate) ring: &'a mut Ring,
    pub(crate) mem: &'a MemTable,
    pub(crate) backend: &'a mut B,
    pub(crate) scratch: &'a mut B::Scratch,
    pub(crate) iov: &'a mut [Iov],
    pub(crate) heads: &'a mut [UsedElem],
    pub(crate) stats: &'a mut Stats,
    pub(crate) features: u64,
    /// The device IOTLB that the ring's and the buffers' addresses go
    /// through, or `None` for the memory table.
    pub(crate) iotlb: Option<&'a QueueIotlb>,
    pub(crate) waker: &'a Arc<Waker>,
    call: Option<&'a EventFd>,
    busyloop_timeout: u32,
    pub(crate) log: RunLog<'a>,
}

/// The dirty log as one run of the data path sees it.
///
/// Every write the device makes to guest memory goes through one of
/// [`Ring`]'s methods or [`ActiveRing::log_written`], and each of them
/// marks its pages here, then has userspace told with [`RunLog::flush`].
pub(crate) struct RunLog<'a> {
    log: DirtyLog,
    /// With the device IOTLB, the addresses given to [`WriteLog::mark`]
    /// are I/O virtual: they are translated to the owner's, then to every
    /// guest-physical range backed by that memory (C's `log_write_hva`).
    iova: Option<(&'a QueueIotlb, &'a [Region])>,
    eventfd: Option<&'a EventFd>,
    /// `VHOST_F_LOG_ALL`: the data the device writes is logged (the used
    /// ring's writes follow `VHOST_VRING_F_LOG`, inside [`Ring`]).
    data: bool,
    /// Bits were set since the eventfd was last signalled.
    marked: Cell<bool>,
}

impl WriteLog for RunLog<'_> {
    fn mark(&self, addr: u64, len: u64) -> Result<(), LogError> {
        match self.iova {
            None => self.log.mark(&OwnerBitmap, addr, len)?,
            Some((iotlb, regions)) => iotlb.for_each_piece(addr, len, Access::Write, |piece| {
                memory::for_each_alias(regions, piece.uaddr, piece.len, |gpa, n| {
                    self.log.mark(&OwnerBitmap, gpa, n)
                })
            })?,
        }
        self.marked.set(true);
        Ok(())
    }
}

impl<'a> RunLog<'a> {
    fn new(
        log: DirtyLog,
        eventfd: Option<&'a EventFd>,
        features: u64,
        iova: Option<(&'a QueueIotlb, &'a [Region])>,
    ) -> Self {
        Self { log, iova, eventfd, data: features & bit(feature::VHOST_F_LOG_ALL) != 0, marked: Cell::new(false) }
    }

    /// Tells userspace that the log has new bits, once per batch of
    /// writes (C signals its `log_ctx` after each `log_used` or
    /// `vhost_log_write` that succeeded).
    pub(crate) fn flush(&self) {
        if self.marked.replace(false) {
            if let Some(eventfd) = self.eventfd {
                eventfd.signal();
            }
        }
    }
}

impl<B: Backend> ActiveRing<'_, B> {
    /// Publishes `heads[..count]` and signals the guest if it wants to be.
    /// `mem` is the ring's memory: the owner's, or with the device IOTLB
    /// the owner's seen through it.
    pub(crate) fn publish<M: GuestMemory>(&mut self, mem: &M, count: usize) -> Result<(), VringError> {
        if count == 0 {
            return Ok(());
        }
        self.ring.add_used(mem, &self.log, &self.heads[..count])?;
        self.log.flush();
        if self.ring.should_notify(mem)? {
            if let Some(call) = self.call {
                call.signal();
                self.stats.calls += 1;
            }
        }
        Ok(())
    }

    /// The ring is empty: asks the guest to kick again. Returns true if
    /// buffers arrived meanwhile; notifications are then off again and the
    /// caller goes on (charging the retry to its weight).
    pub(crate) fn wait_for_kick<M: GuestMemory>(&mut self, mem: &M) -> Result<bool, VringError> {
        let more = self.ring.enable_notify(mem, &self.log)?;
        if more {
            self.ring.disable_notify(mem, &self.log)?;
        }
        self.log.flush();
        Ok(more)
    }

    /// Busy-polls for up to the queue's `VHOST_SET_VRING_BUSYLOOP_TIMEOUT`
    /// microseconds until `ready` finds work, instead of going to sleep and
    /// paying for a wakeup (C's `vhost_net_busy_poll`). Returns true if it
    /// found some. It gives up early when the scheduler wants the CPU or a
    /// signal is pending; with a timeout of 0 (the default) it does not
    /// poll at all.
    pub(crate) fn busy_poll(
        &mut self,
        mut ready: impl FnMut(&mut Self) -> Result<bool, VringError>,
    ) -> Result<bool, VringError> {
        if self.busyloop_timeout == 0 {
            return Ok(false);
        }
        let start = Instant::<Monotonic>::now();
        loop {
            if ready(self)? {
                return Ok(true);
            }
            if should_stop_polling() || start.elapsed().as_micros_ceil() >= i64::from(self.busyloop_timeout) {
                return Ok(false);
            }
            core::hint::spin_loop();
        }
    }

    /// After a run that faulted on the owner's memory: asks the guest to
    /// kick again, so that the queue tries again at its next kick, not
    /// never. While it runs, a packed ring with event-idx has `DISABLE` in
    /// its device area ([`PackedRing::disable_notify`]). Best effort: the
    /// memory may fault again, and then the queue waits for userspace.
    pub(crate) fn ask_for_kick(&mut self) {
        let asked = match self.iotlb {
            None => self.ring.enable_notify(&OwnerMem, &self.log),
            Some(iotlb) => self.ring.enable_notify(&Translated::new(&OwnerMem, iotlb), &self.log),
        };
        let _faulted_again: Result<bool, VringError> = asked;
        self.log.flush();
    }

    /// Asks the guest not to kick while this run polls the ring
    /// (`vhost_disable_notify`).
    pub(crate) fn disable_notify<M: GuestMemory>(&mut self, mem: &M) -> Result<(), VringError> {
        self.ring.disable_notify(mem, &self.log)?;
        self.log.flush();
        Ok(())
    }

    pub(crate) fn has_feature(&self, bit_nr: u32) -> bool {
        self.features & bit(bit_nr) != 0
    }

    /// Logs that the device wrote the first `len` bytes of the buffers
    /// `iov`, with `VHOST_F_LOG_ALL` (C's `vhost_log_write`), once the
    /// writes are visible. As in C, a log that cannot be written (the owner
    /// unmapped it after it was checked) does not stop the queue. Inlined
    /// for the check alone: every RX packet passes here, logging or not.
    #[inline]
    pub(crate) fn log_written(&self, iov: &[Iov], len: u64) {
        if self.log.data {
            self.log_written_on(iov, len);
        }
    }

    fn log_written_on(&self, iov: &[Iov], len: u64) {
        OwnerMem.wmb();
        let mut rest = len;
        for seg in iov {
            if rest == 0 {
                break;
            }
            let n = core::cmp::min(seg.len, rest);
            if self.log.mark(seg.gpa, n).is_err() {
                // C returns here, without signalling.
                return;
            }
            rest -= n;
        }
        self.log.flush();
    }
}

fn ring_features(features: u64) -> RingFeatures {
    RingFeatures {
        event_idx: features & bit(feature::VIRTIO_RING_F_EVENT_IDX) != 0,
        indirect: features & bit(feature::VIRTIO_RING_F_INDIRECT_DESC) != 0,
        notify_on_empty: features & bit(feature::VIRTIO_F_NOTIFY_ON_EMPTY) != 0,
        in_order: features & bit(feature::VIRTIO_F_IN_ORDER) != 0,
    }
}

impl<B: Backend> VqState<B> {
    fn new(index: u32, waker: Arc<Waker>, nheads: usize, channel: Arc<MissChannel>) -> Result<Self> {
        let mut iov = KVec::with_capacity(MAX_SEGMENTS, GFP_KERNEL)?;
        iov.resize(MAX_SEGMENTS, Iov::default(), GFP_KERNEL)?;
        let mut heads = KVec::with_capacity(nheads, GFP_KERNEL)?;
        heads.resize(nheads, UsedElem::default(), GFP_KERNEL)?;
        Ok(Self {
            index,
            num: 1,
            addr: None,
            base: 0,
            used_idx: 0,
            busyloop_timeout: 0,
            ring: None,
            stopped: false,
            broken: false,
            features: 0,
            mem: None,
            backend: None,
            kick: None,
            call: None,
            err: None,
            waker,
            stats: Stats::default(),
            log: DirtyLog::default(),
            log_eventfd: None,
            used_log: None,
            iotlb: None,
            iotlb_format: iotlb::FORMAT_V1,
            channel,
            iov,
            heads,
            scratch: B::new_scratch()?,
        })
    }

    /// `VHOST_SET_VRING_NUM`: not while a backend is attached. A split ring
    /// is a power of two, a packed ring any size (a guest may resize it to
    /// 200 with a queue reset); QEMU acks the features first.
    pub(crate) fn set_num(&mut self, num: u32) -> Result {
        if self.backend.is_some() {
            return Err(EBUSY);
        }
        if num == 0 || num > vring::MAX_NUM || (!self.packed() && !num.is_power_of_two()) {
            return Err(EINVAL);
        }
        self.num = num;
        Ok(())
    }

    /// `VHOST_SET_VRING_ADDR`: the avail and used rings aligned; with a
    /// backend attached, the ring inside the user address space (the C
    /// driver's `-EINVAL`; without one, [`VqState::set_backend`] checks it).
    /// A running ring moves to the new addresses where it stands.
    pub(crate) fn set_addr(&mut self, addr: &VringAddr) -> Result {
        if addr.flags & !VHOST_VRING_F_LOG_MASK != 0 {
            return Err(eopnotsupp());
        }
        if addr.avail_user_addr % AVAIL_ALIGN != 0
            || addr.used_user_addr % USED_ALIGN != 0
            || addr.log_guest_addr % USED_ALIGN != 0
        {
            return Err(EINVAL);
        }
        let new = RingAddr { desc: addr.desc_user_addr, avail: addr.avail_user_addr, used: addr.used_user_addr };
        let used_log = (addr.flags & VHOST_VRING_F_LOG_MASK != 0).then_some(addr.log_guest_addr);
        if self.backend.is_some() && (!self.addr_ok(&new) || !self.log_covers_used(self.log, used_log)) {
            return Err(EINVAL);
        }
        self.stop();
        self.addr = Some(new);
        self.used_log = used_log;
        // New addresses are a reconfiguration: a ring the guest corrupted
        // may run again (a stopped one still waits for its backend).
        self.broken = false;
        self.start();
        Ok(())
    }

    /// `VHOST_SET_VRING_BASE`: not while a backend is attached. A split
    /// ring's base is a 16-bit index; a packed ring's encodes both
    /// positions, which must lie inside the ring (`SET_VRING_NUM` comes
    /// first; a later one that leaves them outside keeps the ring from
    /// starting, see [`VqState::start`]).
    pub(crate) fn set_base(&mut self, base: u32) -> Result {
        if self.backend.is_some() {
            return Err(EBUSY);
        }
        let fits = if self.packed() { PackedRing::base_fits(base, self.num) } else { base <= u32::from(u16::MAX) };
        if !fits {
            return Err(EINVAL);
        }
        self.base = base;
        self.stopped = false;
        self.broken = false;
        Ok(())
    }

    /// `VHOST_GET_VRING_BASE`: stops the ring, so the index cannot move
    /// after it is read.
    pub(crate) fn get_base(&mut self) -> u32 {
        self.stop();
        self.stopped = true;
        self.base
    }

    /// `VHOST_SET_VRING_KICK`; `None` unbinds.
    pub(crate) fn set_kick(&mut self, file: Option<PollableFile>) -> Result {
        let poll = match file {
            Some(file) => Some(FilePoll::start(file, POLLIN, self.waker.clone())?),
            None => None,
        };
        // The old poll, if any, leaves its wait queue here.
        self.kick = poll;
        Ok(())
    }

    /// `VHOST_SET_VRING_CALL`; `None` unbinds.
    pub(crate) fn set_call(&mut self, call: Option<EventFd>) {
        self.call = call;
    }

    /// `VHOST_SET_VRING_ERR`; `None` unbinds.
    pub(crate) fn set_err(&mut self, err: Option<EventFd>) {
        self.err = err;
    }

    pub(crate) fn set_busyloop_timeout(&mut self, timeout: u32) {
        self.busyloop_timeout = timeout;
    }

    pub(crate) fn busyloop_timeout(&self) -> u32 {
        self.busyloop_timeout
    }

    /// `SET_FEATURES`: stores the bits, as the C driver does; a running ring
    /// follows them from its next access. Nothing is read from guest memory
    /// here, so the caller's address space does not matter. A change of ring
    /// format, which [`VqState::can_set_features`] allows only without a
    /// backend, makes the old position meaningless: the queue resumes from
    /// the new format's first position (userspace sets the base next, as
    /// QEMU does after `SET_FEATURES`).
    ///
    /// `iotlb` is the queue's new device IOTLB (empty), given exactly when
    /// `features` has `VIRTIO_F_ACCESS_PLATFORM`: as in C, every such call
    /// starts from an empty table.
    pub(crate) fn set_features(&mut self, features: u64, iotlb: Option<QueueIotlb>) {
        self.iotlb = iotlb;
        let old = ring_features(self.features);
        let format_changed = self.format_changes(features);
        self.features = features;
        if format_changed {
            self.stop();
            self.base = if self.packed() { packed::FRESH_BASE } else { 0 };
            self.used_idx = 0;
            return;
        }
        let new = ring_features(features);
        if let Some(ring) = self.ring.as_mut() {
            ring.set_features(new);
            if new.event_idx != old.event_idx {
                // The guest's notification state must be published again
                // in the new scheme: let the worker re-arm it.
                self.waker.wake();
            }
        }
    }

    /// `SET_MEM_TABLE`: the new table is used from the next access. A ring
    /// that waited only for a table starts; a stopped one stays stopped.
    pub(crate) fn set_mem(&mut self, mem: Arc<MemTable>) {
        self.mem = Some(mem);
        // A guest that used memory before the table had it (a hotplug
        // race) may run again; a stopped ring stays stopped.
        self.broken = false;
        // A logged packed ring finds its descriptor ring's guest address
        // through the table: look it up again in the new one.
        if self.used_log.is_some() && self.ring.as_ref().is_some_and(Ring::is_packed) {
            self.stop();
        }
        if self.ring.is_none() {
            self.start();
        }
    }

    /// `VHOST_NET_SET_BACKEND`: attaches `backend` (or with `None`
    /// detaches). On error nothing has changed: the old backend stays
    /// attached and running (the C driver's `err_used`). The old backend is
    /// released here, under the lock, before the worker can use the new
    /// one: packets it had taken off the tap go back in order.
    pub(crate) fn set_backend(&mut self, backend: Option<B>) -> Result {
        let mut backend = backend;
        let used_idx = match backend.as_mut() {
            Some(new) => {
                // C writes the used flags of a ring it has no address for
                // at address 0, and faults.
                let addr = self.addr.ok_or(EFAULT)?;
                let used_idx = self.init_access(&addr)?;
                new.enable(&self.waker)?;
                used_idx
            }
            None => self.used_idx,
        };
        self.stop();
        drop(self.backend.take());
        self.backend = backend;
        if self.backend.is_some() {
            self.used_idx = used_idx;
        }
        self.stopped = false;
        self.broken = false;
        self.start();
        Ok(())
    }

    /// `VHOST_NET_SET_BACKEND` with the file that is attached already: as
    /// in the C driver nothing is rebuilt, but a ring `GET_VRING_BASE`
    /// stopped runs again (in C it never stopped).
    pub(crate) fn reattach(&mut self) {
        self.stopped = false;
        self.start();
    }

    /// What `VHOST_NET_SET_BACKEND` checks before it looks at the fd, as
    /// the C driver does (`vhost_vq_access_ok`): a memory table must be
    /// set and the log must have room for what the queue would log
    /// (`-EFAULT`, for an unbind too), and the ring addresses, if set, in
    /// user space. A ring without addresses can only be unbound.
    pub(crate) fn check_access(&self) -> Result {
        // Addresses that were set must lie in user space (`vq_access_ok`;
        // with a backend attached, SET_VRING_ADDR refused any other).
        if self.addr.is_some_and(|addr| !self.addr_ok(&addr)) || !self.log_covers(self.log) {
            return Err(EFAULT);
        }
        Ok(())
    }

    /// Whether `log` has room for the bits of the used ring at `used_log`
    /// (C's `vq_log_used_access_ok`): the ring's size with `avail_event`
    /// only under event-idx (`vhost_get_used_size`), or a packed ring's
    /// device event area.
    /// With the device IOTLB the used ring is logged through its I/O
    /// virtual address, which has no log room to check (nor does C).
    fn log_covers_used(&self, log: DirtyLog, used_log: Option<u64>) -> bool {
        if self.iotlb.is_some() {
            return true;
        }
        let event_idx = self.features & bit(feature::VIRTIO_RING_F_EVENT_IDX) != 0;
        let size = if self.packed() { PackedRing::sizes(self.num).2 } else { Vring::sizes(self.num, event_idx).2 };
        match used_log {
            Some(gpa) => log.covers(gpa, size, user_limit()),
            None => true,
        }
    }

    /// Whether the acked features make this a packed ring.
    fn packed(&self) -> bool {
        self.features & bit(feature::VIRTIO_F_RING_PACKED) != 0
    }

    fn format_changes(&self, features: u64) -> bool {
        (self.features ^ features) & bit(feature::VIRTIO_F_RING_PACKED) != 0
    }

    /// Whether the ring's addresses would change meaning: I/O virtual with
    /// `VIRTIO_F_ACCESS_PLATFORM`, the owner's without.
    fn address_space_changes(&self, features: u64) -> bool {
        (self.features ^ features) & bit(feature::VIRTIO_F_ACCESS_PLATFORM) != 0
    }

    /// Whether `SET_FEATURES` may set `features`: the ring format and the
    /// address space change only while no backend is attached (`EBUSY`
    /// otherwise), since the ring's addresses, size and log room were
    /// checked for the old ones. QEMU acks the features before it attaches
    /// a backend.
    pub(crate) fn can_set_features(&self, features: u64) -> bool {
        self.backend.is_none() || !(self.format_changes(features) || self.address_space_changes(features))
    }

    /// Whether the ring's addresses can be used (`vq_access_ok`): inside
    /// the user address space, unless they are I/O virtual addresses,
    /// which the device IOTLB checks at each access; those must still not
    /// wrap past the end of the 64-bit space.
    fn addr_ok(&self, addr: &RingAddr) -> bool {
        match self.iotlb {
            Some(_) => addr.end_below(self.num, self.packed(), u64::MAX),
            None => addr.in_user_space(self.num, self.packed()),
        }
    }

    /// `VHOST_SET_BACKEND_FEATURES`: the format of this queue's misses.
    pub(crate) fn set_iotlb_format(&mut self, format: u32) {
        self.iotlb_format = format;
    }

    /// `VHOST_IOTLB_UPDATE` on this queue's copy of the table; refused
    /// without a table (the writer gets `EFAULT`, as in C).
    pub(crate) fn iotlb_update(&mut self, iova: u64, size: u64, uaddr: u64, perm: u8) -> Result<(), MessageError> {
        let iotlb = self.iotlb.as_mut().ok_or(MessageError::NoIotlb)?;
        iotlb.update(iova, size, uaddr, perm, user_limit()).map_err(MessageError::Update)
    }

    /// `VHOST_IOTLB_INVALIDATE` on this queue's copy. Holding the queue's
    /// lock here means no run of the worker is in progress: the next one
    /// translates through the table as it is now.
    pub(crate) fn iotlb_invalidate(&mut self, iova: u64, size: u64) -> Result<(), MessageError> {
        let iotlb = self.iotlb.as_mut().ok_or(MessageError::NoIotlb)?;
        iotlb.invalidate(iova, size);
        Ok(())
    }

    /// Whether the queue can run with `log` (C's `vq_log_access_ok`): it
    /// has a memory table (C refuses a queue without one, log or not), the
    /// log has room for every region with `VHOST_F_LOG_ALL`, and for the
    /// used ring with `VHOST_VRING_F_LOG`.
    fn log_covers(&self, log: DirtyLog) -> bool {
        let Some(mem) = self.mem.as_deref() else { return false };
        let table = self.features & bit(feature::VHOST_F_LOG_ALL) == 0 || log.covers_table(mem, user_limit());
        table && self.log_covers_used(log, self.used_log)
    }

    /// `VHOST_SET_LOG_BASE` for this queue: refused (`-EFAULT`) if a
    /// running queue's writes would not fit, checked again at attach.
    pub(crate) fn set_log_base(&mut self, log: DirtyLog) -> Result {
        if self.backend.is_some() && !self.log_covers(log) {
            return Err(EFAULT);
        }
        self.log = log;
        Ok(())
    }

    /// `VHOST_SET_LOG_FD` for this queue; `None` unbinds.
    pub(crate) fn set_log_eventfd(&mut self, eventfd: Option<Arc<EventFd>>) {
        self.log_eventfd = eventfd;
    }

    /// Whether `SET_FEATURES` may turn `VHOST_F_LOG_ALL` on: every region
    /// of an attached queue's table has room in its log (C's
    /// `vhost_log_access_ok`; a queue with no table refuses).
    pub(crate) fn can_log_all(&self) -> bool {
        self.backend.is_none() || self.mem.as_deref().is_some_and(|mem| self.log.covers_table(mem, user_limit()))
    }

    /// Whether a new memory table can replace this queue's (C's
    /// `memory_access_ok`): with `VHOST_F_LOG_ALL`, an attached queue's log
    /// must have room for it.
    pub(crate) fn can_take_mem(&self, mem: &MemTable) -> bool {
        self.backend.is_none()
            || self.features & bit(feature::VHOST_F_LOG_ALL) == 0
            || self.log.covers_table(mem, user_limit())
    }

    /// Whether the attached backend is `file`.
    pub(crate) fn backend_is(&self, file: &File) -> bool {
        self.backend.as_ref().is_some_and(|backend| backend.is_file(file))
    }

    /// `vhost_vq_init_access`: the ring must lie in the user address space
    /// and be reachable, the flags the device writes writable (they are
    /// reset, so a stale `NO_NOTIFY` or `DISABLE` does not linger, and the
    /// write is logged), and a split ring continues from the guest's used
    /// index, which it returns (a packed ring's used position is in its
    /// base). `-EFAULT` otherwise.
    ///
    /// With the device IOTLB the ring's addresses are translated: userspace
    /// maps the used ring first (QEMU does), and the driver's part is not
    /// probed, as C does not (QEMU maps only the used ring ahead).
    fn init_access(&self, addr: &RingAddr) -> Result<u16> {
        if !self.addr_ok(addr) {
            return Err(EFAULT);
        }
        match &self.iotlb {
            None => self.init_access_in(&OwnerMem, addr, true),
            Some(iotlb) => self.init_access_in(&Translated::new(&OwnerMem, iotlb), addr, false),
        }
    }

    /// [`VqState::init_access`] through the ring memory `mem`.
    fn init_access_in<M: GuestMemory>(&self, mem: &M, addr: &RingAddr, probe_driver: bool) -> Result<u16> {
        let packed = self.packed();
        // The device's flags are reset; a field of the driver's part is
        // read to check it is reachable.
        let (device_flags, driver_probe) = if packed {
            (PackedRing::device_flags_addr_of(addr.used), PackedRing::driver_flags_addr_of(addr.avail))
        } else {
            (Vring::used_flags_addr_of(addr.used), Vring::avail_idx_addr_of(addr.avail))
        };
        mem.write_u16(device_flags, 0).map_err(|_| EFAULT)?;
        if let Some(used_log) = self.used_log_of(addr) {
            let log = self.run_log();
            mem.wmb();
            // As on the data path, a log the owner unmapped does not fail
            // the attach.
            let _unwritable: Result<(), LogError> =
                log.mark(used_log.saturating_add(device_flags - addr.used), 2);
            log.flush();
        }
        if probe_driver {
            mem.read_u16(driver_probe).map_err(|_| EFAULT)?;
        }
        if packed {
            return Ok(self.used_idx);
        }
        mem.read_u16(Vring::used_idx_addr_of(addr.used)).map_err(|_| EFAULT)
    }

    /// Where the used ring's writes are logged, if `VHOST_VRING_F_LOG` asks
    /// for it: at `log_guest_addr`, or with the device IOTLB at the used
    /// ring's own I/O virtual address, which the log translates (C ignores
    /// `log_guest_addr` then too).
    fn used_log_of(&self, addr: &RingAddr) -> Option<u64> {
        match self.iotlb {
            None => self.used_log,
            Some(_) => self.used_log.map(|_| addr.used),
        }
    }

    /// Detaches the backend and stops the ring: the first step of taking
    /// the device apart, after which the worker finds nothing to do.
    pub(crate) fn detach(&mut self) -> Option<B> {
        self.stop();
        self.kick = None;
        self.backend.take()
    }

    /// The state of a freshly opened queue (`RESET_OWNER`, `close`).
    pub(crate) fn reset(&mut self) {
        self.iotlb = None;
        self.iotlb_format = iotlb::FORMAT_V1;
        self.stop();
        self.kick = None;
        self.backend = None;
        self.call = None;
        self.err = None;
        self.mem = None;
        self.addr = None;
        self.num = 1;
        self.base = 0;
        self.used_idx = 0;
        self.busyloop_timeout = 0;
        self.stopped = false;
        self.broken = false;
        self.features = 0;
        self.log = DirtyLog::default();
        self.log_eventfd = None;
        self.used_log = None;
    }

    /// Starts the ring if everything it needs is there, in the format the
    /// features ask for.
    fn start(&mut self) {
        if self.ring.is_some() || self.stopped || self.broken || self.backend.is_none() {
            return;
        }
        let (Some(addr), Some(mem)) = (self.addr, self.mem.as_deref()) else { return };
        let used_log = self.used_log_of(&addr);
        let layout = RingLayout { num: self.num, desc: addr.desc, avail: addr.avail, used: addr.used, used_log };
        let features = ring_features(self.features);
        let ring = if self.packed() && self.iotlb.is_some() {
            // With the device IOTLB the descriptor ring is logged through
            // its I/O virtual address, like the used ring of a split ring.
            PackedRing::resume(layout, Some(addr.desc), self.base, features).map(Ring::Packed)
        } else if self.packed() {
            // A packed ring's used entries go into the descriptor ring, which
            // userspace gave by owner address only: its guest address for
            // the log comes from the memory table, and the log must have
            // room for it.
            let desc_size = PackedRing::sizes(self.num).0;
            let desc_log = memory::guest_address(mem, addr.desc, desc_size);
            if self.used_log.is_some() {
                let Some(desc_gpa) = desc_log else {
                    self.fail(VringError::NotMapped);
                    return;
                };
                if !self.log.covers(desc_gpa, desc_size, user_limit()) {
                    self.fail(VringError::BadLayout);
                    return;
                }
            }
            // A base or size set after the other, or misaligned parts.
            PackedRing::resume(layout, desc_log, self.base, features).map(Ring::Packed)
        } else {
            // A size set for a packed ring before the format changed.
            Vring::resume(layout, self.base as u16, self.used_idx, features).map(Ring::Split)
        };
        let Some(ring) = ring else {
            self.fail(VringError::BadLayout);
            return;
        };
        self.ring = Some(ring);
        self.waker.wake();
    }

    /// Stops the ring, keeping its position.
    fn stop(&mut self) {
        if let Some(ring) = self.ring.take() {
            match ring.base() {
                RingBase::Split { avail, used } => {
                    self.base = u32::from(avail);
                    self.used_idx = used;
                }
                RingBase::Packed(base) => self.base = base,
            }
        }
    }

    /// The running ring and what the data path needs with it, or `None`
    /// if the queue is not running.
    pub(crate) fn active(&mut self) -> Option<ActiveRing<'_, B>> {
        let (ring, mem, backend) = (self.ring.as_mut()?, self.mem.as_deref()?, self.backend.as_mut()?);
        Some(ActiveRing {
            ring,
            mem,
            backend,
            scratch: &mut self.scratch,
            iov: &mut self.iov,
            heads: &mut self.heads,
            stats: &mut self.stats,
            features: self.features,
            iotlb: self.iotlb.as_ref(),
            waker: &self.waker,
            call: self.call.as_ref(),
            busyloop_timeout: self.busyloop_timeout,
            log: RunLog::new(
                self.log,
                self.log_eventfd.as_deref(),
                self.features,
                self.iotlb.as_ref().map(|iotlb| (iotlb, &mem[..])),
            ),
        })
    }

    /// The log as a run of the data path would see it.
    fn run_log(&self) -> RunLog<'_> {
        let iova = match (&self.iotlb, self.mem.as_deref()) {
            (Some(iotlb), Some(mem)) => Some((iotlb, &mem[..])),
            _ => None,
        };
        RunLog::new(self.log, self.log_eventfd.as_deref(), self.features, iova)
    }

    /// Reports an error of the data path: error eventfd, counter, one debug
    /// line. A malformed ring stays stopped until userspace reconfigures
    /// it, so a hostile guest cannot make the worker spin or flood the log.
    /// A fault on the owner's memory (userspace unmapped or protected a
    /// ring) is not the guest's doing: the queue asks for a kick and tries
    /// again at the next one, as the C driver does for every error.
    pub(crate) fn fail(&mut self, err: VringError) {
        self.stats.errors += 1;
        if let Some(eventfd) = &self.err {
            eventfd.signal();
        }
        pr_debug!("vhost-net-rs: vq {}: {:?}\n", self.index, err);
        if err != VringError::Fault {
            self.stop();
            self.broken = true;
        } else if let Some(mut active) = self.active() {
            active.ask_for_kick();
        }
    }

    /// One line of `/proc/PID/fdinfo/FD`.
    pub(crate) fn show(&self, m: &SeqFile) {
        let stats = &self.stats;
        seq_print!(
            m,
            "vq{}:\tnum={} last_avail_idx={} running={} broken={} backend={} \
             packets={} bytes={} wakeups={} calls={} errors={} drops={} dirty_log={} ring={} \
             iotlb={} iotlb_entries={} iotlb_misses={}\n",
            self.index,
            self.num,
            // A packed ring's avail position: index and wrap counter (bit 15).
            match self.ring.as_ref().map(Ring::base) {
                Some(RingBase::Split { avail, .. }) => u32::from(avail),
                Some(RingBase::Packed(base)) => base & 0xffff,
                None if self.packed() => self.base & 0xffff,
                None => self.base,
            },
            u8::from(self.ring.is_some()),
            u8::from(self.broken),
            u8::from(self.backend.is_some()),
            stats.packets,
            stats.bytes,
            self.waker.wakeups(),
            stats.calls,
            stats.errors,
            stats.drops,
            // What is being logged for a migration: the data the device
            // writes (VHOST_F_LOG_ALL), the used ring (VHOST_VRING_F_LOG).
            match (self.features & bit(feature::VHOST_F_LOG_ALL) != 0, self.used_log.is_some()) {
                (false, false) => "off",
                (true, false) => "data",
                (false, true) => "used",
                (true, true) => "data+used",
            },
            if self.packed() { "packed" } else { "split" },
            u8::from(self.iotlb.is_some()),
            self.iotlb.as_ref().map_or(0, |iotlb| iotlb.len()),
            stats.iotlb_misses
        );
    }
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
    pub(crate) fn new(index: u32, channel: Arc<MissChannel>) -> Result<Arc<Self>> {
        let waker = Waker::new()?;
        let state = VqState::new(index, waker.clone(), B::HEADS, channel)?;
        Arc::pin_init(pin_init!(VirtQueue { waker, state <- new_mutex!(state) }), GFP_KERNEL)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VqState<B>> {
        self.state.lock()
    }

    /// Has the worker run the queue (an update answered its miss).
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }
}

impl<B: Backend> VqState<B> {
    /// One run of the data path, if the ring runs.
    fn service(&mut self) -> bool {
        if let Err(err) = self.check_ring_mapped() {
            self.stopped_by(err);
            return false;
        }
        // Borrowed where `active()` built it: bound by value, the 160-byte
        // ring view was copied on every run.
        let mut active = self.active();
        let Some(active) = active.as_mut() else { return false };
        match B::run(active) {
            Ok(more) => more,
            Err(err) => {
                self.stopped_by(err);
                false
            }
        }
    }

    /// A run ended on `err`: a device IOTLB miss is posted for userspace,
    /// anything else is a failure ([`VqState::fail`]).
    fn stopped_by(&mut self, err: VringError) {
        if err != VringError::IotlbMiss {
            self.fail(err);
            return;
        }
        let fault = self.iotlb.as_ref().and_then(|iotlb| iotlb.last_fault());
        if let Some(TranslateError::Miss { iova, access }) = fault {
            let miss = Miss { iova, access, format: self.iotlb_format };
            if self.channel.post(self.index as usize, miss) {
                self.stats.iotlb_misses += 1;
            }
        }
    }

    /// With the device IOTLB, whether the running ring's parts are mapped
    /// for what the device does with them, before a run touches them (C's
    /// `vq_meta_prefetch`): the run then cannot stop halfway through
    /// publishing used entries for a miss. The descriptors of a packed
    /// ring are written too (used entries go there).
    fn check_ring_mapped(&self) -> Result<(), VringError> {
        let (Some(iotlb), Some(addr), Some(ring)) = (&self.iotlb, self.addr, &self.ring) else { return Ok(()) };
        let event_idx = self.features & bit(feature::VIRTIO_RING_F_EVENT_IDX) != 0;
        let (desc, driver, device) =
            if ring.is_packed() { PackedRing::sizes(self.num) } else { Vring::sizes(self.num, event_idx) };
        iotlb::check_range(iotlb, addr.desc, desc, Access::Read)?;
        if ring.is_packed() {
            iotlb::check_range(iotlb, addr.desc, desc, Access::Write)?;
        }
        iotlb::check_range(iotlb, addr.avail, driver, Access::Read)?;
        iotlb::check_range(iotlb, addr.used, device, Access::Write)?;
        Ok(())
    }
}

impl<B: Backend> Work for VirtQueue<B> {
    fn waker(&self) -> &Waker {
        &self.waker
    }

    fn run(&self) -> bool {
        self.state.lock().service()
    }
}
