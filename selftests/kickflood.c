// SPDX-License-Identifier: GPL-2.0
/*
 * kickflood: a guest that kicks an empty TX ring in a tight loop, ignoring
 * NO_NOTIFY, must not take a host CPU away from everything else (issue 33,
 * defect 1).
 *
 * Each kick sets the queue's work pending again before the worker's run
 * (about a microsecond, the ring being empty) ends, so the worker may find
 * work at every turn and never sleep. Unless it calls cond_resched()
 * between runs, as C's vhost_run_work_list does after every work item, a
 * kernel that never forces preemption (PREEMPT_NONE) would not switch away
 * from it: whatever else wants that CPU would starve, the soft-lockup
 * watchdog would fire after 20 s and RCU would report a stall.
 *
 * No kernel this module builds for can show it on x86: from 7.2 on, an
 * architecture with lazy preemption (x86 among them) offers neither
 * PREEMPT_NONE nor PREEMPT_VOLUNTARY (kernel/Kconfig.preempt: NONE depends
 * on ARCH_NO_PREEMPT, VOLUNTARY on !ARCH_HAS_PREEMPT_LAZY), and
 * sched_dynamic_mode() refuses preempt=none and preempt=voluntary there
 * ("Dynamic Preempt: unsupported mode"). Debian's 7.2 and 7.3 kernels run
 * lazy, the test kernel too: the tick turns a lazy reschedule request into
 * a forced one, and the worker is preempted whatever it does. The test
 * stays, for the kernels where nothing forces preemption, and as a check
 * that a flood costs the CPU's other tasks nothing on these.
 *
 * The worker (created at VHOST_SET_OWNER, a thread of this process that
 * inherits its CPU mask) and a CPU hog share one CPU; this thread kicks
 * from another. The hog must keep running: no gap of a second in its
 * progress, the worker switching away from the CPU again and again, and
 * no soft lockup or RCU stall in the kernel log.
 */
#include "harness.h"
#include "kselftest_harness.h"

#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 300

static const struct h_opts opts = {
	.num = 256, .event_idx = true, .indirect = true, .mrg_rxbuf = true, .version_1 = true,
	.tap_offload = -1,
};

/* How long the flood lasts (VNR_KICKFLOOD_SECS): a gap of a second in the
 * hog's progress would show the defect at once; 25 s or more gives the
 * soft-lockup watchdog (2 * watchdog_thresh, 20 s by default) time to
 * report the CPU as well. */
#define FLOOD_SECS_DEFAULT	5
#define MAX_GAP_NS		(1000ULL * 1000 * 1000)

struct hog {
	pthread_t thr;
	volatile bool stop;
	volatile uint64_t loops;
	uint64_t max_gap_ns;	/* longest time between two of its loops */
};

static void *hog_fn(void *arg)
{
	struct hog *h = arg;
	uint64_t last = h_now_ns();

	while (!h->stop) {
		uint64_t now = h_now_ns();

		if (now - last > h->max_gap_ns)
			h->max_gap_ns = now - last;
		last = now;
		h->loops++;
	}
	return NULL;
}

static int pin(pid_t tid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(tid, sizeof(set), &set) ? -errno : 0;
}

/* The TX worker among this process's threads: vhost-net-rs's one worker
 * per device, "vhost-net-rs" ("vhost-net-rs-tx" with workers=2), or C's,
 * "vhost-<pid>". */
static pid_t tx_worker(void)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	pid_t found = 0;

	if (!dir)
		return 0;
	while ((e = readdir(dir))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
		if (!strcmp(comm, "vhost-net-rs") || !strcmp(comm, "vhost-net-rs-tx") ||
		    (!strncmp(comm, "vhost-", 6) && strncmp(comm, "vhost-net-rs", 12)))
			found = atoi(e->d_name);
	}
	closedir(dir);
	return found;
}

/* A "voluntary_ctxt_switches" or "nonvoluntary_ctxt_switches" count of
 * thread tid; -1 if it cannot be read. */
