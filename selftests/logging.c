// SPDX-License-Identifier: GPL-2.0
/*
 * logging: dirty-page logging for live migration (VHOST_F_LOG_ALL).
 *
 * During a migration QEMU gives the device a bitmap (VHOST_SET_LOG_BASE),
 * one bit per 4 KiB guest page, turns LOG_ALL on and asks for the used
 * rings' writes to be logged too (VHOST_VRING_F_LOG). Every page the device
 * writes must then have its bit set, or the destination runs on a stale
 * copy of it. These cases drive RX and TX with logging on and compare the
 * bitmap with the exact pages the device wrote, computed from the used
 * rings; and they check the C driver's rules for the log's ioctls. They run
 * unchanged on the C driver (VNR_DEV=/dev/vhost-net).
 */
#include "harness.h"
#include "kselftest_harness.h"

#define LOG_PAGE	4096ULL
#define LOG_BYTES	H_LOG_BYTES
/* Allocated: room for a log whose base is the allocation plus one byte,
 * rounded to the word the kernel sets bits in. */
#define LOG_ALLOC	(LOG_BYTES + 8)

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1,
};

static bool log_bit(const uint8_t *bitmap, uint64_t page)
{
	return __atomic_load_n(&bitmap[page / 8], __ATOMIC_RELAXED) & (1u << (page % 8));
}

/* Marks the pages of [gpa, gpa + len) in `want`. */
static void want_range(uint8_t *want, uint64_t gpa, uint64_t len)
{
	uint64_t page;

	for (page = gpa / LOG_PAGE; len && page <= (gpa + len - 1) / LOG_PAGE; page++)
		want[page / 8] |= 1u << (page % 8);
}

/* Marks the used-ring pages the device wrote for entries [from, to) of
 * queue q: the elements and used->idx. [from, to) must not span more than
 * the ring: the entries are read back from it. */
static void want_used(struct h_dev *d, uint8_t *want, int q, uint16_t from, uint16_t to)
{
	struct h_vq *v = &d->vq[q];
	uint64_t used = h_gpa(d, v->vr.used);
	uint16_t i;

	want_range(want, used + 2, 2);
	for (i = from; i != to; i++)
		want_range(want, used + 4 + 8ULL * (i % v->num), 8);
}

/* Compares the bitmap with `want`: returns the pages missing, and counts
 * the pages logged that were not wanted in *extra. */
static unsigned int compare(const uint8_t *bitmap, const uint8_t *want, unsigned int *extra,
			    uint64_t *first_missing)
{
	unsigned int missing = 0;
	uint64_t page;

	*extra = 0;
	*first_missing = ~0ULL;
	for (page = 0; page < LOG_BYTES * 8; page++) {
		bool got = log_bit(bitmap, page), w = want[page / 8] & (1u << (page % 8));

		if (w && !got) {
			if (!missing)
				*first_missing = page;
			missing++;
		} else if (got && !w) {
			(*extra)++;
		}
	}
	return missing;
}

/* Logging off: LOG_ALL cleared and the rings' addresses set again without
 * VHOST_VRING_F_LOG, as QEMU does when a migration ends or is cancelled. */
static int log_stop(struct h_dev *d)
{
	int q, r;

	if ((r = h_ioctl(d->fd, VHOST_SET_FEATURES, &d->features)))
		return r;
	for (q = 0; q < 2; q++) {
		struct h_vq *v = &d->vq[q];
		struct vhost_vring_addr a = {
			.index = q,
			.desc_user_addr = (uint64_t)(uintptr_t)v->vr.desc,
			.avail_user_addr = (uint64_t)(uintptr_t)v->vr.avail,
			.used_user_addr = (uint64_t)(uintptr_t)v->vr.used,
		};

		if ((r = h_ioctl(d->fd, VHOST_SET_VRING_ADDR, &a)))
			return r;
	}
	return 0;
}

