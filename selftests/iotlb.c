// SPDX-License-Identifier: GPL-2.0
/*
 * iotlb: the device IOTLB (VIRTIO_F_ACCESS_PLATFORM), as QEMU drives it
 * for a guest with a vIOMMU.
 *
 * With the feature acked, every address the device is given (the rings in
 * VHOST_SET_VRING_ADDR, the descriptors' buffers) is an I/O virtual
 * address. The device translates them through a table that user space
 * fills with messages written to the vhost fd (UPDATE, INVALIDATE); an
 * address it cannot translate makes it stop the queue and post a MISS,
 * which user space reads from the fd (poll() says when) and answers with
 * an UPDATE, whereupon the queue goes on by itself. The memory table is
 * still set, as QEMU sets it.
 *
 * Here guest memory appears to the device at IOVA + its guest-physical
 * address (h_opts.iotlb; harness.h turns every address it hands the device
 * into an IOVA), mapped one 4 KiB page per mapping, the way a vIOMMU's
 * page tables come through. struct viommu plays QEMU: it knows which
 * pages it mapped, and its responder thread answers each miss with the
 * page the device asked for, after checking what it asked.
 *
 * The cases run unchanged on the C driver (VNR_DEV=/dev/vhost-net), which
 * is the reference for every rule checked; the source lines quoted are
 * from drivers/vhost/vhost.c and net.c. Only the fdinfo counter (ours) and
 * batched updates (VHOST_BACKEND_F_IOTLB_BATCH, which the C vhost-net does
 * not offer) skip where they do not apply.
 */
#include "harness.h"
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include "kselftest_harness.h"

/* TCG, and more so the debug kernel, are slow: the harness's 30 s per test
 * would kill honest runs. A hung test still fails, just later. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 600

#define PAGE		4096ULL
#define NPAGES		(H_MEM_SIZE / PAGE)
/*
 * Where guest memory appears to the device: far from any guest-physical
 * address, and above 2^56, so that no IOVA is also a user address of this
 * process on either paging depth (a device that used one as such would
 * fault), yet within a 57-bit vIOMMU's reach.
 */
#define IOVA		0x0123400000000000ULL
/* IOVAs of mappings that are not guest memory the device uses (fillers). */
#define IOVA_FILLER	0x0155500000000000ULL

/* sizeof(struct vhost_msg) == sizeof(struct vhost_msg_v2): what a read
 * returns and what a successful write returns. */
#define MSG_LEN		72
#define BF_V2		(1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2)
#define BF_BATCH	(1ULL << VHOST_BACKEND_F_IOTLB_BATCH)
#define RO		VHOST_ACCESS_RO
#define WO		VHOST_ACCESS_WO
#define RW		VHOST_ACCESS_RW

_Static_assert(sizeof(struct vhost_msg) == MSG_LEN, "struct vhost_msg is 72 bytes");
_Static_assert(sizeof(struct vhost_msg_v2) == MSG_LEN, "struct vhost_msg_v2 is 72 bytes");
_Static_assert(offsetof(struct vhost_msg, iotlb) == 8, "v1 body at 8");
_Static_assert(offsetof(struct vhost_msg_v2, iotlb) == 8, "v2 body at 8");

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1, .iotlb = true, .iova = IOVA,
};

/* A message as read() gives it: the type word, then the v1 padding or
 * the v2 address-space id, then the body. */
union msg {
	struct vhost_msg v1;
	struct vhost_msg_v2 v2;
	uint8_t bytes[256];
};

/* write() of one IOTLB message, `len` bytes of it, in format `fmt`
 * (VHOST_IOTLB_MSG or _V2) with address-space id `asid` (v2's word at
 * offset 4; v1 has padding there): write's result, or -errno. */
static ssize_t msg_write_full(int fd, uint32_t fmt, uint32_t asid, uint8_t type, uint64_t iova,
			      uint64_t size, uint64_t uaddr, uint8_t perm, size_t len)
{
	union msg m;
	ssize_t n;

	memset(&m, 0, sizeof(m));
	m.v2.type = fmt;
	m.v2.asid = asid;
	m.v2.iotlb.iova = iova;
	m.v2.iotlb.size = size;
	m.v2.iotlb.uaddr = uaddr;
	m.v2.iotlb.perm = perm;
	m.v2.iotlb.type = type;
	n = write(fd, &m, len);
	return n < 0 ? -errno : n;
}

static ssize_t msg_write(int fd, uint32_t fmt, uint8_t type, uint64_t iova, uint64_t size,
			 uint64_t uaddr, uint8_t perm)
{
	return msg_write_full(fd, fmt, 0, type, iova, size, uaddr, perm, MSG_LEN);
}

/* An UPDATE of [iova, iova + size) to where guest memory has it (the
 * harness's own GPA-to-HVA knowledge), as QEMU writes it: 0 or -errno. */
static int update(struct h_dev *d, uint64_t iova, uint64_t size, uint8_t perm)
{
	ssize_t n = msg_write(d->fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, iova, size,
			      (uint64_t)(uintptr_t)h_ptr(d, iova), perm);

	return n == MSG_LEN ? 0 : n < 0 ? (int)n : -EIO;
}

static int invalidate(struct h_dev *d, uint64_t iova, uint64_t size)
{
	ssize_t n = msg_write(d->fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_INVALIDATE, iova, size, 0, 0);

	return n == MSG_LEN ? 0 : n < 0 ? (int)n : -EIO;
}

/* read() of one message into m: its result, or -errno. */
static ssize_t msg_read(int fd, union msg *m, size_t len)
{
	ssize_t n;

	memset(m, 0xcc, sizeof(*m));
	n = read(fd, m, len);
	return n < 0 ? -errno : n;
}

