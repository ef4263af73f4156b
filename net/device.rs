// SPDX-License-Identifier: GPL-2.0

//! The vhost-net device: one open `/dev/vhost-net-rs` (or, with
//! `drop_in=1`, `/dev/vhost-net`), its ioctls, and `read`/`write`/`poll`
//! of device IOTLB messages.

use crate::net::NET_FEATURES;
use crate::tap_glue::tap;
use crate::vhost::dev::{fd_or_unbind, Queue, Queues};
use crate::vhost::device_iotlb::{MessageError, MissControl};
use crate::vhost::virtqueue::Backend;
use crate::vhost::virtqueue::QueueConfig;
use crate::vring::Features;
use kernel::mm::Mm;
use kernel::sync::poll::PollTable;
use kernel::{
    fs::{File, Kiocb},
    iov::{IovIterDest, IovIterSource},
    miscdevice::{MiscDevice, MiscDeviceRegistration},
    new_mutex,
    prelude::*,
    seq_file::SeqFile,
    sync::{aref::ARef, Arc, Mutex},
};

use crate::tap_glue::compat::errno;
use crate::vhost::device_iotlb::{MissChannel, ReadOutcome};

use crate::vring::iotlb;

use crate::tap_glue::{file_poll, misc_node};

use crate::tap_glue::misc_node::{MiscNode, PollableDevice, DYNAMIC_MINOR, VHOST_NET_MINOR};

use crate::net::{rx::RxBackend, tx::TxBackend, QUEUES, RX_INDEX, TX_INDEX};
use crate::tap_glue::uaccess::OwnerMem;
use crate::tap_glue::worker::{Pair, Worker};
use crate::vhost::dev::{DevState, Limits};
use crate::vhost::uapi::*;
use crate::vhost::uapi::{read_arg, write_arg};
use crate::vhost::virtqueue::VirtQueue;
use kernel::sync::SetOnce;

