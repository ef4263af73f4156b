// SPDX-License-Identifier: GPL-2.0

//! vhost-net-rs: the vhost-net data path, in Rust.
//!
//! Registers the misc device `/dev/vhost-net-rs`, which speaks the vhost ioctl
//! ABI of the in-tree `/dev/vhost-net` (Linux 7.3 `drivers/vhost/net.c`), so
//! that an unmodified QEMU can use it through `-netdev tap,vhostfd=N`.
//!
//! Each open file is one device: a queue pair, vq 0 receiving and vq 1
//! transmitting, with its own memory table, owner and features.
//!
//! # Lock order
//!
//! 1. `VhostNet::state`, the control-plane mutex, held for one ioctl.
//!
//! No other lock is taken while holding it yet.

use kernel::{
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::Mm,
    new_mutex,
    prelude::*,
    seq_file::SeqFile,
    seq_print,
    sync::{aref::ARef, Mutex},
    uaccess::{UserPtr, UserSlice},
};

mod memory;
mod uapi;

use memory::{MemError, Region};
use uapi::*;

module! {
    type: VhostNetModule,
    name: "vhost_net_rs",
    authors: ["The vhost-net-rs developers"],
    description: "vhost-net data path in Rust: /dev/vhost-net-rs, ABI-compatible with /dev/vhost-net",
    license: "GPL",
    params: {
        max_mem_regions: u32 {
            default: 64,
            description: "Maximum number of memory regions in VHOST_SET_MEM_TABLE (1..=509, clamped)",
        },
    },
}

/// The C driver's hard upper bound on regions; the parameter is clamped to it.
const MEM_REGIONS_HARD_MAX: u32 = 509;

/// Number of virtqueues per device: vq 0 is RX, vq 1 is TX.
const NVQS: usize = 2;

/// Largest split ring the vhost ABI allows: `num` must fit in 16 bits and be
/// a power of two.
const VRING_MAX_NUM: u32 = 32768;

/// The first address past the user address space on x86-64 with 4-level
/// paging (`TASK_SIZE_MAX`). Anything above is refused at setup time; every
/// access goes through the uaccess helpers, which check again.
const USER_LIMIT: u64 = (1u64 << 47) - 4096;

/// Alignment the virtio spec requires of each ring part.
const DESC_ALIGN: u64 = 16;
const AVAIL_ALIGN: u64 = 2;
const USED_ALIGN: u64 = 4;

/// `max_mem_regions`, clamped to `1..=509`.
fn max_regions() -> usize {
    let v = *module_parameters::max_mem_regions.value();
    v.clamp(1, MEM_REGIONS_HARD_MAX) as usize
}

#[pin_data]
struct VhostNetModule {
    #[pin]
    _miscdev: MiscDeviceRegistration<VhostNet>,
}

impl kernel::InPlaceModule for VhostNetModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        let v = *module_parameters::max_mem_regions.value();
        if v == 0 || v > MEM_REGIONS_HARD_MAX {
            pr_warn!("max_mem_regions={} out of range, using {}\n", v, max_regions());
        }
        try_pin_init!(Self {
            _miscdev <- MiscDeviceRegistration::register(MiscDeviceOptions {
                name: c"vhost-net-rs",
            }),
        })
    }
}

/// Configuration of one virtqueue, as set by the `VHOST_SET_VRING_*` ioctls.
#[derive(Clone, Copy)]
struct VqConfig {
    num: u32,
    desc: u64,
    avail: u64,
    used: u64,
    log: u64,
    log_used: bool,
    last_avail_idx: u16,
    busyloop_timeout: u32,
}

impl VqConfig {
    /// The state after open and after `RESET_OWNER`, as in the C driver.
    const RESET: Self = Self {
        num: 1,
        desc: 0,
        avail: 0,
        used: 0,
        log: 0,
        log_used: false,
        last_avail_idx: 0,
        busyloop_timeout: 0,
    };
}

/// Everything the control plane of one open file owns.
struct DevState {
    /// The owner's address space, set by `SET_OWNER`. Every ioctl that
    /// configures the device must come from a task using this mm.
    owner: Option<ARef<Mm>>,
    features: u64,
    backend_features: u64,
    /// Validated memory table, sorted by guest-physical address.
    mem: KVec<Region>,
    vqs: [VqConfig; NVQS],
    /// `VHOST_SET_FORK_FROM_OWNER`: workers as vhost_tasks (1) or kthreads (0).
    fork_owner: u8,
}

