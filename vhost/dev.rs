// SPDX-License-Identifier: GPL-2.0

//! The device's control-plane state (C's `struct vhost_dev`): the owner,
//! the negotiated features, the memory table's size, and the rules of the
//! ioctls that touch them; and what every vhost device's ioctls share.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    mm::Mm,
    prelude::*,
    seq_file::SeqFile,
    seq_print,
    sync::{aref::ARef, Arc},
    uaccess::{UserPtr, UserSlice},
};

use crate::tap_glue::compat::errno;
use crate::tap_glue::eventfd::{self, EventFd};
use crate::tap_glue::uaccess::{user_limit, OwnerMem};
use crate::vhost::device_iotlb::{self, MessageError, MissControl};
use crate::vhost::uapi::*;
use crate::vhost::virtqueue::{Backend, MemTable, QueueConfig, VirtQueue};
use crate::vring::dirty_log::DirtyLog;
use crate::vring::features::FEATURE_WORDS;
use crate::vring::iotlb;
use crate::vring::mem_table::{self, MemError, Region};
use crate::vring::Features;

/// The upper bound of `max_mem_regions`: QEMU's largest memory-slot count
/// (`KVM_USER_MEM_SLOTS`, 509 on x86). The C driver's parameter is a
/// `ushort` with no bound of its own; this keeps one table's allocation
/// small.
const MEM_REGIONS_HARD_MAX: u32 = 509;

/// The upper bound of `max_iotlb_entries`: 32768 mappings of 48 bytes,
/// 1.5 MiB per queue at most, allocated as userspace's updates fill the
/// table and charged to its memory cgroup.
const IOTLB_ENTRIES_HARD_MAX: u32 = 32768;

/// The module's limits on what userspace may make a device allocate, from
/// its parameters, clamped.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// Most regions in a `VHOST_SET_MEM_TABLE` (`max_mem_regions`).
    pub(crate) mem_regions: usize,
    /// Most device IOTLB entries per queue (`max_iotlb_entries`).
    pub(crate) iotlb_entries: usize,
}

impl Limits {
    /// The limits the parameters ask for, clamped to `1..=509` and
    /// `1..=32768`; says so when a value is out of range.
    pub(crate) fn new(mem_regions: u32, iotlb_entries: u32) -> Self {
        let limits = Self {
            mem_regions: mem_regions.clamp(1, MEM_REGIONS_HARD_MAX) as usize,
            iotlb_entries: iotlb_entries.clamp(1, IOTLB_ENTRIES_HARD_MAX) as usize,
        };
        if mem_regions as usize != limits.mem_regions {
            pr_warn!(
                "max_mem_regions={} out of range, using {}\n",
                mem_regions,
                limits.mem_regions
            );
        }
        if iotlb_entries as usize != limits.iotlb_entries {
            pr_warn!(
                "max_iotlb_entries={} out of range, using {}\n",
                iotlb_entries,
                limits.iotlb_entries
            );
        }
        limits
    }
}

/// Log lines about too large memory tables, per module load.
const MAX_REGION_WARNINGS: u32 = 10;

/// The control-plane state of one open file.
pub(crate) struct DevState<W> {
    /// The module's limits, as they were when the file was opened.
    pub(crate) limits: Limits,
    /// The owner's address space, set by `SET_OWNER`. Every ioctl that
    /// configures the device must come from a task using this mm.
    pub(crate) owner: Option<ARef<Mm>>,
    /// One worker per queue, running while there is an owner.
    pub(crate) workers: Option<W>,
    pub(crate) features: Features,
    pub(crate) backend_features: u64,
    pub(crate) nregions: usize,
    /// `VHOST_SET_FORK_FROM_OWNER`: workers as vhost_tasks (1) or kthreads
    /// in the owner's address space (0).
    pub(crate) fork_owner: u8,
    /// A memory table was refused for its size and the log said why (see
    /// [`DevState::too_many_regions`]).
    pub(crate) told_max_regions: bool,
}