/* Whether the vhost fd has a message to read within timeout_ms. */
static bool readable(struct h_dev *d, int timeout_ms)
{
	struct pollfd p = { .fd = d->fd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/*
 * The C driver of a kernel before 7.3 follows other rules (measured on
 * Debian's 7.2.12): it posts a miss at each attempt, with no
 * vq->iotlb_miss to hold a second one back until the first is answered,
 * and it takes an INVALIDATE of size 0. These cases describe 7.3's rules,
 * which vhost-net-rs follows on every kernel: on an older C driver the
 * whole program skips, saying so, rather than fail there.
 */
__attribute__((constructor)) static void c_before_7_3(void)
{
	struct utsname u;
	int major, minor;

	if (!h_on_c_driver() || uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return;
	if (major < 7 || (major == 7 && minor < 3)) {
		printf("TAP version 13\n1..0 # SKIP the C driver of %s predates 7.3's IOTLB rules\n", u.release);
		exit(KSFT_SKIP);
	}
}

/* Waits up to timeout_ms for a message and reads it: 0, -ETIMEDOUT, or
 * -errno (-EIO for a read of another length than 72). */
static int miss_wait(struct h_dev *d, union msg *m, int timeout_ms)
{
	ssize_t n;

	if (!readable(d, timeout_ms))
		return -ETIMEDOUT;
	n = msg_read(d->fd, m, sizeof(*m));
	return n == MSG_LEN ? 0 : n < 0 ? (int)n : -EIO;
}

/* The body of a message read in either format. */
static const struct vhost_iotlb_msg *body(const union msg *m)
{
	return &m->v2.iotlb;	/* same offset in both formats */
}

/* Guest memory the device uses, as device addresses (IOVAs). */
static uint64_t ring_iova(struct h_dev *d, int q)
{
	return h_gpa(d, d->vq[q].vr.desc);
}

static uint64_t ring_len(struct h_dev *d, int q)
{
	return vring_size(d->vq[q].num, 4096);
}

static uint64_t used_iova(struct h_dev *d, int q)
{
	return h_gpa(d, d->vq[q].vr.used);
}

/* The used ring with avail_event at its end (EVENT_IDX). */
static uint64_t used_len(struct h_dev *d, int q)
{
	return 6 + sizeof(struct vring_used_elem) * d->vq[q].num;
}

static uint64_t bufs_iova(struct h_dev *d, int q)
{
	return d->vq[q].buf_base;
}

static uint64_t bufs_len(struct h_dev *d, int q)
{
	return (uint64_t)d->vq[q].num * d->vq[q].buf_size;
}

static bool within(uint64_t a, uint64_t base, uint64_t len)
{
	return a >= base && a - base < len;
}

/*
 * The guest's IOMMU, as QEMU holds it: which pages of guest memory it
 * mapped for the device (one IOTLB mapping each), and a responder thread
 * that answers the device's misses. A guest maps its pages as a Linux
 * guest's DMA API does with a vIOMMU: the rings both ways, TX buffers for
 * the device to read only, RX buffers for it to write only.
 */
struct viommu {
	struct h_dev *d;
	pthread_mutex_t lock;	/* `mapped`, with the writes that change what it says */
	uint8_t mapped[NPAGES / 8];
	pthread_t thr;
	bool running;
	volatile bool stop;
	unsigned long served[2];	/* misses answered, per queue */
	unsigned long bad;		/* misses with a wrong field, or failed writes */
	unsigned long spurious;		/* misses for a page that was mapped */
	char why[256];			/* what the first of those was */
};

static void vi_init(struct viommu *vi, struct h_dev *d)
{
	memset(vi, 0, sizeof(*vi));
	vi->d = d;
	pthread_mutex_init(&vi->lock, NULL);
}

static bool vi_is_mapped(struct viommu *vi, uint64_t page)
{
	return vi->mapped[page / 8] & (1u << (page % 8));
}

static void vi_mark(struct viommu *vi, uint64_t page, bool on)
{
	if (on)
		vi->mapped[page / 8] |= 1u << (page % 8);
	else
		vi->mapped[page / 8] &= ~(1u << (page % 8));
}

/*
 * What the device should ask for at `iova`, and the permissions the guest
 * maps its page with; the queue it belongs to in *q. 0 for an address the
 * device has no business with. Ring pages hold nothing else (rings are
 * page-aligned, H_RING_OFF(q) apart).
 */
static uint8_t want_access(struct h_dev *d, uint64_t iova, int *q, uint8_t *map_perm)
{
	for (*q = 0; *q < 2; (*q)++) {
		if (within(iova, used_iova(d, *q), used_len(d, *q))) {
			*map_perm = RW;
			return WO;
		}
		if (within(iova, ring_iova(d, *q), ring_len(d, *q))) {
			*map_perm = RW;
			return RO;	/* descriptors, avail ring, used_event */
		}
		if (within(iova, bufs_iova(d, *q), bufs_len(d, *q))) {
			*map_perm = *q == 0 ? WO : RO;
			return *map_perm;
		}
	}
	return 0;
}

/* Maps the page of guest memory at `iova` (one mapping) with the
 * permissions its contents get: 0 or -errno. */
static int vi_map(struct viommu *vi, uint64_t iova)
{
	uint64_t page = (iova - vi->d->iova) / PAGE;
	uint8_t perm;
	int q, r;

	if (page >= NPAGES || !want_access(vi->d, iova, &q, &perm))
		return -EINVAL;
	pthread_mutex_lock(&vi->lock);
	r = update(vi->d, vi->d->iova + page * PAGE, PAGE, perm);
	if (!r)
		vi_mark(vi, page, true);
	pthread_mutex_unlock(&vi->lock);
	return r;
}

/* INVALIDATE [iova, iova + size): every page it overlaps is unmapped. The
 * pages are marked first, so that a miss the device posts meanwhile never
 * finds its page still marked. */
static int vi_unmap(struct viommu *vi, uint64_t iova, uint64_t size)
{
	uint64_t p, first = (iova - vi->d->iova) / PAGE, last = (iova + size - 1 - vi->d->iova) / PAGE;
	int r;

	pthread_mutex_lock(&vi->lock);
	for (p = first; p <= last && p < NPAGES; p++)
		vi_mark(vi, p, false);
	r = invalidate(vi->d, iova, size);
	pthread_mutex_unlock(&vi->lock);
	return r;
}

/* Maps every page of [iova, iova + len), one mapping each, in order. */
static int vi_map_range(struct viommu *vi, uint64_t iova, uint64_t len)
{
	uint64_t a;
	int r;

	for (a = iova & ~(PAGE - 1); a < iova + len; a += PAGE)
		if ((r = vi_map(vi, a)))
			return r;
	return 0;
}

static void vi_fail(struct viommu *vi, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void vi_fail(struct viommu *vi, const char *fmt, ...)
{
	va_list ap;

	if (vi->bad + vi->spurious == 0) {
		va_start(ap, fmt);
		vsnprintf(vi->why, sizeof(vi->why), fmt, ap);
		va_end(ap);
	}
}

/* One miss read by the responder: checked, and answered with its page. */
static void vi_answer(struct viommu *vi, const union msg *m)
{
	struct h_dev *d = vi->d;
	const struct vhost_iotlb_msg *b = body(m);
	uint8_t want, perm;
	uint64_t page;
	int q, r;

	if (m->v2.type != VHOST_IOTLB_MSG_V2 || b->type != VHOST_IOTLB_MISS) {
		vi_fail(vi, "message with type word %u, iotlb type %u (want %u, MISS)", m->v2.type,
			b->type, VHOST_IOTLB_MSG_V2);
		vi->bad++;
		return;
	}
	want = want_access(d, b->iova, &q, &perm);
	if (!want || b->perm != want) {
		vi_fail(vi, "miss at %#llx with perm %u (the guest's memory there wants %u)",
			(unsigned long long)b->iova, b->perm, want);
		vi->bad++;
		return;
	}
	page = (b->iova - d->iova) / PAGE;
	pthread_mutex_lock(&vi->lock);
	if (vi_is_mapped(vi, page)) {
		vi_fail(vi, "miss at %#llx, whose page is mapped", (unsigned long long)b->iova);
		vi->spurious++;
	}
	/* Answered all the same, as QEMU would: the queue waits for it. */
	r = update(d, d->iova + page * PAGE, PAGE, perm);
	if (!r)
		vi_mark(vi, page, true);
	pthread_mutex_unlock(&vi->lock);
	if (r) {
		vi_fail(vi, "UPDATE of %#llx: %s", (unsigned long long)b->iova, strerror(-r));
		vi->bad++;
		return;
	}
	vi->served[q]++;
}

/* The responder: QEMU's vhost_iotlb_read loop, on poll(). Runs until
 * told to stop and nothing is left to read. */
static void *vi_fn(void *arg)
{
	struct viommu *vi = arg;
	struct pollfd p = { .fd = vi->d->fd, .events = POLLIN };
	union msg m;

	for (;;) {
		ssize_t n;
		int r = poll(&p, 1, 20);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			vi_fail(vi, "poll: %s", strerror(errno));
			vi->bad++;
			return NULL;
		}
		if (r == 0) {
			if (vi->stop)
				return NULL;
			continue;
		}
		n = msg_read(vi->d->fd, &m, sizeof(m));
		if (n == -EAGAIN)
			continue;	/* POLLIN with nothing to read: poll again */
		if (n != MSG_LEN) {
			vi_fail(vi, "read of a miss gave %zd", n);
			vi->bad++;
			return NULL;
		}
		vi_answer(vi, &m);
	}
}

/* The responder reads without blocking (O_NONBLOCK on the vhost fd, which
 * only read() looks at), so that it can stop. */
static int vi_start(struct viommu *vi)
{
	int fl = fcntl(vi->d->fd, F_GETFL);

	if (fl < 0 || fcntl(vi->d->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	vi->stop = false;
	if (pthread_create(&vi->thr, NULL, vi_fn, vi))
		return -EAGAIN;
	vi->running = true;
	return 0;
}

static unsigned long vi_stop(struct viommu *vi)
{
	int fl = fcntl(vi->d->fd, F_GETFL);

	if (vi->running) {
		vi->stop = true;
		pthread_join(vi->thr, NULL);
		vi->running = false;
	}
	if (fl >= 0)
		fcntl(vi->d->fd, F_SETFL, fl & ~O_NONBLOCK);
	return vi->served[0] + vi->served[1];
}

/* Maps both queues' rings in the vIOMMU: 0 or -errno. */
static int map_rings(struct viommu *vi, struct h_dev *d)
{
	int q, r;

	for (q = 0; q < 2; q++)
		if ((r = vi_map_range(vi, ring_iova(d, q), ring_len(d, q))))
			return r;
	return 0;
}

/* VHOST_NET_SET_BACKEND of both queues, d's tap: 0 or -errno. */
static int set_backends(struct h_dev *d)
{
	int q, r;

	for (q = 0; q < 2; q++) {
		struct vhost_vring_file b = { .index = q, .fd = d->tap };

		if ((r = h_ioctl(d->fd, VHOST_NET_SET_BACKEND, &b)))
			return r;
	}
	return 0;
}

/* QEMU's vhost_dev_start with a vIOMMU: the used rings are mapped
 * (vhost_device_iotlb_miss(used_phys)) before the backends are set, which
 * C needs (vhost_vq_init_access writes used->flags and reads used->idx). */
static int start_with_used_rings(struct viommu *vi)
{
	int q, r;

	for (q = 0; q < 2; q++)
		if ((r = vi_map_range(vi, used_iova(vi->d, q), used_len(vi->d, q))))
			return r;
	return set_backends(vi->d);
}

/* Every page of the rings and buffers of both queues, mapped in order. */
static int map_everything(struct viommu *vi)
{
	int q, r;

	for (q = 0; q < 2; q++) {
		if ((r = vi_map_range(vi, ring_iova(vi->d, q), ring_len(vi->d, q))) ||
		    (r = vi_map_range(vi, bufs_iova(vi->d, q), bufs_len(vi->d, q))))
			return r;
	}
	return 0;
}

/* Puts one TX frame (seq, len bytes after the header) in the buffer at
 * device address `buf`, in the next ring slot, and kicks. */
static void tx_post_at(struct h_dev *d, uint64_t buf, uint32_t seq, size_t len)
{
	struct h_vq *v = &d->vq[1];
	uint16_t head = v->avail_idx % v->num;
	uint8_t *p = h_ptr(d, buf);

	memset(p, 0, d->hdr_len);
	h_frame(p + d->hdr_len, seq, len);
	v->vr.desc[head] = (struct vring_desc){ buf, d->hdr_len + len, 0, 0 };
	h_publish(d, 1, head);
	h_kick(d, 1);
}

/* Whether TX frame `seq` of len bytes shows up on the packet socket within
 * timeout_ms: 0, -ETIMEDOUT, or -EBADMSG for another frame. */
static int tx_seen(struct h_dev *d, uint32_t seq, size_t len, int timeout_ms)
{
	uint8_t buf[2048];
	ssize_t n = h_pkt_recv(d, buf, sizeof(buf), timeout_ms);

	if (n < 0)
		return n;
	return h_check_frame(buf, n, len) == seq ? 0 : -EBADMSG;
}

/* Takes every used entry of queue q (after waiting for n of them). */
static int take_used(struct h_dev *d, int q, uint16_t n)
{
	int r = h_wait_used(d, q, n, H_WAIT_MS);

	while (h_used_pending(d, q))
		h_take_used(d, q);
	return r;
}

static uint64_t tv_us(struct timeval tv)
{
	return (uint64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* CPU time (µs) this process's other threads used while this one slept
 * ms milliseconds. The vhost workers of both drivers are vhost_tasks,
 * threads of their owner, so this is what a worker spinning on a queue
 * that waits for an UPDATE would burn. */
static uint64_t workers_cpu_us(int ms)
{
	struct rusage p0, t0, p1, t1;

	getrusage(RUSAGE_SELF, &p0);
	getrusage(RUSAGE_THREAD, &t0);
	usleep(ms * 1000);
	getrusage(RUSAGE_SELF, &p1);
	getrusage(RUSAGE_THREAD, &t1);
	int64_t all = (int64_t)(tv_us(p1.ru_utime) + tv_us(p1.ru_stime)) -
		      (int64_t)(tv_us(p0.ru_utime) + tv_us(p0.ru_stime));
	int64_t mine = (int64_t)(tv_us(t1.ru_utime) + tv_us(t1.ru_stime)) -
		       (int64_t)(tv_us(t0.ru_utime) + tv_us(t0.ru_stime));

	/* The kernel scales sampled CPU time per thread and per process
	 * separately: the difference may come out a little below zero. */
	return all > mine ? (uint64_t)(all - mine) : 0;
}

/* The device's fdinfo counter `name` ("iotlb_misses=") on queue q's line
 * only; ~0 if that line does not have it. (h_fdinfo_u64 looks past the
 * line, and would read vq1's counter for a vq0 line without one.) */
static uint64_t vq_counter(struct h_dev *d, int q, const char *name)
{
	char buf[4096], tag[8], *line, *end, *p;

	snprintf(tag, sizeof(tag), "vq%d:", q);
	if (!h_fdinfo_read(d, buf, sizeof(buf)) || !(line = strstr(buf, tag)))
		return ~0ULL;
	end = strchr(line, '\n');
	if (end)
		*end = 0;
	p = strstr(line, name);
	return p ? strtoull(p + strlen(name), NULL, 10) : ~0ULL;
}

/* ------------------------------------------------------------------------
 * 1. The ABI: features, message formats, and every error of read() and
 * write() on the vhost fd.
 */

TEST(features_offer_the_iotlb)
{
	int fd = open(h_dev_path(), O_RDWR);
	uint64_t f = 0, bf = 0, bit;
	struct h_dev d;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, h_ioctl(fd, VHOST_GET_FEATURES, &f));
	EXPECT_TRUE(f & (1ULL << VIRTIO_F_ACCESS_PLATFORM)) TH_LOG("features %#llx", (unsigned long long)f);
	/* net.c: VHOST_NET_BACKEND_FEATURES; no owner needed. */
	ASSERT_EQ(0, h_ioctl(fd, VHOST_GET_BACKEND_FEATURES, &bf));
	EXPECT_TRUE(bf & BF_V2) TH_LOG("backend features %#llx", (unsigned long long)bf);
	TH_LOG("backend features %#llx: IOTLB_BATCH %s", (unsigned long long)bf,
	       bf & BF_BATCH ? "offered" : "not offered");
	/* An unoffered backend feature: EOPNOTSUPP (net.c,
	 * VHOST_SET_BACKEND_FEATURES: features & ~VHOST_NET_BACKEND_FEATURES). */
	for (bit = 0; bit < 64 && (bf & (1ULL << bit)); bit++)
		;
	bit = 1ULL << bit;
	EXPECT_EQ(-EOPNOTSUPP, h_ioctl(fd, VHOST_SET_BACKEND_FEATURES, &bit));
	EXPECT_EQ(0, h_ioctl(fd, VHOST_SET_BACKEND_FEATURES, &bf));
	close(fd);

	/* Batching hints (types 5 and 6) are messages only where
	 * VHOST_BACKEND_F_IOTLB_BATCH was acked; otherwise they are unknown
	 * types, EFAULT (vhost_process_iotlb_msg's default case, turned into
	 * -EFAULT by vhost_chr_write_iter). h_setup acks MSG_V2 only. */
	ASSERT_EQ(0, h_setup(&d, &opts));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_BATCH_BEGIN, 0, 0, 0, 0));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_BATCH_END, 0, 0, 0, 0));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG, VHOST_IOTLB_BATCH_BEGIN, 0, 0, 0, 0));
	h_teardown(&d);
}

