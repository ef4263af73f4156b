// SPDX-License-Identifier: GPL-2.0
/* See vnr_shim.h. */
#include <linux/build_bug.h>
#include <linux/cache.h>
#include <linux/poll.h>
#include <linux/if_tap.h>
#include <linux/if_tun.h>
#include <linux/if_vlan.h>
#include <linux/module.h>
#include <linux/net.h>
#include <linux/overflow.h>
#include <linux/ptr_ring.h>
#include <linux/ratelimit.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/skbuff.h>
#include <linux/uaccess.h>
#include <linux/unaligned.h>
#include <linux/version.h>
#include <linux/vhost.h>
#include <linux/virtio_config.h>
#include <linux/virtio_features.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>
#include <net/sock.h>
#include <net/xdp.h>
#include "vnr_shim.h"

/*
 * What differs in C between the releases the module builds against (the
 * Rust side is compat.rs): 7.2's tun has no IFF_BACKPRESSURE, so no stopped
 * queue waits for its consumer to wake it.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 3, 0)
static inline void tun_wake_queue(struct file *file, int consumed) { }
#endif

/* The Rust module! macro has no version field: Kbuild passes VERSION. */
MODULE_VERSION(VNR_VERSION);


/*
 * The module's parameters. Those of the Rust module! macro of Linux 7.2
 * and 7.3 get no /sys/module/<name>/parameters/ entry, so an operator could
 * not read the values in effect: they are declared here, read once by the
 * Rust side at load (vnr_params()), which writes back the values it
 * clamped them to (vnr_set_params()); the entries are read-only.
 */
static unsigned int drop_in;
module_param(drop_in, uint, 0444);
MODULE_PARM_DESC(drop_in, "1: also serve /dev/vhost-net (misc minor 238) in place of the C vhost_net, which must not be loaded; 0 (default): /dev/vhost-net-rs only");
static unsigned int max_mem_regions = 64;
module_param(max_mem_regions, uint, 0444);
MODULE_PARM_DESC(max_mem_regions, "Maximum number of memory regions in VHOST_SET_MEM_TABLE (1..509, clamped)");
static unsigned int max_iotlb_entries = 2048;
module_param(max_iotlb_entries, uint, 0444);
MODULE_PARM_DESC(max_iotlb_entries, "Maximum number of device IOTLB entries per queue (1..32768, clamped); when full, an update retires the oldest");

static unsigned int workers = 1;
module_param(workers, uint, 0444);
MODULE_PARM_DESC(workers, "Worker threads per device: 1 (default), one for both queues, as the C vhost_net; 2: one per queue");

void vnr_params(struct vnr_params *p)
{
	p->drop_in = drop_in;
	p->max_mem_regions = max_mem_regions;
	p->max_iotlb_entries = max_iotlb_entries;
	p->workers = workers;
}

void vnr_set_params(const struct vnr_params *p)
{
	max_mem_regions = p->max_mem_regions;
	max_iotlb_entries = p->max_iotlb_entries;
	workers = p->workers;
}

void vnr_announce(bool with_drop_in)
{
	pr_info("vhost_net_rs: version %s loaded: /dev/vhost-net-rs%s, max_mem_regions=%u, max_iotlb_entries=%u, workers=%u\n",
		VNR_VERSION, with_drop_in ? " and /dev/vhost-net" : "", max_mem_regions, max_iotlb_entries, workers);
}

/*
 * A queue stopped on a guest error: one warning per burst of 5 s for the
 * module, with the owner's pid, the queue and the reason, so that a guest
 * that breaks its rings again and again cannot flood the log (the rest are
 * counted in fdinfo and signalled on the error eventfd). Ratelimit states
 * are C macros.
 */
static DEFINE_RATELIMIT_STATE(vnr_stopped_rs, 5 * HZ, 1);

void vnr_warn_queue_stopped(int pid, unsigned int vq, const char *reason, int len)
{
	if (__ratelimit(&vnr_stopped_rs))
		pr_warn("vhost_net_rs: pid %d vq %u stopped: %.*s; it runs again once userspace resets the ring\n",
			pid, vq, len, reason);
}

/*
 * uapi.rs writes the vhost ABI out by hand and asserts the same sizes,
 * offsets and ioctl numbers on its side; these fail the build if
 * <linux/vhost.h> ever disagrees with them.
 */