impl<W> DevState<W> {
    pub(crate) fn new(fork_owner: u8, limits: Limits) -> Self {
        Self {
            limits,
            owner: None,
            workers: None,
            features: Features::default(),
            backend_features: 0,
            nregions: 0,
            fork_owner,
            told_max_regions: false,
        }
    }

    /// A table of `nregions` regions is larger than `max_mem_regions`.
    /// QEMU decides how many memory slots it may use from the C `vhost`
    /// module's parameter (64 when that module is not loaded), not from
    /// ours: say which parameter to raise.
    pub(crate) fn too_many_regions(&mut self, nregions: usize) -> Error {
        // Once per file, and a few times per module load: any user who may
        // open the device (the kvm group, for the drop-in node) could
        // otherwise fill the log, one file at a time.
        static LINES_LEFT: AtomicU32 = AtomicU32::new(MAX_REGION_WARNINGS);
        if !self.told_max_regions
            && LINES_LEFT
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
        {
            self.told_max_regions = true;
            if nregions > MEM_REGIONS_HARD_MAX as usize {
                pr_warn!(
                    "SET_MEM_TABLE with {} regions refused (E2BIG): more than max_mem_regions can allow ({})\n",
                    nregions,
                    MEM_REGIONS_HARD_MAX
                );
                return E2BIG;
            }
            pr_warn!(
                "SET_MEM_TABLE with {} regions refused (E2BIG): vhost_net_rs max_mem_regions={}. QEMU takes \
                 its slot limit from /sys/module/vhost/parameters/max_mem_regions (64 without the C vhost \
                 module): load vhost_net_rs with max_mem_regions={} or more\n",
                nregions,
                self.limits.mem_regions,
                nregions
            );
        }
        E2BIG
    }

    /// The capability to reach the owner's memory, or `-EPERM` unless the
    /// calling task shares the owner's address space (C's
    /// `vhost_dev_check_owner`).
    pub(crate) fn check_owner(&self) -> Result<OwnerMem> {
        self.owner
            .as_deref()
            .and_then(OwnerMem::of_owner)
            .ok_or(EPERM)
    }
}

/// A region refused by `SET_MEM_TABLE`, as the C driver reports it: any
/// region it cannot map is `-EFAULT`.
pub(crate) fn mem_errno(err: MemError) -> Error {
    match err {
        MemError::TooMany => E2BIG,
        MemError::BadSize | MemError::BadUserAddr => EFAULT,
    }
}

/// An fd argument: `None` for `VHOST_FILE_UNBIND` (-1), which unbinds.
pub(crate) fn fd_or_unbind(fd: i32) -> Option<i32> {
    (fd != VHOST_FILE_UNBIND).then_some(fd)
}

/// The fd of a `struct vhost_vring_file` argument, `None` to unbind.
fn read_fd(arg: usize) -> Result<Option<i32>> {
    Ok(fd_or_unbind(read_arg::<VringFile>(arg)?.fd))
}

/// A queue of a device, whatever its backend, as the vhost core drives it.
pub(crate) trait Queue: Sync {
    /// Runs `f` on the queue's configuration, under the queue's lock.
    fn configure(&self, f: &mut dyn FnMut(&mut dyn QueueConfig));
    /// Has the queue's worker run it.
    fn wake(&self);
}

impl<B: Backend> Queue for VirtQueue<B> {
    fn configure(&self, f: &mut dyn FnMut(&mut dyn QueueConfig)) {
        f(&mut *self.lock())
    }

    fn wake(&self) {
        VirtQueue::wake(self)
    }
}

/// The queues of a device, as the control plane reaches them.
pub(crate) trait Queues {
    /// How many queues the device has; they are numbered from 0.
    fn count(&self) -> u32;
    /// Queue `index`, if the device has it.
    fn queue(&self, index: u32) -> Option<&dyn Queue>;
    /// The channel the queues post their device IOTLB misses to.
    fn misses(&self) -> &dyn MissControl;

    /// Runs `f` on each queue's configuration in turn, one queue lock at a
    /// time.
    fn each(&self, f: &mut dyn FnMut(&mut dyn QueueConfig)) {
        for index in 0..self.count() {
            if let Some(queue) = self.queue(index) {
                queue.configure(f);
            }
        }
    }

