/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A userspace vhost-net driver that plays both QEMU and the guest.
 *
 * It owns "guest memory" (an mmap), lays split rings out in it, registers it
 * with the vhost device through the same ioctls QEMU uses, and attaches a tap
 * whose other side is an AF_PACKET socket. Guest TX is then checked by
 * reading frames off the packet socket, and guest RX by injecting frames
 * through it.
 *
 * Used by datapath.c (and the benchmark). Everything fails loudly: each
 * helper returns -errno or a negative code and the tests assert on it.
 */
#ifndef VNR_HARNESS_H
#define VNR_HARNESS_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <linux/vhost.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>
#include <linux/virtio_config.h>

#define H_MEM_SIZE	(64UL << 20)
#define H_RING_OFF(q)	((uint64_t)(q) * (4UL << 20))	/* rings: 4 MiB each */
#define H_BUF_OFF	(16UL << 20)			/* buffers after that */
#define H_ETH_TYPE	0x88b5				/* local experimental */
#define H_MAX_NUM	32768

struct h_vq {
	unsigned int num;
	struct vring vr;
	int kick, call, err;
	uint16_t avail_idx;	/* next avail index the guest publishes */
	uint16_t used_seen;	/* used entries the guest has consumed */
	uint32_t buf_size;	/* per-descriptor buffer size */
	uint64_t buf_base;	/* guest-physical base of this queue's buffers */
};

struct h_dev {
	int fd;			/* /dev/vhost-net-rs or /dev/vhost-net */
	int tap, pkt, ifindex;
	char ifname[IFNAMSIZ];
	uint8_t *mem;
	uint64_t features;
	bool vhost_hdr;		/* VHOST_NET_F_VIRTIO_NET_HDR: vhost adds/strips */
	unsigned int hdr_len;	/* virtio-net header length the guest sees */
	struct h_vq vq[2];	/* 0 = RX, 1 = TX */
};

struct h_opts {
	const char *dev;	/* device node; default $VNR_DEV or vhost-net-rs */
	unsigned int num;	/* ring size, both queues */
	bool event_idx, indirect, mrg_rxbuf, version_1, vhost_hdr;
	uint32_t rx_buf;	/* RX buffer size (default 2048) */
	uint32_t tx_buf;	/* TX buffer size (default 2048) */
	uint16_t base;		/* initial ring index */
	int tap_offload;	/* TUNSETOFFLOAD flags, -1: leave */
};

static inline uint64_t h_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static inline uint64_t h_gpa(struct h_dev *d, void *p)
{
	return (uint64_t)((uint8_t *)p - d->mem);
}

static inline void *h_ptr(struct h_dev *d, uint64_t gpa)
{
	return d->mem + gpa;
}

static inline int h_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

static inline int h_tap_open(struct h_dev *d, bool vnet_hdr, int offload)
{
	struct ifreq ifr = { 0 };
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK), s, r;
	static int seq;

	if (fd < 0)
		return -errno;
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0);
	snprintf(ifr.ifr_name, IFNAMSIZ, "vnr%d.%d", getpid() % 10000, seq++);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0)
		goto err;
	memcpy(d->ifname, ifr.ifr_name, IFNAMSIZ);
	if (vnet_hdr) {
		int sz = d->hdr_len;

		if (ioctl(fd, TUNSETVNETHDRSZ, &sz) < 0)
			goto err;
	}
	if (offload >= 0 && ioctl(fd, TUNSETOFFLOAD, (unsigned long)offload) < 0)
		goto err;
	s = socket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0)
		goto err;
	r = ioctl(s, SIOCGIFFLAGS, &ifr);
	ifr.ifr_flags |= IFF_UP;
	if (!r)
		r = ioctl(s, SIOCSIFFLAGS, &ifr);
	close(s);
	if (r < 0)
		goto err;
	d->ifindex = if_nametoindex(d->ifname);
	d->tap = fd;
	return 0;
err:
	r = -errno;
	close(fd);
	return r;
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

static inline void h_vq_layout(struct h_dev *d, int q, unsigned int num, uint16_t base,
			       uint32_t buf_size)
{
	struct h_vq *v = &d->vq[q];

	v->num = num;
	vring_init(&v->vr, num, d->mem + H_RING_OFF(q), 4096);
	v->avail_idx = base;
	v->used_seen = base;
	v->buf_size = buf_size;
	v->buf_base = H_BUF_OFF + (uint64_t)q * ((H_MEM_SIZE - H_BUF_OFF) / 2);
	/* The device reads used->idx when the backend is set. */
	v->vr.used->idx = base;
	v->vr.avail->idx = base;
}

/* Guest-physical address of buffer slot i of queue q. */
static inline uint64_t h_buf(struct h_dev *d, int q, unsigned int i)
{
	struct h_vq *v = &d->vq[q];

	return v->buf_base + (uint64_t)(i % v->num) * v->buf_size;
}

