// SPDX-License-Identifier: GPL-2.0
/*
 * teardown: the device taken apart while traffic flows both ways.
 *
 * A flood thread keeps the TX ring full of frames (which the tap hands to
 * the host stack, which drops them) and injects frames into the tap for the
 * RX ring, reposting buffers as they fill. While it runs, the test closes
 * the device, resets its owner, or swaps its backend. Afterwards the module
 * must hold no reference (its refcnt is 0 once every fd is closed) and the
 * device or its successor must carry clean traffic. The in-VM runner checks
 * the kernel log, and kmemleak on the debug kernel.
 *
 * A last case runs 1000 open, configure, traffic, close cycles on one guest
 * memory and tap, as 1000 QEMU runs would, and compares slab usage.
 */
#include "harness.h"
#include "kselftest_harness.h"
#include "leak.h"
#include <pthread.h>

#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

#define WAIT_MS 10000

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1,
};

/* The module's reference count, or -1 if it cannot be read (the C driver,
 * or a module built in). */
static int module_refcnt(void)
{
	const char *dev = getenv("VNR_DEV");
	char path[96];
	FILE *f;
	int n = -1;

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt",
		 dev && strstr(dev, "/dev/vhost-net") && !strstr(dev, "-rs") ? "vhost_net" : "vhost_net_rs");
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &n) != 1)
		n = -1;
	fclose(f);
	return n;
}

/* Closing the device while both rings are busy joins the workers and drops
 * every reference, ten times over. */
TEST(close_mid_flood)
{
	int i, r0 = module_refcnt();

	for (i = 0; i < 10; i++) {
		struct h_dev d;
		struct h_opts o = opts;
		struct h_flood fl;

		ASSERT_EQ(0, h_setup(&d, &o));
		h_flood_start(&fl, &d);
		usleep(200 * 1000);
		/* Only the device: the flood thread still writes the eventfds. */
		ASSERT_EQ(0, close(d.fd));
		d.fd = -1;
		usleep(50 * 1000);
		EXPECT_LT(0, h_flood_stop(&fl));
		h_teardown(&d);
	}
	if (r0 >= 0)
		EXPECT_EQ(r0, module_refcnt());
}

/* RESET_OWNER while both rings are busy stops the workers; the same fd then
 * takes a new owner and configuration and carries traffic again. */
TEST(reset_owner_mid_flood)
{
	struct h_dev d;
	struct h_opts o = opts;
	struct h_flood fl;
	int fd;

	ASSERT_EQ(0, h_setup(&d, &o));
	h_flood_start(&fl, &d);
	usleep(300 * 1000);
	EXPECT_EQ(0, h_ioctl(d.fd, VHOST_RESET_OWNER, NULL));
	usleep(50 * 1000);
	EXPECT_LT(0, h_flood_stop(&fl));
	/* The old eventfds go; the reset fd takes a new owner and rings. */
	fd = d.fd;
	d.fd = -1;
	h_detach(&d);
	d.fd = fd;
	ASSERT_EQ(0, h_configure(&d, &o));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 7));
	EXPECT_EQ(0, h_rx_one(&d, 8, true));
	h_teardown(&d);
}

/* NET_SET_BACKEND to another tap while both rings are busy: traffic moves
 * to the new tap, and the old one can be closed at once. */
TEST(backend_swap_mid_flood)
{
	struct h_dev d, t2;
	struct h_opts o = opts;
	struct h_flood fl;
	int q;

	ASSERT_EQ(0, h_setup(&d, &o));
	t2 = d;
	ASSERT_EQ(0, h_tap_open(&t2, true, -1));
	ASSERT_EQ(0, h_pkt_open(&t2));
	h_flood_start(&fl, &d);
	usleep(300 * 1000);
	for (q = 0; q < 2; q++) {
		struct vhost_vring_file b = { .index = q, .fd = t2.tap };

		EXPECT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	usleep(200 * 1000);
	EXPECT_LT(0, h_flood_stop(&fl));
	close(d.tap);
	close(d.pkt);
	d.tap = t2.tap;
	d.pkt = t2.pkt;
	EXPECT_EQ(0, h_tx_one(&d, t2.pkt, 9));
	EXPECT_EQ(0, h_rx_one(&d, 10, true));
	h_teardown(&d);
}

/* One memory and tap, and the options, for lifetimes(). */
struct lifetimes {
	struct h_dev d;
	struct h_opts o;
};

/* n guest lifetimes on one memory and tap: open, configure, one frame each
 * way, close. 0, or -errno (logged). */
static int lifetimes(void *arg, int n)
{
	struct lifetimes *l = arg;

	for (int i = 0; i < n; i++) {
		int r = h_attach(&l->d, &l->o);

		if (!r)
			r = h_tx_one(&l->d, l->d.pkt, i);
		if (!r)
			r = h_rx_one(&l->d, i, false);
		h_detach(&l->d);
		if (r) {
			H_LOG("lifetime %d: %s", i, strerror(-r));
			return r;
		}
	}
	return 0;
}

/* 1000 guest lifetimes with traffic leak nothing, as leak.h judges it. */
TEST(open_configure_traffic_close_1000)
{
	static struct lifetimes l;

	l.o = opts;
	l.o.num = 64;
	ASSERT_EQ(0, h_setup(&l.d, &l.o));
	h_detach(&l.d);
	h_leak_check(_metadata, lifetimes, &l);
	h_teardown(&l.d);
}

TEST_HARNESS_MAIN
