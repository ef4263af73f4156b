/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A userspace vhost-net driver that plays both QEMU and the guest.
 *
 * It owns "guest memory" (an mmap), lays split rings (or, with h_opts.packed,
 * packed rings) out in it, registers it with the vhost device through the
 * same ioctls QEMU uses, and attaches a tap
 * whose other side is an AF_PACKET socket. Guest TX is then checked by
 * reading frames off the packet socket, and guest RX by injecting frames
 * through it.
 *
 * Used by every selftest and the benchmark: anything two of them need lives
 * here, once. Everything fails loudly: each helper returns -errno or a
 * negative code (traffic helpers log why with H_LOG) and the tests assert
 * on it.
 */
#ifndef VNR_HARNESS_H
#define VNR_HARNESS_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/vhost.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>
#include <linux/virtio_config.h>

#define H_MEM_SIZE	(64UL << 20)
#define H_RING_OFF(q)	((uint64_t)(q) * (4UL << 20))	/* rings: 4 MiB each */
#define H_BUF_OFF	(16UL << 20)			/* buffers after that */
#define H_ETH_TYPE	0x88b5				/* local experimental */
#define H_MAX_NUM	32768
#define H_WAIT_MS	10000				/* default bounded wait */

/*
 * A packed queue's 4 MiB: the driver's split-layout table (h_vq.vr, see
 * below) first, then the packed ring, the driver and device event
 * suppression areas, each on a page of its own so that a dirty log tells
 * them apart, and the driver's map of buffer ids to chain lengths. Sized
 * for H_MAX_NUM.
 */
#define H_P_DESC	(1UL << 20)
#define H_P_DRIVER	(H_P_DESC + 16UL * H_MAX_NUM)
#define H_P_DEVICE	(H_P_DRIVER + 4096)
#define H_P_CHAIN	(H_P_DEVICE + 4096)

/*
 * A split queue with VIRTIO_F_IN_ORDER (h_opts.in_order): the driver's
 * record, per avail position, of the head it published there and the
 * writable bytes of that chain, at 3 MiB into the queue's 4 MiB.
 */
#define H_IO_HEAD	(3UL << 20)
#define H_IO_LEN	(H_IO_HEAD + 2UL * H_MAX_NUM)

/* Packed descriptor flags (virtio 1.1 2.8.1): AVAIL and USED as bits. */
#define H_P_AVAIL	(1 << VRING_PACKED_DESC_F_AVAIL)
#define H_P_USED	(1 << VRING_PACKED_DESC_F_USED)
#define H_P_WRAP	(1 << VRING_PACKED_EVENT_F_WRAP_CTR)	/* in off_wrap */

/* A diagnostic line in the TAP output, for helpers that have no test
 * metadata to hand to TH_LOG. */
#define H_LOG(fmt, ...)	fprintf(stderr, "# " fmt "\n", ##__VA_ARGS__)

struct h_vq {
	unsigned int num;
	struct vring vr;
	int kick, call, err;
	uint16_t avail_idx;	/* next avail index the guest publishes */
	uint16_t used_seen;	/* used entries the guest has consumed */
	uint32_t buf_size;	/* per-descriptor buffer size */
	uint64_t buf_base;	/* guest-physical base of this queue's buffers */
	/*
	 * Packed ring (h_opts.packed). The tests still write their chains
	 * into vr.desc, as on a split ring, and h_publish() copies each one
	 * into the ring the device reads (pdesc); vr's avail and used rings
	 * go unused. avail_idx and used_seen count buffers as on a split
	 * ring, so that their difference is still the number in flight.
	 */
	struct vring_packed_desc *pdesc;
	struct vring_packed_desc_event *pdriver, *pdevice;
	uint16_t *p_chain;	/* per buffer id: ring entries of its chain, 0: not in flight */
	uint16_t p_avail, p_used;	/* next avail and next used position */
	bool p_avail_wrap, p_used_wrap;	/* the driver's wrap counters there */
	/* The AVAIL and USED bits of those laps, kept with the counters: what
	 * the driver writes into a descriptor it adds, and what it waits for
	 * in a used one (a Linux driver's avail_used_flags). */
	uint16_t p_avail_bits, p_used_bits;
	uint16_t p_busy;	/* ring entries posted and not taken back */
	uint16_t p_found;	/* used entries seen from p_used on, not taken */
	uint16_t p_scan;	/* with some found, the position after them, */
	bool p_scan_wrap;	/* and its wrap (with none, the scan starts at p_used) */
	/*
	 * Split ring with VIRTIO_F_IN_ORDER (h_opts.in_order). The device may
	 * return a run of buffers with one used element, in the slot of the
	 * run's first buffer, naming its last one; the buffers before it were
	 * used completely (virtio 2.7.9). io_head and io_len say, per avail
	 * position, which head went there and how many bytes it can take;
	 * h_take_used() hands out the run one buffer at a time as if each had
	 * its own element. io_left: buffers of the current run not taken yet,
	 * io_last its element; io_skipped counts the buffers that came back
	 * without an element of their own.
	 */
	uint16_t *io_head;
	uint32_t *io_len;
	uint16_t io_left;
	struct vring_used_elem io_last;
	uint64_t io_skipped;
};

struct h_dev {
	int fd;			/* /dev/vhost-net-rs or /dev/vhost-net */
	int tap, pkt, ifindex;
	char ifname[IFNAMSIZ];
	char parent[IFNAMSIZ];	/* macvtap: its veth parent (deleted at teardown) */
	uint8_t *mem;
	uint64_t features;
	/* The second feature word (bits 64-127: the UDP-tunnel GSO bits), set
	 * with VHOST_SET_FEATURES_ARRAY when not zero. */
	uint64_t features_hi;
	bool vhost_hdr;		/* VHOST_NET_F_VIRTIO_NET_HDR: vhost adds/strips */
	unsigned int hdr_len;	/* virtio-net header length the guest sees */
	bool packed;		/* VIRTIO_F_RING_PACKED negotiated */
	bool in_order;		/* VIRTIO_F_IN_ORDER negotiated */
	/*
	 * VIRTIO_F_ACCESS_PLATFORM negotiated (h_opts.iotlb): the device sees
	 * guest memory through its IOTLB, at `iova` + the guest-physical
	 * address. Every address the device is given (SET_VRING_ADDR,
	 * descriptors) is then an IOVA; h_gpa and h_ptr convert, so the
	 * helpers below need no other change. `iova` is 0 otherwise.
	 */
	bool iotlb;
	uint64_t iova;
	struct h_vq vq[2];	/* 0 = RX, 1 = TX */
};

struct h_opts {
	const char *dev;	/* device node; default $VNR_DEV or vhost-net-rs */
	unsigned int num;	/* ring size, both queues */
	bool event_idx, indirect, mrg_rxbuf, version_1, vhost_hdr;
	uint32_t rx_buf;	/* RX buffer size (default 2048) */
	uint32_t tx_buf;	/* TX buffer size (default 2048) */
	uint16_t base;		/* initial ring index; packed: see h_vq_layout */
	int tap_offload;	/* TUNSETOFFLOAD flags, -1: leave */
	int tap_flags;		/* extra TUNSETIFF flags (IFF_BACKPRESSURE, ...) */
	bool shared_mem;	/* guest memory MAP_SHARED, so h_mem_alias works */
	bool macvtap;		/* backend: a macvtap on a veth, not a tap */
	bool kthread_workers;	/* VHOST_SET_FORK_FROM_OWNER 0 before SET_OWNER */
	bool packed;		/* packed rings (VIRTIO_F_RING_PACKED), not split */
	bool in_order;		/* VIRTIO_F_IN_ORDER: buffers used in ring order */
	/*
	 * VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO and HOST_UDP_TUNNEL_GSO, in the
	 * second feature word, as QEMU 11.1 acks them: the virtio-net header
	 * is struct virtio_net_hdr_v1_hash_tunnel (24 bytes), and so is the
	 * tap's (TUNSETVNETHDRSZ), whose offloads are the caller's
	 * (tap_offload; TUN_F_UDP_TUNNEL_GSO for tunnel GSO on RX).
	 */
	bool udp_tunnel;
	/*
	 * The device IOTLB (VIRTIO_F_ACCESS_PLATFORM), as QEMU drives it for
	 * a guest with a vIOMMU: guest memory appears to the device at IOVA
	 * `iova` + gpa, VHOST_BACKEND_F_IOTLB_MSG_V2 is acked, and h_setup
	 * stops before VHOST_NET_SET_BACKEND: the device needs the used rings
	 * mapped first (see iotlb.c), which is the test's to do.
	 */
	bool iotlb;
	uint64_t iova;
};

static inline uint64_t h_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* The address the device is given for p in guest memory: its
 * guest-physical address, or with the device IOTLB its IOVA. */
static inline uint64_t h_gpa(struct h_dev *d, void *p)
{
	return (uint64_t)((uint8_t *)p - d->mem) + d->iova;
}

/* Where the device address `gpa` (h_gpa's) is in guest memory. */
static inline void *h_ptr(struct h_dev *d, uint64_t gpa)
{
	return d->mem + (gpa - d->iova);
}

static inline int h_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

/* The device node under test: $VNR_DEV, or /dev/vhost-net-rs. */
static inline const char *h_dev_path(void)
{
	const char *p = getenv("VNR_DEV");

	return p ? p : "/dev/vhost-net-rs";
}

#ifndef VNR_NO_PRECONDITIONS
/*
 * kselftest convention: a test that cannot run here skips as a whole
 * ("1..0 # SKIP", exit KSFT_SKIP = 4) instead of failing every case. The
 * tests need root (taps, /dev nodes) and the device, so that
 * `make -C selftests run_tests` on a kernel without the module loaded says
 * so. bench and soak, tools rather than tests, define VNR_NO_PRECONDITIONS.
 */
__attribute__((constructor)) static void h_preconditions(void)
{
	const char *why = NULL;

	if (geteuid() != 0)
		why = "needs root";
	else if (access(h_dev_path(), F_OK) != 0)
		why = "no device node (load vhost_net_rs, or set VNR_DEV)";
	if (why) {
		printf("TAP version 13\n1..0 # SKIP %s: %s\n", h_dev_path(), why);
		exit(4);
	}
}
#endif

/* Whether the tests run on the C driver, for the few cases that check what
 * only vhost-net-rs has (fdinfo, its feature set). Asked of the device, not
 * of its path: with drop_in=1, /dev/vhost-net is vhost-net-rs, whose fdinfo
 * has "vhost-net-rs-" lines. */
