// SPDX-License-Identifier: GPL-2.0
/*
 * backends: the kinds of socket VHOST_NET_SET_BACKEND takes besides a tap.
 *
 * macvtap is what libvirt's <interface type='direct'> gives QEMU: a
 * /dev/tapN file whose socket (tap_get_socket) and packet queue
 * (tap_get_ptr_ring) the C driver uses like a tun file's. Each case runs the
 * same traffic through a macvtap on a veth, checked byte for byte from the
 * veth's other end, and runs unchanged on the C driver (VNR_DEV).
 */
#include "harness.h"
#include "kselftest_harness.h"

#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 600

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1, .macvtap = true,
};

static void macvtap_traffic(struct __test_metadata *_metadata, const struct h_opts *o)
{
	struct h_dev d;
	int r = h_setup(&d, o);

	if (r == -ENODEV)
		SKIP(return, "no macvtap in this kernel (or no ip command)");
	ASSERT_EQ(0, r) TH_LOG("macvtap setup: %s", strerror(-r));
	/* Small frames (the batched TX path when the queue takes batches),
	 * full-size ones, and each way. */
	EXPECT_EQ(0, h_run_tx(&d, 1000, 64, 0));
	EXPECT_EQ(0, h_run_tx(&d, 500, 1400, 0));
	EXPECT_EQ(0, h_run_rx(&d, 1000, 64));
	EXPECT_EQ(0, h_run_rx(&d, 500, 1400));
	h_teardown(&d);
}

TEST(macvtap_carries_traffic) { macvtap_traffic(_metadata, &opts); }

TEST(macvtap_carries_traffic_vhost_header)
{
	struct h_opts o = opts;

	o.vhost_hdr = true;
	macvtap_traffic(_metadata, &o);
}

TEST(macvtap_carries_traffic_legacy_header)
{
	struct h_opts o = opts;

	o.mrg_rxbuf = false;
	o.version_1 = false;
	macvtap_traffic(_metadata, &o);
}

/* A macvtap backend swapped for a tap and back, mid-stream. */
TEST(macvtap_and_tap_swap)
{
	struct h_dev d, t;
	struct vhost_vring_file b = { .index = 0 };
	int q, r = h_setup(&d, &opts);

	if (r == -ENODEV)
		SKIP(return, "no macvtap in this kernel (or no ip command)");
	ASSERT_EQ(0, r);
	memset(&t, 0, sizeof(t));
	t.hdr_len = d.hdr_len;
	ASSERT_EQ(0, h_tap_open_flags(&t, true, -1, 0));
	ASSERT_EQ(0, h_pkt_open(&t));
	EXPECT_EQ(0, h_run_tx(&d, 200, 64, 0));
	for (q = 0; q < 2; q++) {
		b.index = q;
		b.fd = t.tap;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	/* Frames now go through the tap, whose packet socket is t.pkt. */
	EXPECT_EQ(0, h_tx_one(&d, t.pkt, 7));
	for (q = 0; q < 2; q++) {
		b.index = q;
		b.fd = d.tap;
		ASSERT_EQ(0, h_ioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	}
	EXPECT_EQ(0, h_run_tx(&d, 200, 64, 0));
	EXPECT_EQ(0, h_run_rx(&d, 200, 64));
	close(t.pkt);
	close(t.tap);
	h_teardown(&d);
}

TEST_HARNESS_MAIN
