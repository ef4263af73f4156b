// SPDX-License-Identifier: GPL-2.0
/*
 * bench: data-path throughput and latency of a vhost device, or of the
 * userspace baseline, driven by the selftest harness. Prints one JSON object
 * per run; scripts/bench runs it for every backend and aggregates.
 *
 *   bench -b rs|c|user -m tx|rx|lat|bidir [-s BYTES] [-t SECS] [-q PAIRS] [-P] [-I]
 *
 * tx     guest TX: frames are posted as fast as the ring takes them; the tap
 *        delivers them to the host stack, which drops them (unknown type).
 * rx     guest RX: a sender thread injects frames into each tap through
 *        AF_PACKET; the guest side reposts buffers as they fill.
 * bidir  both at once, on every queue pair.
 * lat    one frame at a time: guest TX -> tap -> a reflector on the tap's
 *        far side -> tap -> guest RX; the round trip is timed. The guest
 *        side polls the RX used ring (64 spins, then 50 us sleeps), or
 *        with -W sleeps on the RX queue's call eventfd until the device
 *        signals it, as a guest waits for its interrupt.
 * gsotx  guest TX of 64 KB TCP GSO frames (tap-header mode, tap offloads on);
 *        throughput in Mbit/s.
 * gsorx  guest RX of 64 KB GSO frames injected through a PACKET_VNET_HDR
 *        socket on the tap, into 64 KB guest buffers.
 * fair   CVE-2019-3900: the guest floods TX at 64 B while one RX frame a
 *        millisecond arrives on the same device; reports the RX frames'
 *        delay from the tap to the guest's used ring (p50, p99, max) and
 *        how many never arrived. A worker that let TX starve RX shows here.
 * mem    kernel memory per device: Slab + VmallocUsed + KernelStack from
 *        /proc/meminfo before and after setting up 32 devices (each with
 *        its tap, which costs the same on every backend).
 *
 * "user" is the baseline without vhost: a device thread in this process
 * moves frames between the rings and the tap fd with read()/write(), as
 * QEMU's userspace virtio-net does.
 *
 * -P asks for packed rings (VIRTIO_F_RING_PACKED). Only vhost-net-rs has
 * them: on C and on the userspace baseline (whose device thread reads split
 * rings) the same case runs on split rings, so that a packed case's row
 * compares vhost-net-rs's packed ring with the others' split one. The JSON
 * says both: "packed" is what was asked, the same for every backend, and
 * "ring" what was measured.
 *
 * -I negotiates VIRTIO_F_IN_ORDER on split rings, on vhost-net-rs and C
 * (both offer it; the userspace baseline and packed rings run without it):
 * the devices then return a TX batch as one used element. The JSON's
 * "in_order" says what was asked, as "packed" does, and "in_order_rings"
 * what was measured.
 *
 * -T puts the guest behind a virtual IOMMU (VIRTIO_F_ACCESS_PLATFORM) on
 * vhost-net-rs and C: the device sees guest memory at I/O virtual
 * addresses, mapped page by page as a guest's DMA API maps it (one 4 KiB
 * IOTLB entry per page of the rings and buffers, given before the
 * backends are attached, so no miss is taken while measuring). The cost
 * measured is the translation's. The userspace baseline runs without.
 *
 * -a pins the threads apart: the data-path threads (the vhost workers, or
 * the baseline's device threads) on the last CPU, this process's own
 * threads (the guest side, the RX sources, the reflector) on CPU 0, as an
 * operator pins vhost workers away from vCPUs. Without it the scheduler
 * places them, differently from run to run. The JSON's "pinned" counts the
 * data-path threads pinned (0 when there is one CPU or pinning failed).
 *
 * Worker CPU time per packet comes from /proc/self/task/TID/stat of
 * the vhost worker threads (they are threads of this process), or of the
 * device thread for "user".
 *
 * Context switches per packet, from the same threads' status: of the whole
 * system ("ctxt_per_pkt"), of every data-path thread
 * ("worker_switches_per_pkt"), and of the threads serving the RX queues
 * ("rx_worker_switches_per_pkt"). Which threads those are, "rx_worker"
 * says: "rx" where each RX queue has a worker of its own (vhost-net-rs
 * with workers=2), "worker" where one thread serves both queues of a
 * device, TX's work included (vhost-net-rs with workers=1, the default;
 * the C driver, one worker per device; the baseline's device thread). So
 * with "worker" the row is the device's whole worker, alike on every
 * backend, and compares only with another "worker" row.
 */
#define VNR_NO_PRECONDITIONS /* a tool: it checks its own devices */
#include "harness.h"
#include <dirent.h>
#include <pthread.h>

#define MAXQ 4

