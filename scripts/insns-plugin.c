// SPDX-License-Identifier: GPL-2.0
/*
 * scripts/insns-plugin.c: a QEMU TCG plugin for `scripts/bench --insns`.
 *
 * Counts the guest instructions executed at kernel addresses (the upper
 * half) and at user addresses, per vCPU, and each time a vCPU runs the
 * marker no-op "nopw 0x4e56(%rax,%rax,1)" at a user address
 * (selftests/bench.c's insn_mark(), at the start and at the end of every
 * timed run) appends a line "VCPU KERNEL USER" with the totals over all
 * vCPUs to the file named by its out= argument; with vcpus=N, followed by
 * each of the first N vCPUs' own total (kernel and user), "ALL0 ALL1 ...":
 * with the bench's threads pinned apart, the last vCPU's is what the data
 * path (the vhost workers, or the userspace baseline's device threads)
 * executed, with the interrupts and scheduling it took there. The difference between a
 * run's two lines is the kernel's (and userspace's) work during that run:
 * unlike time under TCG on a shared host, it does not change with the
 * host's load.
 *
 * With hist=FILE (scripts/profile --insns), it also keeps each kernel
 * translation block's executions, and at every end marker appends
 * "RUN ADDRESS INSTRUCTIONS" lines for the blocks that ran since the start
 * marker (RUN counts the timed runs from 1): the host maps the addresses
 * to symbols with the VM's /proc/kallsyms.
 *
 * Built by scripts/bench with gcc; loaded with
 * -plugin file=insns-plugin.so,out=FILE. The declarations below are the
 * few functions of QEMU's plugin API (version 1, QEMU 7.2, as Debian 12
 * ships it without its header) that this uses; a QEMU whose API changed
 * them needs its own header instead.
 *
 * What it counts: a block's instructions when the block starts (one left
 * early by an exception still counts whole), and the idle loop's too
 * (per second, not per packet). Blocks are never freed, and each marker
 * walks them all: a measuring tool, not for long runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
					  enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
					    enum qemu_plugin_cb_flags flags, void *userdata);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MAX_VCPUS 64
#define KERNEL_HALF 0xffff800000000000ull

/* One counter per vCPU, each written only by its vCPU's thread: kernel
 * instructions, and user ones (the harness's guest side, every process). */
static uint64_t counts[MAX_VCPUS], user_counts[MAX_VCPUS];
static FILE *out, *hist;
static unsigned int marks, vcpus;
static const unsigned char marker[] = { 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x56, 0x4e, 0x00, 0x00 };

/* A kernel translation block: its address and size, and (with hist=)
 * how often it ran since the last marker. Never freed; pushed on a list. */
struct block {
	uint64_t vaddr;
	uint64_t insns;
	uint64_t execs;
	struct block *next;
};
static struct block *blocks;

static void tb_ran(unsigned int vcpu, void *data)
{
	struct block *block = data;

	if (vcpu < MAX_VCPUS)
		__atomic_store_n(&counts[vcpu], counts[vcpu] + block->insns, __ATOMIC_RELAXED);
	if (hist)
		__atomic_fetch_add(&block->execs, 1, __ATOMIC_RELAXED);
}

/* A user translation block ran: its length is the callback's data. */
static void user_tb_ran(unsigned int vcpu, void *data)
{
	if (vcpu < MAX_VCPUS)
		__atomic_store_n(&user_counts[vcpu], user_counts[vcpu] + (uintptr_t)data, __ATOMIC_RELAXED);
}

static void marker_ran(unsigned int vcpu, void *unused)
{
	unsigned int mark = __atomic_fetch_add(&marks, 1, __ATOMIC_RELAXED);
	uint64_t total = 0, user = 0;

	for (int i = 0; i < MAX_VCPUS; i++) {
		total += __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
		user += __atomic_load_n(&user_counts[i], __ATOMIC_RELAXED);
	}
	/* vCPU, kernel instructions so far, user instructions so far, then
	 * each vCPU's own. */
	fprintf(out, "%u %llu %llu", vcpu, (unsigned long long)total, (unsigned long long)user);
	for (unsigned int i = 0; i < vcpus; i++)
		fprintf(out, " %llu", (unsigned long long)(__atomic_load_n(&counts[i], __ATOMIC_RELAXED) +
							     __atomic_load_n(&user_counts[i], __ATOMIC_RELAXED)));
	fputc('\n', out);
	fflush(out);
	if (!hist)
		return;
	for (struct block *b = __atomic_load_n(&blocks, __ATOMIC_ACQUIRE); b; b = b->next) {
		uint64_t execs = __atomic_exchange_n(&b->execs, 0, __ATOMIC_RELAXED);

		if (mark % 2 && execs)
			fprintf(hist, "%u %llx %llu\n", mark / 2 + 1, (unsigned long long)b->vaddr,
				(unsigned long long)(execs * b->insns));
	}
	fflush(hist);
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	if (qemu_plugin_tb_vaddr(tb) >= KERNEL_HALF) {
		struct block *block = calloc(1, sizeof(*block));

		if (!block)
			abort();
		block->vaddr = qemu_plugin_tb_vaddr(tb);
		block->insns = n;
		block->next = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
		while (!__atomic_compare_exchange_n(&blocks, &block->next, block, 0, __ATOMIC_RELEASE,
						    __ATOMIC_RELAXED))
			;
		qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_ran, QEMU_PLUGIN_CB_NO_REGS, block);
		return;
	}
	qemu_plugin_register_vcpu_tb_exec_cb(tb, user_tb_ran, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);

		if (qemu_plugin_insn_size(insn) == sizeof(marker) &&
		    !memcmp(qemu_plugin_insn_data(insn), marker, sizeof(marker)))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, marker_ran, QEMU_PLUGIN_CB_NO_REGS, NULL);
	}
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
	const char *path = NULL, *hist_path = NULL;

	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "out=", 4))
			path = argv[i] + 4;
		else if (!strncmp(argv[i], "hist=", 5))
			hist_path = argv[i] + 5;
		else if (!strncmp(argv[i], "vcpus=", 6))
			vcpus = (unsigned int)strtoul(argv[i] + 6, NULL, 10);
	}
	if (vcpus > MAX_VCPUS)
		vcpus = MAX_VCPUS;
	if (!path) {
		fprintf(stderr, "insns-plugin: needs out=FILE\n");
		return -1;
	}
	out = fopen(path, "a");
	if (!out) {
		perror(path);
		return -1;
	}
	if (hist_path) {
		hist = fopen(hist_path, "a");
		if (!hist) {
			perror(hist_path);
			return -1;
		}
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	return 0;
}
