# SPDX-License-Identifier: GPL-2.0
#
# vhost-net-rs: out-of-tree Rust kernel module.
#
#   make                 build vhost_net_rs.ko against the cached test kernel
#   make KDIR=/path      build against any Rust-enabled Linux 7.x build tree
#   make CLIPPY=1        the same, with clippy lints (must stay warning-free)
#   make setup           install tools and build the test kernel (scripts/setup)
#   make check           run every selftest in a VM (the test command)
#   make demo            build, boot the VM, load the module, show the device
#   make shell           interactive shell in the test VM
#   make host-test       cargo unit tests of the ring/memory code on the host
#   make fuzz            fuzz the ring parser for 60 s (FUZZ_SECS=N for longer)
#   make soak MINUTES=N  bidirectional flood with every payload checked
#   make check-e2e       make check with the whole end-to-end set (12 guest boots)
#   make check-debug     the selftests on the debug kernel (KASAN, lockdep, ...)
#   make clean

# The build runs inside the kernel's own make (M=); everything below this
# guard is only for the outer invocation.
ifneq ($(KERNELRELEASE),)
include $(src)/Kbuild
else

SHELL := /bin/bash
ROOT  := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
KDIR  ?= $(shell $(ROOT)/scripts/kdir 2>/dev/null)
KFLAGS := $(shell KDIR=$(KDIR) && source $(ROOT)/scripts/lib.sh && KDIR=$(KDIR) vnr_kmake_flags)

.PHONY: all modules clean setup check check-e2e check-debug demo bench bench-nic shell host-test fuzz soak kdir-check

all: modules

kdir-check:
	@test -n "$(KDIR)" || { echo "No kernel tree: run 'make setup' (or scripts/setup) first, or pass KDIR=/path/to/linux-build." >&2; exit 1; }
	@test -f "$(KDIR)/Module.symvers" || { echo "KDIR=$(KDIR) is not a built kernel tree (no Module.symvers)." >&2; exit 1; }

modules: kdir-check
	$(MAKE) -C $(KDIR) M=$(ROOT) $(KFLAGS) modules

clean:
	@if [ -n "$(KDIR)" ]; then $(MAKE) -C $(KDIR) M=$(ROOT) $(KFLAGS) clean; fi
	rm -rf $(ROOT)/selftests/build

setup:
	$(ROOT)/scripts/setup

check:
	$(ROOT)/selftests/run

check-e2e:
	VNR_E2E=full $(ROOT)/selftests/run

check-debug:
	$(ROOT)/selftests/run --debug

demo:
	$(ROOT)/scripts/demo $(ARGS)

bench:
	$(ROOT)/scripts/bench $(ARGS)

bench-nic:
	$(ROOT)/scripts/nicbench $(ARGS)

shell:
	$(ROOT)/scripts/vm --shell

host-test:
	cd $(ROOT)/tests/host && cargo test --release --quiet

FUZZ_SECS ?= 60
fuzz:
	cd $(ROOT)/tests/host/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run vring corpus/vring -- \
		-max_total_time=$(FUZZ_SECS)

MINUTES ?= 10
soak:
	$(ROOT)/scripts/soak $(MINUTES)

endif
