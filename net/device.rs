// SPDX-License-Identifier: GPL-2.0

//! The vhost-net device: one open `/dev/vhost-net-rs` (or, with
//! `drop_in=1`, `/dev/vhost-net`), its ioctls, and `read`/`write`/`poll`
//! of device IOTLB messages.

use kernel::{fs::{File, Kiocb}, iov::{IovIterDest, IovIterSource}, miscdevice::{MiscDevice, MiscDeviceRegistration}, new_mutex, prelude::*, seq_file::SeqFile, seq_print, sync::{aref::ARef, Arc, Mutex}, uaccess::{UserPtr, UserSlice}};

use crate::tap_glue::compat::code::{ebadfd, enobufs, eopnotsupp};
use crate::vhost::device_iotlb::{MessageError, MissChannel, ReadOutcome};
use crate::vring::dirty_log::DirtyLog;
use crate::vring::{iotlb, mem_table};
use crate::vhost::device_iotlb;
use crate::tap_glue::{file_poll, misc_node};
use crate::tap_glue::eventfd::EventFd;
use crate::tap_glue::misc_node::{MiscNode, PollWait, PollableDevice, DYNAMIC_MINOR, VHOST_NET_MINOR};
use crate::vring::mem_table::Region;
use crate::net::{rx::RxQueue, tx::TxQueue, QUEUES, RX_INDEX, TX_INDEX};
use crate::vhost::uapi::*;
use crate::tap_glue::uaccess::{user_limit, OwnerMem};
use crate::vhost::virtqueue::{MemTable, VirtQueue};
use crate::tap_glue::worker::Worker;
use crate::vhost::dev::{mem_errno, queue_ioctl, read_arg, write_arg, DevState, Limits};
use kernel::sync::SetOnce;

/// The module's limits, set once by [`VhostNet::register`] before any node
/// exists, so every `open()` finds them.
static LIMITS: SetOnce<Limits> = SetOnce::new();

/// The device's nodes: `/dev/vhost-net-rs`, and `/dev/vhost-net` with
/// `drop_in=1`.
#[pin_data]
pub(crate) struct DevNodes {
    /// `/dev/vhost-net`, with `drop_in=1`. Declared first, so that it is
    /// registered first: it is the one that fails in practice.
    _dropin: Option<Pin<KBox<MiscNode<VhostNet>>>>,
    #[pin]
    _main: MiscNode<VhostNet>,
}

/// `/dev/vhost-net` if `drop_in` asks for it. Fails the module load,
/// saying why, if the node cannot be had.
fn dropin_node(drop_in: u32) -> Result<Option<Pin<KBox<MiscNode<VhostNet>>>>> {
    match drop_in {
        0 => return Ok(None),
        1 => {}
        other => {
            pr_err!("drop_in={} is not 0 or 1\n", other);
            return Err(EINVAL);
        }
    }
    match KBox::pin_init(MiscNode::register(c"vhost-net", VHOST_NET_MINOR), GFP_KERNEL) {
        Ok(node) => {
            pr_info!("serving /dev/vhost-net (misc minor 238) as well as /dev/vhost-net-rs\n");
            Ok(Some(node))
        }
        Err(err) => {
            if err == EBUSY {
                pr_err!(
                    "drop_in=1: misc minor 238 (/dev/vhost-net) is taken, most likely by the C vhost_net \
                     module; unload it first (modprobe -r vhost_net) or load vhost_net_rs without drop_in\n"
                );
            } else {
                pr_err!("drop_in=1: registering /dev/vhost-net failed: {:?}\n", err);
            }
            Err(err)
        }
    }
}

/// The workers of a device with an owner.
struct Workers {
    _rx: Worker<VirtQueue<RxQueue>>,
    _tx: Worker<VirtQueue<TxQueue>>,
}

/// One open `/dev/vhost-net-rs`.
///
/// # Invariants
///
/// `rx` is queue [`RX_INDEX`] and `tx` queue [`TX_INDEX`].
#[pin_data(PinnedDrop)]
pub(crate) struct VhostNet {
    #[pin]
    state: Mutex<DevState<Workers>>,
    rx: Arc<VirtQueue<RxQueue>>,
    tx: Arc<VirtQueue<TxQueue>>,
    /// The queues' device IOTLB misses, on their way to `read()`.
    channel: Arc<MissChannel<QUEUES>>,
}

