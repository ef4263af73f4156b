// SPDX-License-Identifier: GPL-2.0

//! A run of the data path: the running ring the backend borrows
//! ([`ActiveRing`]), the dirty log of one run ([`RunLog`]), and what a run
//! that ends early does (a device IOTLB miss is posted, anything else fails
//! the ring).

use crate::tap_glue::eventfd::EventFd;
use crate::vhost::device_iotlb::QueueIotlb;
use crate::vring::dirty_log::{DirtyLog, LogError, WriteLog};
use crate::vring::Features;

use super::*;
use crate::tap_glue::shim::warn_queue_stopped;
use crate::tap_glue::uaccess::OwnerMem;
use crate::tap_glue::worker::{should_stop_polling, Waker};
use crate::vring::iotlb::{self, Miss, Translated};
use crate::vring::mem_table::{self, Access, Region, Translate, TranslateError};
use crate::vring::packed::PackedRing;
use crate::vring::ring::Ring;
use crate::vring::ring::RingBase;
use crate::vring::RingLayout;
use crate::vring::{Iov, SplitRing, Stop, UsedElem, UserMemory};
use core::cell::Cell;
use kernel::{
    prelude::*,
    sync::Arc,
    time::{Instant, Monotonic},
};

/// Code that runs on a ring's memory, whichever it is: see
/// [`with_ring_memory`].
pub(crate) trait OnRingMemory {
    /// What the code returns.
    type Output;
    /// Runs with the ring's memory `mem`, whose addresses `translate`
    /// translates to the owner's.
    fn run<M: UserMemory, T: Translate + ?Sized>(self, mem: &M, translate: &T) -> Self::Output;
}

/// Runs `f` on the ring's memory: the owner's, with the memory table
/// `table`, or with the device IOTLB `iotlb`, the owner's seen through it
/// (every address an I/O virtual one).
pub(crate) fn with_ring_memory<F: OnRingMemory>(
    owner: &OwnerMem,
    table: &[Region],
    iotlb: Option<&QueueIotlb>,
    f: F,
) -> F::Output {
    match iotlb {
        None => f.run(owner, table),
        Some(iotlb) => f.run(&Translated::new(owner, iotlb), iotlb),
    }
}

/// A running ring, borrowed by the data path for one run.
pub(crate) struct ActiveRing<'a, B: Backend> {
    /// The capability to reach the owner's memory: runs happen in the
    /// worker, in the owner's address space.
    pub(crate) owner: &'a OwnerMem,
    pub(crate) ring: &'a mut Ring,
    pub(crate) mem: &'a MemTable,
    pub(crate) backend: &'a mut B,
    pub(crate) scratch: &'a mut B::Scratch,
    pub(crate) iov: &'a mut [Iov],
    pub(crate) heads: &'a mut [UsedElem],
    pub(crate) stats: &'a mut Stats,
    /// The negotiated features, as the backend decoded them.
    pub(crate) config: B::Config,
    /// The device IOTLB that the ring's and the buffers' addresses go
    /// through, or `None` for the memory table.
    pub(crate) iotlb: Option<&'a QueueIotlb>,
    pub(crate) waker: &'a Arc<Waker>,
    pub(super) call: Option<&'a EventFd>,
    pub(super) busyloop_timeout: u32,
    pub(crate) log: RunLog<'a>,
}

/// The dirty log as one run of the data path sees it.
///
/// Every write the device makes to guest memory goes through one of
/// [`Ring`]'s methods or [`ActiveRing::log_written`], and each of them
/// marks its pages here, then has userspace told with [`RunLog::flush`].
pub(crate) struct RunLog<'a> {
    owner: &'a OwnerMem,
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
            None => self.log.mark(&self.owner.bitmap(), addr, len)?,
            Some((iotlb, regions)) => iotlb.for_each_piece(addr, len, Access::Write, |piece| {
                mem_table::for_each_alias(regions, piece.uaddr, piece.len, |gpa, n| {
                    self.log.mark(&self.owner.bitmap(), gpa, n)
                })
            })?,
        }
        self.marked.set(true);
        Ok(())
    }
}

