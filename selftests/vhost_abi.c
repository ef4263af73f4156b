// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_abi: the control-plane ABI of /dev/vhost-net-rs.
 *
 * Each case checks one rule of the in-tree vhost-net ioctl behaviour:
 * unknown commands, ownership, features, ring sizes and the memory table.
 * Set VNR_DEV to run the same cases against another device node.
 */
#include "harness.h"
#include <sys/wait.h>

#include "kselftest_harness.h"

/* TCG, and more so the debug kernel, are slow: the harness's 30 s per test
 * would kill honest runs. A hung test still fails, just later. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 900

static int open_dev(struct __test_metadata *_metadata)
{
	int fd = open(h_dev_path(), O_RDWR);

	ASSERT_LE(0, fd) TH_LOG("open %s: %s", h_dev_path(), strerror(errno));
	return fd;
}

/* ioctl() returning -errno, or the non-negative result. */
static int xioctl(int fd, unsigned long cmd, void *arg)
{
	int r = ioctl(fd, cmd, arg);

	return r < 0 ? -errno : r;
}

/*
 * Unknown commands go the C driver's way (vhost_net_ioctl's default case):
 * the owner check first (-EPERM), then the vring index at the argument
 * (-EFAULT, -ENOBUFS), and only then -ENOTTY.
 */
TEST(unknown_ioctl_follows_the_c_driver)
{
	int fd = open_dev(_metadata);
	char buf[64] = { 0 };
	const unsigned long cmds[] = {
		_IO(VHOST_VIRTIO, 0x7f), 0x5401 /* TCGETS */, _IOW('x', 1, int),
		/* A known number with the wrong size bits is a different command. */
		_IOW(VHOST_VIRTIO, 0x10, __u32),
	};
	unsigned int i;

	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		EXPECT_EQ(-EPERM, xioctl(fd, cmds[i], buf));
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		buf[0] = 0;
		EXPECT_EQ(-ENOTTY, xioctl(fd, cmds[i], buf));
		buf[0] = 7;
		EXPECT_EQ(-ENOBUFS, xioctl(fd, cmds[i], buf));
		EXPECT_EQ(-EFAULT, xioctl(fd, cmds[i], NULL));
	}
	close(fd);
}

TEST(ioctls_before_set_owner_are_eperm)
{
	int fd = open_dev(_metadata);
	struct vhost_vring_state s = { .index = 0, .num = 256 };
	struct vhost_vring_file f = { .index = 0, .fd = -1 };
	struct vhost_vring_addr a = { 0 };
	struct { struct vhost_memory h; struct vhost_memory_region r[1]; } m = { 0 };
	__u64 u = 0;

	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_MEM_TABLE, &m));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_VRING_NUM, &s));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_VRING_BASE, &s));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_GET_VRING_BASE, &s));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_VRING_KICK, &f));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_VRING_CALL, &f));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_VRING_ERR, &f));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_NET_SET_BACKEND, &f));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_SET_LOG_BASE, &u));
	EXPECT_EQ(-EPERM, xioctl(fd, VHOST_RESET_OWNER, NULL));
	/* Feature queries need no owner, as in the C driver. */
	EXPECT_EQ(0, xioctl(fd, VHOST_GET_FEATURES, &u));
	close(fd);
}

TEST(second_set_owner_is_ebusy)
{
	int fd = open_dev(_metadata);

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(-EBUSY, xioctl(fd, VHOST_SET_OWNER, NULL));
	/* RESET_OWNER by the owner makes the device ownable again. */
	EXPECT_EQ(0, xioctl(fd, VHOST_RESET_OWNER, NULL));
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	close(fd);
}