static inline bool h_on_c_driver(void)
{
	static int on_c = -1;
	char path[64], buf[512];
	ssize_t n;
	int fd, info;

	if (on_c >= 0)
		return on_c;
	on_c = strcmp(h_dev_path(), "/dev/vhost-net") == 0;
	fd = open(h_dev_path(), O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return on_c;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	info = open(path, O_RDONLY | O_CLOEXEC);
	if (info >= 0) {
		n = read(info, buf, sizeof(buf) - 1);
		if (n > 0) {
			buf[n] = 0;
			on_c = strstr(buf, "vhost-net-rs-owner:") == NULL;
		}
		close(info);
	}
	close(fd);
	return on_c;
}

/* How many times `needle` occurs in the kernel log buffer; -1 if it cannot
 * be read. */
static inline int h_klog_count(const char *needle)
{
	int size = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
	int count = 0, len;
	char *buf, *at;

	if (size <= 0 || !(buf = malloc(size + 1)))
		return -1;
	len = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, size);
	if (len < 0) {
		free(buf);
		return -1;
	}
	buf[len] = 0;
	for (at = buf; (at = strstr(at, needle)); at += strlen(needle))
		count++;
	free(buf);
	return count;
}

/* The vnet header (d->hdr_len bytes) and offloads of a tap or macvtap fd;
 * -1 with errno on failure. */
static inline int h_tap_header(struct h_dev *d, int fd, bool vnet_hdr, int offload)
{
	if (vnet_hdr) {
		int sz = d->hdr_len;

		if (ioctl(fd, TUNSETVNETHDRSZ, &sz) < 0)
			return -1;
	}
	if (offload >= 0 && ioctl(fd, TUNSETOFFLOAD, (unsigned long)offload) < 0)
		return -1;
	return 0;
}

/* Makes the open tap or macvtap `fd` d's backend, whose traffic the packet
 * socket sees on interface `ifindex`; if setting it up failed with `err`
 * (-errno), closes it instead and returns `err`. */
static inline int h_tap_adopt(struct h_dev *d, int fd, unsigned int ifindex, int err)
{
	if (err) {
		close(fd);
		return err;
	}
	d->ifindex = ifindex;
	d->tap = fd;
	return 0;
}

/*
 * Keeps the host's IPv6 stack off a test interface: on a kernel with IPv6
 * (a distribution's), bringing it up would send router solicitations and
 * MLD reports into it, which arrive in the guest's RX ring ahead of the
 * frames a test injects. Nothing to do on a kernel without IPv6.
 */
static inline int h_no_ipv6(const char *ifname)
{
	char path[96];
	int fd, r;

	snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", ifname);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = write(fd, "1", 1) == 1 ? 0 : -errno;
	close(fd);
	return r;
}

/* Opens a tap (up, named vnrPID.N) for d, with `extra` TUNSETIFF flags. */
static inline int h_tap_open_flags(struct h_dev *d, bool vnet_hdr, int offload, int extra)
{
	struct ifreq ifr = { 0 };
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK), s, r;
	static int seq;

	if (fd < 0)
		return -errno;
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0) | extra;
	snprintf(ifr.ifr_name, IFNAMSIZ, "vnr%d.%d", getpid() % 10000, seq++);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 || h_tap_header(d, fd, vnet_hdr, offload) < 0)
		return h_tap_adopt(d, fd, 0, -errno);
	memcpy(d->ifname, ifr.ifr_name, IFNAMSIZ);
	r = h_no_ipv6(d->ifname);
	if (r)
		return h_tap_adopt(d, fd, 0, r);
	s = socket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0)
		return h_tap_adopt(d, fd, 0, -errno);
	r = ioctl(s, SIOCGIFFLAGS, &ifr);
	ifr.ifr_flags |= IFF_UP;
	if (!r)
		r = ioctl(s, SIOCSIFFLAGS, &ifr);
	r = r < 0 ? -errno : 0;
	close(s);
	return h_tap_adopt(d, fd, if_nametoindex(d->ifname), r);
}

static inline int h_tap_open(struct h_dev *d, bool vnet_hdr, int offload)
{
	return h_tap_open_flags(d, vnet_hdr, offload, 0);
}

/*
 * A macvtap backend, as libvirt's <interface type='direct'> makes one: a
 * veth pair (parent vnrpPID.N, peer vnrqPID.N), a macvtap in bridge mode on
 * the parent, and its /dev/tapIFINDEX opened like a tap. d->ifindex is the
 * peer's, so the packet socket sees what the guest sends and injects what
 * it receives.
 */
static inline int h_macvtap_open(struct h_dev *d, bool vnet_hdr, int offload)
{
	static int seq;
	char cmd[512], peer[IFNAMSIZ], path[64];
	struct ifreq ifr = { 0 };
	int n = getpid() % 10000, tries, fd, r;
	unsigned int idx;

	snprintf(d->parent, IFNAMSIZ, "vnrp%d.%d", n, seq);
	snprintf(peer, IFNAMSIZ, "vnrq%d.%d", n, seq);
	snprintf(d->ifname, IFNAMSIZ, "vnrm%d.%d", n, seq++);
	snprintf(cmd, sizeof(cmd),
		 "ip link add %s type veth peer name %s && "
		 "ip link add link %s name %s type macvtap mode bridge",
		 d->parent, peer, d->parent, d->ifname);
	if (system(cmd)) {
		d->parent[0] = 0;
		return -ENODEV;
	}
	if (h_no_ipv6(d->parent) || h_no_ipv6(peer) || h_no_ipv6(d->ifname))
		return -EIO;
	snprintf(cmd, sizeof(cmd), "ip link set %s up && ip link set %s up && ip link set %s up",
		 d->parent, peer, d->ifname);
	if (system(cmd))
		return -ENODEV;
	idx = if_nametoindex(d->ifname);
	snprintf(path, sizeof(path), "/dev/tap%u", idx);
	/* devtmpfs adds the node asynchronously. */
	for (tries = 0; (fd = open(path, O_RDWR | O_NONBLOCK)) < 0 && errno == ENOENT && tries < 100; tries++)
		usleep(20 * 1000);
	if (fd < 0)
		return -errno;
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0);
	r = ioctl(fd, TUNSETIFF, &ifr) < 0 || h_tap_header(d, fd, vnet_hdr, offload) < 0 ? -errno : 0;
	return h_tap_adopt(d, fd, if_nametoindex(peer), r);
}

/* An AF_PACKET socket on d's tap for ethertype `proto`, that does not see
 * its own sends; with vnet_hdr, frames carry a virtio header (GSO). */
static inline int h_packet_socket(struct h_dev *d, uint16_t proto, bool vnet_hdr)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(proto),
				   .sll_ifindex = d->ifindex };
	int one = 1, big = 8 << 20;
	int s = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(proto));

	if (s < 0)
		return -errno;
	if ((vnet_hdr && setsockopt(s, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one))) ||
	    setsockopt(s, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) ||
	    setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) ||
	    setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) ||
	    bind(s, (struct sockaddr *)&sll, sizeof(sll))) {
		int r = -errno;

		close(s);
		return r;
	}
	return s;
}

/* The test frames' socket: our ethertype, no virtio header. */
static inline int h_pkt_open(struct h_dev *d)
{
	int s = h_packet_socket(d, H_ETH_TYPE, false);

	if (s < 0)
		return s;
	d->pkt = s;
	return 0;
}

/*
 * Lays queue q out afresh. On a packed ring `base` counts ring entries
 * already gone through a fresh ring: the driver starts at position
 * base % num, with a wrap counter that began at 1 and flipped at every
 * pass (so 65500 on 64 entries is position 28, wrap counter 0). The ring
 * is zeroed, as a guest does when it resets a queue: no stale descriptor
 * may look available to the device, nor used to the driver.
 */
static inline void h_vq_layout(struct h_dev *d, int q, unsigned int num, uint16_t base,
			       uint32_t buf_size)
{
	struct h_vq *v = &d->vq[q];

	v->num = num;
	vring_init(&v->vr, num, d->mem + H_RING_OFF(q), 4096);
	v->avail_idx = base;
	v->used_seen = base;
	v->buf_size = buf_size;
	v->buf_base = d->iova + H_BUF_OFF + (uint64_t)q * ((H_MEM_SIZE - H_BUF_OFF) / 2);
	/* The device reads used->idx when the backend is set. */
	v->vr.used->idx = base;
	v->vr.avail->idx = base;
	v->io_head = (uint16_t *)(d->mem + H_RING_OFF(q) + H_IO_HEAD);
	v->io_len = (uint32_t *)(d->mem + H_RING_OFF(q) + H_IO_LEN);
	v->io_left = 0;
	if (d->in_order) {
		unsigned int i;

		/* No stale element may pass for one the device wrote. */
		for (i = 0; i < num; i++)
			v->vr.used->ring[i] = (struct vring_used_elem){ 0xffff, 0xffffffffu };
	}
	if (d->packed) {
		uint8_t *r = d->mem + H_RING_OFF(q);

		v->pdesc = (struct vring_packed_desc *)(r + H_P_DESC);
		v->pdriver = (struct vring_packed_desc_event *)(r + H_P_DRIVER);
		v->pdevice = (struct vring_packed_desc_event *)(r + H_P_DEVICE);
		v->p_chain = (uint16_t *)(r + H_P_CHAIN);
		memset(v->pdesc, 0, sizeof(*v->pdesc) * num);
		memset(v->pdriver, 0, sizeof(*v->pdriver));
		memset(v->pdevice, 0, sizeof(*v->pdevice));
		memset(v->p_chain, 0, sizeof(*v->p_chain) * num);
		v->p_avail = v->p_used = v->p_scan = base % num;
		v->p_avail_wrap = v->p_used_wrap = v->p_scan_wrap = !((base / num) & 1);
		v->p_avail_bits = v->p_avail_wrap ? H_P_AVAIL : H_P_USED;
		v->p_used_bits = v->p_used_wrap ? H_P_AVAIL | H_P_USED : 0;
		v->p_busy = v->p_found = 0;
	}
}

/* A packed ring position and wrap counter as VHOST_SET_VRING_BASE takes
 * them: 15 bits of index, the wrap counter in bit 15. */
static inline uint32_t h_p_pos(uint16_t pos, bool wrap)
{
	return pos | (wrap ? H_P_WRAP : 0);
}

/*
 * VHOST_SET/GET_VRING_BASE's value for queue q at the driver's used
 * position: what the device reports once it has used every buffer it took
 * and the driver has taken every used entry, and what makes it resume
 * there. Split: the 16-bit index. Packed: the last avail position and its
 * wrap counter in bits 0-15, the used ones in bits 16-31, both the same.
 */