/// The module's limits, set once by [`VhostNet::register`] after every
/// node is registered: an `open()` that does not find them (`-EAGAIN`) came
/// while the module was still loading, and fails, so that no file can
/// outlive a load whose later registration failed.
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
    match KBox::pin_init(
        MiscNode::register(c"vhost-net", VHOST_NET_MINOR),
        GFP_KERNEL,
    ) {
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

/// The workers of a device with an owner: one for both queues, as in the C
/// driver (`vhost_dev_set_owner` attaches every queue to the device's one
/// worker), or, with `workers=2`, one per queue.
enum Workers {
    Shared {
        _both: Worker<Pair<VirtQueue<RxBackend>, VirtQueue<TxBackend>>>,
    },
    PerQueue {
        _rx: Worker<VirtQueue<RxBackend>>,
        _tx: Worker<VirtQueue<TxBackend>>,
    },
}

/// The `workers` module parameter: how many workers a device has. Set once
/// by [`VhostNet::register`], before any node exists.
static WORKERS: SetOnce<u32> = SetOnce::new();

/// One open `/dev/vhost-net-rs`.
///
/// # Invariants
///
/// `rx` is queue [`RX_INDEX`] and `tx` queue [`TX_INDEX`].
#[pin_data(PinnedDrop)]
pub(crate) struct VhostNet {
    #[pin]
    state: Mutex<DevState<Workers>>,
    rx: Arc<VirtQueue<RxBackend>>,
    tx: Arc<VirtQueue<TxBackend>>,
    /// The queues' device IOTLB misses, on their way to `read()`.
    channel: Arc<MissChannel<QUEUES>>,
}

impl Queues for VhostNet {
    fn count(&self) -> u32 {
        QUEUES as u32
    }

    fn queue(&self, index: u32) -> Option<&dyn Queue> {
        match index {
            RX_INDEX => Some(&*self.rx),
            TX_INDEX => Some(&*self.tx),
            _ => None,
        }
    }

    fn misses(&self) -> &dyn MissControl {
        &*self.channel
    }
}

impl VhostNet {
    /// Starts the device's workers (one for both queues, or one per queue
    /// with `workers=2`), in the owner's address space `mm`: as
    /// vhost_tasks, or as kthreads (`VHOST_FORK_OWNER_KTHREAD`).
    fn start_workers(&self, mm: &ARef<Mm>, fork_owner: u8) -> Result<Workers> {
        let per_queue = WORKERS.copy() == Some(2);
        Ok(if fork_owner == VHOST_FORK_OWNER_KTHREAD {
            // Kthreads borrow the owner's address space: they need a user
            // reference on it (the C driver's get_task_mm).
            let user = mm.mmget_not_zero().ok_or(EINVAL)?;
            if per_queue {
                Workers::PerQueue {
                    _rx: Worker::start_kthread(self.rx.clone(), c"vhost-net-rs-rx", user.clone())?,
                    _tx: Worker::start_kthread(self.tx.clone(), c"vhost-net-rs-tx", user)?,
                }
            } else {
                Workers::Shared {
                    _both: Worker::start_kthread(self.pair()?, c"vhost-net-rs", user)?,
                }
            }
        } else if per_queue {
            Workers::PerQueue {
                _rx: Worker::start(self.rx.clone(), c"vhost-net-rs-rx")?,
                _tx: Worker::start(self.tx.clone(), c"vhost-net-rs-tx")?,
            }
        } else {
            Workers::Shared {
                _both: Worker::start(self.pair()?, c"vhost-net-rs")?,
            }
        })
    }

    /// Both queues, for one worker: RX first, as the C driver's
    /// `vhost_run_work_list` runs works in the order they were queued and
    /// a ping's request reaches the guest before its reply leaves.
    fn pair(&self) -> Result<Arc<Pair<VirtQueue<RxBackend>, VirtQueue<TxBackend>>>> {
        Ok(Arc::new(
            Pair(self.rx.clone(), self.tx.clone()),
            GFP_KERNEL,
        )?)
    }

    /// `VHOST_NET_SET_BACKEND`: binds queue `index` to a tap (or with fd -1
    /// unbinds it). Errors in the C driver's order (`vhost_net_set_backend`):
    /// the argument, the owner, the index, the ring's access, then the fd.
    fn set_backend(&self, arg: usize) -> Result<isize> {
        let file: VringFile = read_arg(arg)?;
        let st = self.state.lock();
        let owner = st.check_owner()?;
        match file.index {
            RX_INDEX => attach(&self.rx, file.fd, RxBackend::new, &owner, &self.channel),
            TX_INDEX => attach(&self.tx, file.fd, TxBackend::new, &owner, &self.channel),
            _ => Err(errno!(ENOBUFS)),
        }
    }
}

/// `VHOST_NET_SET_BACKEND` on queue `vq`: `make` builds the backend of its
/// kind from the tap file `fd` (-1 unbinds). Like the C driver, any fd that
/// is not a usable backend, closed ones included, is `-ENOTSOCK`.
fn attach<B: Backend>(
    vq: &VirtQueue<B>,
    fd: i32,
    make: impl FnOnce(ARef<File>) -> Result<B>,
    owner: &OwnerMem,
    channel: &MissChannel<QUEUES>,
) -> Result<isize> {
    let mut queue = vq.lock();
    let tap_fd = fd_or_unbind(fd);
    if tap_fd.is_none() {
        // C's vhost_net_set_backend: `if (fd == -1) vhost_clear_msg()`,
        // with the queue locked and before the ring's access is checked.
        channel.clear();
    }
    queue.check_access()?;
    let backend = match tap_fd {
        None => None,
        Some(fd) => {
            let file = tap::backend_file(fd)?;
            if queue.backend_is(&file) {
                queue.reattach();
                return Ok(0);
            }
            Some(make(file)?)
        }
    };
    queue.set_backend(backend, owner)?;
    Ok(0)
}

#[pinned_drop]
impl PinnedDrop for VhostNet {
    fn drop(self: Pin<&mut Self>) {
        self.state.lock().teardown(&*self);
    }
}

impl VhostNet {
    /// The `workers` parameter's value in effect: 1 (one worker for both
    /// queues) or 2 (one per queue); anything else is taken as 1.
    pub(crate) fn workers(requested: u32) -> u32 {
        if requested == 1 || requested == 2 {
            return requested;
        }
        pr_warn!("workers={} is not 1 or 2; using 1\n", requested);
        1
    }

    /// Registers the device's nodes, with the module's `limits`; `drop_in`
    /// and `workers` are the parameters of those names.
    pub(crate) fn register(
        limits: Limits,
        drop_in: u32,
        workers: u32,
    ) -> impl PinInit<DevNodes, Error> {
        // Read by a device's SET_OWNER, which comes after an `open()`, which
        // needs the limits set below.
        WORKERS.populate(workers);
        // The drop-in node first: it is the one that fails in practice
        // (EBUSY while C holds the minor), before anything else is
        // registered. A node is live once registered, and misc_open may
        // call `open()` on it at once; until the limits are set, after
        // both nodes, `open()` refuses (`-EAGAIN`), so that a file opened
        // on the first node cannot outlive a failed registration of the
        // second (the C driver's single misc_register has no such window).
        // `register` runs once, at load.
        try_pin_init!(DevNodes {
            _dropin: dropin_node(drop_in)?,
            _main <- MiscNode::register(c"vhost-net-rs", DYNAMIC_MINOR),
        })
        .pin_chain(move |_| {
            LIMITS.populate(limits);
            Ok(())
        })
    }
}

#[vtable]
impl MiscDevice for VhostNet {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let limits = LIMITS.copy().ok_or(EAGAIN)?;
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
        let me = &*me;
        match cmd {
            VHOST_GET_FEATURES => {
                write_arg(arg, &NET_FEATURES.bits())?;
                Ok(0)
            }
            VHOST_SET_FEATURES => {
                me.state
                    .lock()
                    .set_features(me, Features::from_bits(read_arg(arg)?), NET_FEATURES)
            }
            VHOST_GET_FEATURES_ARRAY => DevState::<Workers>::get_features_array(arg, NET_FEATURES),
            VHOST_SET_FEATURES_ARRAY => me.state.lock().set_features_array(me, arg, NET_FEATURES),
            VHOST_GET_BACKEND_FEATURES => {
                write_arg(arg, &BACKEND_FEATURES)?;
                Ok(0)
            }
            VHOST_SET_BACKEND_FEATURES => me.state.lock().set_backend_features(me, read_arg(arg)?),
            VHOST_SET_OWNER => me
                .state
                .lock()
                .set_owner(|mm, fork_owner| me.start_workers(mm, fork_owner)),
            VHOST_RESET_OWNER => me.state.lock().reset_owner(me),
            VHOST_NET_SET_BACKEND => me.set_backend(arg),
            _ => me.state.lock().dev_ioctl(me, cmd, arg),
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
            ReadOutcome::NoIotlb => Err(errno!(EBADFD)),
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
            pr_debug!("IOTLB write refused: {:?}\n", err);
            EINVAL
        })?;
        me.state
            .lock()
            .iotlb_message(&*me, &message)
            .map_err(|err| {
                pr_debug!("IOTLB message type {} refused: {:?}\n", message.kind, err);
                // As C's vhost_process_iotlb_msg: -ENOMEM when a mapping
                // cannot be allocated, -EFAULT for everything else.
                if err == MessageError::NoMemory {
                    ENOMEM
                } else {
                    EFAULT
                }
            })?;
        Ok(iotlb::MSG_LEN)
    }

    fn show_fdinfo(me: Pin<&VhostNet>, m: &SeqFile, _file: &File) {
        me.state.lock().show(&*me, m);
    }
}

impl PollableDevice for VhostNet {
    /// `EPOLLIN` while a device IOTLB miss waits to be read; never
    /// `EPOLLOUT`, as in C (a write never waits).
    fn poll(me: Pin<&VhostNet>, file: &File, table: &PollTable<'_>) -> u32 {
        match me.channel.poll(file, table) {
            Ok(true) => file_poll::POLLIN | file_poll::POLLRDNORM,
            Ok(false) => 0,
            Err(_) => file_poll::POLLERR,
        }
    }
}
