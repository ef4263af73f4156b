// SPDX-License-Identifier: GPL-2.0

//! The one FFI surface of the module beyond `bindings`: the C functions that
//! bindgen does not reach, each typed as its C prototype.
//!
//! Two kinds live here: kernel functions whose headers are not in the
//! kernel crate's bindings (`vhost_task`, the tun socket), and the C shim
//! (`vnr_shim.c`, mirrored by `vnr_shim.h`), which wraps what Rust cannot
//! express: single 16-bit user accesses (`get_user`/`put_user` are macros),
//! inline helpers of `ptr_ring`, `xdp_buff` and tun, and the current task's
//! state. Callers are in `worker.rs`, `uaccess.rs`, `tap.rs` and the batches.

use crate::vring::Store8;
use core::ffi::c_void;
use kernel::{
    bindings,
    ffi::{c_char, c_int, c_uint},
};

// `Store8` is the shim's `struct vnr_store8`, whose layout the shim asserts
// too.
const _: () = assert!(core::mem::size_of::<Store8>() == 12);
const _: () = assert!(core::mem::offset_of!(Store8, bytes) == 4);
const _: () = assert!(core::mem::align_of::<Store8>() == 4);

/// Opaque `struct vhost_task` (kernel/vhost_task.c).
#[repr(C)]
pub(crate) struct VhostTask {
    _opaque: [u8; 0],
}

/// Opaque `struct ptr_ring` (include/linux/ptr_ring.h): tun's queue of
/// packets for the reader of the tap.
#[repr(C)]
pub(crate) struct PtrRing {
    _opaque: [u8; 0],
}

/// Opaque `struct xdp_buff` (include/net/xdp.h); its size comes from
/// [`vnr_xdp_buff_size`].
#[repr(C)]
pub(crate) struct XdpBuff {
    _opaque: [u8; 0],
}

// The bindgen types are passed by pointer only, never by value; the lint
// trips on a zero-length array marker deep inside `struct file` and `struct
// socket`, which does not change how a pointer to them is passed.
#[allow(improper_ctypes)]
extern "C" {
    // include/linux/sched/vhost_task.h
    pub(crate) fn vhost_task_create(
        func: unsafe extern "C" fn(*mut c_void) -> bool,
        handle_kill: unsafe extern "C" fn(*mut c_void),
        arg: *mut c_void,
        name: *const c_char,
    ) -> *mut VhostTask;
    pub(crate) fn vhost_task_start(task: *mut VhostTask);
    pub(crate) fn vhost_task_stop(task: *mut VhostTask);
    pub(crate) fn vhost_task_wake(task: *mut VhostTask);

    // include/linux/if_tun.h
    pub(crate) fn tun_ptr_free(ptr: *mut c_void);

    // vnr_shim.h: 16-bit user accesses, a packed event area's 32-bit
    // load, one 64-bit store, 16-byte descriptor reads (split; packed,
    // flags first), a packed ring's used entries in one access, and the TX
    // packet copy.
    pub(crate) fn vnr_get_user_u16(uaddr: *const u16, val: *mut u16) -> c_int;
    pub(crate) fn vnr_get_user_u32(uaddr: *const u32, val: *mut u32) -> c_int;
    pub(crate) fn vnr_put_user_u16(uaddr: *mut u16, val: u16) -> c_int;
    pub(crate) fn vnr_put_user_u64(uaddr: *mut u64, val: u64) -> c_int;
    pub(crate) fn vnr_read_user_16(uaddr: *const c_void, dst: *mut u8) -> c_int;
    pub(crate) fn vnr_read_user_16_acquire(uaddr: *const c_void, dst: *mut u8) -> c_int;
    pub(crate) fn vnr_copy_from_user(dst: *mut c_void, src: *const c_void, n: usize) -> usize;
    pub(crate) fn vnr_put_user_u64_each(
        uaddr: *mut c_void,
        len: usize,
        stores: *const Store8,
        n: c_uint,
    ) -> c_int;
    pub(crate) fn vnr_put_user_u64_spaced(
        uaddr: *mut c_void,
        spacing: usize,
        vals: *const u64,
        n: c_uint,
    ) -> c_int;

    // vnr_shim.h: a message over one user buffer.
    pub(crate) fn vnr_iov_iter_ubuf(
        iter: *mut bindings::iov_iter,
        direction: c_uint,
        buf: *mut c_void,
        count: usize,
    );

    // vnr_shim.h: the current task and the address space.
    pub(crate) fn vnr_set_current_running();
    pub(crate) fn vnr_set_current_interruptible();
    pub(crate) fn vnr_cond_resched();
    pub(crate) fn vnr_busy_poll_should_stop() -> bool;
    pub(crate) fn vnr_task_size_max() -> u64;

    // vnr_shim.h: TX batching into tun.
    pub(crate) fn vnr_xdp_buff_size() -> usize;
    pub(crate) fn vnr_xdp_shinfo_size() -> c_uint;
    pub(crate) fn vnr_xdp_rx_pad() -> c_uint;
    pub(crate) fn vnr_sock_xdp_headroom(sock: *mut bindings::socket) -> c_uint;
    pub(crate) fn vnr_xdp_prepare(
        xdp: *mut XdpBuff,
        buf: *mut c_void,
        buflen: c_uint,
        pad: c_uint,
        datalen: c_uint,
    );
    pub(crate) fn vnr_xdp_data(xdp: *mut XdpBuff) -> *mut c_void;
    pub(crate) fn vnr_sock_can_batch(sock: *mut bindings::socket) -> bool;
    pub(crate) fn vnr_tun_send_batch(
        sock: *mut bindings::socket,
        xdp: *mut XdpBuff,
        n: c_uint,
    ) -> c_int;

    // vnr_shim.h: the backend socket, and RX batching from its ring.
    pub(crate) fn vnr_backend_socket(file: *mut bindings::file) -> *mut bindings::socket;
    pub(crate) fn vnr_backend_rx_ring(file: *mut bindings::file) -> *mut PtrRing;
    pub(crate) fn vnr_rx_ring_consume(
        file: *mut bindings::file,
        ring: *mut PtrRing,
        queue: *mut *mut c_void,
        n: c_int,
    ) -> c_int;
    pub(crate) fn vnr_rx_ring_unconsume(ring: *mut PtrRing, queue: *mut *mut c_void, n: c_int);
    pub(crate) fn vnr_rx_ptr_len(ptr: *mut c_void) -> c_int;

    // vnr_shim.h: the module's parameters and its rate-limited warning.
    fn vnr_params(params: *mut Params);
    fn vnr_set_params(params: *const Params);
    fn vnr_warn_queue_stopped(pid: c_int, vq: c_uint, reason: *const c_char, len: c_int);
    fn vnr_announce(drop_in: bool);
}

