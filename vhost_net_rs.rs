// SPDX-License-Identifier: GPL-2.0

//! vhost-net-rs: the vhost-net data path, in Rust.
//!
//! Registers the misc device `/dev/vhost-net-rs`, which speaks the vhost ioctl
//! ABI of the in-tree `/dev/vhost-net` (Linux 7.3 `drivers/vhost/net.c`), so
//! that an unmodified QEMU can use it through `-netdev tap,vhostfd=N`.
//!
//! Each open file is one device: a queue pair, vq 0 receiving and vq 1
//! transmitting, each with its own worker (a vhost_task in the owner's
//! process), bound to a tap.
//!
//! Files: `uapi.rs` (ABI), `memory.rs` (memory table), `vring.rs` (split
//! ring), `virtqueue.rs` (per-queue state), `net.rs` (TX/RX), `tap_glue.rs`
//! (tap socket), `glue.rs` (eventfd, polling, workers), `uaccess.rs` (owner
//! memory). `unsafe` lives only in the three glue files.
//!
//! # Lock order
//!
//! 1. `VhostNet::state`, the device's control-plane mutex, held for one ioctl.
//! 2. `VirtQueue::inner`, one queue's mutex, also held by its worker while it
//!    processes the ring.
//!
//! Never the other way round; workers never take `state`.

use kernel::{
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::Mm,
    new_mutex,
    prelude::*,
    seq_file::SeqFile,
    seq_print,
    sync::{aref::ARef, Arc, Mutex},
    uaccess::{UserPtr, UserSlice},
};

mod glue;
mod memory;
mod net;
mod tap_glue;
mod uaccess;
mod uapi;
mod virtqueue;
mod vring;

use glue::{EventFd, Worker};
use memory::{MemError, Region};
use tap_glue::TapSocket;
use uapi::*;
use virtqueue::{Dir, Stats, VirtQueue, VqConfig, VqInner};

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
    let v = module_parameters::max_mem_regions.value();
    v.clamp(1, MEM_REGIONS_HARD_MAX) as usize
}

#[pin_data]
struct VhostNetModule {
    #[pin]
    _miscdev: MiscDeviceRegistration<VhostNet>,
}

impl kernel::InPlaceModule for VhostNetModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        let v = module_parameters::max_mem_regions.value();
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

/// The control-plane state of one open file.
struct DevState {
    /// The owner's address space, set by `SET_OWNER`. Every ioctl that
    /// configures the device must come from a task using this mm.
    owner: Option<ARef<Mm>>,
    /// One worker per queue, running while there is an owner.
    workers: Option<[Worker<VirtQueue>; NVQS]>,
    features: u64,
    backend_features: u64,
    nregions: usize,
    /// `VHOST_SET_FORK_FROM_OWNER`: workers as vhost_tasks (1) or kthreads (0).
    fork_owner: u8,
}

