// SPDX-License-Identifier: GPL-2.0

//! The queue's configuration rules: every `VHOST_SET_VRING_*` ioctl, and
//! `SET_MEM_TABLE`, `SET_FEATURES`, `SET_LOG_BASE` and `NET_SET_BACKEND` as
//! they touch one queue, as methods of [`VqState`], the state under the
//! queue's lock.

use crate::tap_glue::compat::errno;
use crate::tap_glue::eventfd::EventFd;
use crate::tap_glue::file_poll::{FilePoll, PollableFile, POLLIN};
use crate::tap_glue::uaccess::{user_limit, OwnerMem};
use crate::tap_glue::worker::Waker;
use crate::vhost::device_iotlb::{self, MessageError, PostMiss, QueueIotlb};
use crate::vhost::uapi::{VringAddr, VHOST_VRING_F_LOG_MASK};
use crate::vring::dirty_log::{DirtyLog, LogError, WriteLog};
use crate::vring::iotlb::{self};

use crate::vring::packed::{self, PackedRing};
use crate::vring::ring::{Ring, RingBase};
use crate::vring::Features;
use crate::vring::{self, Iov, SplitRing, UsedElem, UserMemory, MAX_SEGMENTS};

use super::*;
use crate::vring::mem_table::Translate;
use core::fmt::Debug;
use kernel::{fs::File, prelude::*, seq_file::SeqFile, seq_print, sync::Arc};