/* Every way a write() is refused, as vhost_chr_write_iter and
 * vhost_process_iotlb_msg refuse it, and what one that is taken returns. */
TEST(write_rules)
{
	uint64_t page, uaddr, f;
	struct h_dev d;
	int fd;

	/* No IOTLB (ACCESS_PLATFORM never acked): a well-formed UPDATE or
	 * INVALIDATE is EFAULT (`if (!dev->iotlb) ret = -EFAULT`), with or
	 * without an owner. */
	fd = open(h_dev_path(), O_RDWR);
	ASSERT_LE(0, fd);
	uaddr = (uint64_t)(uintptr_t)&f;
	EXPECT_EQ(-EFAULT, msg_write(fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, 0, 8, uaddr, RO));
	EXPECT_EQ(-EFAULT, msg_write(fd, VHOST_IOTLB_MSG, VHOST_IOTLB_INVALIDATE, 0, 8, 0, 0));
	ASSERT_EQ(0, h_ioctl(fd, VHOST_SET_OWNER, NULL));
	f = 1ULL << VIRTIO_F_VERSION_1;
	ASSERT_EQ(0, h_ioctl(fd, VHOST_SET_FEATURES, &f));
	EXPECT_EQ(-EFAULT, msg_write(fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, 0, 8, uaddr, RO));
	EXPECT_EQ(-EFAULT, msg_write(fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_INVALIDATE, 0, 8, 0, 0));
	/* Framing errors come first, IOTLB or not: EINVAL. */
	EXPECT_EQ(-EINVAL, msg_write(fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, 0, 0, uaddr, RO));
	close(fd);

	ASSERT_EQ(0, h_setup(&d, &opts));
	page = bufs_iova(&d, 1);
	uaddr = (uint64_t)(uintptr_t)h_ptr(&d, page);
	/* Taken: 72 bytes back, in either format, whatever the length past
	 * the 40 bytes read (type, pad or asid, body): vhost_chr_write_iter
	 * returns sizeof(struct vhost_msg) or sizeof(struct vhost_msg_v2). */
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG, VHOST_IOTLB_UPDATE, page, PAGE, uaddr, RO));
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, PAGE, uaddr, RO));
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG, VHOST_IOTLB_INVALIDATE, page, PAGE, 0, 0));
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_INVALIDATE, page, PAGE, 0, 0));
	EXPECT_EQ(MSG_LEN, msg_write_full(d.fd, VHOST_IOTLB_MSG, 0, VHOST_IOTLB_UPDATE, page, PAGE, uaddr,
					  RO, 40));
	EXPECT_EQ(MSG_LEN, msg_write_full(d.fd, VHOST_IOTLB_MSG_V2, 0, VHOST_IOTLB_INVALIDATE, page, PAGE,
					  0, 0, 200));
	/* The v2 address-space id is not read: vhost-net never offers
	 * VHOST_BACKEND_F_IOTLB_ASID, so it skips the word (offset = 4). */
	EXPECT_EQ(MSG_LEN, msg_write_full(d.fd, VHOST_IOTLB_MSG_V2, 7, VHOST_IOTLB_UPDATE, page, PAGE, uaddr,
					  RO, MSG_LEN));
	/* Short writes: less than the type word, or than the body. */
	EXPECT_EQ(-EINVAL, msg_write_full(d.fd, VHOST_IOTLB_MSG_V2, 0, VHOST_IOTLB_UPDATE, page, PAGE, uaddr,
					  RO, 3));
	EXPECT_EQ(-EINVAL, msg_write_full(d.fd, VHOST_IOTLB_MSG, 0, VHOST_IOTLB_UPDATE, page, PAGE, uaddr,
					  RO, 8));
	EXPECT_EQ(-EINVAL, msg_write_full(d.fd, VHOST_IOTLB_MSG, 0, VHOST_IOTLB_UPDATE, page, PAGE, uaddr,
					  RO, 39));
	EXPECT_EQ(-EINVAL, msg_write_full(d.fd, VHOST_IOTLB_MSG_V2, 0, VHOST_IOTLB_UPDATE, page, PAGE, uaddr,
					  RO, 39));
	/* Unknown type words. */
	EXPECT_EQ(-EINVAL, msg_write(d.fd, 0, VHOST_IOTLB_UPDATE, page, PAGE, uaddr, RO));
	EXPECT_EQ(-EINVAL, msg_write(d.fd, 3, VHOST_IOTLB_UPDATE, page, PAGE, uaddr, RO));
	/* An empty UPDATE is a framing error (EINVAL); an empty INVALIDATE
	 * is refused by vhost_process_iotlb_msg (-EINVAL there, EFAULT to the
	 * writer). */
	EXPECT_EQ(-EINVAL, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, 0, uaddr, RO));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_INVALIDATE, page, 0, 0, 0));
	/* Message types user space does not send: a MISS (the device's),
	 * ACCESS_FAIL, anything else. */
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_MISS, page, PAGE, uaddr, RO));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_ACCESS_FAIL, page, PAGE, uaddr, RO));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG, 99, page, PAGE, uaddr, RO));
	/* An UPDATE onto memory that is not the owner's to give: kernel
	 * addresses (umem_access_ok), for reading, writing or both; a user
	 * range that wraps (vhost_overflow); an IOVA range that wraps
	 * (vhost_iotlb_add_range: last < start). */
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, PAGE,
				     0xffff800000000000ULL, RO));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, PAGE,
				     0xffff800000000000ULL, WO));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG, VHOST_IOTLB_UPDATE, page, PAGE,
				     0xffff800000000000ULL, RW));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, PAGE,
				     ~0ULL - 10, RO));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, ~0ULL - PAGE + 2, PAGE,
				     uaddr, RO));
	/* ACCESS_PLATFORM off again: the IOTLB is gone, and with it UPDATE. */
	f = d.features & ~(1ULL << VIRTIO_F_ACCESS_PLATFORM);
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &f));
	EXPECT_EQ(-EFAULT, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, PAGE, uaddr, RO));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &d.features));
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, page, PAGE, uaddr, RO));
	h_teardown(&d);
}