static long long ctxt_switches(pid_t tid, const char *which)
{
	char path[64], line[128];
	long long v = -1;
	size_t n = strlen(which);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, which, n) && line[n] == ':')
			v = atoll(line + n + 1);
	fclose(f);
	return v;
}

static int klog_bad(void)
{
	return h_klog_count("soft lockup") + h_klog_count("rcu_sched self-detected stall") +
	       h_klog_count("rcu_preempt self-detected stall") +
	       h_klog_count("rcu: INFO: rcu_sched detected stalls") +
	       h_klog_count("rcu: INFO: rcu_preempt detected stalls");
}

TEST(kick_flood_on_an_empty_ring_lets_the_cpu_go)
{
	const char *env = getenv("VNR_KICKFLOOD_SECS");
	unsigned int secs = env ? atoi(env) : FLOOD_SECS_DEFAULT;
	long long vol0, invol0, vol1, invol1;
	int ncpu = sysconf(_SC_NPROCESSORS_ONLN), cpu_w, cpu_k = 0, bad0;
	struct hog h = { 0 };
	uint64_t kicks = 0, end, one = 1;
	struct h_dev d;
	pid_t worker;
	FILE *f;

	if (ncpu < 2)
		SKIP(return, "needs two CPUs: one for the worker and the hog, one to kick from");
	cpu_w = ncpu - 1;
	f = fopen("/sys/kernel/debug/sched/preempt", "r");
	if (f) {
		char mode[128] = "";

		if (fgets(mode, sizeof(mode), f))
			TH_LOG("preemption: %s", strtok(mode, "\n"));
		fclose(f);
	}
	/* The worker is made at SET_OWNER with this thread's CPU mask. */
	ASSERT_EQ(0, pin(0, cpu_w));
	ASSERT_EQ(0, h_setup(&d, &opts));
	worker = tx_worker();
	ASSERT_NE(0, worker) TH_LOG("no TX worker among this process's threads");
	/* Pinned by inheritance; pin it outright where that is allowed. */
	pin(worker, cpu_w);
	ASSERT_EQ(0, pthread_create(&h.thr, NULL, hog_fn, &h));
	ASSERT_EQ(0, pin(0, cpu_k));
	usleep(100 * 1000);

	bad0 = klog_bad();
	vol0 = ctxt_switches(worker, "voluntary_ctxt_switches");
	invol0 = ctxt_switches(worker, "nonvoluntary_ctxt_switches");
	h.max_gap_ns = 0;
	/* No buffers: every kick finds the ring empty. */
	end = h_now_ns() + (uint64_t)secs * 1000000000ULL;
	for (;;) {
		unsigned int i;

		for (i = 0; i < 256; i++)
			if (write(d.vq[1].kick, &one, sizeof(one)) == sizeof(one))
				kicks++;
		if (h_now_ns() > end)
			break;
	}
	vol1 = ctxt_switches(worker, "voluntary_ctxt_switches");
	invol1 = ctxt_switches(worker, "nonvoluntary_ctxt_switches");
	h.stop = true;
	pthread_join(h.thr, NULL);
	TH_LOG("%u s: %llu kicks; hog %llu loops, longest gap %llu ms; worker %d switched away %lld times "
	       "(%lld voluntary, %lld not)",
	       secs, (unsigned long long)kicks, (unsigned long long)h.loops,
	       (unsigned long long)(h.max_gap_ns / 1000000), worker, (vol1 - vol0) + (invol1 - invol0),
	       vol1 - vol0, invol1 - invol0);
	EXPECT_GT(MAX_GAP_NS, h.max_gap_ns)
		TH_LOG("the hog sharing the worker's CPU did not run for %llu ms",
		       (unsigned long long)(h.max_gap_ns / 1000000));
	/* A fair share switches every few ms; 10 a second is a floor. */
	EXPECT_LE(10LL * secs, (vol1 - vol0) + (invol1 - invol0))
		TH_LOG("the worker kept its CPU through the flood");
	EXPECT_EQ(bad0, klog_bad()) TH_LOG("soft lockup or RCU stall in the kernel log");
	h_teardown(&d);
}

TEST_HARNESS_MAIN