impl VhostNet {
    /// Stops the workers and drops every binding: what `RESET_OWNER` and
    /// `close()` do, in the C driver's order. The backends go first, with
    /// the polls that could wake a worker and the rings the workers
    /// process, so a worker that still runs finds nothing to do and cannot
    /// re-arm a poll. Then the workers stop (each after an RCU grace
    /// period, see `worker.rs`). Then the rest of the state goes.
    fn teardown(&self, st: &mut DevState<Workers>) {
        let rx_backend = self.rx.lock().detach();
        let tx_backend = self.tx.lock().detach();
        drop(rx_backend);
        drop(tx_backend);
        st.workers = None;
        self.rx.lock().reset();
        self.tx.lock().reset();
        // The IOTLB went with the queues: its misses go, and a blocked
        // reader learns it (as C's vhost_dev_cleanup wakes it).
        self.channel.set_enabled(false);
        // Like the C driver (vhost_dev_reset_owner), the worker kind goes
        // back to its default too.
        *st = DevState::new(VHOST_FORK_OWNER_TASK, st.limits);
    }

    fn set_owner(&self) -> Result<isize> {
        let mut st = self.state.lock();
        if st.owner.is_some() {
            return Err(EBUSY);
        }
        let mm = {
            let current = kernel::current!();
            let mm = current.mm().ok_or(EINVAL)?;
            ARef::from(&**mm)
        };
        let workers = if st.fork_owner == VHOST_FORK_OWNER_KTHREAD {
            // Kthreads borrow the owner's address space: they need a user
            // reference on it (the C driver's get_task_mm).
            let user = mm.mmget_not_zero().ok_or(EINVAL)?;
            Workers {
                _rx: Worker::start_kthread(self.rx.clone(), c"vhost-net-rs-rx", user.clone())?,
                _tx: Worker::start_kthread(self.tx.clone(), c"vhost-net-rs-tx", user)?,
            }
        } else {
            Workers {
                _rx: Worker::start(self.rx.clone(), c"vhost-net-rs-rx")?,
                _tx: Worker::start(self.tx.clone(), c"vhost-net-rs-tx")?,
            }
        };
        st.workers = Some(workers);
        st.owner = Some(mm);
        Ok(0)
    }

    /// `RESET_OWNER`: the device as freshly opened, except that, as in the
    /// C driver (`vhost_dev_reset_owner`), the queues keep an empty memory
    /// table rather than none, which a backend can be attached with.
    fn reset_owner(&self) -> Result<isize> {
        let mut st = self.state.lock();
        st.check_owner()?;
        let empty: Arc<MemTable> = Arc::new(KVec::new(), GFP_KERNEL)?;
        self.teardown(&mut st);
        self.rx.lock().set_mem(empty.clone());
        self.tx.lock().set_mem(empty);
        Ok(0)
    }

    /// `SET_FEATURES`: every bit checked first, then stored on both queues.
    /// As in the C driver, this needs no owner and reads no guest memory.
    /// `VHOST_F_LOG_ALL` needs every attached queue's log to have room for
    /// the memory table (`-EFAULT`), and the ring format (`RING_PACKED`)
    /// changes only on queues without a backend (`-EBUSY`), as does the
    /// address space (`ACCESS_PLATFORM`).
    ///
    /// With `ACCESS_PLATFORM`, each queue gets a new, empty device IOTLB,
    /// as C's `vhost_init_device_iotlb` gives the device one; QEMU sets
    /// the features again when migration starts, and refills the table on
    /// the misses that follow, which a queue posts when it next runs.
    fn set_features(&self, features: u64) -> Result<isize> {
        if features & !NET_FEATURES != 0 {
            return Err(eopnotsupp());
        }
        let platform = features & bit(feature::VIRTIO_F_ACCESS_PLATFORM) != 0;
        let mut st = self.state.lock();
        if features & bit(feature::VHOST_F_LOG_ALL) != 0 && !(self.rx.lock().can_log_all() && self.tx.lock().can_log_all()) {
            return Err(EFAULT);
        }
        if !(self.rx.lock().can_set_features(features) && self.tx.lock().can_set_features(features)) {
            return Err(EBUSY);
        }
        let (rx_table, tx_table) = if platform {
            (Some(device_iotlb::new_table(st.limits.iotlb_entries)?), Some(device_iotlb::new_table(st.limits.iotlb_entries)?))
        } else {
            (None, None)
        };
        st.features = features;
        self.rx.lock().set_features(features, rx_table);
        self.tx.lock().set_features(features, tx_table);
        self.channel.set_enabled(platform);
        Ok(0)
    }