static void on_signal(int sig)
{
}

struct blocked_reader {
	int fd;
	ssize_t r;
	volatile bool done;
};

static void *blocked_read(void *arg)
{
	struct blocked_reader *b = arg;
	union msg m;

	b->r = msg_read(b->fd, &m, sizeof(m));
	b->done = true;
	return NULL;
}

/* The errors of read(), as vhost_chr_read_iter gives them. */
TEST(read_rules)
{
	struct sigaction sa = { .sa_handler = on_signal };	/* no SA_RESTART */
	struct blocked_reader b = { 0 };
	union msg m;
	pthread_t thr;
	struct h_dev d;
	uint64_t f;
	int fd, i;

	fd = open(h_dev_path(), O_RDWR);
	ASSERT_LE(0, fd);
	/* A buffer that cannot hold a message: 0, before anything else. */
	EXPECT_EQ(0, msg_read(fd, &m, MSG_LEN - 1));
	EXPECT_EQ(0, msg_read(fd, &m, 1));
	/* Blocking, with no IOTLB to ever post a miss: EBADFD. */
	EXPECT_EQ(-EBADFD, msg_read(fd, &m, MSG_LEN));
	/* Non-blocking with nothing to read: EAGAIN, IOTLB or not. */
	ASSERT_EQ(0, fcntl(fd, F_SETFL, O_NONBLOCK));
	EXPECT_EQ(-EAGAIN, msg_read(fd, &m, MSG_LEN));
	close(fd);

	ASSERT_EQ(0, h_setup(&d, &opts));
	ASSERT_EQ(0, fcntl(d.fd, F_SETFL, O_NONBLOCK));
	EXPECT_EQ(-EAGAIN, msg_read(d.fd, &m, MSG_LEN));
	EXPECT_FALSE(readable(&d, 0));
	ASSERT_EQ(0, fcntl(d.fd, F_SETFL, 0));
	/* A reader blocked on an IOTLB with nothing to say is let go when
	 * the IOTLB goes away (vhost_clear_device_iotlb wakes dev->wait):
	 * EBADFD. The signal is only there to end the test if it is not. */
	ASSERT_EQ(0, sigaction(SIGUSR1, &sa, NULL));
	b.fd = d.fd;
	ASSERT_EQ(0, pthread_create(&thr, NULL, blocked_read, &b));
	usleep(300 * 1000);
	EXPECT_FALSE(b.done) TH_LOG("a blocking read with the IOTLB on returned %zd", b.r);
	f = d.features & ~(1ULL << VIRTIO_F_ACCESS_PLATFORM);
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &f));
	for (i = 0; i < 500 && !b.done; i++)
		usleep(10 * 1000);
	EXPECT_TRUE(b.done) TH_LOG("a reader blocked on the IOTLB stayed blocked after it went away");
	if (!b.done)
		pthread_kill(thr, SIGUSR1);
	pthread_join(thr, NULL);
	EXPECT_EQ(-EBADFD, b.r);
	h_teardown(&d);
}

/*
 * A miss as read() gives it: the format acked with
 * VHOST_SET_BACKEND_FEATURES (v2 with IOTLB_MSG_V2, v1 without), type
 * MISS, the first address the device could not translate, the access it
 * needed; the rest zero (vhost_new_msg: kzalloc). A read too short for it
 * leaves it there; poll and epoll say POLLIN while it is unread.
 */
TEST(miss_message_format)
{
	uint64_t buf = 0, bf = 0;
	struct epoll_event ev = { .events = EPOLLIN };
	struct viommu vi;
	struct h_dev d;
	union msg m;
	int ep;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_rings(&vi, &d));
	ASSERT_EQ(0, set_backends(&d));
	ep = epoll_create1(0);
	ASSERT_LE(0, ep);
	ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, d.fd, &ev));
	EXPECT_EQ(0, epoll_wait(ep, &ev, 1, 0));

	/* v2: a TX buffer in the middle of an unmapped page. */
	buf = bufs_iova(&d, 1) + PAGE + 512;
	tx_post_at(&d, buf, 1, 200);
	ASSERT_EQ(1, epoll_wait(ep, &ev, 1, H_WAIT_MS)) TH_LOG("no miss for an unmapped TX buffer");
	EXPECT_TRUE(ev.events & EPOLLIN);
	EXPECT_TRUE(readable(&d, 0));
	EXPECT_EQ(0, msg_read(d.fd, &m, MSG_LEN - 1));
	EXPECT_TRUE(readable(&d, 0)) TH_LOG("a short read lost the message");
	ASSERT_EQ(MSG_LEN, msg_read(d.fd, &m, sizeof(m)));
	EXPECT_EQ(VHOST_IOTLB_MSG_V2, m.v2.type);
	EXPECT_EQ(0, m.v2.asid);
	EXPECT_EQ(VHOST_IOTLB_MISS, body(&m)->type);
	EXPECT_EQ(buf, body(&m)->iova);
	EXPECT_EQ(RO, body(&m)->perm);
	EXPECT_EQ(0, body(&m)->size);
	EXPECT_EQ(0, body(&m)->uaddr);
	/* Read: no longer readable. */
	EXPECT_EQ(0, epoll_wait(ep, &ev, 1, 0));
	EXPECT_FALSE(readable(&d, 0));
	ASSERT_EQ(0, vi_map(&vi, buf));
	EXPECT_EQ(0, tx_seen(&d, 1, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* v1: MSG_V2 no longer acked. The device's format is the one acked
	 * when it posts the miss (vhost_iotlb_miss); user space may still
	 * write either. */
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_BACKEND_FEATURES, &bf));
	buf = bufs_iova(&d, 1) + 3 * PAGE;
	tx_post_at(&d, buf, 2, 200);
	ASSERT_EQ(1, epoll_wait(ep, &ev, 1, H_WAIT_MS)) TH_LOG("no miss for an unmapped TX buffer");
	ASSERT_EQ(MSG_LEN, msg_read(d.fd, &m, 200));
	EXPECT_EQ(VHOST_IOTLB_MSG, m.v1.type);
	EXPECT_EQ(0, m.v2.asid) TH_LOG("v1 padding not zero");
	EXPECT_EQ(VHOST_IOTLB_MISS, m.v1.iotlb.type);
	EXPECT_EQ(buf, m.v1.iotlb.iova);
	EXPECT_EQ(RO, m.v1.iotlb.perm);
	EXPECT_EQ(0, m.v1.iotlb.size);
	EXPECT_EQ(0, m.v1.iotlb.uaddr);
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG, VHOST_IOTLB_UPDATE, buf, PAGE,
				     (uint64_t)(uintptr_t)h_ptr(&d, buf), RO));
	EXPECT_EQ(0, tx_seen(&d, 2, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* An RX buffer: the device writes, so it asks for WO. */
	bf = BF_V2;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_BACKEND_FEATURES, &bf));
	h_rx_fill(&d, 1);
	buf = h_buf(&d, 0, 0);
	{
		uint8_t frame[200];

		h_frame(frame, 3, sizeof(frame));
		ASSERT_EQ(sizeof(frame), send(d.pkt, frame, sizeof(frame), 0));
	}
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("no miss for an unmapped RX buffer");
	EXPECT_EQ(VHOST_IOTLB_MSG_V2, m.v2.type);
	EXPECT_EQ(VHOST_IOTLB_MISS, body(&m)->type);
	EXPECT_EQ(buf, body(&m)->iova);
	EXPECT_EQ(WO, body(&m)->perm);
	close(ep);
	h_teardown(&d);
}