static_assert(sizeof(struct vhost_vring_state) == 8);
static_assert(offsetof(struct vhost_vring_state, num) == 4);
static_assert(sizeof(struct vhost_vring_file) == 8);
static_assert(offsetof(struct vhost_vring_file, fd) == 4);
static_assert(sizeof(struct vhost_vring_addr) == 40);
static_assert(offsetof(struct vhost_vring_addr, flags) == 4);
static_assert(offsetof(struct vhost_vring_addr, desc_user_addr) == 8);
static_assert(offsetof(struct vhost_vring_addr, used_user_addr) == 16);
static_assert(offsetof(struct vhost_vring_addr, avail_user_addr) == 24);
static_assert(offsetof(struct vhost_vring_addr, log_guest_addr) == 32);
static_assert(sizeof(struct vhost_memory) == 8);
static_assert(offsetof(struct vhost_memory, padding) == 4);
static_assert(sizeof(struct vhost_memory_region) == 32);
static_assert(offsetof(struct vhost_memory_region, memory_size) == 8);
static_assert(offsetof(struct vhost_memory_region, userspace_addr) == 16);
static_assert(offsetof(struct vhost_memory_region, flags_padding) == 24);
static_assert(VHOST_GET_FEATURES == 0x8008af00);
static_assert(VHOST_SET_FEATURES == 0x4008af00);
static_assert(VHOST_SET_OWNER == 0xaf01);
static_assert(VHOST_RESET_OWNER == 0xaf02);
static_assert(VHOST_SET_MEM_TABLE == 0x4008af03);
static_assert(VHOST_SET_LOG_BASE == 0x4008af04);
static_assert(VHOST_SET_LOG_FD == 0x4004af07);
static_assert(VHOST_SET_VRING_NUM == 0x4008af10);
static_assert(VHOST_SET_VRING_ADDR == 0x4028af11);
static_assert(VHOST_SET_VRING_BASE == 0x4008af12);
static_assert(VHOST_GET_VRING_BASE == 0xc008af12);
static_assert(VHOST_SET_VRING_KICK == 0x4008af20);
static_assert(VHOST_SET_VRING_CALL == 0x4008af21);
static_assert(VHOST_SET_VRING_ERR == 0x4008af22);
static_assert(VHOST_SET_VRING_BUSYLOOP_TIMEOUT == 0x4008af23);
static_assert(VHOST_GET_VRING_BUSYLOOP_TIMEOUT == 0x4008af24);
static_assert(VHOST_SET_BACKEND_FEATURES == 0x4008af25);
static_assert(VHOST_GET_BACKEND_FEATURES == 0x8008af26);
static_assert(VHOST_NET_SET_BACKEND == 0x4008af30);
static_assert(VHOST_GET_FEATURES_ARRAY == 0x8008af83);
static_assert(VHOST_SET_FEATURES_ARRAY == 0x4008af83);
static_assert(VHOST_SET_FORK_FROM_OWNER == 0x4001af84);
static_assert(VHOST_GET_FORK_FROM_OWNER == 0x8001af85);
static_assert(VHOST_FILE_UNBIND == -1);
static_assert(VHOST_VRING_F_LOG == 0);
static_assert(VHOST_FORK_OWNER_KTHREAD == 0 && VHOST_FORK_OWNER_TASK == 1);
/* uapi.rs's feature bit numbers, and VIRTIO_FEATURES_U64S. */
static_assert(VIRTIO_NET_F_MRG_RXBUF == 15 && VIRTIO_F_NOTIFY_ON_EMPTY == 24);
static_assert(VIRTIO_F_ANY_LAYOUT == 27 && VHOST_NET_F_VIRTIO_NET_HDR == 27);
static_assert(VIRTIO_RING_F_INDIRECT_DESC == 28 && VIRTIO_RING_F_EVENT_IDX == 29);
static_assert(VIRTIO_F_VERSION_1 == 32 && VIRTIO_F_RING_RESET == 40);
static_assert(VHOST_F_LOG_ALL == 26 && VHOST_PAGE_SIZE == 0x1000);
static_assert(VIRTIO_FEATURES_U64S == 2);
/* The device IOTLB's messages (iotlb.rs, uapi.rs). */
static_assert(VIRTIO_F_ACCESS_PLATFORM == 33);
static_assert(VHOST_BACKEND_F_IOTLB_MSG_V2 == 0x1 && VHOST_BACKEND_F_IOTLB_BATCH == 0x2);
static_assert(VHOST_IOTLB_MSG == 0x1 && VHOST_IOTLB_MSG_V2 == 0x2);
static_assert(VHOST_IOTLB_MISS == 1 && VHOST_IOTLB_UPDATE == 2 && VHOST_IOTLB_INVALIDATE == 3);
static_assert(VHOST_IOTLB_ACCESS_FAIL == 4 && VHOST_IOTLB_BATCH_BEGIN == 5 && VHOST_IOTLB_BATCH_END == 6);
static_assert(VHOST_ACCESS_RO == 0x1 && VHOST_ACCESS_WO == 0x2);
static_assert(sizeof(struct vhost_msg) == 72 && sizeof(struct vhost_msg_v2) == 72);
static_assert(offsetof(struct vhost_msg, iotlb) == 8 && offsetof(struct vhost_msg_v2, iotlb) == 8);
static_assert(sizeof(struct vhost_iotlb_msg) == 32);
static_assert(offsetof(struct vhost_iotlb_msg, size) == 8 && offsetof(struct vhost_iotlb_msg, uaddr) == 16);
static_assert(offsetof(struct vhost_iotlb_msg, perm) == 24 && offsetof(struct vhost_iotlb_msg, type) == 25);
/* uapi.rs's VirtioNetHdr, and vring.rs's descriptor and ring flags. */
static_assert(sizeof(struct virtio_net_hdr) == 10 && sizeof(struct virtio_net_hdr_mrg_rxbuf) == 12);
static_assert(offsetof(struct virtio_net_hdr_mrg_rxbuf, num_buffers) == 10);
static_assert(VIRTIO_NET_HDR_F_NEEDS_CSUM == 1);
static_assert(VRING_DESC_F_NEXT == 1 && VRING_DESC_F_WRITE == 2 && VRING_DESC_F_INDIRECT == 4);
static_assert(VRING_USED_F_NO_NOTIFY == 1 && VRING_AVAIL_F_NO_INTERRUPT == 1);
static_assert(sizeof(struct vring_desc) == 16 && sizeof(struct vring_used_elem) == 8);