    fn get_features_array(&self, arg: usize) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let len = usize::try_from(count).map_err(|_| EFAULT)?.checked_mul(8).ok_or(EFAULT)?;
        let mut writer = UserSlice::new(UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?), len).writer();
        let words = [NET_FEATURES, 0u64];
        for index in 0..count {
            let word = usize::try_from(index).ok().and_then(|i| words.get(i)).copied().unwrap_or(0);
            writer.write(&word)?;
        }
        Ok(0)
    }

    fn set_features_array(&self, arg: usize) -> Result<isize> {
        let count: u64 = read_arg(arg)?;
        let len = usize::try_from(count).map_err(|_| EFAULT)?.checked_mul(8).ok_or(EFAULT)?;
        let mut reader = UserSlice::new(UserPtr::from_addr(arg.checked_add(8).ok_or(EFAULT)?), len).reader();
        let mut words = [0u64; FEATURES_U64S];
        for index in 0..count {
            let word: u64 = reader.read()?;
            match usize::try_from(index).ok().and_then(|i| words.get_mut(i)) {
                Some(slot) => *slot = word,
                None if word != 0 => return Err(eopnotsupp()),
                None => {}
            }
        }
        if words[1..].iter().any(|&word| word != 0) {
            return Err(eopnotsupp());
        }
        self.set_features(words[0])
    }

    /// `VHOST_SET_BACKEND_FEATURES`: as in C, no owner needed. The v2
    /// format applies to the misses posted from now on.
    fn set_backend_features(&self, features: u64) -> Result<isize> {
        if features & !NET_BACKEND_FEATURES != 0 {
            return Err(eopnotsupp());
        }
        let format = if features & bit(backend_feature::VHOST_BACKEND_F_IOTLB_MSG_V2) != 0 {
            iotlb::FORMAT_V2
        } else {
            iotlb::FORMAT_V1
        };
        let mut st = self.state.lock();
        st.backend_features = features;
        self.rx.lock().set_iotlb_format(format);
        self.tx.lock().set_iotlb_format(format);
        Ok(0)
    }

    /// Wakes the queues named in `mask` (bit `q` for queue `q`).
    fn wake_queues(&self, mask: u64) {
        if mask & (1 << RX_INDEX) != 0 {
            self.rx.wake();
        }
        if mask & (1 << TX_INDEX) != 0 {
            self.tx.wake();
        }
    }

    /// One message written to the device (`vhost_process_iotlb_msg`),
    /// applied to each queue's copy of the IOTLB under that queue's lock,
    /// so that it is in effect for every run once this returns (see
    /// `device_iotlb.rs`).
    fn iotlb_message(&self, message: &iotlb::Message) -> Result<(), MessageError> {
        let st = self.state.lock();
        let batches = st.backend_features & bit(backend_feature::VHOST_BACKEND_F_IOTLB_BATCH) != 0;
        match message.kind {
            iotlb::MSG_UPDATE => {
                // Both copies have taken every message so far, so they
                // take or refuse this one alike.
                self.rx.lock().iotlb_update(message.iova, message.size, message.uaddr, message.perm)?;
                self.tx.lock().iotlb_update(message.iova, message.size, message.uaddr, message.perm)?;
                self.wake_queues(self.channel.answer(message.iova, message.size));
            }
            iotlb::MSG_INVALIDATE => {
                if message.size == 0 {
                    return Err(MessageError::EmptyInvalidate);
                }
                self.rx.lock().iotlb_invalidate(message.iova, message.size)?;
                self.tx.lock().iotlb_invalidate(message.iova, message.size)?;
            }
            iotlb::MSG_BATCH_BEGIN if batches => self.channel.begin_batch(),
            iotlb::MSG_BATCH_END if batches => self.wake_queues(self.channel.end_batch()),
            other => return Err(MessageError::Unsupported(other)),
        }
        Ok(())
    }

    /// `VHOST_SET_LOG_BASE`: the dirty bitmap's address in the owner's
    /// memory, given to each queue. A queue whose running ring would not
    /// fit keeps its old base and the call fails with `-EFAULT`, while the
    /// other queue takes the new one, as in the C driver.
    fn set_log_base(&self, arg: usize) -> Result<isize> {
        let base: u64 = read_arg(arg)?;
        if usize::try_from(base).is_err() {
            return Err(EFAULT);
        }
        let log = DirtyLog::new(base);
        let rx = self.rx.lock().set_log_base(log);
        let tx = self.tx.lock().set_log_base(log);
        rx.and(tx)?;
        Ok(0)
    }

    /// `VHOST_SET_LOG_FD`: the eventfd signalled after writes are logged;
    /// -1 unbinds.
    fn set_log_fd(&self, arg: usize) -> Result<isize> {
        let fd: i32 = read_arg(arg)?;
        let eventfd = match fd {
            VHOST_FILE_UNBIND => None,
            fd => Some(Arc::new(EventFd::from_fd(fd)?, GFP_KERNEL)?),
        };
        self.rx.lock().set_log_eventfd(eventfd.clone());
        self.tx.lock().set_log_eventfd(eventfd);
        Ok(0)
    }

    /// `SET_MEM_TABLE`: the whole table is read and checked before either
    /// queue sees it, so a refused table changes nothing.
    fn set_mem_table(&self, st: &mut DevState<Workers>, arg: usize) -> Result<isize> {
        let header: MemoryHeader = read_arg(arg)?;
        if header.padding != 0 {
            return Err(eopnotsupp());
        }
        let nregions = header.nregions as usize;
        if nregions > st.limits.mem_regions {
            return Err(st.too_many_regions(nregions));
        }
        let mut reader = UserSlice::new(
            UserPtr::from_addr(arg.checked_add(core::mem::size_of::<MemoryHeader>()).ok_or(EFAULT)?),
            nregions * core::mem::size_of::<MemoryRegion>(),
        )
        .reader();
        let mut regions = KVec::with_capacity(nregions, GFP_KERNEL)?;
        for _ in 0..nregions {
            let raw: MemoryRegion = reader.read()?;
            let region = Region::new(raw.guest_phys_addr, raw.memory_size, raw.userspace_addr, user_limit())
                .map_err(mem_errno)?;
            regions.push(region, GFP_KERNEL)?;
        }
        mem_table::validate(&mut regions, st.limits.mem_regions).map_err(mem_errno)?;
        // With logging on, the log must have room for the new table.
        if !(self.rx.lock().can_take_mem(&regions) && self.tx.lock().can_take_mem(&regions)) {
            return Err(EFAULT);
        }
        let table = Arc::new(regions, GFP_KERNEL)?;
        st.nregions = nregions;
        self.rx.lock().set_mem(table.clone());
        self.tx.lock().set_mem(table);
        Ok(0)
    }

    /// The vring ioctls: each works on one queue, under its lock.
    fn vring_ioctl(&self, cmd: u32, arg: usize, owner: &OwnerMem) -> Result<isize> {
        // The vq index leads every vring ioctl argument; out of range is
        // -ENOBUFS, as in the C driver.
        match read_arg::<u32>(arg)? {
            RX_INDEX => queue_ioctl(&self.rx, RX_INDEX, cmd, arg, RxQueue::new, owner),
            TX_INDEX => queue_ioctl(&self.tx, TX_INDEX, cmd, arg, TxQueue::new, owner),
            _ => Err(enobufs()),
        }
    }

    fn set_fork_owner(st: &mut DevState<Workers>, arg: usize) -> Result<isize> {
        if st.owner.is_some() {
            return Err(EBUSY);
        }
        let mode: u8 = read_arg(arg)?;
        match mode {
            VHOST_FORK_OWNER_TASK | VHOST_FORK_OWNER_KTHREAD => {
                st.fork_owner = mode;
                Ok(0)
            }
            _ => Err(EINVAL),
        }
    }

    /// A command this driver does not know gets the errors the C driver
    /// gives it on its way through `vhost_dev_ioctl` and
    /// `vhost_vring_ioctl`: no owner, then a bad vring index, then
    /// `-ENOTTY`.
    fn unknown_ioctl(&self, arg: usize) -> Result<isize> {
        self.state.lock().check_owner()?;
        match read_arg::<u32>(arg)? {
            RX_INDEX | TX_INDEX => Err(ENOTTY),
            _ => Err(enobufs()),
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
        let owner = st.check_owner()?;
        match cmd {
            VHOST_SET_MEM_TABLE => self.set_mem_table(&mut st, arg),
            VHOST_SET_LOG_BASE => self.set_log_base(arg),
            VHOST_SET_LOG_FD => self.set_log_fd(arg),
            _ => self.vring_ioctl(cmd, arg, &owner),
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

impl VhostNet {
    /// Registers the device's nodes, with the module's `limits`; `drop_in`
    /// is the parameter of that name.
    pub(crate) fn register(limits: Limits, drop_in: u32) -> impl PinInit<DevNodes, Error> {
        // Set before the first node exists; `register` runs once, at load.
        LIMITS.populate(limits);
        // The drop-in node first: it is the one that fails in practice
        // (EBUSY while C holds the minor), and nothing may fail after a
        // node is registered, or a file opened in between would outlive
        // the failed load.
        try_pin_init!(DevNodes {
            _dropin: dropin_node(drop_in)?,
            _main <- MiscNode::register(c"vhost-net-rs", DYNAMIC_MINOR),
        })
    }
}

#[vtable]
impl MiscDevice for VhostNet {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let limits = LIMITS.copy().ok_or(ENODEV)?;
        let channel = MissChannel::new()?;
        let rx = VirtQueue::new(RX_INDEX, channel.clone())?;
        let tx = VirtQueue::new(TX_INDEX, channel.clone())?;
        KBox::try_pin_init(
            try_pin_init!(VhostNet {
                state <- new_mutex!(DevState::new(VHOST_FORK_OWNER_TASK, limits)),
                rx,
                tx,
                channel,
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
            _ => me.unknown_ioctl(arg),
        }
    }

    /// `read()`: one device IOTLB miss, as `struct vhost_msg` or
    /// `vhost_msg_v2` (72 bytes), with the C driver's results: 0 for a
    /// buffer too short for one, `-EAGAIN` for none with `O_NONBLOCK`,
    /// `-EBADFD` for none without an IOTLB; otherwise it waits.
    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        let me = kiocb.file();
        if iov.len() < iotlb::MSG_LEN {
            return Ok(0);
        }
        match me.channel.read(misc_node::nonblocking(&kiocb))? {
            ReadOutcome::WouldBlock => Err(EAGAIN),
            ReadOutcome::NoIotlb => Err(ebadfd()),
            ReadOutcome::Miss(queue, miss) => {
                let bytes = iotlb::encode_miss(miss.format, miss.iova, miss.access);
                let copied = iov.copy_to_iter(&bytes);
                if copied != bytes.len() {
                    // As in C, a message that did not get out is dropped:
                    // the queue posts again when it runs.
                    me.channel.drop_read(queue);
                }
                Ok(copied)
            }
        }
    }

    /// `write()`: one device IOTLB message (`vhost_chr_write_iter`). A
    /// malformed frame is `-EINVAL`, a message the device refuses
    /// `-EFAULT`; one taken returns the message's size, 72, however many
    /// bytes were written.
    fn write_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterSource<'_>) -> Result<usize> {
        let me = kiocb.file();
        let mut bytes = [0u8; iotlb::MIN_WRITE];
        let copied = iov.copy_from_iter(&mut bytes);
        let message = iotlb::parse_write(&bytes[..copied]).map_err(|err| {
            pr_debug!("vhost-net-rs: IOTLB write refused: {:?}\n", err);
            EINVAL
        })?;
        me.iotlb_message(&message).map_err(|err| {
            pr_debug!("vhost-net-rs: IOTLB message type {} refused: {:?}\n", message.kind, err);
            EFAULT
        })?;
        Ok(iotlb::MSG_LEN)
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
        me.rx.lock().show(m);
        me.tx.lock().show(m);
    }
}

impl PollableDevice for VhostNet {
    /// `EPOLLIN` while a device IOTLB miss waits to be read; never
    /// `EPOLLOUT`, as in C (a write never waits).
    fn poll(me: Pin<&VhostNet>, wait: &PollWait<'_>) -> u32 {
        if me.channel.poll(wait) {
            file_poll::POLLIN | file_poll::POLLRDNORM
        } else {
            0
        }
    }
}