impl DevState {
    fn new() -> Self {
        Self {
            owner: None,
            features: 0,
            backend_features: 0,
            mem: KVec::new(),
            vqs: [VqConfig::RESET; NVQS],
            fork_owner: VHOST_FORK_OWNER_TASK,
        }
    }

    /// `-EPERM` unless the calling task shares the owner's address space.
    fn check_owner(&self) -> Result {
        let cur = kernel::current!();
        match (&self.owner, cur.mm()) {
            (Some(o), Some(mm)) if o.as_raw() == mm.as_raw() => Ok(()),
            _ => Err(EPERM),
        }
    }

    /// Drops everything tied to the owner: the state of a freshly opened file.
    fn reset(&mut self) {
        *self = Self::new();
    }
}

/// One open `/dev/vhost-net-rs`.
#[pin_data]
struct VhostNet {
    #[pin]
    state: Mutex<DevState>,
}

/// Reads a `T` from the ioctl argument.
fn read_arg<T: kernel::transmute::FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .reader()
        .read::<T>()
}

/// Writes a `T` to the ioctl argument.
fn write_arg<T: kernel::transmute::AsBytes>(arg: usize, v: &T) -> Result {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .writer()
        .write(v)
}

/// The vq index at the start of every vring ioctl argument; `-ENOBUFS` when
/// it is out of range, as in the C driver.
fn vq_index(arg: usize) -> Result<usize> {
    let idx: u32 = read_arg(arg)?;
    let idx = idx as usize;
    if idx >= NVQS {
        return Err(ENOBUFS);
    }
    Ok(idx)
}

fn mem_errno(e: MemError) -> Error {
    match e {
        MemError::TooMany => E2BIG,
        MemError::BadUserAddr | MemError::NotMapped => EFAULT,
        MemError::BadSize | MemError::Unaligned | MemError::Overlap => EINVAL,
    }
}

impl VhostNet {
    fn set_owner(&self) -> Result<isize> {
        let mut st = self.state.lock();
        if st.owner.is_some() {
            return Err(EBUSY);
        }
        let cur = kernel::current!();
        let mm = cur.mm().ok_or(EINVAL)?;
        st.owner = Some(ARef::from(&**mm));
        Ok(0)
    }

    fn reset_owner(&self) -> Result<isize> {
        let mut st = self.state.lock();
        st.check_owner()?;
        st.reset();
        Ok(0)
    }

    fn set_features(&self, features: u64) -> Result<isize> {
        if features & !NET_FEATURES != 0 {
            return Err(EOPNOTSUPP);
        }
        let mut st = self.state.lock();
        // Dirty logging is not offered, so LOG_ALL can never be set here and
        // there is no log to validate.
        st.features = features;
        Ok(0)
    }