impl<B: Backend> VqState<B> {
    pub(super) fn new(
        index: u32,
        waker: Arc<Waker>,
        nheads: usize,
        channel: Arc<dyn PostMiss>,
    ) -> Result<Self> {
        let iov = KVec::from_elem(Iov::default(), MAX_SEGMENTS, GFP_KERNEL)?;
        let heads = KVec::from_elem(UsedElem::default(), nheads, GFP_KERNEL)?;
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
            features: Features::default(),
            config: B::Config::default(),
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

    /// `VHOST_NET_SET_BACKEND`: attaches `backend` (or with `None`
    /// detaches). On error nothing has changed: the old backend stays
    /// attached and running (the C driver's `err_used`). The old backend is
    /// released here, under the lock, before the worker can use the new
    /// one: packets it had taken off the tap go back in order.
    pub(crate) fn set_backend(&mut self, backend: Option<B>, owner: &OwnerMem) -> Result {
        let mut backend = backend;
        let used_idx = match backend.as_mut() {
            Some(new) => {
                // C writes the used flags of a ring it has no address for
                // at address 0, and faults.
                let addr = self.addr.ok_or(EFAULT)?;
                let used_idx = self.init_access(&addr, owner)?;
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
        let event_idx = self.features.event_idx();
        let size = if self.packed() {
            PackedRing::sizes(self.num).2
        } else {
            SplitRing::sizes(self.num, event_idx).2
        };
        match used_log {
            Some(gpa) => log.covers(gpa, size, user_limit()),
            None => true,
        }
    }

    /// Whether the acked features make this a packed ring.
    pub(super) fn packed(&self) -> bool {
        self.features.packed()
    }

    fn format_changes(&self, features: Features) -> bool {
        self.features.packed() != features.packed()
    }

    /// Whether the ring's addresses would change meaning: I/O virtual with
    /// `VIRTIO_F_ACCESS_PLATFORM`, the owner's without.
    fn address_space_changes(&self, features: Features) -> bool {
        self.features.access_platform() != features.access_platform()
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

    /// Whether the queue can run with `log` (C's `vq_log_access_ok`): it
    /// has a memory table (C refuses a queue without one, log or not), the
    /// log has room for every region with `VHOST_F_LOG_ALL`, and for the
    /// used ring with `VHOST_VRING_F_LOG`.
    fn log_covers(&self, log: DirtyLog) -> bool {
        let Some(mem) = self.mem.as_deref() else {
            return false;
        };
        let table = !self.features.log_all() || log.covers_table(mem, user_limit());
        table && self.log_covers_used(log, self.used_log)
    }

    /// Whether the attached backend is `file`.
    pub(crate) fn backend_is(&self, file: &File) -> bool {
        self.backend
            .as_ref()
            .is_some_and(|backend| backend.is_file(file))
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
    fn init_access(&self, addr: &RingAddr, owner: &OwnerMem) -> Result<u16> {
        struct InitAccess<'r, B: Backend>(&'r VqState<B>, &'r RingAddr, &'r OwnerMem);
        impl<B: Backend> OnRingMemory for InitAccess<'_, B> {
            type Output = Result<u16>;
            fn run<M: UserMemory, T: Translate + ?Sized>(
                self,
                mem: &M,
                _: &T,
            ) -> <Self as OnRingMemory>::Output {
                self.0.init_access_in(mem, self.1, self.2)
            }
        }
        if !self.addr_ok(addr) {
            return Err(EFAULT);
        }
        let table = self.mem.as_deref().map_or(&[][..], |table| &table[..]);
        with_ring_memory(
            owner,
            table,
            self.iotlb.as_ref(),
            InitAccess(self, addr, owner),
        )
    }

    /// [`VqState::init_access`] through the ring memory `mem`.
    fn init_access_in<M: UserMemory>(
        &self,
        mem: &M,
        addr: &RingAddr,
        owner: &OwnerMem,
    ) -> Result<u16> {
        // With the device IOTLB the driver's part is not probed (see above).
        let probe_driver = self.iotlb.is_none();
        let packed = self.packed();
        // The device's flags are reset; a field of the driver's part is
        // read to check it is reachable.
        let (device_flags, driver_probe) = if packed {
            (
                PackedRing::device_flags_addr_of(addr.used),
                PackedRing::driver_flags_addr_of(addr.avail),
            )
        } else {
            (
                SplitRing::used_flags_addr_of(addr.used),
                SplitRing::avail_idx_addr_of(addr.avail),
            )
        };
        mem.write_u16(device_flags, 0).map_err(|_| EFAULT)?;
        if let Some(used_log) = self.used_log_of(addr) {
            let log = self.run_log(owner);
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
        mem.read_u16(SplitRing::used_idx_addr_of(addr.used))
            .map_err(|_| EFAULT)
    }

    /// Where the used ring's writes are logged, if `VHOST_VRING_F_LOG` asks
    /// for it: at `log_guest_addr`, or with the device IOTLB at the used
    /// ring's own I/O virtual address, which the log translates (C ignores
    /// `log_guest_addr` then too).
    pub(super) fn used_log_of(&self, addr: &RingAddr) -> Option<u64> {
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

    /// Reports an error of the data path: error eventfd, counter, one debug
    /// line. A malformed ring stays stopped until userspace reconfigures
    /// it, so a hostile guest cannot make the worker spin or flood the log.
    /// A fault on the owner's memory (userspace unmapped or protected a
    /// ring) is not the guest's doing: the queue asks for a kick and tries
    /// again at the next one, as the C driver does for every error.
    pub(crate) fn fail(&mut self, err: &dyn Debug) {
        self.report(err);
        self.stop();
        self.broken = true;
    }

    /// Counts an error of the data path, signals the error eventfd and
    /// says what it was in one debug line.
    pub(super) fn report(&mut self, err: &dyn Debug) {
        self.stats.errors += 1;
        if let Some(eventfd) = &self.err {
            eventfd.signal();
        }
        pr_debug!("vq {}: {:?}\n", self.index, err);
    }
}

impl<B: Backend> QueueConfig for VqState<B> {
    /// `VHOST_SET_VRING_NUM`: not while a backend is attached. A split ring
    /// is a power of two, a packed ring any size (a guest may resize it to
    /// 200 with a queue reset); QEMU acks the features first.
    fn set_num(&mut self, num: u32) -> Result {
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
    fn set_addr(&mut self, addr: &VringAddr) -> Result {
        if addr.flags & !VHOST_VRING_F_LOG_MASK != 0 {
            return Err(errno!(EOPNOTSUPP));
        }
        if addr.avail_user_addr % AVAIL_ALIGN != 0
            || addr.used_user_addr % USED_ALIGN != 0
            || addr.log_guest_addr % USED_ALIGN != 0
        {
            return Err(EINVAL);
        }
        let new = RingAddr {
            desc: addr.desc_user_addr,
            avail: addr.avail_user_addr,
            used: addr.used_user_addr,
        };
        let used_log = (addr.flags & VHOST_VRING_F_LOG_MASK != 0).then_some(addr.log_guest_addr);
        if self.backend.is_some()
            && (!self.addr_ok(&new) || !self.log_covers_used(self.log, used_log))
        {
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
    fn set_base(&mut self, base: u32) -> Result {
        if self.backend.is_some() {
            return Err(EBUSY);
        }
        let fits = if self.packed() {
            PackedRing::base_fits(base, self.num)
        } else {
            base <= u32::from(u16::MAX)
        };
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
    fn get_base(&mut self) -> u32 {
        self.stop();
        self.stopped = true;
        self.base
    }

    /// `VHOST_SET_VRING_KICK`; `None` unbinds.
    fn set_kick(&mut self, file: Option<PollableFile>) -> Result {
        let poll = match file {
            Some(file) => Some(FilePoll::start(file, POLLIN, self.waker.clone())?),
            None => None,
        };
        // The old poll, if any, leaves its wait queue here.
        self.kick = poll;
        Ok(())
    }

    /// `VHOST_SET_VRING_CALL`; `None` unbinds.
    fn set_call(&mut self, call: Option<EventFd>) {
        self.call = call;
    }

    /// `VHOST_SET_VRING_ERR`; `None` unbinds.
    fn set_err(&mut self, err: Option<EventFd>) {
        self.err = err;
    }

    fn set_busyloop_timeout(&mut self, timeout: u32) {
        self.busyloop_timeout = timeout;
    }

    fn busyloop_timeout(&self) -> u32 {
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
    fn set_features(&mut self, features: Features, iotlb: Option<QueueIotlb>) {
        self.iotlb = iotlb;
        let old = self.features;
        let format_changed = self.format_changes(features);
        self.features = features;
        self.config = B::config(features);
        if format_changed {
            self.stop();
            self.base = if self.packed() { packed::FRESH_BASE } else { 0 };
            self.used_idx = 0;
            return;
        }
        if let Some(ring) = self.ring.as_mut() {
            ring.set_features(features);
            if features.event_idx() != old.event_idx() {
                // The guest's notification state must be published again
                // in the new scheme: let the worker re-arm it.
                self.waker.wake();
            }
        }
    }

    /// `SET_MEM_TABLE`: the new table is used from the next access. A ring
    /// that waited only for a table starts; a stopped one stays stopped.
    fn set_mem(&mut self, mem: Arc<MemTable>) {
        self.mem = Some(mem);
        if let Some(ring) = self.ring.as_mut() {
            ring.forget_written();
        }
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

    /// What `VHOST_NET_SET_BACKEND` checks before it looks at the fd, as
    /// the C driver does (`vhost_vq_access_ok`): a memory table must be
    /// set and the log must have room for what the queue would log
    /// (`-EFAULT`, for an unbind too), and the ring addresses, if set, in
    /// user space. A ring without addresses can only be unbound.
    fn check_access(&self) -> Result {
        // Addresses that were set must lie in user space (`vq_access_ok`;
        // with a backend attached, SET_VRING_ADDR refused any other).
        if self.addr.is_some_and(|addr| !self.addr_ok(&addr)) || !self.log_covers(self.log) {
            return Err(EFAULT);
        }
        Ok(())
    }

    /// Whether `SET_FEATURES` may set `features`: the ring format and the
    /// address space change only while no backend is attached (`EBUSY`
    /// otherwise), since the ring's addresses, size and log room were
    /// checked for the old ones. QEMU acks the features before it attaches
    /// a backend.
    fn can_set_features(&self, features: Features) -> bool {
        self.backend.is_none()
            || !(self.format_changes(features) || self.address_space_changes(features))
    }

    /// `VHOST_SET_BACKEND_FEATURES`: the format of this queue's misses.
    fn set_iotlb_format(&mut self, format: u32) {
        self.iotlb_format = format;
    }

    /// `VHOST_IOTLB_UPDATE` on this queue's copy of the table; refused
    /// without a table (the writer gets `EFAULT`, as in C).
    fn iotlb_update(
        &mut self,
        iova: u64,
        size: u64,
        uaddr: u64,
        perm: u8,
    ) -> Result<(), MessageError> {
        let iotlb = self.iotlb.as_mut().ok_or(MessageError::NoIotlb)?;
        iotlb
            .update(iova, size, uaddr, perm, user_limit())
            .map_err(MessageError::Update)?;
        // The ring's parts may now be other memory.
        if let Some(ring) = self.ring.as_mut() {
            ring.forget_written();
        }
        Ok(())
    }

    /// `VHOST_IOTLB_INVALIDATE` on this queue's copy. Holding the queue's
    /// lock here means no run of the worker is in progress: the next one
    /// translates through the table as it is now.
    fn iotlb_make_room(&mut self) -> Result<(), MessageError> {
        device_iotlb::make_room(self.iotlb.as_mut().ok_or(MessageError::NoIotlb)?)
    }

    fn iotlb_invalidate(&mut self, iova: u64, size: u64) -> Result<(), MessageError> {
        let iotlb = self.iotlb.as_mut().ok_or(MessageError::NoIotlb)?;
        iotlb.invalidate(iova, size);
        if let Some(ring) = self.ring.as_mut() {
            ring.forget_written();
        }
        Ok(())
    }

    /// `VHOST_SET_LOG_BASE` for this queue: refused (`-EFAULT`) if a
    /// running queue's writes would not fit, checked again at attach.
    fn set_log_base(&mut self, log: DirtyLog) -> Result {
        if self.backend.is_some() && !self.log_covers(log) {
            return Err(EFAULT);
        }
        self.log = log;
        Ok(())
    }

    /// `VHOST_SET_LOG_FD` for this queue; `None` unbinds.
    fn set_log_eventfd(&mut self, eventfd: Option<Arc<EventFd>>) {
        self.log_eventfd = eventfd;
    }

    /// Whether `SET_FEATURES` may turn `VHOST_F_LOG_ALL` on: every region
    /// of an attached queue's table has room in its log (C's
    /// `vhost_log_access_ok`; a queue with no table refuses).
    fn can_log_all(&self) -> bool {
        self.backend.is_none()
            || self
                .mem
                .as_deref()
                .is_some_and(|mem| self.log.covers_table(mem, user_limit()))
    }

    /// Whether a new memory table can replace this queue's (C's
    /// `memory_access_ok`): with `VHOST_F_LOG_ALL`, an attached queue's log
    /// must have room for it.
    fn can_take_mem(&self, mem: &MemTable) -> bool {
        self.backend.is_none()
            || !self.features.log_all()
            || self.log.covers_table(mem, user_limit())
    }

    /// The state of a freshly opened queue (`RESET_OWNER`, `close`).
    fn reset(&mut self) {
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
        self.features = Features::default();
        self.config = B::Config::default();
        self.log = DirtyLog::default();
        self.log_eventfd = None;
        self.used_log = None;
    }

    /// One line of `/proc/PID/fdinfo/FD`.
    fn show(&self, m: &SeqFile) {
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
            match (self.features.log_all(), self.used_log.is_some()) {
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

    fn unbind(&mut self) {
        drop(self.detach());
    }
}