TEST(non_owner_process_is_eperm)
{
	int fd = open_dev(_metadata);
	struct vhost_vring_state s = { .index = 0, .num = 256 };
	int status;
	pid_t pid;

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		/* A forked child has its own mm: it is not the owner. */
		int ok = xioctl(fd, VHOST_SET_VRING_NUM, &s) == -EPERM &&
			 xioctl(fd, VHOST_RESET_OWNER, NULL) == -EPERM &&
			 xioctl(fd, VHOST_SET_OWNER, NULL) == -EBUSY;
		_exit(ok ? 0 : 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The owner itself is still accepted. */
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_VRING_NUM, &s));
	close(fd);
}

TEST(features_offered_and_checked)
{
	int fd = open_dev(_metadata);
	__u64 want = (1ULL << VHOST_NET_F_VIRTIO_NET_HDR) | (1ULL << VIRTIO_NET_F_MRG_RXBUF) |
		     (1ULL << VIRTIO_RING_F_INDIRECT_DESC) | (1ULL << VIRTIO_RING_F_EVENT_IDX) |
		     (1ULL << VIRTIO_F_NOTIFY_ON_EMPTY) | (1ULL << VIRTIO_F_ANY_LAYOUT) |
		     (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_F_RING_RESET) |
		     (1ULL << VIRTIO_F_RING_PACKED) | (1ULL << VIRTIO_F_IN_ORDER) |
		     (1ULL << VHOST_F_LOG_ALL) | (1ULL << VIRTIO_F_ACCESS_PLATFORM);
	__u64 f = 0, bad;

	if (h_on_c_driver())
		SKIP(close(fd); return, "the feature set of vhost-net-rs (C's differs: no packed ring, the UDP-tunnel GSO bits)");
	ASSERT_EQ(0, xioctl(fd, VHOST_GET_FEATURES, &f));
	EXPECT_EQ(want, f);
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES, &f));
	bad = 1ULL << 63;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES, &bad));
	/* Bits 36 (ORDER_PLATFORM) and 38 (NOTIFICATION_DATA) are not offered. */
	bad = 1ULL << 36;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES, &bad));
	bad = 1ULL << 38;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES, &bad));

	/* The v2 IOTLB messages, as C, and batches of them, which C's
	 * vhost-net does not take. */
	f = 0x5a5a;
	ASSERT_EQ(0, xioctl(fd, VHOST_GET_BACKEND_FEATURES, &f));
	EXPECT_EQ((1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2) | (1ULL << VHOST_BACKEND_F_IOTLB_BATCH), f);
	bad = 1ULL << VHOST_BACKEND_F_IOTLB_ASID;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_BACKEND_FEATURES, &bad));
	close(fd);
}

/*
 * The feature words past the first (VHOST_GET/SET_FEATURES_ARRAY): both
 * drivers offer the UDP-tunnel GSO bits 65 and 67 in the second word, as
 * Linux 7.3's vhost_net_bits does, and neither their checksum variants (66,
 * 68: tun's business, not vhost's) nor anything past word 2.
 */
#define TNL_WORD	(1ULL << (VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO - 64) | \
			 1ULL << (VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO - 64))