    fn get_features_array(&self, arg: usize) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let words = [NET_FEATURES, 0u64];
        let mut w = UserSlice::new(
            UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?),
            usize::try_from(count).map_err(|_| EFAULT)?.checked_mul(8).ok_or(EFAULT)?,
        )
        .writer();
        for i in 0..count {
            let v = words.get(i as usize).copied().unwrap_or(0);
            w.write(&v)?;
        }
        Ok(0)
    }

    fn set_features_array(&self, arg: usize) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let len = usize::try_from(count).map_err(|_| EFAULT)?.checked_mul(8).ok_or(EFAULT)?;
        let mut r = UserSlice::new(UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?), len)
            .reader();
        let mut words = [0u64; FEATURES_U64S];
        for i in 0..count {
            let v: u64 = r.read()?;
            match words.get_mut(i as usize) {
                Some(w) => *w = v,
                None if v != 0 => return Err(EOPNOTSUPP),
                None => {}
            }
        }
        if words[1..].iter().any(|&w| w != 0) {
            return Err(EOPNOTSUPP);
        }
        self.set_features(words[0])
    }

    fn set_backend_features(&self, features: u64) -> Result<isize> {
        if features & !NET_BACKEND_FEATURES != 0 {
            return Err(EOPNOTSUPP);
        }
        self.state.lock().backend_features = features;
        Ok(0)
    }

    fn set_mem_table(st: &mut DevState, arg: usize) -> Result<isize> {
        let hdr: MemoryHeader = read_arg(arg)?;
        if hdr.padding != 0 {
            return Err(EOPNOTSUPP);
        }
        let n = hdr.nregions as usize;
        if n > max_regions() {
            return Err(E2BIG);
        }
        let mut r = UserSlice::new(
            UserPtr::from_addr(arg.checked_add(core::mem::size_of::<MemoryHeader>()).ok_or(EFAULT)?),
            n * core::mem::size_of::<MemoryRegion>(),
        )
        .reader();
        let mut regions = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let m: MemoryRegion = r.read()?;
            let reg = Region::new(m.guest_phys_addr, m.memory_size, m.userspace_addr, USER_LIMIT)
                .map_err(mem_errno)?;
            regions.push(reg, GFP_KERNEL)?;
        }
        memory::validate(&mut regions, max_regions()).map_err(mem_errno)?;
        st.mem = regions;
        Ok(0)
    }

    fn set_vring_num(st: &mut DevState, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let s: VringState = read_arg(arg)?;
        if s.num == 0 || s.num > VRING_MAX_NUM || !s.num.is_power_of_two() {
            return Err(EINVAL);
        }
        st.vqs[idx].num = s.num;
        Ok(0)
    }

    fn set_vring_addr(st: &mut DevState, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let a: VringAddr = read_arg(arg)?;
        if a.flags & !VHOST_VRING_F_LOG != 0 {
            return Err(EOPNOTSUPP);
        }
        if a.desc_user_addr % DESC_ALIGN != 0
            || a.avail_user_addr % AVAIL_ALIGN != 0
            || a.used_user_addr % USED_ALIGN != 0
            || a.log_guest_addr % USED_ALIGN != 0
        {
            return Err(EINVAL);
        }
        if [a.desc_user_addr, a.avail_user_addr, a.used_user_addr]
            .iter()
            .any(|&p| p >= USER_LIMIT)
        {
            return Err(EFAULT);
        }
        let vq = &mut st.vqs[idx];
        vq.desc = a.desc_user_addr;
        vq.avail = a.avail_user_addr;
        vq.used = a.used_user_addr;
        vq.log = a.log_guest_addr;
        vq.log_used = a.flags & VHOST_VRING_F_LOG != 0;
        Ok(0)
    }

    fn set_vring_base(st: &mut DevState, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let s: VringState = read_arg(arg)?;
        let base = u16::try_from(s.num).map_err(|_| EINVAL)?;
        st.vqs[idx].last_avail_idx = base;
        Ok(0)
    }

    fn get_vring_base(st: &mut DevState, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let s = VringState { index: idx as u32, num: st.vqs[idx].last_avail_idx.into() };
        write_arg(arg, &s)?;
        Ok(0)
    }

    fn set_busyloop(st: &mut DevState, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let s: VringState = read_arg(arg)?;
        st.vqs[idx].busyloop_timeout = s.num;
        Ok(0)
    }

    fn get_busyloop(st: &mut DevState, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let s = VringState { index: idx as u32, num: st.vqs[idx].busyloop_timeout };
        write_arg(arg, &s)?;
        Ok(0)
    }

    fn set_fork_owner(st: &mut DevState, arg: usize) -> Result<isize> {
        if st.owner.is_some() {
            return Err(EBUSY);
        }
        let v: u8 = read_arg(arg)?;
        if v != VHOST_FORK_OWNER_TASK && v != VHOST_FORK_OWNER_KTHREAD {
            return Err(EINVAL);
        }
        st.fork_owner = v;
        Ok(0)
    }

    /// Ioctls that need the owner: everything `vhost_dev_ioctl` and
    /// `vhost_vring_ioctl` handle in the C driver, plus `NET_SET_BACKEND`.
    fn owner_ioctl(&self, cmd: u32, arg: usize) -> Result<isize> {
        let mut st = self.state.lock();
        // Fork-owner control is allowed before there is an owner.
        match cmd {
            VHOST_SET_FORK_FROM_OWNER => return Self::set_fork_owner(&mut st, arg),
            VHOST_GET_FORK_FROM_OWNER => {
                write_arg(arg, &st.fork_owner)?;
                return Ok(0);
            }
            _ => {}
        }
        st.check_owner()?;
        match cmd {
            VHOST_SET_MEM_TABLE => Self::set_mem_table(&mut st, arg),
            VHOST_SET_VRING_NUM => Self::set_vring_num(&mut st, arg),
            VHOST_SET_VRING_ADDR => Self::set_vring_addr(&mut st, arg),
            VHOST_SET_VRING_BASE => Self::set_vring_base(&mut st, arg),
            VHOST_GET_VRING_BASE => Self::get_vring_base(&mut st, arg),
            VHOST_SET_VRING_BUSYLOOP_TIMEOUT => Self::set_busyloop(&mut st, arg),
            VHOST_GET_VRING_BUSYLOOP_TIMEOUT => Self::get_busyloop(&mut st, arg),
            // Dirty logging is not implemented, and LOG_ALL is not offered.
            VHOST_SET_LOG_BASE | VHOST_SET_LOG_FD => Err(EOPNOTSUPP),
            // Eventfds and the tap backend arrive with the data path.
            VHOST_SET_VRING_KICK | VHOST_SET_VRING_CALL | VHOST_SET_VRING_ERR
            | VHOST_NET_SET_BACKEND => {
                vq_index(arg)?;
                Err(EOPNOTSUPP)
            }
            _ => Err(ENOTTY),
        }
    }
}