    /// Whether `check` holds for every queue.
    fn all(&self, check: &dyn Fn(&dyn QueueConfig) -> bool) -> bool {
        let mut all = true;
        self.each(&mut |queue| all = all && check(queue));
        all
    }

    /// Applies `f` to each queue in turn, up to the first error, which it
    /// returns.
    fn try_each(
        &self,
        f: &mut dyn FnMut(&mut dyn QueueConfig) -> Result<(), MessageError>,
    ) -> Result<(), MessageError> {
        let mut result = Ok(());
        self.each(&mut |queue| {
            if result.is_ok() {
                result = f(queue);
            }
        });
        result
    }

    /// Wakes the queues named in `mask` (bit `q` for queue `q`).
    fn wake(&self, mask: u64) {
        for index in 0..self.count().min(u64::BITS) {
            if mask & (1 << index) != 0 {
                if let Some(queue) = self.queue(index) {
                    queue.wake();
                }
            }
        }
    }
}

impl<W> DevState<W> {
    /// Stops the device: the state of a freshly opened file. The backends
    /// go first, with the polls that could wake a worker and the rings the
    /// workers process, so that a worker that still runs finds nothing to
    /// do and cannot re-arm a poll. Then the workers stop (each after an
    /// RCU grace period, see `worker.rs`). Then the rest of the state goes.
    pub(crate) fn teardown(&mut self, queues: &dyn Queues) {
        queues.each(&mut |queue| queue.unbind());
        self.workers = None;
        queues.each(&mut |queue| queue.reset());
        // The IOTLB went with the queues: its misses go, and a blocked
        // reader learns it (as C's vhost_dev_cleanup wakes it).
        queues.misses().set_enabled(false);
        // Like the C driver (vhost_dev_reset_owner), the worker kind goes
        // back to its default too.
        *self = DevState::new(VHOST_FORK_OWNER_TASK, self.limits);
    }

    /// `VHOST_SET_OWNER`: the calling process owns the device; `start`
    /// starts its workers, given the owner's address space and the worker
    /// kind (`VHOST_SET_FORK_FROM_OWNER`).
    pub(crate) fn set_owner(
        &mut self,
        start: impl FnOnce(&ARef<Mm>, u8) -> Result<W>,
    ) -> Result<isize> {
        if self.owner.is_some() {
            return Err(EBUSY);
        }
        let mm = {
            let current = kernel::current!();
            let mm = current.mm().ok_or(EINVAL)?;
            ARef::from(&**mm)
        };
        self.workers = Some(start(&mm, self.fork_owner)?);
        self.owner = Some(mm);
        Ok(0)
    }

    /// `VHOST_RESET_OWNER`: the device as freshly opened, except that, as
    /// in the C driver (`vhost_dev_reset_owner`), the queues keep an empty
    /// memory table rather than none, which a backend can be attached with.
    pub(crate) fn reset_owner(&mut self, queues: &dyn Queues) -> Result<isize> {
        self.check_owner()?;
        let empty: Arc<MemTable> = Arc::new(KVec::new(), GFP_KERNEL)?;
        self.teardown(queues);
        queues.each(&mut |queue| queue.set_mem(empty.clone()));
        Ok(0)
    }