TEST(features_array)
{
	int fd = open_dev(_metadata);
	__u64 buf[5] = { 4, ~0ULL, ~0ULL, ~0ULL, ~0ULL };
	__u64 f, csum[] = { VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO_CSUM,
			    VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO_CSUM };
	unsigned int i;

	ASSERT_EQ(0, xioctl(fd, VHOST_GET_FEATURES, &f));
	ASSERT_EQ(0, xioctl(fd, VHOST_GET_FEATURES_ARRAY, buf));
	EXPECT_EQ(f, buf[1]);
	EXPECT_EQ(TNL_WORD, buf[2]);
	/* Words past what the driver knows are zeroed, not left as they were. */
	EXPECT_EQ(0, buf[3]);
	EXPECT_EQ(0, buf[4]);
	/* A count of 1 is the first word alone; nothing past it is written. */
	buf[0] = 1; buf[2] = 0x5a5a;
	ASSERT_EQ(0, xioctl(fd, VHOST_GET_FEATURES_ARRAY, buf));
	EXPECT_EQ(f, buf[1]);
	EXPECT_EQ(0x5a5a, buf[2]);
	/* A bit in a word past the driver's: refused. */
	buf[0] = 3; buf[1] = f & ~(1ULL << VHOST_F_LOG_ALL); buf[2] = 0; buf[3] = 1;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	buf[3] = 0;
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	/* The tunnel bits, together and alone. */
	buf[2] = TNL_WORD;
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	buf[2] = 1ULL << (VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO - 64);
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	buf[2] = 1ULL << (VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO - 64);
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	/* Their checksum variants are not vhost features. */
	for (i = 0; i < 2; i++) {
		buf[2] = TNL_WORD | 1ULL << (csum[i] - 64);
		EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf)) TH_LOG("bit %llu", csum[i]);
	}
	/* Any other bit of the second word. */
	buf[2] = 1ULL << 0;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	buf[2] = 1ULL << 63;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	/* Counts of 0 and 1 set the first word and clear the second. */
	buf[0] = 0;
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	buf[0] = 1; buf[2] = ~0ULL;
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	close(fd);
}

/* What vhost-net-rs shows in fdinfo: both words as negotiated. */
TEST(fdinfo_shows_the_second_feature_word)
{
	int fd = open_dev(_metadata);
	__u64 buf[3] = { 2, 1ULL << VIRTIO_F_VERSION_1, TNL_WORD };
	char path[64], info[4096], want[64];
	ssize_t n;
	int f;

	if (h_on_c_driver())
		SKIP(close(fd); return, "vhost-net-rs's fdinfo lines");
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_FEATURES_ARRAY, buf));
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = open(path, O_RDONLY);
	ASSERT_LE(0, f);
	n = read(f, info, sizeof(info) - 1);
	close(f);
	ASSERT_LT(0, n);
	info[n] = 0;
	snprintf(want, sizeof(want), "vhost-net-rs-features:\t%#llx\n", 1ULL << VIRTIO_F_VERSION_1);
	EXPECT_NE(NULL, strstr(info, want)) TH_LOG("%s", info);
	snprintf(want, sizeof(want), "vhost-net-rs-features-1:\t%#llx\n", TNL_WORD);
	EXPECT_NE(NULL, strstr(info, want)) TH_LOG("%s", info);
	close(fd);
}

TEST(vring_index_out_of_range_is_enobufs)
{
	int fd = open_dev(_metadata);
	struct vhost_vring_state s = { .index = 2, .num = 256 };

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(-ENOBUFS, xioctl(fd, VHOST_SET_VRING_NUM, &s));
	s.index = 0xffffffff;
	EXPECT_EQ(-ENOBUFS, xioctl(fd, VHOST_GET_VRING_BASE, &s));
	close(fd);
}

TEST(vring_sizes)
{
	int fd = open_dev(_metadata);
	struct vhost_vring_state s = { 0 };
	unsigned int bad[] = { 0, 3, 6, 1000, 32767, 65535, 65536, 1u << 31 };
	unsigned int n;
	size_t i;

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	for (n = 1; n <= 32768; n <<= 1) {
		s.index = n & 1;
		s.num = n;
		EXPECT_EQ(0, xioctl(fd, VHOST_SET_VRING_NUM, &s)) TH_LOG("num=%u", n);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s.num = bad[i];
		EXPECT_EQ(-EINVAL, xioctl(fd, VHOST_SET_VRING_NUM, &s)) TH_LOG("num=%u", bad[i]);
	}
	close(fd);
}

TEST(vring_base_roundtrip)
{
	int fd = open_dev(_metadata);
	struct vhost_vring_state s = { .index = 1, .num = 65535 };

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_VRING_BASE, &s));
	s.num = 0;
	ASSERT_EQ(0, xioctl(fd, VHOST_GET_VRING_BASE, &s));
	EXPECT_EQ(1, s.index);
	EXPECT_EQ(65535, s.num);
	s.num = 65536;
	EXPECT_EQ(-EINVAL, xioctl(fd, VHOST_SET_VRING_BASE, &s));
	close(fd);
}