/// Says in the kernel log that the module is loaded: its version, its
/// nodes (`/dev/vhost-net` too if `drop_in`), and its parameters' values.
pub(crate) fn announce(drop_in: bool) {
    // SAFETY: Reads the shim's parameters and prints.
    unsafe { vnr_announce(drop_in) };
}

/// The module's parameters (`struct vnr_params` in `vnr_shim.h`), declared
/// in the C shim so that they show under
/// `/sys/module/vhost_net_rs/parameters/`.
#[repr(C)]
pub(crate) struct Params {
    pub(crate) drop_in: c_uint,
    pub(crate) max_mem_regions: c_uint,
    pub(crate) max_iotlb_entries: c_uint,
    pub(crate) workers: c_uint,
}

/// The module's parameters as given at load.
pub(crate) fn params() -> Params {
    let mut params = Params {
        drop_in: 0,
        max_mem_regions: 0,
        max_iotlb_entries: 0,
        workers: 0,
    };
    // SAFETY: `params` is a valid `struct vnr_params` to write.
    unsafe { vnr_params(&mut params) };
    params
}

/// Shows the values the parameters were clamped to under
/// `/sys/module/vhost_net_rs/parameters/`. Called at load, before any node
/// exists.
pub(crate) fn set_effective_params(params: &Params) {
    // SAFETY: `params` is a valid `struct vnr_params` to read; the shim
    // stores its fields into its parameters, whose sysfs entries are
    // read-only and which nothing else writes.
    unsafe { vnr_set_params(params) };
}

/// Warns, once per burst of 5 s across the module, that queue `vq`
/// stopped because of `reason`
/// (its `Debug` form, cut at 48 bytes). Called from the queue's worker: the
/// pid is the current process's, the device owner's for a vhost_task.
pub(crate) fn warn_queue_stopped(vq: u32, reason: &dyn core::fmt::Debug) {
    struct Buf {
        bytes: [u8; 48],
        len: usize,
    }
    impl core::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let n = s.len().min(self.bytes.len() - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
    let mut buf = Buf {
        bytes: [0; 48],
        len: 0,
    };
    let _ = core::fmt::write(&mut buf, format_args!("{reason:?}"));
    let pid = kernel::current!().group_leader().pid();
    // SAFETY: `buf.bytes` is valid for `buf.len` bytes, which `%.*s` reads
    // at most.
    unsafe { vnr_warn_queue_stopped(pid, vq, buf.bytes.as_ptr().cast(), buf.len as c_int) };
}