static inline uint32_t h_vq_base(struct h_dev *d, int q)
{
	struct h_vq *v = &d->vq[q];
	uint32_t pos = h_p_pos(v->p_used, v->p_used_wrap);

	return d->packed ? pos | pos << 16 : v->used_seen;
}

/* Guest-physical address (h_gpa's) of buffer slot i of queue q. */
static inline uint64_t h_buf(struct h_dev *d, int q, unsigned int i)
{
	struct h_vq *v = &d->vq[q];

	return v->buf_base + (uint64_t)(i % v->num) * v->buf_size;
}

/* Opens the vhost device and configures it on d's memory and tap, as QEMU
 * does when a guest starts: owner, features, memory table, both rings with
 * fresh indices, eventfds and the backend (with h_opts.iotlb, all but the
 * backend). */
static inline int h_configure(struct h_dev *d, const struct h_opts *o);

static inline int h_attach(struct h_dev *d, const struct h_opts *o)
{
	const char *dev = o->dev ? o->dev : h_dev_path();

	d->fd = open(dev, O_RDWR);
	if (d->fd < 0)
		return -errno;
	if (o->kthread_workers) {
		uint8_t mode = VHOST_FORK_OWNER_KTHREAD;
		int r = h_ioctl(d->fd, VHOST_SET_FORK_FROM_OWNER, &mode);

		if (r)
			return r;
	}
	return h_configure(d, o);
}

/* VHOST_SET_MEM_TABLE with the n regions r, in that order: 0 or -errno. */
static inline int h_set_mem_table(int fd, const struct vhost_memory_region *r, unsigned int n)
{
	struct vhost_memory *m = calloc(1, sizeof(*m) + (size_t)n * sizeof(*r));
	int ret;

	if (!m)
		return -ENOMEM;
	m->nregions = n;
	if (n)
		memcpy(m->regions, r, (size_t)n * sizeof(*r));
	ret = h_ioctl(fd, VHOST_SET_MEM_TABLE, m);
	free(m);
	return ret;
}

/* All of guest memory as one region: gpa 0 at d->mem. */
static inline int h_set_mem_flat(struct h_dev *d)
{
	struct vhost_memory_region r = { .guest_phys_addr = 0, .memory_size = H_MEM_SIZE,
					 .userspace_addr = (uint64_t)(uintptr_t)d->mem };

	return h_set_mem_table(d->fd, &r, 1);
}

/* A second mapping of the guest memory [gpa, gpa + len), for memory tables
 * whose regions are not where d->mem has them: the user address of gpa in
 * the new mapping (same offset in its page as gpa), or NULL. Needs
 * h_opts.shared_mem. Undo with h_mem_unalias(). */
static inline uint8_t *h_mem_alias(struct h_dev *d, uint64_t gpa, uint64_t len)
{
	uint64_t lo = gpa & ~4095ULL, hi = (gpa + len + 4095) & ~4095ULL;
	void *p = mremap(d->mem + lo, 0, hi - lo, MREMAP_MAYMOVE);

	return p == MAP_FAILED ? NULL : (uint8_t *)p + (gpa - lo);
}

static inline void h_mem_unalias(uint8_t *p, uint64_t len)
{
	uintptr_t lo = (uintptr_t)p & ~4095UL, hi = ((uintptr_t)p + len + 4095) & ~4095UL;

	munmap((void *)lo, hi - lo);
}

/* What VHOST_SET_VRING_ADDR takes for the ring part at p: its user
 * address, or with the device IOTLB its IOVA. */
static inline uint64_t h_ring_addr(struct h_dev *d, void *p)
{
	return d->iotlb ? h_gpa(d, p) : (uint64_t)(uintptr_t)p;
}

/* h_attach on an open device fd without an owner. */
/* Queue q's ring addresses as VHOST_SET_VRING_ADDR takes them; with log,
 * VHOST_VRING_F_LOG and the used ring's guest-physical address. A packed
 * ring goes in the same fields, as QEMU passes it: the descriptor ring,
 * the driver area in avail's place, the device area in used's, and the
 * device area's address to log. */
static inline struct vhost_vring_addr h_vring_addr(struct h_dev *d, int q, bool log)
{
	struct h_vq *v = &d->vq[q];
	struct vhost_vring_addr a = {
		.index = q,
		.desc_user_addr = h_ring_addr(d, v->vr.desc),
		.avail_user_addr = h_ring_addr(d, v->vr.avail),
		.used_user_addr = h_ring_addr(d, v->vr.used),
	};
	void *used = v->vr.used;

	if (d->packed) {
		a.desc_user_addr = h_ring_addr(d, v->pdesc);
		a.avail_user_addr = h_ring_addr(d, v->pdriver);
		a.used_user_addr = h_ring_addr(d, v->pdevice);
		used = v->pdevice;
	}
	if (log) {
		a.flags = 1 << VHOST_VRING_F_LOG;
		a.log_guest_addr = h_gpa(d, used);
	}
	return a;
}

/* The 64-bit words of a VHOST_SET_FEATURES_ARRAY argument: count, then
 * the words. */
#define H_FEATURE_WORDS	2

/* Sets d's features with `f` as the first word: VHOST_SET_FEATURES, or with
 * a second word VHOST_SET_FEATURES_ARRAY, as QEMU does (the one-word ioctl
 * would clear it). 0 or -errno. */
static inline int h_set_features(struct h_dev *d, uint64_t f)
{
	uint64_t arr[1 + H_FEATURE_WORDS] = { H_FEATURE_WORDS, f, d->features_hi };

	if (!d->features_hi)
		return h_ioctl(d->fd, VHOST_SET_FEATURES, &f);
	return h_ioctl(d->fd, VHOST_SET_FEATURES_ARRAY, arr);
}

static inline int h_configure(struct h_dev *d, const struct h_opts *o)
{
	uint64_t f = d->features;
	int q, r;

	if ((r = h_ioctl(d->fd, VHOST_SET_OWNER, NULL)))
		return r;
	if (d->iotlb) {
		/* Misses in the v2 format, as QEMU acks it (vhost_kernel_set_backend_cap). */
		uint64_t bf = 1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2;

		if ((r = h_ioctl(d->fd, VHOST_SET_BACKEND_FEATURES, &bf)))
			return r;
	}
	if ((r = h_set_features(d, f)))
		return r;
	if ((r = h_set_mem_flat(d)))
		return r;
	for (q = 0; q < 2; q++) {
		struct h_vq *v = &d->vq[q];
		unsigned int num = o->num ? o->num : 256;
		struct vhost_vring_state s = { .index = q, .num = num };
		struct vhost_vring_addr a;
		struct vhost_vring_file kf = { .index = q }, cf = { .index = q }, ef = { .index = q };
		struct vhost_vring_file bf = { .index = q, .fd = d->tap };

		h_vq_layout(d, q, num, o->base,
			    q == 0 ? (o->rx_buf ? o->rx_buf : 2048) : (o->tx_buf ? o->tx_buf : 2048));
		v->kick = eventfd(0, EFD_NONBLOCK);
		v->call = eventfd(0, EFD_NONBLOCK);
		v->err = eventfd(0, EFD_NONBLOCK);
		kf.fd = v->kick;
		cf.fd = v->call;
		ef.fd = v->err;
		a = h_vring_addr(d, q, false);
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_NUM, &s)))
			return r;
		s.num = h_vq_base(d, q);
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_BASE, &s)))
			return r;
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_ADDR, &a)))
			return r;
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_KICK, &kf)))
			return r;
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_CALL, &cf)))
			return r;
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_ERR, &ef)))
			return r;
		if (d->iotlb)
			continue;	/* the used ring is not mapped yet: the test's */
		if ((r = h_ioctl(d->fd, VHOST_NET_SET_BACKEND, &bf)))
			return r;
	}
	return 0;
}

/* Closes the device and its eventfds: what a QEMU exit leaves behind. The
 * memory and the tap stay, for another h_attach. */
static inline void h_detach(struct h_dev *d)
{
	int q;

	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
	for (q = 0; q < 2; q++) {
		if (d->vq[q].kick > 0)
			close(d->vq[q].kick);
		if (d->vq[q].call > 0)
			close(d->vq[q].call);
		if (d->vq[q].err > 0)
			close(d->vq[q].err);
		d->vq[q].kick = d->vq[q].call = d->vq[q].err = 0;
	}
}

/* Dirty logging (migration): the bitmap for the whole guest memory, one
 * bit per 4 KiB page. */
#define H_LOG_BYTES	(H_MEM_SIZE / 4096 / 8)

/* Turns dirty logging on, as QEMU does at migration start: the log base
 * (H_LOG_BYTES at `bitmap`) and fd (-1 for none), LOG_ALL, then both rings'
 * addresses again with VHOST_VRING_F_LOG. Returns 0 or -errno. */
static inline int h_log_start(struct h_dev *d, void *bitmap, int logfd)
{
	uint64_t base = (uint64_t)(uintptr_t)bitmap, f = d->features | (1ULL << VHOST_F_LOG_ALL);
	int q, r;

	if ((r = h_ioctl(d->fd, VHOST_SET_LOG_BASE, &base)))
		return r;
	if ((r = h_ioctl(d->fd, VHOST_SET_LOG_FD, &logfd)))
		return r;
	if ((r = h_set_features(d, f)))
		return r;
	for (q = 0; q < 2; q++) {
		struct vhost_vring_addr a = h_vring_addr(d, q, true);

		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_ADDR, &a)))
			return r;
	}
	return 0;
}