/* ------------------------------------------------------------------------
 * 2. The device's side: what needs a mapping, and when it asks.
 */

/*
 * VHOST_NET_SET_BACKEND with the IOTLB on reaches the used ring through
 * it (vhost_vq_init_access: used->flags, used->idx), so the used ring
 * must be mapped first: EFAULT otherwise. QEMU maps it before
 * (vhost_dev_start). C posts a miss for it on the way (translate_desc);
 * whatever is posted must be about the used ring.
 */
TEST(set_backend_needs_the_used_ring_mapped)
{
	struct viommu vi;
	struct h_dev d;
	union msg m;
	int q;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	for (q = 0; q < 2; q++) {
		uint64_t a;

		/* Everything but the used ring. */
		for (a = ring_iova(&d, q); a < used_iova(&d, q); a += PAGE)
			ASSERT_EQ(0, vi_map(&vi, a));
		ASSERT_EQ(0, vi_map_range(&vi, bufs_iova(&d, q), bufs_len(&d, q)));
	}
	for (q = 0; q < 2; q++) {
		struct vhost_vring_file b = { .index = q, .fd = d.tap };

		EXPECT_EQ(-EFAULT, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b)) TH_LOG("queue %d", q);
	}
	ASSERT_EQ(0, fcntl(d.fd, F_SETFL, O_NONBLOCK));
	while (msg_read(d.fd, &m, sizeof(m)) == MSG_LEN) {
		TH_LOG("posted: miss at %#llx, perm %u", (unsigned long long)body(&m)->iova, body(&m)->perm);
		EXPECT_EQ(VHOST_IOTLB_MISS, body(&m)->type);
		EXPECT_TRUE(within(body(&m)->iova, used_iova(&d, 0), used_len(&d, 0)) ||
			    within(body(&m)->iova, used_iova(&d, 1), used_len(&d, 1)));
	}
	ASSERT_EQ(0, fcntl(d.fd, F_SETFL, 0));
	for (q = 0; q < 2; q++)
		ASSERT_EQ(0, vi_map_range(&vi, used_iova(&d, q), used_len(&d, q)));
	ASSERT_EQ(0, set_backends(&d));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 1));
	EXPECT_EQ(0, h_rx_one(&d, 2, false));
	h_teardown(&d);
}

/*
 * A queue that misses stops where it is: nothing sent, nothing used, its
 * worker idle, one miss posted and no more while it is outstanding. The
 * UPDATE that covers it restarts the queue by itself, no kick needed
 * (vhost_iotlb_notify_vq queues the vq's work). The miss names the first
 * address left untranslated: a buffer's own address, or the page boundary
 * inside it where its first page is mapped and its second is not. An
 * INVALIDATE, even of one byte, unmaps the whole mapping it touches before
 * write() returns.
 */