/* Whether vhost-net-rs's fdinfo line for `vq` ("vq0:") has `what`. */
static bool fdinfo_says(struct h_dev *d, const char *vq, const char *what)
{
	char buf[4096], *line, *end;

	if (!h_fdinfo_read(d, buf, sizeof(buf)))
		return false;
	line = strstr(buf, vq);
	if (!line)
		return false;
	end = strchr(line, '\n');
	if (end)
		*end = 0;
	return strstr(line, what) != NULL;
}

TEST(log_all_is_offered)
{
	int fd = open(h_dev_path(), O_RDWR);
	uint64_t f = 0;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, h_ioctl(fd, VHOST_GET_FEATURES, &f));
	EXPECT_TRUE(f & (1ULL << VHOST_F_LOG_ALL));
	close(fd);
}

/* Marks what RX wrote for used entries [from, to): each buffer's first
 * e.len bytes (the packet, its header and num_buffers), and the used ring. */
static void want_rx(struct h_dev *d, uint8_t *want, uint16_t from, uint16_t to)
{
	uint16_t i;

	for (i = from; i != to; i++) {
		struct vring_used_elem e = d->vq[0].vr.used->ring[i % d->vq[0].num];

		want_range(want, h_buf(d, 0, e.id), e.len);
	}
	want_used(d, want, 0, from, to);
}

/* RX with logging on: every page a packet, its header or num_buffers went
 * to, and every used-ring page, has its bit; the log eventfd fired. */
TEST(rx_writes_are_logged)
{
	uint8_t *bitmap = calloc(1, LOG_ALLOC), *want = calloc(1, LOG_ALLOC);
	int logfd = eventfd(0, EFD_NONBLOCK);
	unsigned int extra, missing;
	uint64_t first;
	struct h_dev d;
	uint16_t from;

	ASSERT_TRUE(bitmap && want && logfd >= 0);
	ASSERT_EQ(0, h_setup(&d, &opts));
	ASSERT_EQ(0, h_log_start(&d, bitmap, logfd));
	/* Frames of several sizes, so packets cross buffer and page edges.
	 * The used entries are read after each run, before the ring wraps. */
	from = d.vq[0].vr.used->idx;
	ASSERT_EQ(0, h_run_rx(&d, 200, 60));
	want_rx(&d, want, from, d.vq[0].vr.used->idx);
	from = d.vq[0].vr.used->idx;
	ASSERT_EQ(0, h_run_rx(&d, 200, 1500));
	want_rx(&d, want, from, d.vq[0].vr.used->idx);
	/* TX ran nothing, but its used ring may have been touched at attach
	 * time (flags, avail_event): not counted as extra. */
	missing = compare(bitmap, want, &extra, &first);
	EXPECT_EQ(0, missing) TH_LOG("%u pages written but not logged, the first %#llx",
				     missing, (unsigned long long)first);
	TH_LOG("%u pages logged but not written (used-ring flags and events, page rounding)", extra);
	EXPECT_TRUE(h_fired(logfd, 1000));
	h_teardown(&d);
	close(logfd);
	free(bitmap);
	free(want);
}

/* TX with logging on: the device writes only the used ring (its entries
 * and idx), and those pages are logged; the frames' buffers, which the
 * device only read, are not written and must not be needed. */
TEST(tx_used_ring_writes_are_logged)
{
	uint8_t *bitmap = calloc(1, LOG_ALLOC), *want = calloc(1, LOG_ALLOC);
	int logfd = eventfd(0, EFD_NONBLOCK);
	unsigned int extra, missing;
	uint64_t first, page, tx_buf_logged = 0;
	struct h_dev d;
	uint16_t from, to;

	ASSERT_TRUE(bitmap && want && logfd >= 0);
	ASSERT_EQ(0, h_setup(&d, &opts));
	ASSERT_EQ(0, h_log_start(&d, bitmap, logfd));
	from = d.vq[1].vr.used->idx;
	ASSERT_EQ(0, h_run_tx(&d, 300, 200, 0));
	to = d.vq[1].vr.used->idx;
	want_used(&d, want, 1, from, to);
	missing = compare(bitmap, want, &extra, &first);
	EXPECT_EQ(0, missing) TH_LOG("%u used-ring pages not logged, the first %#llx", missing,
				     (unsigned long long)first);
	for (page = d.vq[1].buf_base / LOG_PAGE; page < (d.vq[1].buf_base + 256 * 2048) / LOG_PAGE; page++)
		tx_buf_logged += log_bit(bitmap, page);
	EXPECT_EQ(0, tx_buf_logged) TH_LOG("TX buffers the device only read were logged");
	EXPECT_TRUE(h_fired(logfd, 1000));
	h_teardown(&d);
	close(logfd);
	free(bitmap);
	free(want);
}