/* Guest memory, a tap with its AF_PACKET peer, and an attached device. */
static inline int h_setup(struct h_dev *d, const struct h_opts *o)
{
	uint64_t f = 0;
	int r;

	memset(d, 0, sizeof(*d));
	d->fd = d->tap = d->pkt = -1;
	if (o->event_idx)
		f |= 1ULL << VIRTIO_RING_F_EVENT_IDX;
	if (o->indirect)
		f |= 1ULL << VIRTIO_RING_F_INDIRECT_DESC;
	if (o->mrg_rxbuf)
		f |= 1ULL << VIRTIO_NET_F_MRG_RXBUF;
	if (o->version_1)
		f |= 1ULL << VIRTIO_F_VERSION_1;
	if (o->vhost_hdr)
		f |= 1ULL << VHOST_NET_F_VIRTIO_NET_HDR;
	if (o->packed)
		f |= 1ULL << VIRTIO_F_RING_PACKED;
	if (o->in_order)
		f |= 1ULL << VIRTIO_F_IN_ORDER;
	if (o->iotlb)
		f |= 1ULL << VIRTIO_F_ACCESS_PLATFORM;
	d->features = f;
	if (o->udp_tunnel)
		d->features_hi = 1ULL << (VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO - 64) |
				 1ULL << (VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO - 64);
	d->iotlb = o->iotlb;
	d->iova = o->iotlb ? o->iova : 0;
	d->packed = o->packed;
	d->in_order = o->in_order;
	d->vhost_hdr = o->vhost_hdr;
	d->hdr_len = (o->mrg_rxbuf || o->version_1) ? 12 : 10;
	if (o->udp_tunnel)
		d->hdr_len = sizeof(struct virtio_net_hdr_v1_hash_tunnel);

	d->mem = mmap(NULL, H_MEM_SIZE, PROT_READ | PROT_WRITE,
		      (o->shared_mem ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (d->mem == MAP_FAILED)
		return -errno;
	if (o->macvtap)
		r = h_macvtap_open(d, !o->vhost_hdr, o->tap_offload);
	else
		r = h_tap_open_flags(d, !o->vhost_hdr, o->tap_offload, o->tap_flags);
	if (r)
		return r;
	if ((r = h_pkt_open(d)))
		return r;
	return h_attach(d, o);
}

static inline void h_teardown(struct h_dev *d)
{
	h_detach(d);
	if (d->parent[0]) {
		char cmd[64];

		/* Takes the macvtap and the veth peer with it. */
		snprintf(cmd, sizeof(cmd), "ip link del %s", d->parent);
		if (system(cmd))
			fprintf(stderr, "# %s failed\n", cmd);
		d->parent[0] = 0;
	}
	if (d->tap >= 0)
		close(d->tap);
	if (d->pkt >= 0)
		close(d->pkt);
	if (d->mem && d->mem != MAP_FAILED)
		munmap(d->mem, H_MEM_SIZE);
	d->tap = d->pkt = -1;
	d->mem = NULL;
}

static inline void h_kick(struct h_dev *d, int q)
{
	uint64_t one = 1;

	if (write(d->vq[q].kick, &one, sizeof(one)) < 0)
		perror("kick");
}

/* Where the driver's publishing on a queue stood, for h_kick_needed to
 * tell what was published since. */
struct h_kick_mark {
	uint16_t avail_idx;		/* split rings */
	uint16_t p_avail;		/* packed rings, with its wrap counter */
	bool p_avail_wrap;
};

static inline struct h_kick_mark h_kick_mark(struct h_vq *v)
{
	return (struct h_kick_mark){ v->avail_idx, v->p_avail, v->p_avail_wrap };
}

/*
 * Whether the device asked for a kick for what queue q published since
 * `from`, as a Linux guest decides after a full barrier: with EVENT_IDX on
 * a split ring, whether avail_event lies in [old, new)
 * (virtqueue_kick_prepare), without it, whether used->flags lacks
 * NO_NOTIFY; on a packed ring, from the device area's flags and, in DESC
 * mode, its event offset and wrap counter (virtqueue_kick_prepare_packed).
 */
static inline bool h_kick_needed(struct h_dev *d, int q, struct h_kick_mark from)
{
	struct h_vq *v = &d->vq[q];
	uint32_t snap;
	uint16_t off_wrap, flags, added, event;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!d->packed) {
		if (!(d->features & (1ULL << VIRTIO_RING_F_EVENT_IDX)))
			return !(__atomic_load_n(&v->vr.used->flags, __ATOMIC_ACQUIRE) & VRING_USED_F_NO_NOTIFY);
		return vring_need_event(__atomic_load_n(&vring_avail_event(&v->vr), __ATOMIC_ACQUIRE),
					v->avail_idx, from.avail_idx);
	}
	/* off_wrap and flags in one load, as the guest reads them. */
	snap = __atomic_load_n((uint32_t *)v->pdevice, __ATOMIC_ACQUIRE);
	memcpy(&off_wrap, (uint8_t *)&snap, 2);
	memcpy(&flags, (uint8_t *)&snap + 2, 2);
	if (flags != VRING_PACKED_EVENT_FLAG_DESC)
		return flags != VRING_PACKED_EVENT_FLAG_DISABLE;
	added = v->p_avail + (v->p_avail_wrap != from.p_avail_wrap ? v->num : 0) - from.p_avail;
	event = off_wrap & 0x7fff;
	if (!!(off_wrap >> 15) != v->p_avail_wrap)
		event -= v->num;
	return vring_need_event(event, v->p_avail, (uint16_t)(v->p_avail - added));
}

/*
 * The packed ring's driver side (virtio 1.1 2.8). A buffer is a chain of
 * descriptors written at consecutive ring positions; the driver marks
 * each available with AVAIL = its wrap counter and USED = its inverse, and
 * writes the first one's flags last, so that the device never sees part of
 * a chain. The device writes one used descriptor per buffer at its own
 * next used position (id, length, AVAIL = USED = its wrap counter) and
 * moves on by the number of descriptors the buffer took, which the driver
 * knows from the id alone: hence p_chain.
 */

/* Descriptor flags `flags` marked available in the lap whose wrap counter
 * is `wrap`: AVAIL equal to it, USED its inverse. */
static inline uint16_t h_p_avail_flags(uint16_t flags, bool wrap)
{
	return (flags & ~(H_P_AVAIL | H_P_USED)) | (wrap ? H_P_AVAIL : H_P_USED);
}

/* Whether descriptor flags `flags` mark it used in the lap whose wrap
 * counter is `wrap`: AVAIL and USED both equal to it. */
static inline bool h_p_is_used(uint16_t flags, bool wrap)
{
	return (flags & (H_P_AVAIL | H_P_USED)) == (wrap ? H_P_AVAIL | H_P_USED : 0);
}

/* Whether a chain of k ring entries with buffer id `id` fits now: it needs
 * that many free entries, and its id must not be in flight. Says why not. */
static inline bool h_packed_room(struct h_vq *v, unsigned int k, uint16_t id)
{
	if (!k || k > v->num - v->p_busy) {
		H_LOG("packed: no room for a chain of %u (%u of %u entries in flight)", k,
		      v->p_busy, v->num);
		return false;
	}
	if (id < v->num && v->p_chain[id]) {
		H_LOG("packed: buffer id %u is still in flight", id);
		return false;
	}
	return true;
}

/* Writes entry i of the chain being added at p_avail, with its AVAIL and
 * USED bits; the first entry's flags are only returned, for
 * h_packed_commit to write last. */
static inline uint16_t h_packed_fill(struct h_vq *v, unsigned int i, uint64_t addr, uint32_t len,
				     uint16_t id, uint16_t flags)
{
	unsigned int pos = v->p_avail + i;
	bool wrap = v->p_avail_wrap;
	struct vring_packed_desc *pd;

	if (pos >= v->num) {
		pos -= v->num;
		wrap = !wrap;
	}
	flags = h_p_avail_flags(flags, wrap);
	pd = &v->pdesc[pos];
	pd->addr = addr;
	pd->len = len;
	pd->id = id;
	if (i)
		pd->flags = flags;
	return flags;
}

/* Makes the k entries filled at p_avail available, buffer id `id`: the
 * first entry's flags, after everything else. */
static inline void h_packed_commit(struct h_vq *v, unsigned int k, uint16_t first_flags, uint16_t id)
{
	__atomic_store_n(&v->pdesc[v->p_avail].flags, first_flags, __ATOMIC_RELEASE);
	v->p_avail += k;
	if (v->p_avail >= v->num) {
		v->p_avail -= v->num;
		v->p_avail_wrap = !v->p_avail_wrap;
		v->p_avail_bits ^= H_P_AVAIL | H_P_USED;
	}
	if (id < v->num)
		v->p_chain[id] = k;
	v->p_busy += k;
	v->avail_idx++;
}

/*
 * Adds a chain of k descriptors to packed queue q as given (addr, len, id,
 * flags with NEXT where the chain goes on; AVAIL and USED are set here),
 * without a kick and without touching the event suppression areas. The
 * buffer id is the last descriptor's. An id of num or more goes into the
 * ring as it is, for the tests of malformed rings, and is not tracked.
 * 0, or -ENOSPC (logged) if it does not fit or its id is in flight.
 */
static inline int h_packed_add(struct h_dev *d, int q, const struct vring_packed_desc *chain,
			       unsigned int k)
{
	struct h_vq *v = &d->vq[q];
	uint16_t first = 0, id = k ? chain[k - 1].id : 0;
	unsigned int i;

	if (!h_packed_room(v, k, id))
		return -ENOSPC;
	for (i = 0; i < k; i++) {
		uint16_t f = h_packed_fill(v, i, chain[i].addr, chain[i].len, chain[i].id, chain[i].flags);

		if (!i)
			first = f;
	}
	h_packed_commit(v, k, first, id);
	return 0;
}

/*
 * An indirect table that a test wrote in the split layout, rewritten in
 * place in the packed one: entries are the same 16 bytes, but a packed
 * table is read in order to its end, so the `next` links become the order
 * and NEXT, reserved there, is dropped. Returns the packed table's length
 * (the chain's entries), or len as it was for a table outside guest memory
 * (a bad address, left to the device). Tests write a table again before
 * they publish it again.
 */
static inline uint32_t h_packed_table(struct h_dev *d, uint64_t gpa, uint32_t len)
{
	unsigned int n = len / sizeof(struct vring_desc), i, idx = 0;
	struct vring_packed_desc *p;
	struct vring_desc *t;

	if (!n || gpa - d->iova >= H_MEM_SIZE || len > H_MEM_SIZE - (gpa - d->iova) || !(t = malloc(len)))
		return len;
	memcpy(t, h_ptr(d, gpa), n * sizeof(*t));
	p = h_ptr(d, gpa);
	for (i = 0; i < n; i++) {
		struct vring_desc e = t[idx % n];

		p[i] = (struct vring_packed_desc){ .addr = e.addr, .len = e.len,
						   .flags = e.flags & ~VRING_DESC_F_NEXT };
		if (!(e.flags & VRING_DESC_F_NEXT))
			break;
		idx = e.next;
	}
	free(t);
	return (i < n ? i + 1 : n) * sizeof(*p);
}

/*
 * h_publish on a packed ring: the chain the test wrote at vr.desc[head]
 * goes into the ring in chain order, with buffer id `head` in each entry.
 * The flag bits NEXT, WRITE and INDIRECT are the same in both layouts. A
 * chain that does not end within num entries (a loop) becomes num entries
 * that all have NEXT, a packed chain that never ends.
 */
static __attribute__((noinline, unused)) void h_packed_publish_chain(struct h_dev *d, int q, uint16_t head)
{
	struct h_vq *v = &d->vq[q];
	struct vring_desc *sd = &v->vr.desc[head % v->num];
	uint16_t first = 0;
	unsigned int i, k;

	for (k = 1; k < v->num && (sd->flags & VRING_DESC_F_NEXT); k++)
		sd = &v->vr.desc[sd->next % v->num];
	if (!h_packed_room(v, k, head))
		return;
	sd = &v->vr.desc[head % v->num];
	for (i = 0; i < k; i++, sd = &v->vr.desc[sd->next % v->num]) {
		uint32_t len = sd->len;
		uint16_t f;

		if (sd->flags & VRING_DESC_F_INDIRECT)
			len = h_packed_table(d, sd->addr, sd->len);
		f = h_packed_fill(v, i, sd->addr, len, head, sd->flags);
		if (!i)
			first = f;
	}
	h_packed_commit(v, k, first, head);
}

/* With EVENT_IDX, asks for an interrupt on the next used entry, as on a
 * split ring: the event offset first, then, only if they change, the
 * flags (the device reads the offset after them), as a Linux guest's
 * virtqueue_enable_cb_prepare_packed keeps a shadow of them. */
static inline void h_packed_want_used(struct h_dev *d, struct h_vq *v)
{
	if (!(d->features & (1ULL << VIRTIO_RING_F_EVENT_IDX)))
		return;
	__atomic_store_n(&v->pdriver->off_wrap, h_p_pos(v->p_used, v->p_used_wrap), __ATOMIC_RELEASE);
	if (v->pdriver->flags != VRING_PACKED_EVENT_FLAG_DESC)
		__atomic_store_n(&v->pdriver->flags, VRING_PACKED_EVENT_FLAG_DESC, __ATOMIC_RELEASE);
}

/* A buffer of one descriptor on a packed ring with room for it, whose id
 * `id` (below num) is not in flight (h_add_one's and h_packed_publish's
 * usual case): the descriptor goes in at p_avail, its flags last. Every
 * value is read once into a local, as a guest's driver keeps its state:
 * the stores into the ring could otherwise alias the h_vq fields (both are
 * 16-bit), and the general path's reloads cost the bench's packed guest
 * side a third more instructions than its split side. */
static inline __attribute__((always_inline)) void h_packed_add_one(struct h_vq *v, uint16_t id, uint64_t addr,
								  uint32_t len, uint16_t flags)
{
	uint16_t pos = v->p_avail, next = pos + 1, bits = v->p_avail_bits;
	struct vring_packed_desc *pd = &v->pdesc[pos];

	v->p_chain[id] = 1;
	v->p_busy++;
	v->avail_idx++;
	if (next >= v->num) {
		next = 0;
		v->p_avail_wrap = !v->p_avail_wrap;
		v->p_avail_bits = bits ^ (H_P_AVAIL | H_P_USED);
	}
	v->p_avail = next;
	pd->addr = addr;
	pd->len = len;
	pd->id = id;
	__atomic_store_n(&pd->flags, (flags & ~(H_P_AVAIL | H_P_USED)) | bits, __ATOMIC_RELEASE);
}

/* The usual buffer, one direct descriptor whose id is free, is written
 * straight into the ring: the general walk above cost the bench's guest
 * side 140 instructions per packet (scripts/bench --insns, user rows),
 * where a guest's driver spends a few dozen. */
static inline void h_packed_publish(struct h_dev *d, int q, uint16_t head)
{
	struct h_vq *v = &d->vq[q];
	struct vring_desc *sd = &v->vr.desc[head % v->num];

	if (!(sd->flags & (VRING_DESC_F_NEXT | VRING_DESC_F_INDIRECT)) && head < v->num &&
	    v->p_busy < v->num && !v->p_chain[head]) {
		h_packed_add_one(v, head, sd->addr, sd->len, sd->flags);
	} else {
		h_packed_publish_chain(d, q, head);
	}
	h_packed_want_used(d, v);
}

/* Ring entries a used descriptor of buffer `id` stands for; 1 (and said)
 * for an id that is not in flight, a device's error the tests then see. */
static inline uint16_t h_packed_step(struct h_vq *v, uint16_t id)
{
	if (id < v->num && v->p_chain[id])
		return v->p_chain[id];
	H_LOG("packed: the device used buffer id %u, which is not in flight", id);
	return 1;
}

/* Used entries not taken yet: those seen before, and any the device wrote
 * since after them. Looks no further than the buffers in flight, whose
 * ring entries alone hold what the driver wrote. */
static inline uint16_t h_packed_pending(struct h_vq *v)
{
	/* With nothing found ahead, the scan starts at p_used, whatever a
	 * misbehaving device did to the steps before. */
	if (!v->p_found) {
		v->p_scan = v->p_used;
		v->p_scan_wrap = v->p_used_wrap;
	}
	while (v->p_found < (uint16_t)(v->avail_idx - v->used_seen)) {
		struct vring_packed_desc *pd = &v->pdesc[v->p_scan];
		uint16_t f = __atomic_load_n(&pd->flags, __ATOMIC_ACQUIRE);

		if (!h_p_is_used(f, v->p_scan_wrap))
			break;
		v->p_scan += h_packed_step(v, pd->id);
		if (v->p_scan >= v->num) {
			v->p_scan -= v->num;
			v->p_scan_wrap = !v->p_scan_wrap;
		}
		v->p_found++;
	}
	return v->p_found;
}

/* Takes back buffer `id`, whose used descriptor is at p_used: its ring
 * entries (one for an id not in flight) and p_used past them. Whether the
 * id was in flight. */
static inline __attribute__((always_inline)) bool h_packed_release(struct h_vq *v, uint16_t id)
{
	bool in_flight = id < v->num && v->p_chain[id];
	uint16_t k = 1;

	if (in_flight) {
		k = v->p_chain[id];
		v->p_chain[id] = 0;
		v->p_busy -= k;
	}
	v->p_used += k;
	if (v->p_used >= v->num) {
		v->p_used -= v->num;
		v->p_used_wrap = !v->p_used_wrap;
		v->p_used_bits ^= H_P_AVAIL | H_P_USED;
	}
	v->used_seen++;
	return in_flight;
}

/* Takes the used descriptor at p_used: its id (~0 if that buffer was not
 * in flight) and length. */
static inline struct vring_used_elem h_packed_take(struct h_vq *v)
{
	struct vring_packed_desc *pd = &v->pdesc[v->p_used];
	struct vring_used_elem e = { ~0u, 0 };
	uint16_t id;

	/* Found already (the callers' h_used_pending), or found now. */
	if (!v->p_found && !h_packed_pending(v))
		return e;
	id = pd->id;
	e.len = pd->len;
	/* h_packed_pending said already if the id is not in flight. */
	if (h_packed_release(v, id))
		e.id = id;
	v->p_found--;
	return e;
}

/* The device-writable bytes of the split chain at `head` on queue q, as a
 * driver counts them when it adds the buffer (total_in_len); 0 for a chain
 * that is malformed. */
static inline uint32_t h_chain_in_len(struct h_dev *d, int q, uint16_t head)
{
	struct h_vq *v = &d->vq[q];
	struct vring_desc *t = v->vr.desc;
	unsigned int i = head % v->num, n = v->num, k;
	uint32_t len = 0;

	if (t[i].flags & VRING_DESC_F_INDIRECT) {
		if (t[i].addr - d->iova + t[i].len > H_MEM_SIZE)
			return 0;
		n = t[i].len / sizeof(*t);
		t = h_ptr(d, t[i].addr);
		i = 0;
	}
	for (k = 0; k < n && i < n; k++) {
		if (t[i].flags & VRING_DESC_F_WRITE)
			len += t[i].len;
		if (!(t[i].flags & VRING_DESC_F_NEXT))
			break;
		i = t[i].next;
	}
	return len;
}

/* Publishes descriptor head `head` on split queue q: no kick, no event. */
static inline __attribute__((always_inline)) void h_split_publish(struct h_dev *d, int q, uint16_t head)
{
	struct h_vq *v = &d->vq[q];

	if (d->in_order) {
		v->io_head[v->avail_idx % v->num] = head;
		v->io_len[v->avail_idx % v->num] = h_chain_in_len(d, q, head);
	}
	v->vr.avail->ring[v->avail_idx % v->num] = head;
	__atomic_store_n(&v->vr.avail->idx, (uint16_t)(v->avail_idx + 1), __ATOMIC_RELEASE);
	v->avail_idx++;
}

/* With EVENT_IDX, asks for an interrupt on queue q's next used entry, the
 * one after those taken (split: used_event; packed: the driver event
 * structure). */
static inline __attribute__((always_inline)) void h_want_used(struct h_dev *d, int q)
{
	struct h_vq *v = &d->vq[q];

	if (d->packed)
		h_packed_want_used(d, v);
	else if (d->features & (1ULL << VIRTIO_RING_F_EVENT_IDX))
		vring_used_event(&v->vr) = v->used_seen;
}

/* Publishes descriptor head `head` on queue q (does not kick) and asks for
 * an interrupt on the next used entry. Always inlined: as a call it cost
 * the bench's split guest side 15% more. */
static inline __attribute__((always_inline)) void h_publish(struct h_dev *d, int q, uint16_t head)
{
	if (d->packed) {
		h_packed_publish(d, q, head);
		return;
	}
	h_split_publish(d, q, head);
	h_want_used(d, q);
}

/*
 * Adds a buffer of one direct descriptor (flags 0 or VRING_DESC_F_WRITE)
 * with buffer id `head` (below num) on queue q, and does not kick: as
 * h_publish after writing vr.desc[head], but on a packed ring whose id is
 * free, written straight into the ring, as a guest's driver writes it,
 * without the split table in between (the bench's guest side). It does
 * not ask for an interrupt, which h_publish does: a caller that adds
 * buffers this way calls h_want_used once its used entries are taken, as
 * a Linux guest's virtqueue_get_buf does, since the event index it stores
 * is the same for every buffer added after them.
 */
static inline __attribute__((always_inline)) void h_add_one(struct h_dev *d, int q, uint16_t head,
							   uint64_t addr, uint32_t len, uint16_t flags)
{
	struct h_vq *v = &d->vq[q];

	if (d->packed && v->p_busy < v->num && !v->p_chain[head]) {
		h_packed_add_one(v, head, addr, len, flags);
		return;
	}
	v->vr.desc[head] = (struct vring_desc){ addr, len, flags, 0 };
	if (d->packed)
		h_packed_publish_chain(d, q, head);	/* which says why the above could not */
	else
		h_split_publish(d, q, head);
}

/* Number of used entries not consumed yet. */
static inline uint16_t h_used_pending(struct h_dev *d, int q)
{
	struct h_vq *v = &d->vq[q];

	if (d->packed)
		return h_packed_pending(v);
	return (uint16_t)(__atomic_load_n(&v->vr.used->idx, __ATOMIC_ACQUIRE) - v->used_seen);
}

/* Waits until at least n used entries are pending; -ETIMEDOUT otherwise. */
static inline int h_wait_used(struct h_dev *d, int q, uint16_t n, int timeout_ms)
{
	uint64_t end = h_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	unsigned int spins = 0;

	while (h_used_pending(d, q) < n) {
		if (h_now_ns() > end)
			return -ETIMEDOUT;
		if (++spins > 64)
			usleep(50);
	}
	return 0;
}

/*
 * The next buffer of an in-order run (see h_vq.io_head). At a run's start
 * the element in the used slot of the next buffer names the run's last
 * buffer; the slot is then poisoned, so that an element the device writes
 * into the wrong slot is never taken for a later run's. An element naming
 * no buffer in flight is logged and returned as id 0xffff, which every
 * caller refuses.
 */
static inline struct vring_used_elem h_take_in_order(struct h_vq *v)
{
	uint16_t pending = (uint16_t)(__atomic_load_n(&v->vr.used->idx, __ATOMIC_ACQUIRE) - v->used_seen);
	uint16_t at = v->used_seen % v->num, k;
	struct vring_used_elem e;

	if (!pending) {
		H_LOG("in-order: no used element pending at index %u", v->used_seen);
		return (struct vring_used_elem){ 0xffff, 0 };
	}
	if (!v->io_left) {
		v->io_last = v->vr.used->ring[at];
		v->vr.used->ring[at] = (struct vring_used_elem){ 0xffff, 0xffffffffu };
		for (k = 0; k < pending; k++)
			if (v->io_head[(uint16_t)(v->used_seen + k) % v->num] == v->io_last.id)
				break;
		if (k == pending) {
			H_LOG("in-order: used element id %u at index %u names none of the %u buffers in flight",
			      v->io_last.id, v->used_seen, pending);
			v->used_seen++;
			return (struct vring_used_elem){ 0xffff, 0 };
		}
		v->io_left = k + 1;
	}
	if (--v->io_left) {
		e = (struct vring_used_elem){ v->io_head[at], v->io_len[at] };
		v->io_skipped++;
	} else
		e = v->io_last;
	v->used_seen++;
	return e;
}

static inline struct vring_used_elem h_take_used(struct h_dev *d, int q)
{
	struct h_vq *v = &d->vq[q];
	struct vring_used_elem e;

	if (d->packed)
		return h_packed_take(v);
	if (d->in_order)
		return h_take_in_order(v);
	e = v->vr.used->ring[v->used_seen % v->num];
	v->used_seen++;
	return e;
}

/*
 * Takes queue q's next used entry into *e, if there is one: h_used_pending
 * and h_take_used in one. On a packed ring with nothing found ahead, the
 * used descriptor at p_used is read once, where h_used_pending scans and
 * h_take_used reads it again (the bench's guest side); an id not in
 * flight goes the general way, which says so.
 */
static inline __attribute__((always_inline)) bool h_next_used(struct h_dev *d, int q,
							     struct vring_used_elem *e)
{
	struct h_vq *v = &d->vq[q];

	if (d->packed && !v->p_found && v->avail_idx != v->used_seen) {
		/* Nothing found ahead: the next used descriptor is at p_used. */
		struct vring_packed_desc *pd = &v->pdesc[v->p_used];
		uint16_t f = __atomic_load_n(&pd->flags, __ATOMIC_ACQUIRE), id;

		if ((f & (H_P_AVAIL | H_P_USED)) != v->p_used_bits)
			return false;
		id = pd->id;
		if (id < v->num && v->p_chain[id]) {
			*e = (struct vring_used_elem){ id, pd->len };
			h_packed_release(v, id);
			return true;
		}
	}
	if (!h_used_pending(d, q))
		return false;
	*e = h_take_used(d, q);
	return true;
}

/* Whether an eventfd fired within timeout_ms (and clears it). */
static inline bool h_fired(int efd, int timeout_ms)
{
	struct pollfd p = { .fd = efd, .events = POLLIN };
	uint64_t v;

	if (poll(&p, 1, timeout_ms) != 1)
		return false;
	return read(efd, &v, sizeof(v)) == sizeof(v);
}

/* A test frame: broadcast dst, our ethertype, seq and a payload pattern. */
static inline size_t h_frame(uint8_t *buf, uint32_t seq, size_t len)
{
	size_t i;

	memset(buf, 0xff, 6);
	memcpy(buf + 6, "\x02\x00\x00\x00\x00\x01", 6);
	buf[12] = H_ETH_TYPE >> 8;
	buf[13] = H_ETH_TYPE & 0xff;
	memcpy(buf + 14, &seq, 4);
	for (i = 18; i < len; i++)
		buf[i] = (uint8_t)(seq * 7 + i);
	return len;
}

/* Checks a frame made by h_frame; returns its seq or -1. */
static inline int64_t h_check_frame(const uint8_t *buf, size_t len, size_t want_len)
{
	uint32_t seq;
	size_t i;

	if (len != want_len || len < 18 || buf[12] != (H_ETH_TYPE >> 8) || buf[13] != (H_ETH_TYPE & 0xff))
		return -1;
	memcpy(&seq, buf + 14, 4);
	for (i = 18; i < len; i++)
		if (buf[i] != (uint8_t)(seq * 7 + i))
			return -1;
	return seq;
}

/* Reads one frame from d's packet socket into buf; returns its length (the
 * whole frame's, MSG_TRUNC), -ETIMEDOUT or -errno. */
static inline ssize_t h_pkt_recv(struct h_dev *d, uint8_t *buf, size_t cap, int timeout_ms)
{
	struct pollfd p = { .fd = d->pkt, .events = POLLIN };
	ssize_t n;

	for (;;) {
		n = recv(d->pkt, buf, cap, MSG_TRUNC);
		if (n >= 0)
			return n;
		if (errno != EAGAIN)
			return -errno;
		if (poll(&p, 1, timeout_ms) != 1)
			return -ETIMEDOUT;
	}
}

/* Puts one frame (seq, len) in the TX ring as header + frame, in one or two
 * descriptors, optionally through an indirect table (layout 1: header in
 * its own descriptor, the table at the end of the buffer slot). Does not
 * kick. */
static inline void h_tx_post(struct h_dev *d, uint16_t slot, uint32_t seq, size_t len, int layout)
{
	struct h_vq *v = &d->vq[1];
	uint16_t head = slot % v->num;
	uint64_t buf = h_buf(d, 1, head);
	uint8_t *p = h_ptr(d, buf);
	struct vring_desc *desc = v->vr.desc;

	memset(p, 0, d->hdr_len);
	h_frame(p + d->hdr_len, seq, len);
	if (layout == 0) {		/* any layout: header and frame together */
		desc[head] = (struct vring_desc){ buf, d->hdr_len + len, 0, 0 };
	} else {
		struct vring_desc *t = h_ptr(d, buf + v->buf_size - 64);

		t[0] = (struct vring_desc){ buf, d->hdr_len, VRING_DESC_F_NEXT, 1 };
		t[1] = (struct vring_desc){ buf + d->hdr_len, len, 0, 0 };
		desc[head] = (struct vring_desc){ h_gpa(d, t), 32, VRING_DESC_F_INDIRECT, 0 };
	}
	h_publish(d, 1, head);
}

/* Guest TX of `count` frames of `len` bytes in windows of up to 64; checks
 * each on the packet socket (byte for byte, in order) and each used entry.
 * Returns 0 or -1 (logged). */
static inline int h_run_tx(struct h_dev *d, uint32_t count, size_t len, int layout)
{
	struct h_vq *v = &d->vq[1];
	uint8_t buf[70000];
	uint32_t sent = 0, got = 0, window = v->num < 64 ? v->num : 64;

	while (got < count) {
		uint32_t burst = 0;

		while (sent < count && sent - got < window) {
			h_tx_post(d, (uint16_t)(v->avail_idx), sent, len, layout);
			sent++;
			burst++;
		}
		if (burst)
			h_kick(d, 1);
		while (got < sent) {
			ssize_t n = h_pkt_recv(d, buf, sizeof(buf), H_WAIT_MS);

			if (n < 0) {
				H_LOG("tx: frame %u of %u not seen on the tap (%zd)", got, count, n);
				return -1;
			}
			if (h_check_frame(buf, n, len) != got) {
				H_LOG("tx: frame %u corrupt or out of order (len %zd)", got, n);
				return -1;
			}
			got++;
		}
		if (h_wait_used(d, 1, (uint16_t)(v->avail_idx - v->used_seen), H_WAIT_MS)) {
			H_LOG("tx: used ring not updated (%u pending of %u)", h_used_pending(d, 1),
			      (uint16_t)(v->avail_idx - v->used_seen));
			return -1;
		}
		while (h_used_pending(d, 1)) {
			if (h_take_used(d, 1).id >= v->num) {
				H_LOG("tx: bad used element");
				return -1;
			}
		}
	}
	return 0;
}

/* Posts `n` RX buffers (one writable descriptor each, a whole slot) and
 * kicks. */
static inline void h_rx_fill(struct h_dev *d, unsigned int n)
{
	struct h_vq *v = &d->vq[0];
	unsigned int i;

	for (i = 0; i < n; i++) {
		uint16_t head = v->avail_idx % v->num;

		v->vr.desc[head] = (struct vring_desc){ h_buf(d, 0, head), v->buf_size, VRING_DESC_F_WRITE, 0 };
		h_publish(d, 0, head);
	}
	h_kick(d, 0);
}

/* Keeps the RX ring stocked with buffers, never past its size, and kicks. */
static inline void h_rx_refill(struct h_dev *d)
{
	struct h_vq *v = &d->vq[0];
	uint16_t out = v->avail_idx - v->used_seen;

	h_rx_fill(d, out < v->num ? v->num - out : 0);
}

/* Takes one received packet off the RX ring: its first used element and,
 * with mergeable buffers, the num_buffers - 1 that follow, copied into buf
 * (header included). Returns its length and sets *nb, or -1 (logged). */
static inline ssize_t h_rx_take(struct h_dev *d, uint8_t *buf, size_t cap, uint16_t *nb)
{
	struct h_vq *v = &d->vq[0];
	bool mrg = d->features & (1ULL << VIRTIO_NET_F_MRG_RXBUF);
	uint16_t k, n = 1;
	size_t off = 0;

	for (k = 0; k < n; k++) {
		struct vring_used_elem e;

		if (h_wait_used(d, 0, 1, H_WAIT_MS)) {
			H_LOG("rx: buffer %u of %u of a packet never reached the ring", k, n);
			return -1;
		}
		e = h_take_used(d, 0);
		if (e.id >= v->num || e.len > v->buf_size || off + e.len > cap) {
			H_LOG("rx: bad used element %u/%u", e.id, e.len);
			return -1;
		}
		if (k == 0 && mrg) {
			memcpy(&n, (uint8_t *)h_ptr(d, h_buf(d, 0, e.id)) + 10, 2);
			if (n == 0 || n > v->num) {
				H_LOG("rx: bad num_buffers %u", n);
				return -1;
			}
		}
		memcpy(buf + off, h_ptr(d, h_buf(d, 0, e.id)), e.len);
		off += e.len;
	}
	*nb = n;
	return off;
}

/* Guest RX of `count` frames of `len` bytes, sent through the packet socket
 * in windows, each read back from the RX ring and checked byte for byte and
 * in order. Returns 0 or -1 (logged). */
static inline int h_run_rx(struct h_dev *d, uint32_t count, size_t len)
{
	struct h_vq *v = &d->vq[0];
	bool mrg = d->features & (1ULL << VIRTIO_NET_F_MRG_RXBUF);
	uint8_t frame[70000], got_buf[70000];
	uint32_t sent = 0, got = 0, window = v->num < 32 ? v->num / 2 : 32;
	unsigned int per = mrg ? (d->hdr_len + len + v->buf_size - 1) / v->buf_size : 1;

	if (!window)
		window = 1;
	if (window * per > v->num)
		window = v->num / per ? v->num / per : 1;
	/* Up to a full ring: a ring left stocked by an earlier run is topped
	 * up, never overfilled. */
	h_rx_refill(d);
	while (got < count) {
		uint32_t w = 0;

		while (sent < count && w < window) {
			h_frame(frame, sent, len);
			if (send(d->pkt, frame, len, 0) != (ssize_t)len) {
				H_LOG("rx: send: %s", strerror(errno));
				return -1;
			}
			sent++;
			w++;
		}
		while (got < sent) {
			uint16_t nb;
			ssize_t off = h_rx_take(d, got_buf, sizeof(got_buf), &nb);

			if (off < 0) {
				H_LOG("rx: frame %u of %u not received", got, count);
				return -1;
			}
			if (off < d->hdr_len ||
			    h_check_frame(got_buf + d->hdr_len, off - d->hdr_len, len) != got) {
				H_LOG("rx: frame %u corrupt: %zd bytes, num_buffers %u", got, off, nb);
				return -1;
			}
			got++;
			h_rx_fill(d, nb);
		}
	}
	return 0;
}

/* One guest TX frame (seq, 200 bytes), seen on the packet socket `pkt`
 * (frames of an earlier flood are skipped), and every TX chain in flight
 * used. 0 or -errno. */
static inline int h_tx_one(struct h_dev *d, int pkt, uint32_t seq)
{
	struct h_vq *v = &d->vq[1];
	uint16_t head = v->avail_idx % v->num;
	uint64_t buf = h_buf(d, 1, head);
	struct pollfd p = { .fd = pkt, .events = POLLIN };
	uint8_t got[2048];
	ssize_t n;

	memset(h_ptr(d, buf), 0, d->hdr_len);
	h_frame((uint8_t *)h_ptr(d, buf) + d->hdr_len, seq, 200);
	v->vr.desc[head] = (struct vring_desc){ buf, d->hdr_len + 200, 0, 0 };
	h_publish(d, 1, head);
	h_kick(d, 1);
	for (;;) {
		if (poll(&p, 1, H_WAIT_MS) != 1)
			return -ETIMEDOUT;
		n = recv(pkt, got, sizeof(got), 0);
		if (n < 0)
			return -errno;
		if (h_check_frame(got, n, 200) == seq)
			break;
	}
	return h_wait_used(d, 1, (uint16_t)(v->avail_idx - v->used_seen), H_WAIT_MS);
}

/* One guest RX frame (seq, 200 bytes), sent through d's packet socket and
 * found in the ring. Frames an earlier flood left queued in the tap (up to
 * its queue length) are drained first if asked: with the queue full, the
 * tap would drop ours. 0 or -errno. */
static inline int h_rx_one(struct h_dev *d, uint32_t seq, bool drain)
{
	uint8_t frame[200];
	unsigned int n;

	for (n = 0; drain && n < 100000; n++) {
		h_rx_refill(d);
		if (h_wait_used(d, 0, 1, 300))
			break;
		h_take_used(d, 0);
	}
	h_frame(frame, seq, sizeof(frame));
	if (send(d->pkt, frame, sizeof(frame), 0) != sizeof(frame))
		return -errno;
	for (n = 0; n < 64; n++) {
		struct vring_used_elem e;

		h_rx_refill(d);
		if (h_wait_used(d, 0, 1, H_WAIT_MS))
			return -ETIMEDOUT;
		e = h_take_used(d, 0);
		if (e.id >= d->vq[0].num || e.len < d->hdr_len)
			return -EINVAL;
		if (h_check_frame((uint8_t *)h_ptr(d, h_buf(d, 0, e.id)) + d->hdr_len,
				  e.len - d->hdr_len, sizeof(frame)) == seq)
			return 0;
	}
	return -EBADMSG;
}

/*
 * A flood both ways from a thread: it keeps the TX ring full of 60-byte
 * frames of zeroes (no ethertype the packet socket listens to; the host
 * stack drops them), injects test frames into the tap for the RX ring, and
 * reposts RX buffers as they fill. `bad` counts used indices that ran ahead
 * of what was posted (a device that lost its place in the used ring); the
 * flood stops at the first.
 */
struct h_flood {
	struct h_dev *d;
	volatile int stop;
	uint64_t rounds;
	unsigned int bad;
	pthread_t thr;
};

static inline void *h_flood_fn(void *arg)
{
	struct h_flood *fl = arg;
	struct h_dev *d = fl->d;
	struct h_vq *tx = &d->vq[1], *rx = &d->vq[0];
	uint8_t frame[128];
	int i;

	h_frame(frame, 0, sizeof(frame));
	while (!fl->stop) {
		if (h_used_pending(d, 1) > (uint16_t)(tx->avail_idx - tx->used_seen) ||
		    h_used_pending(d, 0) > (uint16_t)(rx->avail_idx - rx->used_seen)) {
			fl->bad++;
			break;
		}
		while (h_used_pending(d, 1))
			h_take_used(d, 1);
		while ((uint16_t)(tx->avail_idx - tx->used_seen) < tx->num) {
			uint16_t head = tx->avail_idx % tx->num;

			tx->vr.desc[head] = (struct vring_desc){ h_buf(d, 1, head), d->hdr_len + 60, 0, 0 };
			h_publish(d, 1, head);
		}
		while (h_used_pending(d, 0))
			h_take_used(d, 0);
		h_rx_refill(d);
		h_kick(d, 1);
		for (i = 0; i < 16; i++)
			send(d->pkt, frame, sizeof(frame), MSG_DONTWAIT);
		fl->rounds++;
		usleep(100);
	}
	return NULL;
}

static inline void h_flood_start(struct h_flood *fl, struct h_dev *d)
{
	memset(fl, 0, sizeof(*fl));
	fl->d = d;
	pthread_create(&fl->thr, NULL, h_flood_fn, fl);
}

/* Stops the flood; returns how many rounds it ran. */
static inline uint64_t h_flood_stop(struct h_flood *fl)
{
	fl->stop = 1;
	pthread_join(fl->thr, NULL);
	return fl->rounds;
}

/* With EVENT_IDX: waits until the device has taken every chain posted on
 * queue q and asked to be kicked again (avail_event caught up with the
 * avail index; on a packed ring, the device area asks for an event at the
 * driver's next avail position). Unlike used entries, this holds for
 * chains a device consumes without using them. 0 or -ETIMEDOUT. */
static inline int h_wait_drained(struct h_dev *d, int q, int timeout_ms)
{
	struct h_vq *v = &d->vq[q];
	uint64_t end = h_now_ns() + (uint64_t)timeout_ms * 1000000ULL;

	while (d->packed ?
	       __atomic_load_n(&v->pdevice->flags, __ATOMIC_ACQUIRE) != VRING_PACKED_EVENT_FLAG_DESC ||
	       __atomic_load_n(&v->pdevice->off_wrap, __ATOMIC_ACQUIRE) != h_p_pos(v->p_avail, v->p_avail_wrap) :
	       __atomic_load_n(&vring_avail_event(&v->vr), __ATOMIC_ACQUIRE) != v->avail_idx) {
		if (h_now_ns() > end)
			return -ETIMEDOUT;
		usleep(50);
	}
	return 0;
}

/*
 * 64 KB GSO frames. Only in tap-header mode can a guest hand one to the tap,
 * because only then does the tap see its virtio header. On the tap's far
 * side an AF_PACKET socket with PACKET_VNET_HDR sees the GSO skb whole,
 * with its gso_type and gso_size, and can inject one.
 *
 * H_GSO_LEN is the largest GSO frame a net device takes whole: the stack
 * segments in software any skb of 64 KiB or more (gso_features_check()).
 */
#define H_GSO_LEN	65535		/* Ethernet frame; IPv4 total length 65521 */
#define H_GSO_MSS	1448

/* A TCP/IPv4 frame as a guest with TSO gives it to its NIC: one 64 KB
 * segment for the other side to cut into MSS-sized ones. */
static inline void h_gso_frame(uint8_t *f, size_t len, uint32_t seq)
{
	uint8_t *ip = f + 14, *tcp = ip + 20;
	uint32_t sum = 0, nseq = htonl(seq);
	uint16_t tot = htons(len - 14), c;
	size_t i;

	memcpy(f, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00", 14);
	memset(ip, 0, 40);
	ip[0] = 0x45;
	memcpy(ip + 2, &tot, 2);
	ip[6] = 0x40;			/* DF */
	ip[8] = 64;
	ip[9] = 6;			/* TCP */
	memcpy(ip + 12, "\x0a\xd6\x00\x01\x0a\xd6\x00\x02", 8);
	for (i = 0; i < 20; i += 2)
		sum += ip[i] << 8 | ip[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	c = htons(~sum & 0xffff);
	memcpy(ip + 10, &c, 2);
	memcpy(tcp, "\x9c\x40\x13\x89", 4);	/* 40000 -> 5001 */
	memcpy(tcp + 4, &nseq, 4);
	tcp[12] = 0x50;			/* 20-byte header */
	tcp[13] = 0x18;			/* PSH ACK */
	tcp[14] = 0xff;
	for (i = 54; i < len; i++)
		f[i] = (uint8_t)(seq * 7 + i + (i >> 8));
}

static const struct virtio_net_hdr h_gso_hdr = {
	.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM, .gso_type = VIRTIO_NET_HDR_GSO_TCPV4,
	.hdr_len = 54, .gso_size = H_GSO_MSS, .csum_start = 34, .csum_offset = 16,
};

/* An AF_PACKET socket on the tap for IPv4 frames, with virtio headers. */
static inline int h_gso_sock(struct h_dev *d)
{
	return h_packet_socket(d, ETH_P_IP, true);
}

/* Sum of the named /proc/meminfo fields ("Slab:", ...), in kB; -1 on error. */
static inline long long h_meminfo_kb(const char *const *keys)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char k[64];
	long long v, total = 0;
	int i;

	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld kB\n", k, &v) == 2)
		for (i = 0; keys[i]; i++)
			if (!strcmp(k, keys[i]))
				total += v;
	fclose(f);
	return total;
}

static inline long long h_slab_kb(void)
{
	static const char *const keys[] = { "Slab:", NULL };

	return h_meminfo_kb(keys);
}

/* Memory the kernel could hand out now (MemAvailable), in kB: what a leak
 * of whole pages (page fragments, not slab objects) shows up in. */
static inline long long h_mem_available_kb(void)
{
	static const char *const keys[] = { "MemAvailable:", NULL };

	return h_meminfo_kb(keys);
}

/* Bytes in active slab objects (sum over /proc/slabinfo of active objects
 * times object size): finer than meminfo's Slab, which counts pages. */
static inline long long h_slab_active_bytes(void)
{
	FILE *f = fopen("/proc/slabinfo", "r");
	char line[512], name[128];
	long long total = 0, active, num, size;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%127s %lld %lld %lld", name, &active, &num, &size) == 4)
			total += active * size;
	}
	fclose(f);
	return total;
}

/* Each slab cache's active objects and object size, as /proc/slabinfo
 * gives them: what a memory comparison logs, so that growth names its
 * cache. */
#define H_SLAB_CACHES 512
struct h_slab_cache {
	char name[64];
	long long active, size;
};
struct h_slabs {
	int n;
	struct h_slab_cache c[H_SLAB_CACHES];
};

/* Reads /proc/slabinfo into `s`: 0, or -errno. Caches past H_SLAB_CACHES
 * are left out (-E2BIG). */
static inline int h_slabs_read(struct h_slabs *s)
{
	FILE *f = fopen("/proc/slabinfo", "r");
	char line[512];
	struct h_slab_cache c;
	long long num;
	int ret = 0;

	if (!f)
		return -errno;
	s->n = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%63s %lld %lld %lld", c.name, &c.active, &num, &c.size) != 4)
			continue;
		if (s->n == H_SLAB_CACHES) {
			ret = -E2BIG;
			break;
		}
		s->c[s->n++] = c;
	}
	fclose(f);
	return ret;
}