static const char *backend = "rs", *mode = "tx";
static size_t size = 64;
static double secs = 2.0;
static int nq = 1;
static unsigned int busy_us;	/* -p: busy-loop timeout, µs */
static bool dirty_log;		/* -l: dirty logging on */
static bool packed;		/* -P: packed rings where the backend has them */
static bool in_order;		/* -I: VIRTIO_F_IN_ORDER on split rings of rs and c */
static bool iotlb;		/* -T: the device IOTLB on rs and c */
static bool kick_always;	/* -A: kick after every refill, asked or not */
static bool pin;		/* -a: data-path threads on the last CPU, the rest on CPU 0 */
static bool irq_wait;		/* -W: lat waits on the RX call eventfd */
static volatile int stop;

#define FAIR_MAX 65536

struct pair {
	struct h_dev d;
	int gso_s;			/* gso modes: the PACKET_VNET_HDR socket */
	uint64_t tx_pkts, rx_pkts, bytes;
	uint64_t lat_ns[FAIR_MAX];
	int nlat;
	uint32_t fair_sent;		/* fair: RX frames sent, and when */
	uint64_t *fair_t;
	volatile int fair_stop;
	pthread_t dev_thr, src_thr;
	void *log;			/* -l: the dirty bitmap */
};

static bool gso;			/* gsotx or gsorx */

static struct pair pairs[MAXQ];

static const char *dev_node(void)
{
	return !strcmp(backend, "c") ? "/dev/vhost-net" : "/dev/vhost-net-rs";
}

/* Whether this run's rings are packed: asked for, on vhost-net-rs. */
static bool packed_rings(void)
{
	return packed && !strcmp(backend, "rs");
}

/* Whether this run negotiates IN_ORDER: asked for, on a kernel backend's
 * split rings. */
static bool in_order_rings(void)
{
	return in_order && strcmp(backend, "user") && !packed_rings();
}

/* Whether this run goes through the device IOTLB: asked for, on a kernel
 * backend. */
static bool iotlb_on(void)
{
	return iotlb && strcmp(backend, "user");
}

/* Where guest memory is, as the device sees it with -T. */
#define BENCH_IOVA (1ULL << 40)

/* Maps every 4 KiB page of guest memory that [p, p + len) touches, one
 * IOTLB UPDATE per page, read and write. */