    /// `VHOST_SET_FEATURES`: every bit checked first, then stored on every
    /// queue. As in the C driver, this needs no owner and reads no guest
    /// memory. Bits beyond `offered` are `-EOPNOTSUPP`. `VHOST_F_LOG_ALL`
    /// needs every attached queue's log to have room for the memory table
    /// (`-EFAULT`), and the ring format (`RING_PACKED`) changes only on
    /// queues without a backend (`-EBUSY`), as does the address space
    /// (`ACCESS_PLATFORM`).
    ///
    /// With `ACCESS_PLATFORM`, each queue gets a new, empty device IOTLB,
    /// as C's `vhost_init_device_iotlb` gives the device one; QEMU sets
    /// the features again when migration starts, and refills the table on
    /// the misses that follow, which a queue posts when it next runs.
    pub(crate) fn set_features(
        &mut self,
        queues: &dyn Queues,
        features: Features,
        offered: Features,
    ) -> Result<isize> {
        if !features.beyond(offered).is_empty() {
            return Err(errno!(EOPNOTSUPP));
        }
        if features.log_all() && !queues.all(&|queue| queue.can_log_all()) {
            return Err(EFAULT);
        }
        if !queues.all(&|queue| queue.can_set_features(features)) {
            return Err(EBUSY);
        }
        // Every table is made before any queue changes (empty: they grow
        // as mappings arrive, see `device_iotlb::make_room`).
        let mut tables = KVec::new();
        if features.access_platform() {
            for _ in 0..queues.count() {
                tables.push(
                    device_iotlb::new_table(self.limits.iotlb_entries),
                    GFP_KERNEL,
                )?;
            }
        }
        let mut tables = tables.into_iter();
        self.features = features;
        queues.each(&mut |queue| queue.set_features(features, tables.next()));
        queues.misses().set_enabled(features.access_platform());
        Ok(0)
    }