/* Bytes in active objects over every cache of `s` (as h_slab_active_bytes). */
static inline long long h_slabs_bytes(const struct h_slabs *s)
{
	long long total = 0;

	for (int i = 0; i < s->n; i++)
		total += s->c[i].active * s->c[i].size;
	return total;
}

/* Active objects of cache `name` in `s`; 0 if it has none. */
static inline long long h_slabs_active(const struct h_slabs *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->c[i].name, name))
			return s->c[i].active;
	return 0;
}

/* Shrinks every slab cache (/sys/kernel/slab/NAME/shrink). Besides giving
 * empty slabs back, this empties KASAN's quarantine, where freed objects
 * wait (and count in Slab:) before they are really freed: on the debug
 * kernel, allocation churn would otherwise read as growth. */
static inline void h_shrink_slabs(void)
{
	char path[512];
	struct dirent *ent;
	DIR *dir = opendir("/sys/kernel/slab");
	int fd;

	if (!dir)
		return;
	while ((ent = readdir(dir))) {
		if (ent->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/slab/%s/shrink", ent->d_name);
		fd = open(path, O_WRONLY);
		if (fd < 0)
			continue;
		/* A cache that refuses (an alias) has nothing to give back. */
		(void)!write(fd, "1", 1);
		close(fd);
	}
	closedir(dir);
}

/* Drops caches, waits for RCU-deferred frees (task structs) to land and
 * shrinks the slab caches, so that memory before/after comparisons see
 * only live objects. */
static inline void h_settle(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	if (fd >= 0) {
		if (write(fd, "3", 1) < 0)
			perror("drop_caches");
		close(fd);
	}
	usleep(300 * 1000);
	h_shrink_slabs();
}

/* Slab usage (kB) after work that started from `s0`: settled, and measured
 * again up to five times a second apart while it is `limit` kB or more
 * above `s0`, since frees deferred past a grace period (a deleted tap's
 * net device, RCU-freed objects, slower on the debug kernel) are not
 * leaks. Returns the lowest reading. */
static inline long long h_slab_after_kb(long long s0, long long limit)
{
	long long s1, best = -1;
	int i;

	for (i = 0; i < 5; i++) {
		if (i)
			sleep(1);
		h_settle();
		s1 = h_slab_kb();
		if (best < 0 || s1 < best)
			best = s1;
		if (best - s0 < limit)
			break;
	}
	return best;
}

/* The device's /proc/self/fdinfo text in `buf` (NUL-terminated); false if
 * it cannot be read. */
static inline bool h_fdinfo_read(struct h_dev *d, char *buf, size_t size)
{
	char path[64];
	ssize_t n;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", d->fd);
	f = open(path, O_RDONLY);
	if (f < 0)
		return false;
	n = read(f, buf, size - 1);
	close(f);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return true;
}

/* A counter of the device's fdinfo: `name` (e.g. "drops=") on the line of
 * `vq` (e.g. "vq0:"); ~0 if absent. */
static inline uint64_t h_fdinfo_u64(struct h_dev *d, const char *vq, const char *name)
{
	char buf[4096], *p;

	if (!h_fdinfo_read(d, buf, sizeof(buf)))
		return ~0ULL;
	p = strstr(buf, vq);
	if (!p || !(p = strstr(p, name)))
		return ~0ULL;
	return strtoull(p + strlen(name), NULL, 10);
}

/* Writes `val` to a sysfs/procfs file: 0 or -errno. */
static inline int h_write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY), r = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) != (ssize_t)strlen(val))
		r = -errno;
	close(fd);
	return r;
}

