// SPDX-License-Identifier: GPL-2.0
/*
 * lifecycle: open/configure/close cycles must not leak kernel memory.
 *
 * Slab usage (sum of active objects times object size over /proc/slabinfo)
 * is sampled before and after the cycles. Per-CPU caches make the figure
 * noisy: growth over the limit is measured again after twice as many more
 * cycles, since a real leak grows with the cycle count and noise does not,
 * and the caches that grew most are logged (see run_cycles).
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

/* Cycles per reading; a leak is judged per CYCLES cycles. */
#define CYCLES 1000
/* A leak of even one 64-byte object per cycle is 64 KB over CYCLES. */
#define LIMIT (48 * 1024LL)

static struct h_slabs s0, s1, s3;

/* Settles and reads the caches into `after` until their growth from
 * `before`, stored in `growth`, is `limit` bytes or less, five times at
 * most, a second apart: workers' task structs and the files' RCU-deferred
 * frees come back asynchronously, a leak stays. 0, or -errno if
 * /proc/slabinfo cannot be read. */
static int settled_growth(struct h_slabs *after, const struct h_slabs *before, long long limit,
			  long long *growth)
{
	for (int again = 0; again < 5; again++) {
		int ret;

		if (again)
			sleep(1);
		h_settle();
		ret = h_slabs_read(after);
		if (ret)
			return ret;
		*growth = h_slabs_bytes(after) - h_slabs_bytes(before);
		if (*growth <= limit)
			break;
	}
	return 0;
}

/* The `top` caches that grew most in bytes from s0 to s3, each as
 * "name +OBJS/+OBJS xSIZE": its objects' growth after CYCLES cycles (s1)
 * and after 3 * CYCLES (s3). A leaking cache grows by a multiple of the
 * cycles, and three times as much in the second figure. */
static void top_growth(char *buf, size_t len, int top)
{
	bool taken[H_SLAB_CACHES] = { false };
	size_t used = 0;

	buf[0] = 0;
	for (int t = 0; t < top; t++) {
		long long best = 0, grown;
		int pick = -1;

		for (int i = 0; i < s3.n; i++) {
			grown = (s3.c[i].active - h_slabs_active(&s0, s3.c[i].name)) * s3.c[i].size;
			if (!taken[i] && grown > best) {
				best = grown;
				pick = i;
			}
		}
		if (pick < 0 || used >= len)
			break;
		taken[pick] = true;
		used += snprintf(buf + used, len - used, "%s%s %+lld/%+lld x%lld", t ? ", " : "",
				 s3.c[pick].name,
				 h_slabs_active(&s1, s3.c[pick].name) - h_slabs_active(&s0, s3.c[pick].name),
				 s3.c[pick].active - h_slabs_active(&s0, s3.c[pick].name),
				 s3.c[pick].size);
	}
}

/*
 * Slab growth over CYCLES cycles, judged leak or noise. Growth within
 * LIMIT passes. Above it, 2 * CYCLES more cycles tell: a leak grows with
 * the cycles, by more than 2 * LIMIT again, while noise (objects parked in
 * per-CPU sheaves and partial slabs, frees deferred past the settle) does
 * not. The caches that grew most are logged with both readings. Up to
 * three attempts; the test fails only if every one looks like a leak.
 */
static void run_cycles(struct __test_metadata *_metadata, int configure)
{
	const char *dev = h_dev_path();
	long long g1, g3;
	bool leak = false;
	char top[512];
	int attempt;

	ASSERT_EQ(0, cycle(dev, 200, configure));	/* warm up caches */
	for (attempt = 0; attempt < 3; attempt++) {
		h_settle();
		ASSERT_EQ(0, h_slabs_read(&s0)) TH_LOG("cannot read /proc/slabinfo");
		ASSERT_EQ(0, cycle(dev, CYCLES, configure));
		ASSERT_EQ(0, settled_growth(&s1, &s0, LIMIT, &g1));
		if (g1 <= LIMIT) {
			TH_LOG("attempt %d: slab %lld -> %lld bytes (%+lld) over %d cycles", attempt,
			       h_slabs_bytes(&s0), h_slabs_bytes(&s1), g1, CYCLES);
			leak = false;
			break;
		}
		ASSERT_EQ(0, cycle(dev, 2 * CYCLES, configure));
		ASSERT_EQ(0, settled_growth(&s3, &s0, g1 + 2 * LIMIT, &g3));
		leak = g3 - g1 > 2 * LIMIT;
		top_growth(top, sizeof(top), 5);
		TH_LOG("attempt %d: slab %lld bytes, %+lld after %d cycles, %+lld after %d (%s); grew most "
		       "(objects after %d/%d cycles x size): %s",
		       attempt, h_slabs_bytes(&s0), g1, CYCLES, g3, 3 * CYCLES,
		       leak ? "grows with the cycles" : "noise", CYCLES, 3 * CYCLES, top);
		if (!leak)
			break;
	}
	EXPECT_FALSE(leak) TH_LOG("slab grew by more than %lld bytes per %d cycles in every attempt",
				  LIMIT, CYCLES);
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