    /// `VHOST_GET_FEATURES_ARRAY`: `offered`, as the count of 64-bit words
    /// the argument asks for: the words this driver knows, then zeroes
    /// for any more (C's `clear_user` of the trailing space).
    pub(crate) fn get_features_array(arg: usize, offered: Features) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let len = usize::try_from(count)
            .map_err(|_| EFAULT)?
            .checked_mul(8)
            .ok_or(EFAULT)?;
        let mut writer =
            UserSlice::new(UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?), len).writer();
        let words = offered.words();
        for index in 0..count {
            let word = usize::try_from(index)
                .ok()
                .and_then(|index| words.get(index))
                .copied()
                .unwrap_or(0);
            write_abi(&mut writer, &word)?;
        }
        Ok(0)
    }

    /// `VHOST_SET_FEATURES_ARRAY`: as `VHOST_SET_FEATURES`, over the words
    /// this driver knows; a bit in any word past them is `-EOPNOTSUPP`,
    /// as in C ("not supported by definition"), and so is one it does not
    /// offer in a word it knows. Words it does not get are zero: a count
    /// of 1 is `VHOST_SET_FEATURES`.
    pub(crate) fn set_features_array(
        &mut self,
        queues: &dyn Queues,
        arg: usize,
        offered: Features,
    ) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let len = usize::try_from(count)
            .map_err(|_| EFAULT)?
            .checked_mul(8)
            .ok_or(EFAULT)?;
        let mut reader =
            UserSlice::new(UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?), len).reader();
        let mut words = [0u64; FEATURE_WORDS];
        for index in 0..count {
            let word: u64 = read_abi(&mut reader)?;
            match usize::try_from(index).ok().and_then(|i| words.get_mut(i)) {
                Some(known) => *known = word,
                None if word != 0 => return Err(errno!(EOPNOTSUPP)),
                None => {}
            }
        }
        self.set_features(queues, Features::from_words(words), offered)
    }

    /// `VHOST_SET_BACKEND_FEATURES`: as in C, no owner needed. The v2
    /// format applies to the misses posted from now on.
    pub(crate) fn set_backend_features(
        &mut self,
        queues: &dyn Queues,
        features: u64,
    ) -> Result<isize> {
        if features & !BACKEND_FEATURES != 0 {
            return Err(errno!(EOPNOTSUPP));
        }
        let format = if features & mask(backend_feature::VHOST_BACKEND_F_IOTLB_MSG_V2) != 0 {
            iotlb::FORMAT_V2
        } else {
            iotlb::FORMAT_V1
        };
        self.backend_features = features;
        queues.each(&mut |queue| queue.set_iotlb_format(format));
        Ok(0)
    }

    /// One message written to the device (`vhost_process_iotlb_msg`),
    /// applied to each queue's copy of the IOTLB under that queue's lock,
    /// so that it is in effect for every run once this returns (see
    /// `device_iotlb.rs`).
    pub(crate) fn iotlb_message(
        &self,
        queues: &dyn Queues,
        message: &iotlb::Message,
    ) -> Result<(), MessageError> {
        let batches =
            self.backend_features & mask(backend_feature::VHOST_BACKEND_F_IOTLB_BATCH) != 0;
        match message.kind {
            iotlb::MSG_UPDATE => {
                // Every copy has taken every message so far, so they take
                // or refuse this one alike, once each has room for it: the
                // memory is had first, for all of them.
                queues.try_each(&mut |queue| queue.iotlb_make_room())?;
                queues.try_each(&mut |queue| {
                    queue.iotlb_update(message.iova, message.size, message.uaddr, message.perm)
                })?;
                queues.wake(queues.misses().answer(message.iova, message.size));
            }
            iotlb::MSG_INVALIDATE => {
                if message.size == 0 {
                    return Err(MessageError::EmptyInvalidate);
                }
                queues.try_each(&mut |queue| queue.iotlb_invalidate(message.iova, message.size))?;
            }
            iotlb::MSG_BATCH_BEGIN if batches => queues.misses().begin_batch(),
            iotlb::MSG_BATCH_END if batches => queues.wake(queues.misses().end_batch()),
            other => return Err(MessageError::Unsupported(other)),
        }
        Ok(())
    }

    /// The ioctls of an owned device that C's `vhost_dev_ioctl` and
    /// `vhost_vring_ioctl` handle, with their errors in C's order: no
    /// owner, then (for a vring ioctl) a bad vring index, then `-ENOTTY`
    /// for a command neither knows.
    pub(crate) fn dev_ioctl(&mut self, queues: &dyn Queues, cmd: u32, arg: usize) -> Result<isize> {
        // Fork-owner control is allowed before there is an owner.
        match cmd {
            VHOST_SET_FORK_FROM_OWNER => return self.set_fork_owner(arg),
            VHOST_GET_FORK_FROM_OWNER => {
                write_arg(arg, &self.fork_owner)?;
                return Ok(0);
            }
            _ => {}
        }
        self.check_owner()?;
        match cmd {
            VHOST_SET_MEM_TABLE => self.set_mem_table(queues, arg),
            VHOST_SET_LOG_BASE => set_log_base(queues, arg),
            VHOST_SET_LOG_FD => set_log_fd(queues, arg),
            _ => {
                // The vq index leads every vring ioctl argument; out of
                // range is -errno!(ENOBUFS), as in the C driver.
                let index = read_arg::<u32>(arg)?;
                let queue = queues.queue(index).ok_or(errno!(ENOBUFS))?;
                let mut result = Err(ENOTTY);
                queue.configure(&mut |queue| result = vring_ioctl(queue, index, cmd, arg));
                result
            }
        }
    }

    fn set_fork_owner(&mut self, arg: usize) -> Result<isize> {
        if self.owner.is_some() {
            return Err(EBUSY);
        }
        let mode: u8 = read_arg(arg)?;
        match mode {
            VHOST_FORK_OWNER_TASK | VHOST_FORK_OWNER_KTHREAD => {
                self.fork_owner = mode;
                Ok(0)
            }
            _ => Err(EINVAL),
        }
    }

    /// `VHOST_SET_MEM_TABLE`: the whole table is read and checked before
    /// any queue sees it, so a refused table changes nothing.
    fn set_mem_table(&mut self, queues: &dyn Queues, arg: usize) -> Result<isize> {
        let header: MemoryHeader = read_arg(arg)?;
        if header.padding != 0 {
            return Err(errno!(EOPNOTSUPP));
        }
        let nregions = header.nregions as usize;
        if nregions > self.limits.mem_regions {
            return Err(self.too_many_regions(nregions));
        }
        let mut reader = UserSlice::new(
            UserPtr::from_addr(
                arg.checked_add(core::mem::size_of::<MemoryHeader>())
                    .ok_or(EFAULT)?,
            ),
            nregions * core::mem::size_of::<MemoryRegion>(),
        )
        .reader();
        let mut regions = KVec::with_capacity(nregions, GFP_KERNEL)?;
        for _ in 0..nregions {
            let raw: MemoryRegion = read_abi(&mut reader)?;
            let region = Region::new(
                raw.guest_phys_addr,
                raw.memory_size,
                raw.userspace_addr,
                user_limit(),
            )
            .map_err(mem_errno)?;
            regions.push(region, GFP_KERNEL)?;
        }
        mem_table::validate(&mut regions, self.limits.mem_regions).map_err(mem_errno)?;
        // With logging on, the log must have room for the new table.
        if !queues.all(&|queue| queue.can_take_mem(&regions)) {
            return Err(EFAULT);
        }
        let table = Arc::new(regions, GFP_KERNEL)?;
        self.nregions = nregions;
        queues.each(&mut |queue| queue.set_mem(table.clone()));
        Ok(0)
    }

    /// The device's lines of `/proc/PID/fdinfo/FD`, then each queue's.
    pub(crate) fn show(&self, queues: &dyn Queues, m: &SeqFile) {
        seq_print!(
            m,
            "vhost-net-rs-owner:\t{}\nvhost-net-rs-features:\t{:#x}\nvhost-net-rs-features-1:\t{:#x}\nvhost-net-rs-regions:\t{}\n",
            u8::from(self.owner.is_some()),
            self.features.words()[0],
            self.features.words()[1],
            self.nregions
        );
        queues.each(&mut |queue| queue.show(m));
    }
}