impl<'a> RunLog<'a> {
    pub(super) fn new(
        owner: &'a OwnerMem,
        log: DirtyLog,
        eventfd: Option<&'a EventFd>,
        features: Features,
        iova: Option<(&'a QueueIotlb, &'a [Region])>,
    ) -> Self {
        Self {
            owner,
            log,
            iova,
            eventfd,
            data: features.log_all(),
            marked: Cell::new(false),
        }
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
    ///
    /// An error means the entries could not be added. Once they are, this
    /// succeeds: the caller must not add them again (C's
    /// `vhost_add_used_and_signal_n` adds once, whatever the signal's fate).
    pub(crate) fn publish<M: UserMemory>(&mut self, mem: &M, count: usize) -> Result<(), Stop> {
        if count == 0 {
            return Ok(());
        }
        self.ring.add_used(mem, &self.log, &self.heads[..count])?;
        self.log.flush();
        // A suppression state that cannot be read (`avail->flags`,
        // `used_event`, the driver event area) means "signal", as in C's
        // vhost_notify ("Failed to get flags": return true): a spurious
        // interrupt costs the guest little, a lost one stalls it.
        if self.ring.should_notify(mem).unwrap_or(true) {
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
    pub(crate) fn wait_for_kick<M: UserMemory>(&mut self, mem: &M) -> Result<bool, Stop> {
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
        mut ready: impl FnMut(&mut Self) -> Result<bool, Stop>,
    ) -> Result<bool, Stop> {
        if self.busyloop_timeout == 0 {
            return Ok(false);
        }
        let start = Instant::<Monotonic>::now();
        loop {
            if ready(self)? {
                return Ok(true);
            }
            if should_stop_polling()
                || start.elapsed().as_micros_ceil() >= i64::from(self.busyloop_timeout)
            {
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
        struct EnableNotify<'r>(&'r mut Ring, &'r RunLog<'r>);
        impl OnRingMemory for EnableNotify<'_> {
            type Output = Result<bool, Stop>;
            fn run<M: UserMemory, T: Translate + ?Sized>(
                self,
                mem: &M,
                _: &T,
            ) -> <Self as OnRingMemory>::Output {
                self.0.enable_notify(mem, self.1)
            }
        }
        let _faulted_again = with_ring_memory(
            self.owner,
            self.mem,
            self.iotlb,
            EnableNotify(self.ring, &self.log),
        );
        self.log.flush();
    }

    /// Asks the guest not to kick while this run polls the ring
    /// (`vhost_disable_notify`).
    pub(crate) fn disable_notify<M: UserMemory>(&mut self, mem: &M) -> Result<(), Stop> {
        self.ring.disable_notify(mem, &self.log)?;
        self.log.flush();
        Ok(())
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
        self.owner.wmb();
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

impl<B: Backend> VqState<B> {
    /// One run of the data path, if the ring runs.
    pub(super) fn service(&mut self, owner: &OwnerMem) -> bool {
        if let Err(stop) = self.check_ring_mapped() {
            self.run_ended(&stop, owner);
            return false;
        }
        // Borrowed where `active()` built it: bound by value, the 160-byte
        // ring view was copied on every run.
        let mut active = self.active(owner);
        let Some(active) = active.as_mut() else {
            return false;
        };
        struct RunBackend<'r, 'a, B: Backend>(&'r mut ActiveRing<'a, B>);
        impl<B: Backend> OnRingMemory for RunBackend<'_, '_, B> {
            type Output = Result<bool, B::Error>;
            fn run<M: UserMemory, T: Translate + ?Sized>(
                self,
                mem: &M,
                translate: &T,
            ) -> Self::Output {
                B::run(self.0, mem, translate)
            }
        }
        let (owner_mem, table, iotlb) = (active.owner, active.mem, active.iotlb);
        match with_ring_memory(owner_mem, table, iotlb, RunBackend(active)) {
            Ok(more) => more,
            Err(err) => {
                self.run_ended(&err, owner);
                false
            }
        }
    }

    /// A run ended early on `err`. A device IOTLB miss is posted for
    /// userspace and the queue keeps running; a fault on the owner's memory
    /// (userspace unmapped or protected a ring) is not the guest's doing:
    /// the queue asks for a kick and tries again at the next one, as the C
    /// driver does for every error; anything else stops the ring
    /// ([`VqState::fail`]).
    fn run_ended<E: RunError>(&mut self, err: &E, owner: &OwnerMem) {
        match err.ended() {
            Ended::Missed => self.post_miss(),
            Ended::Faulted => {
                self.report(err);
                if let Some(mut active) = self.active(owner) {
                    active.ask_for_kick();
                }
            }
            Ended::Broken => {
                // Once per burst for the module: a guest that breaks its
                // rings again and again cannot flood the log.
                warn_queue_stopped(self.index, err);
                self.fail(err);
            }
        }
    }

    /// Posts the miss the device IOTLB last saw for userspace to answer.
    fn post_miss(&mut self) {
        let fault = self.iotlb.as_ref().and_then(|iotlb| iotlb.last_fault());
        if let Some(TranslateError::Miss { iova, access }) = fault {
            let miss = Miss {
                iova,
                access,
                format: self.iotlb_format,
            };
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
    fn check_ring_mapped(&self) -> Result<(), Stop> {
        let (Some(iotlb), Some(addr), Some(ring)) = (&self.iotlb, self.addr, &self.ring) else {
            return Ok(());
        };
        let event_idx = self.features.event_idx();
        let (desc, driver, device) = if ring.is_packed() {
            PackedRing::sizes(self.num)
        } else {
            SplitRing::sizes(self.num, event_idx)
        };
        iotlb::check_range(iotlb, addr.desc, desc, Access::Read)?;
        if ring.is_packed() {
            iotlb::check_range(iotlb, addr.desc, desc, Access::Write)?;
        }
        iotlb::check_range(iotlb, addr.avail, driver, Access::Read)?;
        iotlb::check_range(iotlb, addr.used, device, Access::Write)?;
        Ok(())
    }
}

/// Starting and stopping the ring, and lending it to a run.
impl<B: Backend> VqState<B> {
    /// Starts the ring if everything it needs is there, in the format the
    /// features ask for.
    pub(super) fn start(&mut self) {
        if self.ring.is_some() || self.stopped || self.broken || self.backend.is_none() {
            return;
        }
        let (Some(addr), Some(mem)) = (self.addr, self.mem.as_deref()) else {
            return;
        };
        let used_log = self.used_log_of(&addr);
        let layout = RingLayout {
            num: self.num,
            desc: addr.desc,
            avail: addr.avail,
            used: addr.used,
            used_log,
        };
        let features = self.features;
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
            let desc_log = mem_table::guest_address(mem, addr.desc, desc_size);
            if self.used_log.is_some() {
                let Some(desc_gpa) = desc_log else {
                    self.fail(&VringError::NotMapped);
                    return;
                };
                if !self.log.covers(desc_gpa, desc_size, user_limit()) {
                    self.fail(&VringError::BadLayout);
                    return;
                }
            }
            // A base or size set after the other, or misaligned parts.
            PackedRing::resume(layout, desc_log, self.base, features).map(Ring::Packed)
        } else {
            // A size set for a packed ring before the format changed.
            SplitRing::resume(layout, self.base as u16, self.used_idx, features).map(Ring::Split)
        };
        let Some(ring) = ring else {
            self.fail(&VringError::BadLayout);
            return;
        };
        self.ring = Some(ring);
        self.waker.wake();
    }

    /// Stops the ring, keeping its position.
    pub(super) fn stop(&mut self) {
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
    pub(crate) fn active<'a>(&'a mut self, owner: &'a OwnerMem) -> Option<ActiveRing<'a, B>> {
        let (ring, mem, backend) = (
            self.ring.as_mut()?,
            self.mem.as_deref()?,
            self.backend.as_mut()?,
        );
        Some(ActiveRing {
            owner,
            ring,
            mem,
            backend,
            scratch: &mut self.scratch,
            iov: &mut self.iov,
            heads: &mut self.heads,
            stats: &mut self.stats,
            config: self.config,
            iotlb: self.iotlb.as_ref(),
            waker: &self.waker,
            call: self.call.as_ref(),
            busyloop_timeout: self.busyloop_timeout,
            log: RunLog::new(
                owner,
                self.log,
                self.log_eventfd.as_deref(),
                self.features,
                self.iotlb.as_ref().map(|iotlb| (iotlb, &mem[..])),
            ),
        })
    }

    /// The log as a run of the data path would see it.
    pub(super) fn run_log<'a>(&'a self, owner: &'a OwnerMem) -> RunLog<'a> {
        let iova = match (&self.iotlb, self.mem.as_deref()) {
            (Some(iotlb), Some(mem)) => Some((iotlb, &mem[..])),
            _ => None,
        };
        RunLog::new(
            owner,
            self.log,
            self.log_eventfd.as_deref(),
            self.features,
            iova,
        )
    }
}