/* Logging off again (LOG_ALL cleared, rings without VHOST_VRING_F_LOG):
 * nothing more is logged, and traffic goes on. */
TEST(logging_off_logs_nothing)
{
	uint8_t *bitmap = calloc(1, LOG_ALLOC);
	int logfd = eventfd(0, EFD_NONBLOCK);
	struct h_dev d;
	unsigned int i, set = 0;

	ASSERT_TRUE(bitmap && logfd >= 0);
	ASSERT_EQ(0, h_setup(&d, &opts));
	ASSERT_EQ(0, h_log_start(&d, bitmap, logfd));
	ASSERT_EQ(0, h_run_rx(&d, 50, 500));
	if (!h_on_c_driver())
		EXPECT_TRUE(fdinfo_says(&d, "vq0:", "dirty_log=data+used") &&
			    fdinfo_says(&d, "vq1:", "dirty_log=data+used"));
	ASSERT_EQ(0, log_stop(&d));
	if (!h_on_c_driver())
		EXPECT_TRUE(fdinfo_says(&d, "vq0:", "dirty_log=off") && fdinfo_says(&d, "vq1:", "dirty_log=off"));
	memset(bitmap, 0, LOG_ALLOC);
	EXPECT_EQ(0, h_run_rx(&d, 100, 500));
	EXPECT_EQ(0, h_run_tx(&d, 100, 200, 0));
	for (i = 0; i < LOG_BYTES; i++)
		set += __builtin_popcount(bitmap[i]);
	EXPECT_EQ(0, set) TH_LOG("%u pages logged with logging off", set);
	h_teardown(&d);
	close(logfd);
	free(bitmap);
}

/* Whether user space reaches past 2^47: a mapping can be placed above. */
static bool five_level_user_space(void)
{
	void *hint = (void *)(1ULL << 50);
	void *p = mmap(hint, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED)
		return false;
	munmap(p, 4096);
	return p == hint;
}

struct toggler {
	struct h_dev *d;
	uint8_t *bitmap;
	int logfd;
	volatile bool stop;
	int toggles, err;
};

static void *toggle_logging(void *arg)
{
	struct toggler *t = arg;

	while (!t->stop && !t->err) {
		t->err = h_log_start(t->d, t->bitmap, t->logfd);
		if (!t->err)
			t->err = log_stop(t->d);
		t->toggles++;
		usleep(200);
	}
	return NULL;
}

/* Logging turned on and off over and over while both rings carry traffic
 * (a migration started and cancelled, many times): every frame arrives,
 * in order and intact, and neither ring stops. */
TEST(toggling_logging_under_traffic_loses_nothing)
{
	struct toggler t = { .bitmap = calloc(1, LOG_ALLOC), .logfd = eventfd(0, EFD_NONBLOCK) };
	struct h_dev d;
	pthread_t thr;

	ASSERT_TRUE(t.bitmap && t.logfd >= 0);
	ASSERT_EQ(0, h_setup(&d, &opts));
	t.d = &d;
	ASSERT_EQ(0, pthread_create(&thr, NULL, toggle_logging, &t));
	EXPECT_EQ(0, h_run_rx(&d, 2000, 700));
	EXPECT_EQ(0, h_run_tx(&d, 2000, 700, 0));
	t.stop = true;
	pthread_join(thr, NULL);
	EXPECT_EQ(0, t.err) TH_LOG("a log ioctl failed: %s", strerror(-t.err));
	TH_LOG("logging turned on and off %d times", t.toggles);
	EXPECT_LT(10, t.toggles);
	/* And the queues still work with logging left off. */
	EXPECT_EQ(0, log_stop(&d));
	EXPECT_EQ(0, h_rx_one(&d, 9, false));
	h_teardown(&d);
	close(t.logfd);
	free(t.bitmap);
}