TEST(miss_stops_the_queue_and_update_restarts_it)
{
	struct viommu vi;
	struct h_dev d;
	uint64_t buf, cpu;
	uint16_t used;
	union msg m;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_rings(&vi, &d));
	ASSERT_EQ(0, set_backends(&d));

	buf = bufs_iova(&d, 1) + PAGE + 512;
	used = d.vq[1].vr.used->idx;
	tx_post_at(&d, buf, 1, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("no miss for an unmapped TX buffer");
	EXPECT_EQ(buf, body(&m)->iova);
	EXPECT_EQ(RO, body(&m)->perm);
	/* Stopped: nothing sent or used, and kicking it again changes
	 * nothing: no second miss, and no worker time to speak of. */
	EXPECT_EQ(-ETIMEDOUT, tx_seen(&d, 1, 200, 300));
	h_kick(&d, 1);
	cpu = workers_cpu_us(1000);
	TH_LOG("workers used %llu us of CPU in the second the queue waited", (unsigned long long)cpu);
	EXPECT_GT(200000, cpu) TH_LOG("a worker spins while its queue waits for an UPDATE");
	EXPECT_FALSE(readable(&d, 0)) TH_LOG("a second miss while the first is outstanding");
	EXPECT_EQ(used, d.vq[1].vr.used->idx);
	/* The UPDATE alone restarts it. */
	ASSERT_EQ(0, vi_map(&vi, buf));
	EXPECT_EQ(0, tx_seen(&d, 1, 200, H_WAIT_MS)) TH_LOG("the UPDATE did not restart the queue");
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* A buffer across a page boundary, its first page mapped: the miss
	 * is at the boundary. */
	buf = bufs_iova(&d, 1) + 4 * PAGE - 100;
	ASSERT_EQ(0, vi_map(&vi, buf));
	tx_post_at(&d, buf, 2, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS));
	EXPECT_EQ(bufs_iova(&d, 1) + 4 * PAGE, body(&m)->iova);
	EXPECT_EQ(RO, body(&m)->perm);
	ASSERT_EQ(0, vi_map(&vi, body(&m)->iova));
	EXPECT_EQ(0, tx_seen(&d, 2, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* An INVALIDATE of 200 bytes across the boundary takes both page
	 * mappings it overlaps, whole: the same buffer misses at its start,
	 * then, once that page is back, at the boundary again. */
	ASSERT_EQ(0, vi_unmap(&vi, bufs_iova(&d, 1) + 4 * PAGE - 100, 200));
	tx_post_at(&d, buf, 3, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS));
	EXPECT_EQ(buf, body(&m)->iova);
	ASSERT_EQ(0, vi_map(&vi, body(&m)->iova));
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("the second mapping outlived the INVALIDATE");
	EXPECT_EQ(bufs_iova(&d, 1) + 4 * PAGE, body(&m)->iova);
	ASSERT_EQ(0, vi_map(&vi, body(&m)->iova));
	EXPECT_EQ(0, tx_seen(&d, 3, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* One byte of the first buffer's page invalidated: its mapping is
	 * gone by the time write() returns, so the frame posted right after
	 * misses rather than going out through a stale translation. */
	buf = bufs_iova(&d, 1) + PAGE + 512;
	ASSERT_EQ(0, vi_unmap(&vi, bufs_iova(&d, 1) + PAGE + 4000, 1));
	tx_post_at(&d, buf, 4, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("INVALIDATE left the mapping in place");
	EXPECT_EQ(buf, body(&m)->iova);
	EXPECT_EQ(-ETIMEDOUT, tx_seen(&d, 4, 200, 200));
	ASSERT_EQ(0, vi_map(&vi, buf));
	EXPECT_EQ(0, tx_seen(&d, 4, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* RX: the frame waits in the tap while the buffer is unmapped, and
	 * lands in it, whole, once it is mapped (write-only). */
	h_rx_fill(&d, 1);
	buf = h_buf(&d, 0, 0);
	{
		uint8_t frame[300];
		struct vring_used_elem e;

		h_frame(frame, 5, sizeof(frame));
		ASSERT_EQ(sizeof(frame), send(d.pkt, frame, sizeof(frame), 0));
		ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("no miss for an unmapped RX buffer");
		EXPECT_EQ(buf, body(&m)->iova);
		EXPECT_EQ(WO, body(&m)->perm);
		EXPECT_EQ(-ETIMEDOUT, h_wait_used(&d, 0, 1, 300));
		ASSERT_EQ(0, vi_map(&vi, buf));
		ASSERT_EQ(0, h_wait_used(&d, 0, 1, H_WAIT_MS)) TH_LOG("the UPDATE did not restart RX");
		e = h_take_used(&d, 0);
		EXPECT_EQ(0, e.id);
		EXPECT_EQ(d.hdr_len + sizeof(frame), e.len);
		EXPECT_EQ(5, h_check_frame((uint8_t *)h_ptr(&d, buf) + d.hdr_len, e.len - d.hdr_len,
					   sizeof(frame)));
	}
	h_teardown(&d);
}

/*
 * SET_FEATURES with ACCESS_PLATFORM makes a new, empty IOTLB, even over
 * one that was in use (vhost_init_device_iotlb): what was mapped is
 * forgotten, and the device asks again.
 */
TEST(set_features_starts_an_empty_iotlb)
{
	struct viommu vi;
	struct h_dev d;
	union msg m;
	int q;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_everything(&vi));
	ASSERT_EQ(0, set_backends(&d));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 1));
	EXPECT_FALSE(readable(&d, 0));

	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &d.features));
	memset(vi.mapped, 0, sizeof(vi.mapped));
	tx_post_at(&d, h_buf(&d, 1, d.vq[1].avail_idx), 2, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("the mappings outlived SET_FEATURES");
	TH_LOG("first miss after SET_FEATURES: %#llx, perm %u", (unsigned long long)body(&m)->iova,
	       body(&m)->perm);
	EXPECT_TRUE(within(body(&m)->iova, ring_iova(&d, 1), ring_len(&d, 1)) ||
		    within(body(&m)->iova, bufs_iova(&d, 1), bufs_len(&d, 1)));
	EXPECT_EQ(-ETIMEDOUT, tx_seen(&d, 2, 200, 200));
	for (q = 0; q < 2; q++)
		ASSERT_EQ(0, vi_map_range(&vi, used_iova(&d, q), used_len(&d, q)));
	/* Everything again, through the responder: the queue asks for what
	 * it needs, page after page. */
	ASSERT_EQ(0, vi_map(&vi, body(&m)->iova));
	ASSERT_EQ(0, vi_start(&vi));
	EXPECT_EQ(0, tx_seen(&d, 2, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));
	EXPECT_EQ(0, h_run_rx(&d, 20, 500));
	vi_stop(&vi);
	EXPECT_EQ(0, vi.bad) TH_LOG("%s", vi.why);
	EXPECT_EQ(0, vi.spurious) TH_LOG("%s", vi.why);
	h_teardown(&d);
}

/*
 * A ring part whose I/O virtual addresses run past the end of the 64-bit
 * space (TX's descriptor table at 2^64 - 16, to which the device adds 16
 * times the head) cannot be used. vhost-net-rs refuses it when the
 * backend is attached (-EFAULT, as a ring outside the user address space
 * without the IOTLB): its parsers add offsets to a part's start, and a
 * packed ring's sum overflowed there, a panic with the kernel's overflow
 * checks (found by a host test). Before, this split ring took the queue
 * down with an error instead. C takes it, and its sum wraps to IOVA 0,
 * which is not mapped: the frame is not sent. On both, the ring put back
 * where it was sends the frame.
 */
TEST(ring_past_the_end_of_the_iova_space)
{
	struct vhost_vring_file b = { .index = 1 };
	struct vhost_vring_addr a, wrapping;
	struct viommu vi;
	struct h_dev d;
	uint64_t buf;
	uint8_t *p;
	int r;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_everything(&vi));
	/* The top page, mapped onto the TX queue's own descriptor table. */
	ASSERT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, 0ULL - PAGE, PAGE,
				     (uint64_t)(uintptr_t)d.vq[1].vr.desc, RW));
	/* A frame at head 1, made available and not kicked yet. */
	buf = h_buf(&d, 1, 0);
	p = h_ptr(&d, buf);
	memset(p, 0, d.hdr_len);
	h_frame(p + d.hdr_len, 7, 200);
	d.vq[1].vr.desc[1] = (struct vring_desc){ buf, d.hdr_len + 200, 0, 0 };
	h_publish(&d, 1, 1);

	a = h_vring_addr(&d, 1, false);
	wrapping = a;
	wrapping.desc_user_addr = 0ULL - 16;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_ADDR, &wrapping));
	b.fd = d.tap;
	r = h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b);
	if (!h_on_c_driver())
		EXPECT_EQ(-EFAULT, r);
	if (r == 0) {
		h_kick(&d, 1);
		EXPECT_EQ(-ETIMEDOUT, tx_seen(&d, 7, 200, 500)) TH_LOG("sent from a wrapped address");
	}
	/* Back where it was, the ring sends the frame. */
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
	if (r != 0)
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	h_kick(&d, 1);
	EXPECT_EQ(0, tx_seen(&d, 7, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));
	h_teardown(&d);
}

/* ------------------------------------------------------------------------
 * 3. Traffic.
 */

/* xorshift64*, for a shuffle that a seed reproduces. */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

static uint64_t seed_from_env(void)
{
	const char *e = getenv("VNR_IOTLB_SEED");

	return e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20)) | 1;
}

/*
 * All of the rings and buffers mapped before the queues start, one
 * mapping per page, handed over in shuffled order, with rings and buffers
 * laid out so that the descriptor table, the used ring, and many buffers
 * and RX packets straddle pages, so translations cross mappings. TX
 * buffers are mapped for the device to read only and RX buffers for it to
 * write only, as a guest maps them for DMA to and from a device. Every
 * frame goes through byte for byte, and the device never asks for
 * anything.
 */
TEST(sparse_layout_carries_traffic)
{
	struct h_opts o = opts;
	uint64_t *pages, seed = seed_from_env(), a;
	unsigned int n = 0, i, q;
	struct viommu vi;
	struct h_dev d;

	/* 512 entries: an 8 KiB descriptor table, a used ring of 4102
	 * bytes. 3000-byte TX and 1000-byte RX buffers straddle pages, and a
	 * 1400-byte frame takes two RX buffers. */
	o.num = 512;
	o.tx_buf = 3000;
	o.rx_buf = 1000;
	ASSERT_EQ(0, h_setup(&d, &o));
	vi_init(&vi, &d);
	TH_LOG("seed %llu (VNR_IOTLB_SEED=%llu reproduces)", (unsigned long long)seed,
	       (unsigned long long)seed);
	pages = calloc(NPAGES, sizeof(*pages));
	ASSERT_TRUE(pages != NULL);
	for (q = 0; q < 2; q++) {
		for (a = ring_iova(&d, q); a < ring_iova(&d, q) + ring_len(&d, q); a += PAGE)
			pages[n++] = a;
		for (a = bufs_iova(&d, q) & ~(PAGE - 1); a < bufs_iova(&d, q) + bufs_len(&d, q); a += PAGE)
			pages[n++] = a;
	}
	for (i = n - 1; i > 0; i--) {
		unsigned int j = rnd(&seed) % (i + 1);

		a = pages[i];
		pages[i] = pages[j];
		pages[j] = a;
	}
	for (i = 0; i < n; i++)
		ASSERT_EQ(0, vi_map(&vi, pages[i])) TH_LOG("page %u at %#llx", i, (unsigned long long)pages[i]);
	TH_LOG("%u mappings of one page each", n);
	ASSERT_EQ(0, set_backends(&d));
	EXPECT_EQ(0, h_run_tx(&d, 1000, 1500, 0));
	EXPECT_EQ(0, h_run_tx(&d, 600, 1000, 1));	/* through indirect tables */
	EXPECT_EQ(0, h_run_tx(&d, 600, 60, 0));
	EXPECT_EQ(0, h_run_rx(&d, 1000, 1400));	/* two buffers each */
	EXPECT_EQ(0, h_run_rx(&d, 600, 60));
	EXPECT_FALSE(readable(&d, 0)) TH_LOG("a miss with everything mapped");
	free(pages);
	h_teardown(&d);
}

/*
 * Nothing mapped but the used rings, as QEMU starts a device behind a
 * vIOMMU: the responder maps every page the device asks for, after
 * checking that it asked for guest memory of the right kind, with the
 * right access, and for a page that was not mapped. Traffic both ways,
 * through indirect tables too, completes. Returns the misses served.
 */