/* Receive packet steering for d's tap: frames the tap hands to the host
 * stack (guest TX) are processed on the CPUs in the hex `mask`, from their
 * backlog, instead of inside the sender's sendmsg. 0 or -errno (-ENOENT
 * without CONFIG_RPS). */
static inline int h_tap_rps(struct h_dev *d, const char *mask)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/class/net/%s/queues/rx-0/rps_cpus", d->ifname);
	return h_write_file(path, mask);
}

/* Pins the calling thread to `cpu`, or lets it run anywhere if cpu < 0. A
 * vhost worker inherits the affinity of the thread that issues SET_OWNER. */
static inline int h_set_cpu(int cpu)
{
	cpu_set_t set;
	int i;

	CPU_ZERO(&set);
	for (i = 0; i < CPU_SETSIZE; i++)
		if (cpu < 0 || i == cpu)
			CPU_SET(i, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

/* Sends one rtnetlink request and waits for its acknowledgement: 0 or the
 * kernel's -errno. */
static inline int h_rtnl(struct nlmsghdr *req)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	char buf[4096];
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), r = -EIO, i;
	struct timeval tv = { .tv_sec = H_WAIT_MS / 1000 };

	if (s < 0)
		return -errno;
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	req->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	req->nlmsg_seq = 1;
	if (sendto(s, req, req->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto out;
	}
	for (i = 0; i < 16; i++) {
		ssize_t n = recv(s, buf, sizeof(buf), 0);
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		if (n < 0) {
			r = -errno;
			break;
		}
		for (; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_ERROR) {
				r = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
				goto out;
			}
		}
	}
out:
	close(s);
	return r;
}

