// SPDX-License-Identifier: GPL-2.0
/*
 * lifecycle: open/configure/close cycles must not leak kernel memory.
 *
 * Slab usage (sum of active objects times object size over /proc/slabinfo)
 * is sampled before and after the cycles. Per-CPU caches make the figure
 * noisy, so the cycle is repeated up to three times and the smallest growth
 * counts: a real leak grows every time, noise does not.
 */
#include "harness.h"
#include "kselftest_harness.h"

/* TCG, and more so the debug kernel, are slow: the harness's 30 s per test
 * would kill honest runs. A hung test still fails, just later. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

static int cycle(const char *dev, int n, int configure)
{
	struct { struct vhost_memory h; struct vhost_memory_region r[4]; } m = { 0 };
	struct vhost_vring_state s = { .index = 0, .num = 256 };
	int i, k;

	for (k = 0; k < 4; k++)
		m.r[k] = (struct vhost_memory_region){ k * 0x100000ULL, 0x100000, 0x10000000ULL + k * 0x100000ULL, 0 };
	m.h.nregions = 4;
	for (i = 0; i < n; i++) {
		int fd = open(dev, O_RDWR);

		if (fd < 0)
			return -errno;
		if (configure &&
		    (ioctl(fd, VHOST_SET_OWNER) || ioctl(fd, VHOST_SET_MEM_TABLE, &m) ||
		     ioctl(fd, VHOST_SET_VRING_NUM, &s))) {
			int e = -errno;

			close(fd);
			return e;
		}
		close(fd);
	}
	return 0;
}

static void run_cycles(struct __test_metadata *_metadata, int configure)
{
	const char *dev = h_dev_path();
	/* A leak of even one 64-byte object per cycle is 64 KB over 1000. */
	const long long limit = 48 * 1024;
	long long best = -1, before, after, growth;
	int attempt;

	ASSERT_EQ(0, cycle(dev, 200, configure));	/* warm up caches */
	for (attempt = 0; attempt < 3; attempt++) {
		h_settle();
		before = h_slab_active_bytes();
		ASSERT_LT(0, before) TH_LOG("cannot read /proc/slabinfo");
		ASSERT_EQ(0, cycle(dev, 1000, configure));
		/* Workers' task structs and the files' RCU-deferred frees
		 * come back asynchronously: measure again, a second apart,
		 * while the growth looks like a leak. A leak stays. */
		for (int again = 0; again < 5; again++) {
			h_settle();
			after = h_slab_active_bytes();
			growth = after - before;
			if (growth <= limit)
				break;
			sleep(1);
		}
		TH_LOG("attempt %d: slab %lld -> %lld bytes (%+lld)", attempt, before, after, growth);
		if (best < 0 || growth < best)
			best = growth;
		if (best <= limit)
			break;
	}
	EXPECT_LE(best, limit);
}

TEST(open_close_1000_no_leak)
{
	run_cycles(_metadata, 0);
}

TEST(open_configure_close_1000_no_leak)
{
	run_cycles(_metadata, 1);
}

TEST_HARNESS_MAIN