#[vtable]
impl MiscDevice for VhostNet {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        KBox::try_pin_init(
            try_pin_init!(VhostNet {
                state <- new_mutex!(DevState::new()),
            }),
            GFP_KERNEL,
        )
    }

    fn ioctl(me: Pin<&VhostNet>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            VHOST_GET_FEATURES => {
                write_arg(arg, &NET_FEATURES)?;
                Ok(0)
            }
            VHOST_SET_FEATURES => me.set_features(read_arg(arg)?),
            VHOST_GET_FEATURES_ARRAY => me.get_features_array(arg),
            VHOST_SET_FEATURES_ARRAY => me.set_features_array(arg),
            VHOST_GET_BACKEND_FEATURES => {
                write_arg(arg, &NET_BACKEND_FEATURES)?;
                Ok(0)
            }
            VHOST_SET_BACKEND_FEATURES => me.set_backend_features(read_arg(arg)?),
            VHOST_SET_OWNER => me.set_owner(),
            VHOST_RESET_OWNER => me.reset_owner(),
            VHOST_SET_MEM_TABLE
            | VHOST_SET_LOG_BASE
            | VHOST_SET_LOG_FD
            | VHOST_SET_VRING_NUM
            | VHOST_SET_VRING_ADDR
            | VHOST_SET_VRING_BASE
            | VHOST_GET_VRING_BASE
            | VHOST_SET_VRING_KICK
            | VHOST_SET_VRING_CALL
            | VHOST_SET_VRING_ERR
            | VHOST_SET_VRING_BUSYLOOP_TIMEOUT
            | VHOST_GET_VRING_BUSYLOOP_TIMEOUT
            | VHOST_NET_SET_BACKEND
            | VHOST_SET_FORK_FROM_OWNER
            | VHOST_GET_FORK_FROM_OWNER => me.owner_ioctl(cmd, arg),
            _ => Err(ENOTTY),
        }
    }

    fn show_fdinfo(me: Pin<&VhostNet>, m: &SeqFile, _file: &File) {
        let st = me.state.lock();
        seq_print!(
            m,
            "vhost-net-rs-owner:\t{}\nvhost-net-rs-features:\t{:#x}\nvhost-net-rs-regions:\t{}\n",
            st.owner.is_some() as u8,
            st.features,
            st.mem.len()
        );
        for (i, vq) in st.vqs.iter().enumerate() {
            seq_print!(
                m,
                "vq{}:\tnum={} last_avail_idx={} busyloop_timeout={}\n",
                i,
                vq.num,
                vq.last_avail_idx,
                vq.busyloop_timeout
            );
        }
    }
}