static unsigned long on_demand_traffic(struct __test_metadata *_metadata, struct h_dev *d,
				       struct viommu *vi)
{
	unsigned long served;

	vi_init(vi, d);
	if (start_with_used_rings(vi) || vi_start(vi)) {
		TH_LOG("could not start the device with its used rings mapped");
		return 0;
	}
	EXPECT_EQ(0, h_run_tx(d, 300, 1000, 0));
	EXPECT_EQ(0, h_run_tx(d, 100, 600, 1));
	EXPECT_EQ(0, h_run_rx(d, 300, 1000));
	served = vi_stop(vi);
	TH_LOG("misses served: %lu for RX, %lu for TX", vi->served[0], vi->served[1]);
	EXPECT_EQ(0, vi->bad) TH_LOG("%s", vi->why);
	EXPECT_EQ(0, vi->spurious) TH_LOG("%s", vi->why);
	EXPECT_FALSE(readable(d, 0));
	return served;
}

TEST(on_demand_mapping_carries_traffic)
{
	struct viommu vi;
	struct h_dev d;

	ASSERT_EQ(0, h_setup(&d, &opts));
	/* At least the rings and one buffer page each way. */
	EXPECT_LT(6, on_demand_traffic(_metadata, &d, &vi));
	EXPECT_LT(0, vi.served[0]);
	EXPECT_LT(0, vi.served[1]);
	h_teardown(&d);
}

/* Invalidates guest memory under the device's feet: a random buffer page
 * or an unaligned range over up to three, now and then a ring page. */
struct churn {
	struct viommu *vi;
	pthread_t thr;
	volatile bool stop;
	unsigned long count;
	int err;
	uint64_t seed;
};

static void *churn_fn(void *arg)
{
	struct churn *c = arg;
	struct h_dev *d = c->vi->d;

	while (!c->stop && !c->err) {
		uint64_t r = rnd(&c->seed), iova, size;
		int q = r & 1;

		if ((r >> 1) % 8 == 0) {
			iova = ring_iova(d, q) + PAGE * ((r >> 4) % ((ring_len(d, q) + PAGE - 1) / PAGE));
			size = PAGE;
		} else {
			iova = bufs_iova(d, q) + (r >> 4) % bufs_len(d, q);
			size = 1 + (r >> 32) % (3 * PAGE);
			if (iova + size > bufs_iova(d, q) + bufs_len(d, q))
				size = bufs_iova(d, q) + bufs_len(d, q) - iova;
		}
		c->err = vi_unmap(c->vi, iova, size);
		c->count++;
		usleep(500);
	}
	return NULL;
}

/* Mappings withdrawn and given back while traffic runs, as a guest's
 * IOMMU driver unmaps and maps DMA buffers: nothing is lost, corrupted or
 * reordered, and the device asks again for what it lost. Traffic goes on
 * in rounds until at least 150 invalidations hit it, however fast the
 * machine. */
TEST(invalidate_under_traffic_loses_nothing)
{
	struct churn c = { .seed = seed_from_env() };
	struct viommu vi;
	struct h_dev d;
	bool ok = true;
	int round;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_everything(&vi));
	ASSERT_EQ(0, set_backends(&d));
	ASSERT_EQ(0, vi_start(&vi));
	TH_LOG("seed %llu (VNR_IOTLB_SEED=%llu reproduces)", (unsigned long long)c.seed,
	       (unsigned long long)c.seed);
	c.vi = &vi;
	ASSERT_EQ(0, pthread_create(&c.thr, NULL, churn_fn, &c));
	for (round = 0; ok && round < 40 && (round < 2 || c.count < 150); round++)
		ok = !h_run_tx(&d, 500, 700, 0) && !h_run_tx(&d, 100, 700, 1) && !h_run_rx(&d, 500, 700);
	c.stop = true;
	EXPECT_TRUE(ok) TH_LOG("traffic failed in round %d", round);
	pthread_join(c.thr, NULL);
	vi_stop(&vi);
	EXPECT_EQ(0, c.err) TH_LOG("INVALIDATE: %s", strerror(-c.err));
	TH_LOG("%d rounds, %lu invalidations, %lu misses served for RX, %lu for TX", round, c.count,
	       vi.served[0], vi.served[1]);
	EXPECT_LT(20, c.count);
	EXPECT_LT(0, vi.served[0] + vi.served[1]) TH_LOG("no invalidation ever made the device ask again");
	EXPECT_EQ(0, vi.bad) TH_LOG("%s", vi.why);
	EXPECT_EQ(0, vi.spurious) TH_LOG("%s", vi.why);
	/* And with everything mapped back, the queues still run. */
	ASSERT_EQ(0, map_everything(&vi));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 7));
	EXPECT_EQ(0, h_rx_one(&d, 8, false));
	h_teardown(&d);
}

/* ------------------------------------------------------------------------
 * 4. Permissions and the table's bound.
 */

/*
 * RX buffers mapped read-only: the device must not write them. C refuses
 * the translation (translate_desc: -EPERM), signals the queue's error
 * eventfd (vq_err) and leaves the frame where it is; it posts no miss,
 * since a mapping exists.
 */
TEST(read_only_rx_buffer_is_never_written)
{
	uint8_t frame[200], *p = NULL;
	struct viommu vi;
	struct h_dev d;
	uint64_t bufs, len, i;
	union msg m;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_rings(&vi, &d));
	/* Four RX buffers, two pages, read-only. */
	bufs = h_buf(&d, 0, 0);
	len = 4 * d.vq[0].buf_size;
	for (i = 0; i < len; i += PAGE)
		ASSERT_EQ(0, update(&d, bufs + i, PAGE, RO));
	ASSERT_EQ(0, set_backends(&d));
	memset(h_ptr(&d, bufs), 0xa5, len);
	h_rx_fill(&d, 4);
	/* Nothing has gone wrong so far. */
	EXPECT_FALSE(h_fired(d.vq[0].err, 300));

	h_frame(frame, 1, sizeof(frame));
	ASSERT_EQ(sizeof(frame), send(d.pkt, frame, sizeof(frame), 0));
	EXPECT_TRUE(h_fired(d.vq[0].err, H_WAIT_MS)) TH_LOG("no error signalled for a read-only RX buffer");
	EXPECT_EQ(-ETIMEDOUT, h_wait_used(&d, 0, 1, 1000)) TH_LOG("a packet went into a read-only buffer");
	p = h_ptr(&d, bufs);
	for (i = 0; i < len && p[i] == 0xa5; i++)
		;
	EXPECT_EQ(len, i) TH_LOG("read-only RX buffer written at byte %llu", (unsigned long long)i);
	if (readable(&d, 0) && msg_read(d.fd, &m, sizeof(m)) == MSG_LEN)
		TH_LOG("a message was posted: type %u at %#llx, perm %u", body(&m)->type,
		       (unsigned long long)body(&m)->iova, body(&m)->perm);
	else
		TH_LOG("no message posted");
	/* What happens once the mapping is made writable and the queue
	 * kicked, for the record (C: the waiting frame arrives). */
	ASSERT_EQ(0, invalidate(&d, bufs, len));
	for (i = 0; i < len; i += PAGE)
		ASSERT_EQ(0, update(&d, bufs + i, PAGE, WO));
	h_kick(&d, 0);
	if (h_wait_used(&d, 0, 1, 2000) == 0) {
		struct vring_used_elem e = h_take_used(&d, 0);

		TH_LOG("made writable and kicked: frame %lld arrived in buffer %u",
		       (long long)h_check_frame((uint8_t *)h_ptr(&d, h_buf(&d, 0, e.id)) + d.hdr_len,
						e.len - d.hdr_len, sizeof(frame)), e.id);
	} else {
		TH_LOG("made writable and kicked: the frame did not arrive");
	}
	h_teardown(&d);
}

/* max_iotlb_entries of the driver under test, as its module has it. */
static unsigned long max_entries(void)
{
	const char *path = h_on_c_driver() ? "/sys/module/vhost/parameters/max_iotlb_entries" :
					     "/sys/module/vhost_net_rs/parameters/max_iotlb_entries";
	unsigned long n = 2048;
	FILE *f = fopen(path, "r");

	if (f) {
		if (fscanf(f, "%lu", &n) != 1)
			n = 2048;
		fclose(f);
	}
	return n;
}

/*
 * The table holds max_iotlb_entries mappings (2048 by default) and, full,
 * retires its oldest to take a new one (VHOST_IOTLB_FLAG_RETIRE): user
 * space cannot grow it. A TX buffer page mapped first still works with
 * the table full, and misses again after one mapping more.
 */
