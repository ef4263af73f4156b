// SPDX-License-Identifier: GPL-2.0
/*
 * stat: scripts/vhost-net-rs-stat (installed by the package as
 * /usr/sbin/vhost-net-rs-stat) on a device that moves traffic.
 *
 * The test holds a device with its two queues on a tap while a flood thread
 * sends frames both ways, and runs the tool on its own pid twice: it must
 * list the device under this process and fd with an owner, and the two
 * queues (rx vq0, tx vq1) running with a backend, whose packet counters grow
 * between the two listings. --raw must print the module's fdinfo lines.
 * Once the device is closed, the tool lists none for this process. The
 * counters are the module's (its fdinfo); on the C driver, which prints
 * none, the tool lists nothing, and the case skips.
 *
 * VNR_STAT names the tool; by default the one in this tree's scripts/.
 */
#include "harness.h"
#include "kselftest_harness.h"
#include <pthread.h>

#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 120

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1,
};

/* What one listing says of this process's device on fd `fd`. */
struct listing {
	int devices;	/* blocks for this pid and fd */
	bool owner;
	int queues;	/* queue lines under it */
	bool running[2], backend[2];
	unsigned long long packets[2];
	char text[4096];
};

static const char *tool(void)
{
	static char path[PATH_MAX + 64];
	const char *env = getenv("VNR_STAT");
	char exe[PATH_MAX];
	ssize_t n;

	if (env)
		return env;
	/* build/stat -> ../../scripts/vhost-net-rs-stat */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return "scripts/vhost-net-rs-stat";
	exe[n] = 0;
	*strrchr(exe, '/') = 0;
	snprintf(path, sizeof(path), "%s/../../scripts/vhost-net-rs-stat", exe);
	return path;
}

/* Runs the tool with `args` for this pid; returns its exit status and
 * fills `l` from its output. */
static int run_tool(const char *args, int fd, struct listing *l)
{
	char cmd[PATH_MAX + 128], line[512], head[64];
	size_t used = 0;
	bool mine = false;
	int last = -1;	/* the queue whose counters line comes next */
	FILE *p;
	int st;

	memset(l, 0, sizeof(*l));
	snprintf(cmd, sizeof(cmd), "%s -p %d %s 2>&1", tool(), getpid(), args);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	snprintf(head, sizeof(head), "%d ", getpid());
	while (fgets(line, sizeof(line), p)) {
		unsigned int q;
		char dir[4];
		int f;

		if (used + strlen(line) < sizeof(l->text)) {
			strcpy(l->text + used, line);
			used += strlen(line);
		}
		if (!strncmp(line, head, strlen(head))) {
			/* PID COMM FD NODE owner=... */
			mine = sscanf(line, "%*d %*s %d", &f) == 1 && f == fd;
			if (mine) {
				l->devices++;
				l->owner = strstr(line, " owner=yes") != NULL;
			}
		} else if (mine && sscanf(line, " %3s vq%u", dir, &q) == 2 && q < 2) {
			l->queues++;
			last = q;
			l->running[q] = strstr(line, " running=1") != NULL;
			l->backend[q] = strstr(line, " backend=1") != NULL;
			/* vq0 receives, vq1 transmits: a wrong name fails the count. */
			if (strcmp(dir, q ? "tx" : "rx"))
				l->queues += 100;
		} else if (mine && last >= 0 && strstr(line, "packets=")) {
			sscanf(strstr(line, "packets="), "packets=%llu", &l->packets[last]);
			last = -1;
		}
	}
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(stat_lists_two_queues_with_moving_counters)
{
	struct listing a, b;
	struct h_flood fl;
	struct h_dev d;
	int fd;

	if (h_on_c_driver())
		SKIP(return, "the C driver's fdinfo has no counters for the tool to list");
	ASSERT_EQ(0, h_setup(&d, &opts));
	h_flood_start(&fl, &d);
	usleep(200 * 1000);
	ASSERT_EQ(0, run_tool("", d.fd, &a)) TH_LOG("%s", a.text);
	usleep(300 * 1000);
	ASSERT_EQ(0, run_tool("", d.fd, &b)) TH_LOG("%s", b.text);
	EXPECT_LT(0, h_flood_stop(&fl));
	EXPECT_EQ(0, fl.bad);

	EXPECT_EQ(1, a.devices) TH_LOG("%s", a.text);
	EXPECT_TRUE(a.owner) TH_LOG("%s", a.text);
	EXPECT_EQ(2, a.queues) TH_LOG("%s", a.text);
	EXPECT_TRUE(a.running[0] && a.running[1] && a.backend[0] && a.backend[1]) TH_LOG("%s", a.text);
	EXPECT_LT(0, a.packets[0]) TH_LOG("%s", a.text);
	EXPECT_LT(0, a.packets[1]) TH_LOG("%s", a.text);
	EXPECT_LT(a.packets[0], b.packets[0]) TH_LOG("rx did not move: %s", b.text);
	EXPECT_LT(a.packets[1], b.packets[1]) TH_LOG("tx did not move: %s", b.text);

	ASSERT_EQ(0, run_tool("--raw", d.fd, &a));
	EXPECT_NE(NULL, strstr(a.text, "vhost-net-rs-owner:")) TH_LOG("%s", a.text);
	EXPECT_NE(NULL, strstr(a.text, "vq1:")) TH_LOG("%s", a.text);

	fd = d.fd;
	h_teardown(&d);
	ASSERT_EQ(0, run_tool("", fd, &a));
	EXPECT_EQ(0, a.devices) TH_LOG("%s", a.text);
	EXPECT_NE(NULL, strstr(a.text, "no open vhost-net-rs devices")) TH_LOG("%s", a.text);
}

TEST_HARNESS_MAIN