impl DevState {
    fn new() -> Self {
        Self {
            owner: None,
            workers: None,
            features: 0,
            backend_features: 0,
            nregions: 0,
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
}

/// One open `/dev/vhost-net-rs`.
#[pin_data(PinnedDrop)]
struct VhostNet {
    #[pin]
    state: Mutex<DevState>,
    vqs: [Arc<VirtQueue>; NVQS],
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
    /// Stops the workers and drops every binding: what `RESET_OWNER` and
    /// `close()` do. Wakeup sources go first, then the workers (joined), then
    /// the files they used.
    fn teardown(&self, st: &mut DevState) {
        for vq in &self.vqs {
            vq.quiesce();
        }
        st.workers = None;
        for vq in &self.vqs {
            let mut s = vq.inner.lock();
            vq.reset(&mut s);
        }
        let fork_owner = st.fork_owner;
        *st = DevState::new();
        st.fork_owner = fork_owner;
    }

    fn set_owner(&self) -> Result<isize> {
        let mut st = self.state.lock();
        if st.owner.is_some() {
            return Err(EBUSY);
        }
        let mm = {
            let cur = kernel::current!();
            let mm = cur.mm().ok_or(EINVAL)?;
            ARef::from(&**mm)
        };
        let rx = Worker::start(self.vqs[0].clone(), c"vhost-net-rs-rx")?;
        let tx = Worker::start(self.vqs[1].clone(), c"vhost-net-rs-tx")?;
        st.workers = Some([rx, tx]);
        st.owner = Some(mm);
        Ok(0)
    }

    fn reset_owner(&self) -> Result<isize> {
        let mut st = self.state.lock();
        st.check_owner()?;
        self.teardown(&mut st);
        Ok(0)
    }

    fn set_features(&self, features: u64) -> Result<isize> {
        if features & !NET_FEATURES != 0 {
            return Err(EOPNOTSUPP);
        }
        let mut st = self.state.lock();
        st.features = features;
        for vq in &self.vqs {
            let mut s = vq.inner.lock();
            s.features = features;
            if s.ring.is_some() {
                vq.stop_ring(&mut s);
                vq.start_ring(&mut s)?;
            }
        }
        Ok(0)
    }

    fn get_features_array(&self, arg: usize) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let len = usize::try_from(count).map_err(|_| EFAULT)?.checked_mul(8).ok_or(EFAULT)?;
        let mut w = UserSlice::new(UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?), len)
            .writer();
        let words = [NET_FEATURES, 0u64];
        for i in 0..count {
            let v = usize::try_from(i).ok().and_then(|i| words.get(i)).copied().unwrap_or(0);
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
            match usize::try_from(i).ok().and_then(|i| words.get_mut(i)) {
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

    fn set_mem_table(&self, st: &mut DevState, arg: usize) -> Result<isize> {
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
        let table = Arc::new(regions, GFP_KERNEL)?;
        st.nregions = n;
        for vq in &self.vqs {
            let mut s = vq.inner.lock();
            s.mem = Some(table.clone());
            if s.backend.is_some() && s.ring.is_none() && !s.broken {
                vq.start_ring(&mut s)?;
            }
        }
        Ok(0)
    }

    /// The vring ioctls: each works on one queue, under its lock.
    fn vring_ioctl(&self, cmd: u32, arg: usize) -> Result<isize> {
        let idx = vq_index(arg)?;
        let vq = &self.vqs[idx];
        let mut s = vq.inner.lock();
        match cmd {
            VHOST_SET_VRING_NUM => {
                let v: VringState = read_arg(arg)?;
                if s.backend.is_some() {
                    return Err(EBUSY);
                }
                if v.num == 0 || v.num > VRING_MAX_NUM || !v.num.is_power_of_two() {
                    return Err(EINVAL);
                }
                s.cfg.num = v.num;
            }
            VHOST_SET_VRING_ADDR => Self::set_vring_addr(vq, &mut s, read_arg(arg)?)?,
            VHOST_SET_VRING_BASE => {
                let v: VringState = read_arg(arg)?;
                if s.backend.is_some() {
                    return Err(EBUSY);
                }
                s.cfg.last_avail_idx = u16::try_from(v.num).map_err(|_| EINVAL)?;
            }
            VHOST_GET_VRING_BASE => {
                // Stops the ring, so the index cannot move after it is read.
                vq.stop_ring(&mut s);
                let v = VringState { index: idx as u32, num: s.cfg.last_avail_idx.into() };
                write_arg(arg, &v)?;
            }
            VHOST_SET_VRING_KICK => {
                let f: VringFile = read_arg(arg)?;
                let file = match f.fd {
                    VHOST_FILE_UNBIND => None,
                    fd => Some(glue::eventfd_file(fd)?),
                };
                vq.set_kick(&mut s, file)?;
            }
            VHOST_SET_VRING_CALL | VHOST_SET_VRING_ERR => {
                let f: VringFile = read_arg(arg)?;
                let ctx = match f.fd {
                    VHOST_FILE_UNBIND => None,
                    fd => Some(EventFd::from_fd(fd)?),
                };
                // The old context, if any, is released here.
                if cmd == VHOST_SET_VRING_CALL {
                    s.call = ctx;
                } else {
                    s.err = ctx;
                }
            }
            VHOST_SET_VRING_BUSYLOOP_TIMEOUT => {
                let v: VringState = read_arg(arg)?;
                s.cfg.busyloop_timeout = v.num;
            }
            VHOST_GET_VRING_BUSYLOOP_TIMEOUT => {
                let v = VringState { index: idx as u32, num: s.cfg.busyloop_timeout };
                write_arg(arg, &v)?;
            }
            VHOST_NET_SET_BACKEND => {
                let f: VringFile = read_arg(arg)?;
                if !s.cfg.addr_set {
                    return Err(EFAULT);
                }
                // Like the C driver, any fd that is not a usable backend,
                // closed ones included, is -ENOTSOCK.
                let sock = match f.fd {
                    VHOST_FILE_UNBIND => None,
                    fd => {
                        let file = glue::fget(fd).map_err(|_| ENOTSOCK)?;
                        Some(Arc::new(TapSocket::new(file)?, GFP_KERNEL)?)
                    }
                };
                vq.set_backend(&mut s, sock)?;
            }
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }

    fn set_vring_addr(vq: &VirtQueue, s: &mut VqInner, a: VringAddr) -> Result {
        if a.flags & !VHOST_VRING_F_LOG != 0 {
            return Err(EOPNOTSUPP);
        }
        // Logging is not offered, so a log address is never used.
        if a.desc_user_addr % DESC_ALIGN != 0
            || a.avail_user_addr % AVAIL_ALIGN != 0
            || a.used_user_addr % USED_ALIGN != 0
            || a.log_guest_addr % USED_ALIGN != 0
        {
            return Err(EINVAL);
        }
        let (dsz, asz, usz) = vring::Vring::sizes(s.cfg.num, true);
        let in_user = |p: u64, sz: u64| p.checked_add(sz).is_some_and(|e| e <= USER_LIMIT);
        if !in_user(a.desc_user_addr, dsz)
            || !in_user(a.avail_user_addr, asz)
            || !in_user(a.used_user_addr, usz)
        {
            return Err(EFAULT);
        }
        let running = s.ring.is_some();
        vq.stop_ring(s);
        s.cfg.desc = a.desc_user_addr;
        s.cfg.avail = a.avail_user_addr;
        s.cfg.used = a.used_user_addr;
        s.cfg.addr_set = true;
        if running {
            vq.start_ring(s)?;
        }
        Ok(())
    }

    fn set_fork_owner(st: &mut DevState, arg: usize) -> Result<isize> {
        if st.owner.is_some() {
            return Err(EBUSY);
        }
        let v: u8 = read_arg(arg)?;
        match v {
            VHOST_FORK_OWNER_TASK => {
                st.fork_owner = v;
                Ok(0)
            }
            // kthread workers (with kthread_use_mm) are not implemented.
            VHOST_FORK_OWNER_KTHREAD => Err(EOPNOTSUPP),
            _ => Err(EINVAL),
        }
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
            VHOST_SET_MEM_TABLE => self.set_mem_table(&mut st, arg),
            // Dirty logging is not implemented, and LOG_ALL is not offered.
            VHOST_SET_LOG_BASE | VHOST_SET_LOG_FD => Err(EOPNOTSUPP),
            _ => self.vring_ioctl(cmd, arg),
        }
    }
}

#[pinned_drop]
impl PinnedDrop for VhostNet {
    fn drop(self: Pin<&mut Self>) {
        let mut st = self.state.lock();
        self.teardown(&mut st);
    }
}

#[vtable]
impl MiscDevice for VhostNet {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let vqs = [VirtQueue::new(Dir::Rx)?, VirtQueue::new(Dir::Tx)?];
        KBox::try_pin_init(
            try_pin_init!(VhostNet {
                state <- new_mutex!(DevState::new()),
                vqs,
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
            u8::from(st.owner.is_some()),
            st.features,
            st.nregions
        );
        for (i, vq) in me.vqs.iter().enumerate() {
            let s = vq.inner.lock();
            let c: VqConfig = s.cfg;
            let st = &vq.stats;
            seq_print!(
                m,
                "vq{}:\tnum={} last_avail_idx={} running={} broken={} backend={} \
                 packets={} bytes={} wakeups={} calls={} errors={} drops={}\n",
                i,
                c.num,
                s.ring.as_ref().map_or(c.last_avail_idx, |r| r.last_avail_idx),
                u8::from(s.ring.is_some()),
                u8::from(s.broken),
                u8::from(s.backend.is_some()),
                Stats::get(&st.packets),
                Stats::get(&st.bytes),
                vq.waker.wakeups(),
                Stats::get(&st.calls),
                Stats::get(&st.errors),
                Stats::get(&st.drops)
            );
        }
    }
}