/// `VHOST_SET_LOG_BASE`: the dirty bitmap's address in the owner's memory,
/// given to each queue. A queue whose running ring would not fit keeps its
/// old base and the call fails with `-EFAULT`, while the other queues take
/// the new one, as in the C driver.
fn set_log_base(queues: &dyn Queues, arg: usize) -> Result<isize> {
    let base: u64 = read_arg(arg)?;
    if usize::try_from(base).is_err() {
        return Err(EFAULT);
    }
    let log = DirtyLog::new(base);
    let mut result = Ok(0);
    queues.each(&mut |queue| {
        if let Err(err) = queue.set_log_base(log) {
            result = Err(err);
        }
    });
    result
}

/// `VHOST_SET_LOG_FD`: the eventfd signalled after writes are logged; -1
/// unbinds.
fn set_log_fd(queues: &dyn Queues, arg: usize) -> Result<isize> {
    let eventfd = match fd_or_unbind(read_arg(arg)?) {
        None => None,
        Some(fd) => Some(Arc::new(EventFd::from_fd(fd)?, GFP_KERNEL)?),
    };
    queues.each(&mut |queue| queue.set_log_eventfd(eventfd.clone()));
    Ok(0)
}

/// The vring ioctls on one queue, under its lock.
fn vring_ioctl(queue: &mut dyn QueueConfig, index: u32, cmd: u32, arg: usize) -> Result<isize> {
    match cmd {
        VHOST_SET_VRING_NUM => queue.set_num(read_arg::<VringState>(arg)?.num)?,
        VHOST_SET_VRING_ADDR => queue.set_addr(&read_arg::<VringAddr>(arg)?)?,
        VHOST_SET_VRING_BASE => queue.set_base(read_arg::<VringState>(arg)?.num)?,
        VHOST_GET_VRING_BASE => {
            let base = queue.get_base();
            write_arg(arg, &VringState { index, num: base })?;
        }
        VHOST_SET_VRING_KICK => {
            queue.set_kick(read_fd(arg)?.map(eventfd::eventfd_file).transpose()?)?
        }
        VHOST_SET_VRING_CALL => queue.set_call(read_fd(arg)?.map(EventFd::from_fd).transpose()?),
        VHOST_SET_VRING_ERR => queue.set_err(read_fd(arg)?.map(EventFd::from_fd).transpose()?),
        VHOST_SET_VRING_BUSYLOOP_TIMEOUT => {
            queue.set_busyloop_timeout(read_arg::<VringState>(arg)?.num);
        }
        VHOST_GET_VRING_BUSYLOOP_TIMEOUT => {
            write_arg(
                arg,
                &VringState {
                    index,
                    num: queue.busyloop_timeout(),
                },
            )?;
        }
        _ => return Err(ENOTTY),
    }
    Ok(0)
}