/* file_poll.rs spells the poll bits out: bindgen cannot read them. */
static_assert(EPOLLIN == 0x0001 && EPOLLOUT == 0x0004 && EPOLLERR == 0x0008);
static_assert(EPOLLRDNORM == 0x0040);
static_assert(DEFAULT_POLLMASK == (0x0001 | 0x0004 | 0x0040 | 0x0100));

/*
 * One load of a naturally aligned u16 or u32 (single-copy atomic at the
 * alignment the callers keep) in a user-access scope inlined here, where
 * get_user() calls the out-of-line __get_user_N once per access.
 */
#define VNR_GET_USER(type)							\
int vnr_get_user_##type(const type __user *uaddr, type *val)			\
{										\
	type got;								\
										\
	scoped_user_read_access_size(uaddr, sizeof(type), fault)		\
		unsafe_get_user(got, uaddr, fault);				\
	*val = got;								\
	return 0;								\
fault:										\
	return -EFAULT;								\
}

/* A ring index, flags word or num_buffers. */
VNR_GET_USER(u16)
/* A packed ring's event suppression area, offset and flags in one load (as
 * a Linux driver's virtqueue_kick_prepare_packed reads the device's). */
VNR_GET_USER(u32)

/* A ring index, flags word or num_buffers (one num_buffers store per RX
 * packet): as vnr_get_user_u16, where put_user() calls __put_user_2. */
int vnr_put_user_u16(u16 __user *uaddr, u16 val)
{
	scoped_user_write_access_size(uaddr, 2, fault)
		unsafe_put_user(val, uaddr, fault);
	return 0;
fault:
	return -EFAULT;
}

/*
 * A 16-byte ring descriptor: two 64-bit loads in one user-access scope,
 * which on x86-64 masks the address rather than checking it and fencing
 * (as copy_from_user() does). copy_from_user() itself is out of line on
 * x86 and, for 16 bytes, costs more than the loads; C's
 * vhost reads descriptors with the inline __copy_from_user() for the same
 * reason.
 */
int vnr_read_user_16(const void __user *uaddr, u8 *dst)
{
	const u64 __user *src = uaddr;
	u64 lo, hi;

	scoped_user_read_access_size(src, 16, fault) {
		unsafe_get_user(lo, src, fault);
		unsafe_get_user(hi, src + 1, fault);
	}
	memcpy(dst, &lo, 8);
	memcpy(dst + 8, &hi, 8);
	return 0;
fault:
	return -EFAULT;
}