TEST(vring_addr_checks)
{
	int fd = open_dev(_metadata);
	struct vhost_vring_addr a = {
		.index = 0, .desc_user_addr = 0x10000, .avail_user_addr = 0x20000,
		.used_user_addr = 0x30000,
	};

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	a.flags = 2;
	EXPECT_EQ(-EOPNOTSUPP, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	a.flags = 0;
	a.used_user_addr = 0x30002;	/* used ring must be 4-byte aligned */
	EXPECT_EQ(-EINVAL, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	a.used_user_addr = 0x30000;
	a.avail_user_addr = 0x20001;	/* avail ring must be 2-byte aligned */
	EXPECT_EQ(-EINVAL, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	a.avail_user_addr = 0x20000;
	/* The descriptor table needs no alignment (C reads it byte-wise). */
	a.desc_user_addr = 0x10008;
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	/* Without a backend, a range outside user space is taken (C checks it
	 * when a backend is attached). */
	a.desc_user_addr = 0xffff888000000000ULL;
	EXPECT_EQ(0, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	close(fd);
}

/*
 * Backend rules of the C driver (vhost_net_set_backend), as measured on it:
 * before the ring addresses are set, any SET_BACKEND is -EFAULT, an unbind
 * and a non-socket fd alike; a ring outside user space is -EFAULT at
 * attach, and with a backend attached SET_VRING_ADDR refuses one with
 * -EINVAL; binding the attached tap again changes nothing.
 */
TEST(backend_and_ring_address_rules)
{
	struct h_opts o = { .num = 64, .event_idx = true, .mrg_rxbuf = true, .version_1 = true,
			    .tap_offload = -1 };
	struct vhost_vring_file b = { .index = 1, .fd = -1 };
	struct vhost_vring_addr a = { .index = 1 };
	struct h_dev d;
	int fd = open_dev(_metadata), pipefd[2];

	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(-EFAULT, xioctl(fd, VHOST_NET_SET_BACKEND, &b));
	ASSERT_EQ(0, pipe(pipefd));
	b.fd = pipefd[0];
	EXPECT_EQ(-EFAULT, xioctl(fd, VHOST_NET_SET_BACKEND, &b));
	close(pipefd[0]);
	close(pipefd[1]);
	close(fd);

	ASSERT_EQ(0, h_setup(&d, &o));
	a.desc_user_addr = (uint64_t)(uintptr_t)d.vq[1].vr.desc;
	a.avail_user_addr = (uint64_t)(uintptr_t)d.vq[1].vr.avail;
	a.used_user_addr = 0xffff888000000000ULL;	/* a kernel address */
	EXPECT_EQ(-EINVAL, xioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 1));
	/* The same tap again: nothing changes, traffic goes on. */
	b.fd = d.tap;
	EXPECT_EQ(0, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 2));
	/* Detached, the same address is taken, and the attach refuses it. */
	b.fd = -1;
	EXPECT_EQ(0, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	EXPECT_EQ(0, xioctl(d.fd, VHOST_SET_VRING_ADDR, &a));
	b.fd = d.tap;
	EXPECT_EQ(-EFAULT, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	h_teardown(&d);
}

/*
 * What the C driver's SET_BACKEND really checks first (vhost_vq_access_ok)
 * is the memory table: a device that never had one refuses even an unbind
 * with -EFAULT, whether or not the ring addresses are set. RESET_OWNER
 * leaves an empty table behind (vhost_dev_reset_owner), so after it an
 * unbind is accepted with nothing else set, while an attach still needs
 * the ring addresses (-EFAULT).
 */
TEST(backend_needs_a_memory_table)
{
	struct h_opts o = { .num = 64, .event_idx = true, .mrg_rxbuf = true, .version_1 = true,
			    .tap_offload = -1 };
	struct vhost_vring_file b = { .index = 0, .fd = -1 };
	struct vhost_vring_addr a = { .index = 0 };
	struct vhost_vring_state num = { .index = 0, .num = 64 };
	struct h_dev d;
	int fd;

	ASSERT_EQ(0, h_setup(&d, &o));
	/* A fresh device with ring addresses but no table. */
	fd = open_dev(_metadata);
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_VRING_NUM, &num));
	a.desc_user_addr = (uint64_t)(uintptr_t)d.vq[0].vr.desc;
	a.avail_user_addr = (uint64_t)(uintptr_t)d.vq[0].vr.avail;
	a.used_user_addr = (uint64_t)(uintptr_t)d.vq[0].vr.used;
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_VRING_ADDR, &a));
	EXPECT_EQ(-EFAULT, xioctl(fd, VHOST_NET_SET_BACKEND, &b));
	close(fd);
	/* After RESET_OWNER: an unbind with nothing set is fine, an attach
	 * without ring addresses is not. */
	b.fd = -1;
	ASSERT_EQ(0, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	b.index = 1;
	ASSERT_EQ(0, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	ASSERT_EQ(0, xioctl(d.fd, VHOST_RESET_OWNER, NULL));
	ASSERT_EQ(0, xioctl(d.fd, VHOST_SET_OWNER, NULL));
	b.index = 0;
	EXPECT_EQ(0, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	b.fd = d.tap;
	EXPECT_EQ(-EFAULT, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	b.fd = -1;
	EXPECT_EQ(0, xioctl(d.fd, VHOST_NET_SET_BACKEND, &b));
	h_teardown(&d);
}

struct memtab {
	struct vhost_memory h;
	struct vhost_memory_region r[80];
};

static int set_mem(int fd, struct memtab *m, unsigned int n)
{
	m->h.nregions = n;
	return xioctl(fd, VHOST_SET_MEM_TABLE, m);
}

/*
 * The memory-table rules of the C driver (drivers/vhost/vhost.c,
 * vhost_set_memory, and vhost_iotlb_add_range_ctx in iotlb.c): each region
 * is added to an interval tree as [gpa, gpa + size - 1], so
 *  - byte granularity: no alignment rule for gpa, size or user address;
 *  - overlapping regions are accepted (the tree allows them);
 *  - a region whose last byte is below its first (size 0 at gpa > 0, or a
 *    range that wraps past 2^64) is -EFAULT, as is every other refusal;
 *  - user addresses are checked (access_ok) only for queues that have a
 *    backend, so a kernel address is refused once a ring is live.
 */
TEST(mem_table_rules)
{
	int fd = open_dev(_metadata);
	struct memtab *m = calloc(1, sizeof(*m));
	struct h_opts o = { .num = 64, .event_idx = true, .mrg_rxbuf = true, .version_1 = true,
			    .tap_offload = -1 };
	struct vhost_memory_region live[2];
	struct h_dev d;
	unsigned int i;
	int klog_before;

	ASSERT_NE(NULL, m);
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	/* Two ordinary regions, given out of order. */
	m->r[0] = (struct vhost_memory_region){ 0x100000, 0x100000, 0x7f0000000000ULL, 0 };
	m->r[1] = (struct vhost_memory_region){ 0x0, 0x80000, 0x7f1000000000ULL, 0 };
	EXPECT_EQ(0, set_mem(fd, m, 2));
	EXPECT_EQ(0, set_mem(fd, m, 0));
	/* Overlapping guest ranges are accepted, as in the C driver. */
	m->r[1].memory_size = 0x100001000ULL;
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1].memory_size = 0x101000;
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1] = m->r[0];
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1] = (struct vhost_memory_region){ 0x0, 0x80000, 0x7f1000000000ULL, 0 };
	/* Wrapping around 2^64. */
	m->r[1].guest_phys_addr = 0xfffffffffffff000ULL;
	m->r[1].memory_size = 0x2000;
	EXPECT_EQ(-EFAULT, set_mem(fd, m, 2));
	/* Zero size. */
	m->r[1].guest_phys_addr = 0x400000;
	m->r[1].memory_size = 0;
	EXPECT_EQ(-EFAULT, set_mem(fd, m, 2));
	/* Unaligned and odd-sized regions: byte granularity, as in C. */
	m->r[1].memory_size = 0x1800;
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1].memory_size = 0x1001;
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1].memory_size = 0x1000;
	m->r[1].userspace_addr += 8;
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1].guest_phys_addr = 0x400123;
	m->r[1].memory_size = 0x777;
	m->r[1].userspace_addr = 0x7f1000000123ULL;
	EXPECT_EQ(0, set_mem(fd, m, 2));
	m->r[1] = (struct vhost_memory_region){ 0x0, 0x80000, 0x7f1000000000ULL, 0 };
	/* Non-zero padding is an unknown extension. */
	m->h.padding = 1;
	EXPECT_EQ(-EOPNOTSUPP, set_mem(fd, m, 0));
	m->h.padding = 0;
	/* More regions than max_mem_regions (default 64). */
	for (i = 0; i < 65; i++)
		m->r[i] = (struct vhost_memory_region){ i * 0x1000ULL, 0x1000, 0x10000000ULL + i * 0x1000ULL, 0 };
	EXPECT_EQ(0, set_mem(fd, m, 64));
	klog_before = h_klog_count("max_mem_regions=65 or more");
	EXPECT_EQ(-E2BIG, set_mem(fd, m, 65));
	/* vhost-net-rs says which parameter to raise (C says nothing), once
	 * per file however often the client retries. */
	if (!h_on_c_driver()) {
		EXPECT_EQ(klog_before + 1, h_klog_count("max_mem_regions=65 or more"));
		EXPECT_EQ(-E2BIG, set_mem(fd, m, 65));
		EXPECT_EQ(klog_before + 1, h_klog_count("max_mem_regions=65 or more"));
	}
	/* A bad user pointer. */
	EXPECT_EQ(-EFAULT, xioctl(fd, VHOST_SET_MEM_TABLE, (void *)8));
	free(m);
	close(fd);

	/* Kernel addresses, on a device whose rings are live; the device keeps
	 * its old table and carries traffic. */
	ASSERT_EQ(0, h_setup(&d, &o));
	live[0] = (struct vhost_memory_region){ 0, H_MEM_SIZE, (uint64_t)(uintptr_t)d.mem, 0 };
	live[1] = (struct vhost_memory_region){ H_MEM_SIZE, 0x1000, 0xffff888000000000ULL, 0 };
	EXPECT_EQ(-EFAULT, h_set_mem_table(d.fd, live, 2));
	EXPECT_EQ(0, h_tx_one(&d, d.pkt, 1));
	EXPECT_EQ(0, h_rx_one(&d, 2, false));
	h_teardown(&d);
}

TEST(fdinfo_shows_state)
{
	int fd = open_dev(_metadata);
	char path[64], buf[4096];
	ssize_t n;
	int ifd;

	if (h_on_c_driver())
		SKIP(close(fd); return, "fdinfo is vhost-net-rs's own");
	ASSERT_EQ(0, xioctl(fd, VHOST_SET_OWNER, NULL));
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	ifd = open(path, O_RDONLY);
	ASSERT_LE(0, ifd);
	n = read(ifd, buf, sizeof(buf) - 1);
	ASSERT_LT(0, n);
	buf[n] = 0;
	EXPECT_NE(NULL, strstr(buf, "vhost-net-rs-owner:\t1")) TH_LOG("%s", buf);
	EXPECT_NE(NULL, strstr(buf, "vq1:")) TH_LOG("%s", buf);
	close(ifd);
	close(fd);
}

TEST_HARNESS_MAIN