/* Appends attribute `type` to the request; returns it (for nesting). */
static inline struct rtattr *h_nl_attr(struct nlmsghdr *n, unsigned short type, const void *data,
				       unsigned short len)
{
	struct rtattr *a = (struct rtattr *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));

	a->rta_type = type;
	a->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

struct h_link_req {
	struct nlmsghdr n;
	struct ifinfomsg i;
	char attrs[256];
};

static inline void h_link_req_init(struct h_link_req *req, unsigned short type, int ifindex)
{
	memset(req, 0, sizeof(*req));
	req->n.nlmsg_len = NLMSG_LENGTH(sizeof(req->i));
	req->n.nlmsg_type = type;
	req->i.ifi_family = AF_UNSPEC;
	req->i.ifi_index = ifindex;
}

/* Deletes the network interface `ifindex` (ip link del): a tap goes away
 * even while files (a vhost backend) still hold it. */
static inline int h_link_del(int ifindex)
{
	struct h_link_req req;

	h_link_req_init(&req, RTM_DELLINK, ifindex);
	return h_rtnl(&req.n);
}

/* Attaches the XDP program prog_fd (-1: detaches) to `ifindex` with
 * XDP_FLAGS_* `flags` (XDP_FLAGS_DRV_MODE: the driver's own hook). */