/* Opens the vhost device and configures it on d's memory and tap, as QEMU
 * does when a guest starts: owner, features, memory table, both rings with
 * fresh indices, eventfds and the backend. */
static inline int h_configure(struct h_dev *d, const struct h_opts *o);

static inline int h_attach(struct h_dev *d, const struct h_opts *o)
{
	const char *dev = o->dev ? o->dev : (getenv("VNR_DEV") ? getenv("VNR_DEV") : "/dev/vhost-net-rs");

	d->fd = open(dev, O_RDWR);
	if (d->fd < 0)
		return -errno;
	return h_configure(d, o);
}

/* h_attach on an open device fd without an owner. */
static inline int h_configure(struct h_dev *d, const struct h_opts *o)
{
	struct { struct vhost_memory h; struct vhost_memory_region r[1]; } m = { 0 };
	uint64_t f = d->features;
	int q, r;

	if ((r = h_ioctl(d->fd, VHOST_SET_OWNER, NULL)))
		return r;
	if ((r = h_ioctl(d->fd, VHOST_SET_FEATURES, &f)))
		return r;
	m.h.nregions = 1;
	m.r[0].guest_phys_addr = 0;
	m.r[0].memory_size = H_MEM_SIZE;
	m.r[0].userspace_addr = (uint64_t)(uintptr_t)d->mem;
	if ((r = h_ioctl(d->fd, VHOST_SET_MEM_TABLE, &m)))
		return r;
	for (q = 0; q < 2; q++) {
		struct h_vq *v = &d->vq[q];
		unsigned int num = o->num ? o->num : 256;
		struct vhost_vring_state s = { .index = q, .num = num };
		struct vhost_vring_addr a = { .index = q };
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
		a.desc_user_addr = (uint64_t)(uintptr_t)v->vr.desc;
		a.avail_user_addr = (uint64_t)(uintptr_t)v->vr.avail;
		a.used_user_addr = (uint64_t)(uintptr_t)v->vr.used;
		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_NUM, &s)))
			return r;
		s.num = o->base;
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
	d->features = f;
	d->vhost_hdr = o->vhost_hdr;
	d->hdr_len = (o->mrg_rxbuf || o->version_1) ? 12 : 10;

	d->mem = mmap(NULL, H_MEM_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (d->mem == MAP_FAILED)
		return -errno;
	if ((r = h_tap_open(d, !o->vhost_hdr, o->tap_offload)))
		return r;
	if ((r = h_pkt_open(d)))
		return r;
	return h_attach(d, o);
}

static inline void h_teardown(struct h_dev *d)
{
	h_detach(d);
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

/* Publishes descriptor head `head` on queue q (does not kick). */
static inline void h_publish(struct h_dev *d, int q, uint16_t head)
{
	struct h_vq *v = &d->vq[q];

	v->vr.avail->ring[v->avail_idx % v->num] = head;
	__atomic_store_n(&v->vr.avail->idx, (uint16_t)(v->avail_idx + 1), __ATOMIC_RELEASE);
	v->avail_idx++;
	if (d->features & (1ULL << VIRTIO_RING_F_EVENT_IDX))
		vring_used_event(&v->vr) = v->used_seen;	/* interrupt me on the next one */
}

/* Number of used entries not consumed yet. */
static inline uint16_t h_used_pending(struct h_dev *d, int q)
{
	struct h_vq *v = &d->vq[q];

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

static inline struct vring_used_elem h_take_used(struct h_dev *d, int q)
{
	struct h_vq *v = &d->vq[q];
	struct vring_used_elem e = v->vr.used->ring[v->used_seen % v->num];

	v->used_seen++;
	return e;
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

/* Drops caches and waits for RCU-deferred frees (task structs) to land,
 * so that memory before/after comparisons see only real growth. */
static inline void h_settle(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	if (fd >= 0) {
		if (write(fd, "3", 1) < 0)
			perror("drop_caches");
		close(fd);
	}
	usleep(300 * 1000);
}

/* A counter of the device's fdinfo: `name` (e.g. "drops=") on the line of
 * `vq` (e.g. "vq0:"); ~0 if absent. */
static inline uint64_t h_fdinfo_u64(struct h_dev *d, const char *vq, const char *name)
{
	char path[64], buf[4096], *p;
	ssize_t n;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", d->fd);
	f = open(path, O_RDONLY);
	if (f < 0)
		return ~0ULL;
	n = read(f, buf, sizeof(buf) - 1);
	close(f);
	if (n <= 0)
		return ~0ULL;
	buf[n] = 0;
	p = strstr(buf, vq);
	if (!p || !(p = strstr(p, name)))
		return ~0ULL;
	return strtoull(p + strlen(name), NULL, 10);
}

#endif