static int iotlb_map(struct h_dev *d, void *p, uint64_t len)
{
	uint64_t first = h_gpa(d, p) & ~4095ULL, end = h_gpa(d, p) + len, iova;

	for (iova = first; iova < end; iova += 4096) {
		struct vhost_msg_v2 m = { .type = VHOST_IOTLB_MSG_V2 };

		m.iotlb.iova = iova;
		m.iotlb.size = 4096;
		m.iotlb.uaddr = (uint64_t)(uintptr_t)h_ptr(d, iova);
		m.iotlb.perm = VHOST_ACCESS_RW;
		m.iotlb.type = VHOST_IOTLB_UPDATE;
		if (write(d->fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
			return -errno;
	}
	return 0;
}

/* -T: maps each queue's ring parts and buffers, then attaches the
 * backends (h_setup leaves them to the caller with the IOTLB on). */
static int iotlb_start(struct h_dev *d)
{
	int q, r;

	for (q = 0; q < 2; q++) {
		struct h_vq *v = &d->vq[q];
		struct vhost_vring_file b = { .index = q, .fd = d->tap };

		if (d->packed)
			r = iotlb_map(d, v->pdesc, (uint64_t)v->num * 16) ?: iotlb_map(d, v->pdriver, 4) ?:
			    iotlb_map(d, v->pdevice, 4);
		else
			r = iotlb_map(d, v->vr.desc, vring_size(v->num, 4096));
		r = r ?: iotlb_map(d, h_ptr(d, v->buf_base), (uint64_t)v->num * v->buf_size);
		if (r || (r = h_ioctl(d->fd, VHOST_NET_SET_BACKEND, &b)))
			return r;
	}
	return 0;
}

/* ---- the userspace baseline: a device thread serving the rings -------- */

static bool dev_has_avail(struct h_vq *v, uint16_t *last)
{
	return __atomic_load_n(&v->vr.avail->idx, __ATOMIC_ACQUIRE) != *last;
}

static void dev_used(struct h_vq *v, uint16_t *used, uint32_t id, uint32_t len)
{
	v->vr.used->ring[*used % v->num] = (struct vring_used_elem){ id, len };
	__atomic_store_n(&v->vr.used->idx, (uint16_t)(*used + 1), __ATOMIC_RELEASE);
	(*used)++;
}

static void *user_device(void *arg)
{
	struct pair *p = arg;
	struct h_dev *d = &p->d;
	struct h_vq *rx = &d->vq[0], *tx = &d->vq[1];
	/* Where the device starts: the used index, which only this thread
	 * writes. Not the driver's avail_idx, which the main thread may have
	 * moved already (buffers posted before this thread first ran were
	 * then never served, and the run measured 0 packets). */
	uint16_t rx_last = rx->vr.used->idx, rx_used = rx->vr.used->idx;
	uint16_t tx_last = tx->vr.used->idx, tx_used = tx->vr.used->idx;
	struct pollfd pf[3] = { { rx->kick, POLLIN, 0 }, { tx->kick, POLLIN, 0 }, { d->tap, POLLIN, 0 } };
	uint64_t junk, one = 1;
	uint16_t rx_from;

	while (!stop) {
		bool busy = false, tx_full = false, rx_dry = true;

		while (dev_has_avail(tx, &tx_last)) {
			uint16_t head = tx->vr.avail->ring[tx_last % tx->num];
			struct vring_desc *ds = &tx->vr.desc[head];
			/* the tap carries the vnet header itself */
			if (write(d->tap, h_ptr(d, ds->addr), ds->len) < 0 && errno == EAGAIN) {
				tx_full = true;
				break;
			}
			dev_used(tx, &tx_used, head, 0);
			tx_last++;
			busy = true;
		}
		rx_from = rx_used;
		while (dev_has_avail(rx, &rx_last)) {
			uint16_t head = rx->vr.avail->ring[rx_last % rx->num];
			struct vring_desc *ds = &rx->vr.desc[head];
			ssize_t n = read(d->tap, h_ptr(d, ds->addr), ds->len);

			if (n <= 0) {
				rx_dry = false;
				break;
			}
			if (d->features & (1ULL << VIRTIO_NET_F_MRG_RXBUF))
				*(uint16_t *)((uint8_t *)h_ptr(d, ds->addr) + 10) = 1;
			dev_used(rx, &rx_used, head, n);
			rx_last++;
			busy = true;
		}
		/* The guest's interrupt, when it asked for one (used_event), as
		 * QEMU's virtio_notify decides: lat -W sleeps on it. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (rx_used != rx_from &&
		    vring_need_event(__atomic_load_n(&vring_used_event(&rx->vr), __ATOMIC_ACQUIRE), rx_used, rx_from))
			junk = write(rx->call, &one, sizeof(one));
		if (!busy) {
			/* Ask for a kick at the entries it stopped at, as QEMU's
			 * virtio-net does with EVENT_IDX, then look again: what
			 * the guest published before it saw the request came
			 * without a kick. A TX ring the tap refused waits for
			 * room on the tap, and RX for frames, instead. */
			__atomic_store_n(&vring_avail_event(&tx->vr), tx_last, __ATOMIC_RELAXED);
			__atomic_store_n(&vring_avail_event(&rx->vr), rx_last, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			if ((!tx_full && dev_has_avail(tx, &tx_last)) || (rx_dry && dev_has_avail(rx, &rx_last)))
				continue;
			/* A dry RX ring waits for the guest's kick, not for
			 * frames it has no buffer for. */
			pf[2].events = (rx_dry ? 0 : POLLIN) | (tx_full ? POLLOUT : 0);
			poll(pf, 3, 10);
			/* consume the kicks; the rings are rescanned anyway */
			if (pf[0].revents & POLLIN)
				junk = read(rx->kick, &junk, 8);
			if (pf[1].revents & POLLIN)
				junk = read(tx->kick, &junk, 8);
		}
	}
	return NULL;
}

static int setup_pair(struct pair *p)
{
	struct h_opts o = { .dev = dev_node(), .num = 256, .event_idx = true, .indirect = true,
			    .mrg_rxbuf = true, .version_1 = true, .tap_offload = -1,
			    .packed = packed_rings(), .in_order = in_order_rings(),
			    .iotlb = iotlb_on(), .iova = iotlb_on() ? BENCH_IOVA : 0 };
	int r;

	if (gso) {
		/* 64 KB buffers on both rings, offloads on the tap. */
		o.num = 64;
		o.rx_buf = o.tx_buf = H_GSO_LEN + 512;
		o.tap_offload = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
	}
	r = h_setup(&p->d, &o);
	if (!r && iotlb_on())
		r = iotlb_start(&p->d);
	if (r)
		return r;
	if (gso) {
		struct h_vq *v = &p->d.vq[1];
		unsigned int i;

		/* Every TX slot holds a GSO frame, posted over and over. */
		for (i = 0; i < v->num; i++) {
			uint8_t *b = h_ptr(&p->d, h_buf(&p->d, 1, i));

			memset(b, 0, p->d.hdr_len);
			memcpy(b, &h_gso_hdr, sizeof(h_gso_hdr));
			h_gso_frame(b + p->d.hdr_len, H_GSO_LEN, i);
		}
		p->gso_s = h_gso_sock(&p->d);
		if (p->gso_s < 0)
			return p->gso_s;
	}
	if (dirty_log && strcmp(backend, "user")) {
		/* As during a migration: every write the device makes is
		 * logged in a bitmap nobody clears. */
		p->log = calloc(1, H_LOG_BYTES);
		if (!p->log)
			return -ENOMEM;
		r = h_log_start(&p->d, p->log, -1);
		if (r)
			return r;
	}
	if (!strcmp(backend, "user")) {
		/* The baseline: everything but the vhost device, which h_setup
		 * attached on the rs node; closing it leaves the rings, the
		 * eventfds and the tap to this process. */
		close(p->d.fd);
		p->d.fd = -1;
		return pthread_create(&p->dev_thr, NULL, user_device, p) ? -1 : 0;
	}
	return 0;
}

/* ---- guest side ------------------------------------------------------- */

/* Kicks sent, per queue (0 RX, 1 TX), every pair's. */
static uint64_t kicks_sent[2];

/*
 * Kicks queue q after the entries published since `from`: by default only
 * when the device asked for it (h_kick_needed), as a Linux guest does with
 * EVENT_IDX, which every ring of this bench negotiates. With -A, after
 * every refill, which a guest may do too.
 */
static void kick(struct h_dev *d, int q, struct h_kick_mark from)
{
	if (!kick_always && !h_kick_needed(d, q, from))
		return;
	__atomic_fetch_add(&kicks_sent[q], 1, __ATOMIC_RELAXED);
	h_kick(d, q);
}

static void tx_fill(struct pair *p)
{
	struct h_dev *d = &p->d;
	struct h_vq *v = &d->vq[1];
	struct h_kick_mark from = h_kick_mark(v);
	struct vring_used_elem e;
	int posted = 0;

	while (h_next_used(d, 1, &e)) {
		p->tx_pkts++;
		p->bytes += size;
	}
	if ((uint16_t)(v->avail_idx - v->used_seen) < v->num)
		h_want_used(d, 1);
	while ((uint16_t)(v->avail_idx - v->used_seen) < v->num) {
		uint16_t head = v->avail_idx % v->num;

		h_add_one(d, 1, head, h_buf(d, 1, head), d->hdr_len + size, 0);
		posted++;
	}
	if (posted)
		kick(d, 1, from);
}

static void rx_fill_all(struct pair *p)
{
	struct h_dev *d = &p->d;
	struct h_vq *v = &d->vq[0];
	struct h_kick_mark from = h_kick_mark(v);
	struct vring_used_elem e;
	int posted = 0;

	while (h_next_used(d, 0, &e)) {
		p->rx_pkts++;
		p->bytes += size;
		if (p->fair_t && e.id < v->num) {
			uint32_t seq;

			memcpy(&seq, (uint8_t *)h_ptr(d, h_buf(d, 0, e.id)) + d->hdr_len + 14, 4);
			if (seq < p->fair_sent && p->nlat < FAIR_MAX)
				p->lat_ns[p->nlat++] = h_now_ns() - p->fair_t[seq];
		}
	}
	if ((uint16_t)(v->avail_idx - v->used_seen) < v->num)
		h_want_used(d, 0);
	while ((uint16_t)(v->avail_idx - v->used_seen) < v->num) {
		uint16_t head = v->avail_idx % v->num;

		h_add_one(d, 0, head, h_buf(d, 0, head), v->buf_size, VRING_DESC_F_WRITE);
		posted++;
	}
	if (posted)
		kick(d, 0, from);
}

static void *rx_source(void *arg)
{
	struct pair *p = arg;
	static uint8_t gframe[H_GSO_LEN];
	uint8_t frame[2048];
	uint32_t seq = 0;

	if (gso) {
		struct iovec io[2] = { { (void *)&h_gso_hdr, sizeof(h_gso_hdr) }, { gframe, H_GSO_LEN } };
		struct msghdr mh = { .msg_iov = io, .msg_iovlen = 2 };

		h_gso_frame(gframe, H_GSO_LEN, 0);
		while (!stop)
			if (sendmsg(p->gso_s, &mh, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == ENOBUFS))
				usleep(20);
		return NULL;
	}
	if (p->fair_t) {
		/* fair: one frame a millisecond, each send time recorded */
		h_frame(frame, 0, size);
		while (!stop && !p->fair_stop && p->fair_sent < FAIR_MAX) {
			uint32_t s = p->fair_sent;

			memcpy(frame + 14, &s, 4);
			p->fair_t[s] = h_now_ns();
			__atomic_store_n(&p->fair_sent, s + 1, __ATOMIC_RELEASE);
			if (send(p->d.pkt, frame, size, MSG_DONTWAIT) < 0)
				p->fair_t[s] = 0;	/* never sent: not counted */
			usleep(1000);
		}
		return NULL;
	}
	h_frame(frame, 0, size);
	while (!stop) {
		memcpy(frame + 14, &seq, 4);
		if (send(p->d.pkt, frame, size, MSG_DONTWAIT) < 0) {
			if (errno == EAGAIN || errno == ENOBUFS)
				usleep(20);
			continue;
		}
		seq++;
	}
	return NULL;
}

/* -W: waits until queue q has a used entry, sleeping on its call eventfd
 * (the harness asks for an interrupt on every used entry). */
static int wait_used_irq(struct h_dev *d, int q, int timeout_ms)
{
	struct pollfd pf = { .fd = d->vq[q].call, .events = POLLIN };
	uint64_t count;

	while (!h_used_pending(d, q)) {
		if (poll(&pf, 1, timeout_ms) != 1)
			return -ETIMEDOUT;
		if (read(pf.fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
			return -errno;
	}
	return 0;
}

/* Round trip: one frame out on TX, reflected on the tap, back on RX. */
static void run_lat(struct pair *p, uint64_t end)
{
	struct h_dev *d = &p->d;
	uint8_t buf[2048];

	rx_fill_all(p);
	while (h_now_ns() < end && p->nlat < 4096) {
		uint64_t t0 = h_now_ns();
		struct pollfd pf = { .fd = d->pkt, .events = POLLIN };
		ssize_t n;
		struct h_vq *v = &d->vq[1];
		uint16_t head = v->avail_idx % v->num;
		uint64_t b = h_buf(d, 1, head);
		struct h_kick_mark from = h_kick_mark(v);

		memset(h_ptr(d, b), 0, d->hdr_len);
		h_frame((uint8_t *)h_ptr(d, b) + d->hdr_len, p->nlat, size);
		v->vr.desc[head] = (struct vring_desc){ b, d->hdr_len + size, 0, 0 };
		h_publish(d, 1, head);
		kick(d, 1, from);
		/* the reflector: read it off the tap and send it back in */
		if (poll(&pf, 1, 1000) != 1)
			break;
		n = recv(d->pkt, buf, sizeof(buf), 0);
		if (n <= 0 || send(d->pkt, buf, n, 0) != n)
			break;
		if (irq_wait ? wait_used_irq(d, 0, 1000) : h_wait_used(d, 0, 1, 1000))
			break;
		p->lat_ns[p->nlat++] = h_now_ns() - t0;
		h_take_used(d, 0);
		while (h_used_pending(d, 1))
			h_take_used(d, 1);
		rx_fill_all(p);
	}
}

/*
 * Marks an end of the timed section for `scripts/bench --insns`: a no-op
 * whose exact encoding QEMU's instruction-counting plugin
 * (scripts/insns-plugin.c) looks for, snapshotting the guest kernel's
 * executed instruction count when a vCPU runs it. Every run marks its start
 * and its end, in that order.
 */
static inline void insn_mark(void)
{
#if defined(__x86_64__)
	asm volatile("nopw 0x4e56(%%rax,%%rax,1)" ::: "memory");
#endif
}

/* Context switches of the whole system so far ("ctxt" in /proc/stat): per
 * packet, how much scheduling the data path causes, worker and harness
 * alike. */
static uint64_t system_ctxt(void)
{
	unsigned long long n = 0;
	char line[256];
	FILE *f = fopen("/proc/stat", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "ctxt %llu", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* Opens /proc/self/task/TID/NAME of the next thread in `dir` that has one;
 * NULL after the last. */
static FILE *next_task_file(DIR *dir, const char *name)
{
	struct dirent *e;

	while ((e = readdir(dir))) {
		char path[300];
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/%s", e->d_name, name);
		f = fopen(path, "r");
		if (f)
			return f;
	}
	return NULL;
}

/* Whether a thread named `comm` is on the data path (see worker_cpu_ns). */
static bool data_path_thread(const char *comm)
{
	return !strncmp(comm, "vhost", 5) || !strncmp(comm, "vnr-dev", 7);
}

/* Whether a thread named `comm` is an RX queue's own worker: vhost-net-rs's
 * "vhost-net-rs-rx", one per device with workers=2. */
static bool rx_own_thread(const char *comm)
{
	return !strcmp(comm, "vhost-net-rs-rx");
}

/* Whether a thread named `comm` serves both queues of its device:
 * vhost-net-rs's "vhost-net-rs" (workers=1, the default), the C driver's
 * one worker per device, "vhost-PID" of the owner (vhost_dev_set_owner,
 * vhost_worker_create), the baseline's "vnr-dev". */
static bool shared_thread(const char *comm)
{
	return !strcmp(comm, "vhost-net-rs") || !strcmp(comm, "vnr-dev") ||
	       (!strncmp(comm, "vhost-", 6) && comm[6] >= '0' && comm[6] <= '9');
}

/* Context switches (voluntary and not: how often a thread slept or was
 * preempted) of this process's data-path threads, from their
 * /proc/self/task/TID/status. */
struct switches {
	uint64_t all;		/* every data-path thread (see worker_cpu_ns) */
	uint64_t rx_own;	/* the RX queues' own workers (rx_own_thread) */
	uint64_t shared;	/* the threads serving both queues (shared_thread) */
	int rx_own_threads;	/* how many RX queues' own workers there are */
};

static struct switches worker_switches(void)
{
	struct switches s = { 0 };
	DIR *dir = opendir("/proc/self/task");
	FILE *f;

	if (!dir)
		return s;
	while ((f = next_task_file(dir, "status"))) {
		char line[256], comm[32] = "";
		unsigned long long n, total = 0;

		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "Name:\t", 6)) {
				snprintf(comm, sizeof(comm), "%.*s", (int)sizeof(comm) - 1, line + 6);
				comm[strcspn(comm, "\n")] = 0;
			} else if (sscanf(line, "voluntary_ctxt_switches: %llu", &n) == 1 ||
				   sscanf(line, "nonvoluntary_ctxt_switches: %llu", &n) == 1) {
				total += n;
			}
		}
		fclose(f);
		if (data_path_thread(comm))
			s.all += total;
		if (rx_own_thread(comm)) {
			s.rx_own += total;
			s.rx_own_threads++;
		} else if (shared_thread(comm)) {
			s.shared += total;
		}
	}
	closedir(dir);
	return s;
}

/* Reads the /proc/self/task/TID/stat line of the next data-path thread
 * (see data_path_thread) in `dir` into buf; returns its TID, or -1 after
 * the last. */
static int next_data_path_stat(DIR *dir, char *buf, size_t size)
{
	FILE *f;

	while ((f = next_task_file(dir, "stat"))) {
		char *p = fgets(buf, size, f);
		int tid;

		fclose(f);
		/* "tid (comm) state ..." */
		if (!p || sscanf(buf, "%d", &tid) != 1)
			continue;
		p = strchr(buf, '(');
		if (p && data_path_thread(p + 1))
			return tid;
	}
	return -1;
}

/* CPU time (user + system) of the data-path threads of this process: the
 * vhost workers ("vhost-net-rs", or with workers=2 "vhost-net-rs-rx" and
 * "vhost-net-rs-tx"; the C driver's "vhost-PID"), or the
 * baseline's device threads ("vnr-dev"). From /proc/self/task/TID/stat, so
 * it needs no schedstats; resolution is one clock tick. */
static uint64_t worker_cpu_ns(void)
{
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t total = 0;
	DIR *dir = opendir("/proc/self/task");
	char buf[1024];

	if (!dir)
		return 0;
	while (next_data_path_stat(dir, buf, sizeof(buf)) >= 0) {
		unsigned long long ut, st;
		/* utime, stime are fields 14, 15 */
		char *p = strrchr(buf, ')');

		if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
			continue;
		total += (ut + st) * (1000000000ULL / hz);
	}
	closedir(dir);
	return total;
}

/* -a: moves every data-path thread (see worker_cpu_ns) to the last CPU
 * and this thread, whose later children inherit it, to CPU 0. Returns how
 * many data-path threads were moved; 0 with one CPU. */
static int pin_apart(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t mine, theirs;
	char buf[1024];
	DIR *dir;
	int moved = 0, tid;

	if (ncpu < 2)
		return 0;
	CPU_ZERO(&mine);
	CPU_SET(0, &mine);
	CPU_ZERO(&theirs);
	CPU_SET(ncpu - 1, &theirs);
	dir = opendir("/proc/self/task");
	if (!dir)
		return 0;
	while ((tid = next_data_path_stat(dir, buf, sizeof(buf))) >= 0) {
		if (sched_setaffinity(tid, sizeof(theirs), &theirs))
			fprintf(stderr, "bench: pinning thread %d: %s\n", tid, strerror(errno));
		else
			moved++;
	}
	closedir(dir);
	if (sched_setaffinity(0, sizeof(mine), &mine))
		fprintf(stderr, "bench: pinning the guest side: %s\n", strerror(errno));
	return moved;
}

static const char *const mem_keys[] = { "Slab:", "VmallocUsed:", "KernelStack:", NULL };

/* Kernel memory per configured device (with its tap), in bytes. */
static int run_mem(void)
{
	enum { N = 32 };
	static struct pair ps[N];
	long long before, after;
	int i;

	h_settle();
	before = h_meminfo_kb(mem_keys);
	for (i = 0; i < N; i++) {
		if (setup_pair(&ps[i])) {
			fprintf(stderr, "bench: mem: setup %d failed\n", i);
			return 1;
		}
	}
	h_settle();
	after = h_meminfo_kb(mem_keys);
	stop = 1;
	for (i = 0; i < N; i++) {
		if (ps[i].dev_thr)
			pthread_join(ps[i].dev_thr, NULL);
		h_teardown(&ps[i].d);
	}
	printf("{\"backend\":\"%s\",\"mode\":\"mem\",\"packed\":%d,\"ring\":\"%s\",\"devices\":%d,"
	       "\"bytes_per_device\":%.0f}\n", backend, packed, packed_rings() ? "packed" : "split", N,
	       (after - before) * 1024.0 / N);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* CVE-2019-3900: TX flood plus a paced RX stream on one device. Returns the
 * number of RX frames sent that never reached the guest. */
static uint32_t run_fair(struct pair *p, uint64_t end)
{
	uint64_t drain;
	uint32_t sent = 0, i;

	p->fair_t = calloc(FAIR_MAX, sizeof(uint64_t));
	if (!p->fair_t)
		return ~0u;
	rx_fill_all(p);
	pthread_create(&p->src_thr, NULL, rx_source, p);
	while (h_now_ns() < end) {
		tx_fill(p);
		rx_fill_all(p);
		usleep(50);
	}
	p->fair_stop = 1;
	pthread_join(p->src_thr, NULL);
	p->src_thr = 0;
	/* Frames still in flight get 300 ms to land; TX is no longer refilled. */
	drain = h_now_ns() + 300000000ULL;
	while (h_now_ns() < drain) {
		rx_fill_all(p);
		usleep(100);
	}
	for (i = 0; i < p->fair_sent; i++)
		sent += p->fair_t[i] != 0;
	return sent > (uint32_t)p->nlat ? sent - p->nlat : 0;
}

int main(int argc, char **argv)
{
	uint64_t t0, t1, end, cpu0, cpu1, ctxt0, ctxt1, rx_sw, pk = 0, by = 0;
	uint64_t kicks0[2], kicks1[2];
	struct switches sw0, sw1;
	bool rx_own;
	uint32_t lost = 0;
	int c, i, pinned = 0;

	while ((c = getopt(argc, argv, "b:m:s:t:q:p:lPITKAaWh")) != -1) {
		switch (c) {
		case 'b': backend = optarg; break;
		case 'm': mode = optarg; break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 't': secs = atof(optarg); break;
		case 'q': nq = atoi(optarg); break;
		case 'p': busy_us = strtoul(optarg, NULL, 0); break;
		case 'l': dirty_log = true; break;
		case 'P': packed = true; break;
		case 'I': in_order = true; break;
		case 'T': iotlb = true; break;
		case 'K': break;	/* the default now */
		case 'A': kick_always = true; break;
		case 'a': pin = true; break;
		case 'W': irq_wait = true; break;
		default:
			fprintf(stderr, "usage: bench -b rs|c|user -m tx|rx|lat|bidir|gsotx|gsorx|fair|mem [-s BYTES] [-t SECS] [-q PAIRS]\n"
					"             [-p US] [-l] [-P] [-I] [-T] [-A] [-a] [-W]\n"
					"  -p: VHOST_SET_VRING_BUSYLOOP_TIMEOUT on both queues\n"
					"  -l: dirty logging on (VHOST_F_LOG_ALL), as during a live migration\n"
					"  -P: packed rings (VIRTIO_F_RING_PACKED) on rs; c and user run split rings\n"
					"  -I: VIRTIO_F_IN_ORDER on rs and c (split rings only; user runs without)\n"
					"  -T: the device IOTLB (VIRTIO_F_ACCESS_PLATFORM), pages mapped ahead, on rs and c\n"
					"  -A: kick after every refill; by default the guest side kicks only when the device\n"
					"      asked (event-idx), as a Linux guest does\n"
					"  -a: data-path threads (vhost workers, the baseline's device threads) on the last\n"
					"      CPU, the guest side on CPU 0\n"
					"  -W: lat waits for the reply on the RX call eventfd, not by polling the used ring\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (!strcmp(mode, "mem"))
		return run_mem();
	gso = !strcmp(mode, "gsotx") || !strcmp(mode, "gsorx");
	if (gso)
		size = H_GSO_LEN;
	if (!strcmp(mode, "fair"))
		nq = 1;
	if (nq < 1 || nq > MAXQ || ((size < 60 || size > 1514) && !gso)) {
		fprintf(stderr, "bench: -q must be 1..%d and -s 60..1514\n", MAXQ);
		return 2;
	}
	for (i = 0; i < nq; i++) {
		int r = setup_pair(&pairs[i]);

		if (r) {
			fprintf(stderr, "bench: setup of pair %d on %s failed: %s\n", i, backend, strerror(-r));
			return 1;
		}
		if (pairs[i].dev_thr)
			pthread_setname_np(pairs[i].dev_thr, "vnr-dev");
		if (busy_us && pairs[i].d.fd >= 0) {
			int q;

			for (q = 0; q < 2; q++) {
				struct vhost_vring_state st = { .index = q, .num = busy_us };

				r = h_ioctl(pairs[i].d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &st);
				if (r) {
					fprintf(stderr, "bench: busy-loop timeout on %s: %s\n", backend, strerror(-r));
					return 1;
				}
			}
		}
	}
	if (pin)
		pinned = pin_apart();
	cpu0 = worker_cpu_ns();
	ctxt0 = system_ctxt();
	for (i = 0; i < 2; i++)
		kicks0[i] = __atomic_load_n(&kicks_sent[i], __ATOMIC_RELAXED);
	sw0 = worker_switches();
	insn_mark();
	t0 = h_now_ns();
	end = t0 + (uint64_t)(secs * 1e9);
	if (!strcmp(mode, "lat")) {
		run_lat(&pairs[0], end);
	} else if (!strcmp(mode, "fair")) {
		lost = run_fair(&pairs[0], end);
	} else {
		bool tx = !strcmp(mode, "tx") || !strcmp(mode, "bidir") || !strcmp(mode, "gsotx");
		bool rx = !strcmp(mode, "rx") || !strcmp(mode, "bidir") || !strcmp(mode, "gsorx");

		for (i = 0; i < nq && rx; i++)
			pthread_create(&pairs[i].src_thr, NULL, rx_source, &pairs[i]);
		while (h_now_ns() < end) {
			for (i = 0; i < nq; i++) {
				if (tx)
					tx_fill(&pairs[i]);
				if (rx)
					rx_fill_all(&pairs[i]);
			}
			usleep(50);
		}
	}
	t1 = h_now_ns();
	insn_mark();
	cpu1 = worker_cpu_ns();
	ctxt1 = system_ctxt();
	for (i = 0; i < 2; i++)
		kicks1[i] = __atomic_load_n(&kicks_sent[i], __ATOMIC_RELAXED);
	sw1 = worker_switches();
	/* The RX queues' workers: their own where they have one (all of
	 * them: one per device), else the threads that serve both queues,
	 * whose switches include TX's work. */
	rx_own = sw0.rx_own_threads > 0;
	rx_sw = rx_own ? sw1.rx_own - sw0.rx_own : sw1.shared - sw0.shared;
	stop = 1;
	for (i = 0; i < nq; i++) {
		if (pairs[i].src_thr)
			pthread_join(pairs[i].src_thr, NULL);
		if (pairs[i].dev_thr)
			pthread_join(pairs[i].dev_thr, NULL);
		pk += pairs[i].tx_pkts + pairs[i].rx_pkts;
		by += pairs[i].bytes;
	}
	printf("{\"backend\":\"%s\",\"mode\":\"%s\",\"size\":%zu,\"queues\":%d,\"busy_us\":%u,\"dirty_log\":%d,"
	       "\"packed\":%d,\"ring\":\"%s\",\"in_order\":%d,\"in_order_rings\":%d,\"iotlb\":%d,"
	       "\"iotlb_on\":%d,\"kick_asked\":%d,\"irq_wait\":%d,\"pin\":%d,\"pinned\":%d,\"secs\":%.3f",
	       backend, mode, size, nq, busy_us, dirty_log, packed, packed_rings() ? "packed" : "split",
	       in_order, in_order_rings(), iotlb, iotlb_on(), !kick_always, irq_wait, pin, pinned,
	       (t1 - t0) / 1e9);
	if (!strcmp(mode, "lat")) {
		struct pair *p = &pairs[0];

		qsort(p->lat_ns, p->nlat, sizeof(uint64_t), cmp_u64);
		printf(",\"samples\":%d,\"rtt_us_p50\":%.2f,\"rtt_us_p99\":%.2f", p->nlat,
		       p->nlat ? p->lat_ns[p->nlat / 2] / 1e3 : 0.0,
		       p->nlat ? p->lat_ns[p->nlat * 99 / 100] / 1e3 : 0.0);
		pk = p->nlat * 2;
	} else if (!strcmp(mode, "fair")) {
		struct pair *p = &pairs[0];

		qsort(p->lat_ns, p->nlat, sizeof(uint64_t), cmp_u64);
		printf(",\"tx_pps\":%.0f,\"rx_sent\":%u,\"rx_lost\":%u,\"rx_delay_us_p50\":%.1f,"
		       "\"rx_delay_us_p99\":%.1f,\"rx_delay_us_max\":%.1f",
		       p->tx_pkts / ((end - t0) / 1e9), p->nlat + lost, lost,
		       p->nlat ? p->lat_ns[p->nlat / 2] / 1e3 : 0.0,
		       p->nlat ? p->lat_ns[p->nlat * 99 / 100] / 1e3 : 0.0,
		       p->nlat ? p->lat_ns[p->nlat - 1] / 1e3 : 0.0);
	} else {
		printf(",\"packets\":%llu,\"pps\":%.0f,\"mbps\":%.1f", (unsigned long long)pk,
		       pk / ((t1 - t0) / 1e9), by * 8 / ((t1 - t0) / 1e3));
	}
	printf(",\"worker_cpu_ns_per_pkt\":%.0f,\"ctxt_per_pkt\":%.2f,\"worker_switches_per_pkt\":%.2f"
	       ",\"rx_worker\":\"%s\",\"rx_worker_switches_per_pkt\":%.2f"
	       ",\"rx_kicks_per_pkt\":%.3f,\"tx_kicks_per_pkt\":%.3f}\n",
	       pk ? (double)(cpu1 - cpu0) / pk : 0.0, pk ? (double)(ctxt1 - ctxt0) / pk : 0.0,
	       pk ? (double)(sw1.all - sw0.all) / pk : 0.0, rx_own ? "rx" : "worker",
	       pk ? (double)rx_sw / pk : 0.0,
	       pk ? (double)(kicks1[0] - kicks0[0]) / pk : 0.0, pk ? (double)(kicks1[1] - kicks0[1]) / pk : 0.0);
	for (i = 0; i < nq; i++)
		h_teardown(&pairs[i].d);
	return 0;
}
