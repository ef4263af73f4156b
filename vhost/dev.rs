// SPDX-License-Identifier: GPL-2.0

//! The device's control-plane state (C's `struct vhost_dev`): the owner,
//! the negotiated features, the memory table's size, and the rules of the
//! ioctls that touch them; and what every vhost device's ioctls share.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{fs::File, mm::Mm, prelude::*, sync::aref::ARef, uaccess::{UserPtr, UserSlice}};

use crate::tap_glue::eventfd::{self, EventFd};

use crate::vring::mem_table::MemError;

use crate::vhost::uapi::*;

use crate::tap_glue::tap;
use crate::tap_glue::uaccess::OwnerMem;
use crate::vhost::virtqueue::{Backend, VirtQueue};

/// The upper bound of `max_mem_regions`: QEMU's largest memory-slot count
/// (`KVM_USER_MEM_SLOTS`, 509 on x86). The C driver's parameter is a
/// `ushort` with no bound of its own; this keeps one table's allocation
/// small.
const MEM_REGIONS_HARD_MAX: u32 = 509;

/// The upper bound of `max_iotlb_entries`: 32768 mappings of 48 bytes,
/// 1.5 MiB per queue, allocated when a guest acks `ACCESS_PLATFORM`.
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
            pr_warn!("max_mem_regions={} out of range, using {}\n", mem_regions, limits.mem_regions);
        }
        if iotlb_entries as usize != limits.iotlb_entries {
            pr_warn!("max_iotlb_entries={} out of range, using {}\n", iotlb_entries, limits.iotlb_entries);
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
    pub(crate) features: u64,
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
            features: 0,
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
            && LINES_LEFT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1)).is_ok()
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
        self.owner.as_deref().and_then(OwnerMem::of_owner).ok_or(EPERM)
    }
}

/// Reads a `T` from the ioctl argument.
pub(crate) fn read_arg<T: kernel::transmute::FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .reader()
        .read::<T>()
}

/// Writes a `T` to the ioctl argument.
pub(crate) fn write_arg<T: kernel::transmute::AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .writer()
        .write(value)
}

/// A region refused by `SET_MEM_TABLE`, as the C driver reports it: any
/// region it cannot map is `-EFAULT`.
pub(crate) fn mem_errno(err: MemError) -> Error {
    match err {
        MemError::TooMany => E2BIG,
        MemError::BadSize | MemError::BadUserAddr => EFAULT,
    }
}

/// The vring ioctls on one queue, under its lock. `attach` builds the
/// backend of this queue's kind from a tap file.
pub(crate) fn queue_ioctl<B: Backend>(
    vq: &VirtQueue<B>,
    index: u32,
    cmd: u32,
    arg: usize,
    attach: impl FnOnce(ARef<File>) -> Result<B>,
    owner: &OwnerMem,
) -> Result<isize> {
    let mut queue = vq.lock();
    match cmd {
        VHOST_SET_VRING_NUM => queue.set_num(read_arg::<VringState>(arg)?.num)?,
        VHOST_SET_VRING_ADDR => queue.set_addr(&read_arg::<VringAddr>(arg)?)?,
        VHOST_SET_VRING_BASE => queue.set_base(read_arg::<VringState>(arg)?.num)?,
        VHOST_GET_VRING_BASE => {
            let base = queue.get_base();
            write_arg(arg, &VringState { index, num: base })?;
        }
        VHOST_SET_VRING_KICK => {
            let file = match read_arg::<VringFile>(arg)?.fd {
                VHOST_FILE_UNBIND => None,
                fd => Some(eventfd::eventfd_file(fd)?),
            };
            queue.set_kick(file)?;
        }
        VHOST_SET_VRING_CALL => {
            let call = match read_arg::<VringFile>(arg)?.fd {
                VHOST_FILE_UNBIND => None,
                fd => Some(EventFd::from_fd(fd)?),
            };
            queue.set_call(call);
        }
        VHOST_SET_VRING_ERR => {
            let err = match read_arg::<VringFile>(arg)?.fd {
                VHOST_FILE_UNBIND => None,
                fd => Some(EventFd::from_fd(fd)?),
            };
            queue.set_err(err);
        }
        VHOST_SET_VRING_BUSYLOOP_TIMEOUT => {
            queue.set_busyloop_timeout(read_arg::<VringState>(arg)?.num);
        }
        VHOST_GET_VRING_BUSYLOOP_TIMEOUT => {
            write_arg(arg, &VringState { index, num: queue.busyloop_timeout() })?;
        }
        VHOST_NET_SET_BACKEND => {
            // Like the C driver, any fd that is not a usable backend,
            // closed ones included, is -ENOTSOCK.
            let fd = read_arg::<VringFile>(arg)?.fd;
            queue.check_access()?;
            let backend = match fd {
                VHOST_FILE_UNBIND => None,
                fd => {
                    let file = tap::backend_file(fd)?;
                    if queue.backend_is(&file) {
                        queue.reattach();
                        return Ok(0);
                    }
                    Some(attach(file)?)
                }
            };
            queue.set_backend(backend, owner)?;
        }
        _ => return Err(ENOTTY),
    }
    Ok(0)
}