TEST(full_table_retires_the_oldest_mapping)
{
	unsigned long max = max_entries(), n = 0;
	uint64_t p, filler;
	struct h_dev d;
	union msg m;
	int q;

	ASSERT_EQ(0, h_setup(&d, &opts));
	TH_LOG("max_iotlb_entries %lu", max);
	ASSERT_LT(8, max);
	/* 1: the page of TX buffers 0 and 1; 2, 3: each queue's rings, one
	 * mapping each. */
	p = bufs_iova(&d, 1);
	ASSERT_EQ(0, update(&d, p, PAGE, RO));
	n++;
	for (q = 0; q < 2; q++, n++)
		ASSERT_EQ(0, update(&d, ring_iova(&d, q), ring_len(&d, q), RW));
	ASSERT_EQ(0, set_backends(&d));
	tx_post_at(&d, p, 1, 200);
	EXPECT_EQ(0, tx_seen(&d, 1, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));

	/* Fillers, all onto one page of guest memory, up to a full table:
	 * the first mapping stays. */
	filler = (uint64_t)(uintptr_t)h_ptr(&d, d.iova + H_MEM_SIZE - PAGE);
	for (; n < max; n++)
		ASSERT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE,
					     IOVA_FILLER + n * PAGE, PAGE, filler, RO));
	tx_post_at(&d, p + d.vq[1].buf_size, 2, 200);
	EXPECT_EQ(0, tx_seen(&d, 2, 200, H_WAIT_MS)) TH_LOG("a mapping went before the table was full");
	EXPECT_EQ(0, take_used(&d, 1, 1));
	EXPECT_FALSE(readable(&d, 0));

	/* One more: the first one goes. */
	ASSERT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_UPDATE, IOVA_FILLER + n * PAGE,
				     PAGE, filler, RO));
	tx_post_at(&d, p, 3, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("mapping %lu did not retire the first", max + 1);
	EXPECT_EQ(p, body(&m)->iova);
	EXPECT_EQ(RO, body(&m)->perm);
	EXPECT_EQ(-ETIMEDOUT, tx_seen(&d, 3, 200, 200));
	/* Room made by hand, so that the answer retires nothing else. */
	ASSERT_EQ(0, invalidate(&d, IOVA_FILLER + 3 * PAGE, PAGE));
	ASSERT_EQ(0, update(&d, p, PAGE, RO));
	EXPECT_EQ(0, tx_seen(&d, 3, 200, H_WAIT_MS));
	EXPECT_EQ(0, take_used(&d, 1, 1));
	h_teardown(&d);
}

/* ------------------------------------------------------------------------
 * 5. What only some drivers have.
 */

/* vhost-net-rs counts the misses each queue posted in its fdinfo line
 * (iotlb_misses=); after on-demand traffic, exactly those served. */
TEST(fdinfo_counts_iotlb_misses)
{
	struct viommu vi;
	struct h_dev d;
	uint64_t c0, c1;

	if (h_on_c_driver())
		SKIP(return, "the C driver has no fdinfo counters");
	ASSERT_EQ(0, h_setup(&d, &opts));
	EXPECT_EQ(0, vq_counter(&d, 0, "iotlb_misses="));
	EXPECT_EQ(0, vq_counter(&d, 1, "iotlb_misses="));
	EXPECT_LT(0, on_demand_traffic(_metadata, &d, &vi));
	c0 = vq_counter(&d, 0, "iotlb_misses=");
	c1 = vq_counter(&d, 1, "iotlb_misses=");
	TH_LOG("fdinfo: %llu and %llu misses; served %lu and %lu", (unsigned long long)c0,
	       (unsigned long long)c1, vi.served[0], vi.served[1]);
	EXPECT_EQ(vi.served[0], c0);
	EXPECT_EQ(vi.served[1], c1);
	h_teardown(&d);
}

/*
 * With VHOST_BACKEND_F_IOTLB_BATCH acked, updates may come between
 * BATCH_BEGIN and BATCH_END; after END they are all in force. Only where
 * the driver offers it (not the C vhost-net).
 */
TEST(batched_updates_take_effect)
{
	uint64_t bf = 0;
	struct viommu vi;
	struct h_dev d;

	ASSERT_EQ(0, h_setup(&d, &opts));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_GET_BACKEND_FEATURES, &bf));
	if (!(bf & BF_BATCH)) {
		h_teardown(&d);
		SKIP(return, "%s does not offer VHOST_BACKEND_F_IOTLB_BATCH", h_dev_path());
	}
	bf = BF_V2 | BF_BATCH;
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_BACKEND_FEATURES, &bf));
	vi_init(&vi, &d);
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_BATCH_BEGIN, 0, 0, 0, 0));
	ASSERT_EQ(0, map_everything(&vi));
	EXPECT_EQ(MSG_LEN, msg_write(d.fd, VHOST_IOTLB_MSG_V2, VHOST_IOTLB_BATCH_END, 0, 0, 0, 0));
	ASSERT_EQ(0, set_backends(&d));
	EXPECT_EQ(0, h_run_tx(&d, 300, 500, 0));
	EXPECT_EQ(0, h_run_rx(&d, 300, 500));
	EXPECT_FALSE(readable(&d, 0)) TH_LOG("a miss for memory mapped in a batch");
	h_teardown(&d);
}

/*
 * Issue 33, defect 2: an unanswered miss outlives a backend unbind. QEMU
 * leaves a miss unanswered when the guest's vIOMMU maps its IOVA to no
 * RAM, and at a device stop (guest reset or reboot) only unbinds the
 * backends, binds them again and sets the features again. A queue has one
 * miss outstanding at a time; C's vhost_net_set_backend clears the
 * device's messages on fd -1 (vhost_clear_msg), so the queue's next miss
 * is posted. One kept across the unbind holds back every later miss of
 * its queue, which then never runs again.
 */
TEST(i33_unbind_forgets_an_unanswered_miss)
{
	struct viommu vi;
	struct h_dev d;
	uint64_t a, b, end;
	uint16_t head;
	union msg m;
	int q;

	ASSERT_EQ(0, h_setup(&d, &opts));
	vi_init(&vi, &d);
	ASSERT_EQ(0, map_rings(&vi, &d));
	ASSERT_EQ(0, set_backends(&d));

	/* MISS(A), read and never answered. */
	a = bufs_iova(&d, 1) + PAGE + 512;
	head = d.vq[1].avail_idx % d.vq[1].num;
	tx_post_at(&d, a, 1, 200);
	ASSERT_EQ(0, miss_wait(&d, &m, H_WAIT_MS)) TH_LOG("no miss for an unmapped TX buffer");
	ASSERT_EQ(a, body(&m)->iova);

	/* The device stops, the guest reboots and puts another buffer, at B,
	 * in the slot that A still holds (the device never took it), and the
	 * device starts again, as QEMU drives it: the backends bound again,
	 * the features set again (an empty IOTLB), the rings mapped again. */
	for (q = 0; q < 2; q++) {
		struct vhost_vring_file unbind = { .index = q, .fd = -1 };

		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &unbind));
	}
	b = bufs_iova(&d, 1) + 3 * PAGE + 256;
	{
		uint8_t *p = h_ptr(&d, b);

		memset(p, 0, d.hdr_len);
		h_frame(p + d.hdr_len, 2, 200);
		d.vq[1].vr.desc[head] = (struct vring_desc){ b, d.hdr_len + 200, 0, 0 };
	}
	ASSERT_EQ(0, set_backends(&d));
	ASSERT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &d.features));
	memset(vi.mapped, 0, sizeof(vi.mapped));
	ASSERT_EQ(0, map_rings(&vi, &d));
	h_kick(&d, 1);
	/* MISS(B) within a second. A worker that ran between the bind and
	 * the mapping of the rings may have asked for a ring page first. */
	end = h_now_ns() + 1000ULL * 1000 * 1000;
	for (;;) {
		uint64_t now = h_now_ns();

		ASSERT_EQ(0, miss_wait(&d, &m, now < end ? (int)((end - now) / 1000000) : 0))
			TH_LOG("no miss within a second after the unbind: the queue is wedged");
		if (body(&m)->iova == b)
			break;
		TH_LOG("miss at %#llx first", (unsigned long long)body(&m)->iova);
		ASSERT_TRUE(within(body(&m)->iova, ring_iova(&d, 1), ring_len(&d, 1)) ||
			    within(body(&m)->iova, ring_iova(&d, 0), ring_len(&d, 0)));
		ASSERT_EQ(0, vi_map(&vi, body(&m)->iova));
	}
	EXPECT_EQ(RO, body(&m)->perm);
	/* Answered, the queue runs. */
	ASSERT_EQ(0, vi_map(&vi, b));
	EXPECT_EQ(0, tx_seen(&d, 2, 200, H_WAIT_MS)) TH_LOG("the UPDATE did not restart the queue");
	EXPECT_EQ(0, take_used(&d, 1, 1));
	h_teardown(&d);
}

TEST_HARNESS_MAIN