/*
 * A TX packet's bytes, into its page fragment: the body of
 * _copy_from_user() (address masked or checked, the speculation barrier,
 * the copy, the rest zeroed on a fault), inlined here, as architectures
 * with INLINE_COPY_USER have it. Rust's UserSlice reaches the same code
 * through two wrappers and the exported _copy_from_user(). Like
 * UserSlice, it leaves out copy_from_user()'s check_copy_size(): the Rust
 * caller bounds the destination. Returns the bytes not copied.
 */
unsigned long vnr_copy_from_user(void *dst, const void __user *src, unsigned long n)
{
	return _inline_copy_from_user(dst, src, n);
}

/*
 * A packed ring's descriptor, as the driver publishes it: the last 8 bytes
 * (length, id and flags) in one single-copy-atomic load, then, after a read
 * barrier, the first 8 (address and length), so that they are no older
 * than the flags that made the descriptor available. One user access in
 * place of a flags load and a descriptor read.
 */
int vnr_read_user_16_acquire(const void __user *uaddr, u8 *dst)
{
	const u64 __user *src = uaddr;
	u64 lo, hi;

	scoped_user_read_access_size(src, 16, fault) {
		unsafe_get_user(hi, src + 1, fault);
		smp_rmb();
		unsafe_get_user(lo, src, fault);
	}
	memcpy(dst, &lo, 8);
	memcpy(dst + 8, &hi, 8);
	return 0;
fault:
	return -EFAULT;
}

/*
 * The rest of a packed ring's used batch: n aligned 64-bit stores, each
 * single-copy atomic, in order, at byte stores[i].offset of the len bytes
 * at uaddr (the descriptor ring), in one user-access scope, read straight
 * from the caller's array. The area is checked whole with access_ok, not
 * masked: the stores are not at its start. An offset outside it (the
 * caller's bug) ends the batch there with -EFAULT.
 */
static_assert(sizeof(struct vnr_store8) == 12);
static_assert(offsetof(struct vnr_store8, bytes) == 4);

int vnr_put_user_u64_each(void __user *uaddr, size_t len, const struct vnr_store8 *stores,
			  unsigned int n)
{
	u8 __user *base = uaddr;
	unsigned int i;

	if ((unsigned long)base % 8 || len < 8)
		return -EFAULT;
	if (!user_write_access_begin(base, len))
		return -EFAULT;
	for (i = 0; i < n; i++) {
		u32 offset = stores[i].offset;
		u64 val;

		if (offset % 8 || offset > len - 8)
			goto fault;
		val = get_unaligned((const u64 *)stores[i].bytes);
		unsafe_put_user(val, (u64 __user *)(base + offset), fault);
	}
	user_write_access_end();
	return 0;
fault:
	user_write_access_end();
	return -EFAULT;
}

/*
 * A run of a packed ring's used descriptors at adjacent positions: n
 * aligned 64-bit stores, each single-copy atomic, in order, of vals[i] at
 * uaddr + i * spacing, in one user-access scope. The span they cover is
 * checked whole with access_ok; one that overflows is refused.
 */
int vnr_put_user_u64_spaced(void __user *uaddr, size_t spacing, const u64 *vals, unsigned int n)
{
	u8 __user *at = uaddr;
	size_t span;
	unsigned int i;

	if (!n)
		return 0;
	if ((unsigned long)at % 8 || spacing % 8 ||
	    check_mul_overflow((size_t)(n - 1), spacing, &span) ||
	    check_add_overflow(span, (size_t)8, &span))
		return -EFAULT;
	if (!user_write_access_begin(at, span))
		return -EFAULT;
	/* i * spacing <= span: inside the checked range. */
	for (i = 0; i < n; i++)
		unsafe_put_user(vals[i], (u64 __user *)(at + i * spacing), fault);
	user_write_access_end();
	return 0;
fault:
	user_write_access_end();
	return -EFAULT;
}

/* One aligned 64-bit store (a packed ring's used descriptor, flags
 * included): single-copy atomic on the 64-bit targets the module builds
 * for. */
int vnr_put_user_u64(u64 __user *uaddr, u64 val)
{
	return put_user(val, uaddr);
}

/*
 * A packet in one guest buffer, the usual case (a Linux guest posts one
 * descriptor per RX buffer, and a small TX packet is one): tun's copies
 * through an ITER_UBUF take the single-buffer path of the iterators,
 * where an ITER_IOVEC walks its segment array on every copy.
 */
void vnr_iov_iter_ubuf(struct iov_iter *iter, unsigned int direction, void __user *buf, size_t count)
{
	/* iov_iter_ubuf() names every field but iov_offset, which the
	 * compiler then zero-fills with a string store over the whole
	 * iterator: named here too, the fields are plain stores. */
	*iter = (struct iov_iter) {
		.iter_type = ITER_UBUF,
		.nofault = false,
		.data_source = direction,
		.iov_offset = 0,
		.ubuf = buf,
		.count = count,
		.nr_segs = 1,
	};
}