/* The log ioctls' errors, as the C driver gives them. */
TEST(log_ioctl_rules)
{
	uint8_t *bitmap = calloc(1, LOG_ALLOC);
	uint64_t kernel = 0xffff888000000000ULL, base, f;
	int pipefd[2], fd, bad = 9999;
	struct vhost_vring_addr a;
	struct h_dev d;

	ASSERT_TRUE(bitmap != NULL);
	ASSERT_EQ(0, pipe(pipefd));
	ASSERT_EQ(0, h_setup(&d, &opts));
	/* Unreadable arguments. */
	EXPECT_EQ(-EFAULT, h_ioctl(d.fd, VHOST_SET_LOG_BASE, (void *)8));
	EXPECT_EQ(-EFAULT, h_ioctl(d.fd, VHOST_SET_LOG_FD, (void *)8));
	/* The log fd: an eventfd, -1, or the errors of eventfd_ctx_fdget. */
	fd = pipefd[0];
	EXPECT_EQ(-EINVAL, h_ioctl(d.fd, VHOST_SET_LOG_FD, &fd));
	EXPECT_EQ(-EBADF, h_ioctl(d.fd, VHOST_SET_LOG_FD, &bad));
	fd = -1;
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_LOG_FD, &fd));
	/* Without LOG_ALL and VRING_F_LOG nothing is logged, so any base is
	 * taken, even one no bitmap could live at. */
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_LOG_BASE, &kernel));
	/* LOG_ALL then needs room for the whole table: refused. */
	f = d.features | (1ULL << VHOST_F_LOG_ALL);
	EXPECT_EQ(-EFAULT, h_ioctl(d.fd, VHOST_SET_FEATURES, &f));
	/* An unaligned base is fine; so is LOG_ALL with it. */
	base = (uint64_t)(uintptr_t)bitmap + 1;
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_LOG_BASE, &base));
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_FEATURES, &f));
	/* With LOG_ALL on running rings, a base whose bits would leave the
	 * user address space is refused, and the old one stays. */
	EXPECT_EQ(-EFAULT, h_ioctl(d.fd, VHOST_SET_LOG_BASE, &kernel));
	/* A used-ring log address whose bits are out of reach: EINVAL. To
	 * get there on either paging depth, the base is moved (briefly: no
	 * traffic meanwhile) to the last page below the user address space's
	 * end, which leaves room for the table's bits only. */
	base = (five_level_user_space() ? 1ULL << 56 : 1ULL << 47) - 2 * 4096;
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_LOG_BASE, &base));
	a = (struct vhost_vring_addr){
		.index = 0, .flags = 1 << VHOST_VRING_F_LOG,
		.desc_user_addr = (uint64_t)(uintptr_t)d.vq[0].vr.desc,
		.avail_user_addr = (uint64_t)(uintptr_t)d.vq[0].vr.avail,
		.used_user_addr = (uint64_t)(uintptr_t)d.vq[0].vr.used,
		.log_guest_addr = 1ULL << 30,
	};
	EXPECT_EQ(-EINVAL, h_ioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
	base = (uint64_t)(uintptr_t)bitmap + 1;
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_LOG_BASE, &base));
	/* An unaligned log address. */
	a.log_guest_addr = h_gpa(&d, d.vq[0].vr.used) + 2;
	EXPECT_EQ(-EINVAL, h_ioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
	a.log_guest_addr = h_gpa(&d, d.vq[0].vr.used);
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
	/* Traffic still flows. */
	EXPECT_EQ(0, h_rx_one(&d, 7, false));
	h_teardown(&d);
	close(pipefd[0]);
	close(pipefd[1]);
	free(bitmap);
}

TEST_HARNESS_MAIN