static inline int h_xdp_attach(int ifindex, int prog_fd, uint32_t flags)
{
	struct h_link_req req;
	struct rtattr *nest;

	h_link_req_init(&req, RTM_SETLINK, ifindex);
	nest = h_nl_attr(&req.n, IFLA_XDP | NLA_F_NESTED, NULL, 0);
	h_nl_attr(&req.n, IFLA_XDP_FD, &prog_fd, sizeof(prog_fd));
	if (flags)
		h_nl_attr(&req.n, IFLA_XDP_FLAGS, &flags, sizeof(flags));
	nest->rta_len = (char *)&req.n + req.n.nlmsg_len - (char *)nest;
	return h_rtnl(&req.n);
}

/* Loads a BPF program of `type` from n instructions (license GPL): its fd,
 * or -errno with the verifier's log on stderr. */
static inline int h_bpf_prog_load(uint32_t type, const struct bpf_insn *insns, unsigned int n)
{
	static char log[16384];
	union bpf_attr a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.prog_type = type;
	a.insns = (uint64_t)(uintptr_t)insns;
	a.insn_cnt = n;
	a.license = (uint64_t)(uintptr_t)"GPL";
	a.log_buf = (uint64_t)(uintptr_t)log;
	a.log_size = sizeof(log);
	a.log_level = 1;
	log[0] = 0;
	fd = syscall(__NR_bpf, BPF_PROG_LOAD, &a, sizeof(a));
	if (fd < 0) {
		int e = -errno;

		if (log[0])
			H_LOG("bpf verifier: %s", log);
		return e;
	}
	return fd;
}

#endif