void vnr_set_current_running(void)
{
	__set_current_state(TASK_RUNNING);
}

/* With the full barrier of set_current_state(), for a sleep-wake loop. */
void vnr_set_current_interruptible(void)
{
	set_current_state(TASK_INTERRUPTIBLE);
}

void vnr_cond_resched(void)
{
	cond_resched();
}

/* need_resched() and signal_pending() are inline. */
bool vnr_busy_poll_should_stop(void)
{
	return need_resched() || signal_pending(current);
}

/* The first address past the user address space (access_ok's limit). */
u64 vnr_task_size_max(void)
{
	return TASK_SIZE_MAX;
}

size_t vnr_xdp_buff_size(void)
{
	return sizeof(struct xdp_buff);
}

unsigned int vnr_xdp_shinfo_size(void)
{
	return SKB_DATA_ALIGN(sizeof(struct skb_shared_info));
}

/* VHOST_NET_RX_PAD */
unsigned int vnr_xdp_rx_pad(void)
{
	return NET_IP_ALIGN + NET_SKB_PAD;
}

/* Room an XDP program on the tap may grow the frame into (vhost_sock_xdp). */
unsigned int vnr_sock_xdp_headroom(struct socket *sock)
{
	return sock_flag(sock->sk, SOCK_XDP) ? XDP_PACKET_HEADROOM : 0;
}

void vnr_xdp_prepare(struct xdp_buff *xdp, void *buf, unsigned int buflen, unsigned int pad,
		     unsigned int datalen)
{
	xdp_init_buff(xdp, buflen, NULL);
	xdp_prepare_buff(xdp, buf, pad, datalen, true);
}

void *vnr_xdp_data(struct xdp_buff *xdp)
{
	return xdp->data;
}

/* tun takes batches when its socket's send buffer is unlimited (its default). */
bool vnr_sock_can_batch(struct socket *sock)
{
	return READ_ONCE(sock->sk->sk_sndbuf) == INT_MAX;
}

int vnr_tun_send_batch(struct socket *sock, struct xdp_buff *xdp, unsigned int n)
{
	struct tun_msg_ctl ctl = { .type = TUN_MSG_PTR, .num = n, .ptr = xdp };
	struct msghdr msg = {
		.msg_control = &ctl,
		.msg_controllen = sizeof(ctl),
		.msg_flags = MSG_DONTWAIT,
	};

	return sock->ops->sendmsg(sock, &msg, 0);
}

/*
 * The socket of a tap (tun with IFF_TAP) or macvtap file, or ERR_PTR for
 * anything else (get_tap_socket in drivers/vhost/net.c).
 */
struct socket *vnr_backend_socket(struct file *file)
{
	struct socket *sock = tun_get_socket(file);

	return IS_ERR(sock) ? tap_get_socket(file) : sock;
}

/* The queue of packets for the reader of a tap or macvtap file, or NULL. */
struct ptr_ring *vnr_backend_rx_ring(struct file *file)
{
	struct ptr_ring *ring = tun_get_tx_ring(file);

	if (IS_ERR(ring))
		ring = tap_get_ptr_ring(file);
	return IS_ERR(ring) ? NULL : ring;
}

/*
 * Takes up to n queued packets, and lets a tap stopped by IFF_BACKPRESSURE
 * queue again once there is room (vhost_net_buf_produce; a no-op for
 * macvtap).
 */
int vnr_rx_ring_consume(struct file *file, struct ptr_ring *ring, void **q, int n)
{
	int got;

	spin_lock(&ring->consumer_lock);
	got = __ptr_ring_consume_batched(ring, q, n);
	if (got)
		tun_wake_queue(file, got);
	spin_unlock(&ring->consumer_lock);
	return got;
}

void vnr_rx_ring_unconsume(struct ptr_ring *ring, void **q, int n)
{
	ptr_ring_unconsume(ring, q, n, tun_ptr_free);
}

/* The length tun will deliver for a queued entry, as tun_ptr_peek_len(). */
int vnr_rx_ptr_len(void *ptr)
{
	struct sk_buff *skb = ptr;

	if (tun_is_xdp_frame(ptr))
		return tun_ptr_to_xdp(ptr)->len;
	return skb->len + (skb_vlan_tag_present(skb) ? VLAN_HLEN : 0);
}
