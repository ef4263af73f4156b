// SPDX-License-Identifier: GPL-2.0
/*
 * lifecycle: open/configure/close cycles must not leak kernel memory, as
 * leak.h judges it.
 */
#include "harness.h"
#include "kselftest_harness.h"
#include "leak.h"

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

static int open_close(void *arg, int n)
{
	return cycle(h_dev_path(), n, 0);
}

static int open_configure_close(void *arg, int n)
{
	return cycle(h_dev_path(), n, 1);
}

TEST(open_close_1000_no_leak)
{
	h_leak_check(_metadata, open_close, NULL);
}

TEST(open_configure_close_1000_no_leak)
{
	h_leak_check(_metadata, open_configure_close, NULL);
}

TEST_HARNESS_MAIN
