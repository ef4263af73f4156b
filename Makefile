# SPDX-License-Identifier: GPL-2.0
#
# vhost-net-rs: out-of-tree Rust kernel module.
#
#   make                 build vhost-net-rs.ko against the running kernel's build
#                        tree if scripts/preflight accepts it, else against the
#                        cached test kernel
#   make KDIR=/path      build against any Rust-enabled Linux 7.2+ build tree
#   make preflight       say whether KDIR can take the module, and why not (without
#                        KDIR: the running kernel's tree, or scripts/distro-kdir's)
#   make install         install the module (INSTALL_MOD_PATH= for another root),
#                        run depmod, and install the udev rule, the modprobe
#                        options and a modules-load.d entry (DESTDIR= prefix)
#   make uninstall       remove all of that again
#   make deb             build vhost-net-rs-dkms_VERSION_all.deb (debian/: the
#                        source for DKMS, which rebuilds the module for each new
#                        kernel; see docs/lifecycle.md), and run lintian on it
#   make CLIPPY=1        the same, with clippy lints (must stay warning-free)
#   make setup           install tools and build the test kernel (scripts/setup)
#   make check           check-docs, then every selftest in a VM (the test command)
#   make quick           the inner loop: build with clippy, host unit tests,
#                        and one VM boot with the core suites (ABI, data
#                        path, security) on vhost-net-rs
#   make demo            the ping-flood comparison in the VM: vhost-net-rs, C, userspace,
#                        repeated with medians and spreads (ARGS="--icount --insns":
#                        virtual time, instructions counted; ARGS=--help: the rest)
#   make check-docs      check the README's and docs/' claims against the tree (host only)
#   make results         regenerate results/README.md from the runs it cites
#   make help            this list
#   make shell           interactive shell in the test VM
#   make host-test       cargo unit tests of the ring layer on the host
#   make rustfmt         format the Rust sources with the kernel's .rustfmt.toml
#   make rustfmtcheck    say which Rust sources the kernel's rustfmt would change
#   make fuzz            fuzz the ring parser for 60 s (FUZZ_SECS=N for longer;
#                        FUZZ_TARGET=iotlb for the device IOTLB)
#   make soak MINUTES=N  bidirectional flood with every payload checked
#   make bench           data-path benchmark: vhost-net-rs, C, userspace (scripts/bench)
#   make bench-nic       iperf3 by NIC model (scripts/nicbench)
#   make bench-kvm       real guest on nested KVM: iperf3 and TCP request/response,
#                        rs, C, userspace alternated, with spreads (scripts/kvmbench)
#   make check-e2e       make check with the whole end-to-end set (14 guest boots)
#   make check-debug     the selftests on the debug kernel (KASAN, lockdep, ...)
#   make check-package   the Debian package in Debian 13 (scripts/package-test):
#                        make deb, lintian, install, a kernel upgrade, a kernel
#                        it cannot be built for, remove and purge
#   make check-qemu      the end-to-end cases that differ between QEMUs on Debian
#                        13's QEMU 10.0 and 11.1, rs and C (scripts/debian-qemu,
#                        selftests/qemu-versions.sh)
#   make check-distro    build for Debian 13's stock kernel as a Debian user
#                        would, boot that kernel in the VM and run the
#                        selftests there (scripts/distro-test)
#   make clean

# The build runs inside the kernel's own make (M=), which reads Kbuild; should
# it read this file instead, $(src) is set. Everything below this guard is
# only for the outer invocation (dkms runs that with KERNELRELEASE= given,
# so that variable cannot tell the two apart).
ifneq ($(src),)
include $(src)/Kbuild
else

SHELL := /bin/bash
ROOT  := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
# Whether the user named the tree; install, uninstall and preflight act on
# the running kernel unless they did.
KDIR_GIVEN := $(filter command line environment,$(origin KDIR))
KDIR  ?= $(shell $(ROOT)/scripts/kdir 2>/dev/null)
KFLAGS := $(shell source $(ROOT)/scripts/lib.sh && KDIR=$(KDIR) vnr_module_flags)
RUNNING_KDIR := /lib/modules/$(shell uname -r)/build
# Where `make install` puts things: INSTALL_MOD_PATH prefixes the module
# tree (as for the kernel's modules_install; it defaults to DESTDIR), DESTDIR
# the files under /etc.
INSTALL_MOD_PATH ?= $(DESTDIR)
KRELEASE = $(or $(if $(KDIR_GIVEN),$(shell cat $(KDIR)/include/config/kernel.release 2>/dev/null)),$(shell uname -r))
MODDIR = $(INSTALL_MOD_PATH)/lib/modules/$(KRELEASE)/extra
ETC_FILES = $(DESTDIR)/etc/udev/rules.d/99-vhost-net-rs.rules \
	$(DESTDIR)/etc/modprobe.d/vhost-net-rs.conf \
	$(DESTDIR)/etc/modules-load.d/vhost-net-rs.conf

.PHONY: check-qemu check-package dkms-modules deb rustfmt rustfmtcheck all modules clean setup check quick check-e2e check-debug check-distro demo bench bench-nic bench-kvm shell host-test fuzz soak \
	kdir-check preflight install-check install uninstall
.PHONY: help check-docs results

all: modules

kdir-check:
	@test -n "$(KDIR)" || { echo "No kernel build tree for the running kernel ($$(uname -r)) that can take a Rust module." >&2; \
		echo "  On a distribution kernel: scripts/distro-kdir $$(uname -r) prepares one (see README.md, Install), then run make again." >&2; \
		echo "  On your own kernel: make KDIR=/path/to/its/build/tree. Developers: make setup builds the project's test kernel." >&2; \
		$(ROOT)/scripts/preflight $(RUNNING_KDIR) >/dev/null || true; exit 1; }
	@$(ROOT)/scripts/preflight --quiet $(KDIR) || $(ROOT)/scripts/preflight $(KDIR)

# Without KDIR=, the tree `make` and `make install` would use for the running
# kernel: its own, or the one scripts/distro-kdir made for it (scripts/kdir
# RELEASE); when neither will do, the running kernel's, whose problems are
# the ones to report.
preflight:
	@$(ROOT)/scripts/preflight $(if $(KDIR_GIVEN),$(KDIR),$(or $(shell $(ROOT)/scripts/kdir $(shell uname -r) 2>/dev/null),$(RUNNING_KDIR)))

# Without KDIR=, make install is for the running kernel (its own build tree,
# or the one scripts/distro-kdir made for it): not for the test kernel
# `make` falls back to, whose modules would land on this host.
install-check:
	@if [ -z "$(KDIR_GIVEN)" ] && [ "$$(cat $(KDIR)/include/config/kernel.release 2>/dev/null)" != "$$(uname -r)" ]; then \
		echo "make install: the running kernel ($$(uname -r)) cannot take the module:" >&2; \
		$(ROOT)/scripts/preflight $(RUNNING_KDIR) 2>&1 | tail -n +2 >&2; \
		echo "To install for another kernel, name its tree: make install KDIR=/path/to/build" >&2; \
		exit 1; \
	fi

modules: kdir-check
	$(MAKE) -C $(KDIR) M=$(ROOT) $(KFLAGS) modules

# The kernel's modules_install signs the module when the tree has a signing
# key. A distribution's tree has none (its key stays with the distribution):
# then the module is installed unsigned, which a kernel that does not
# enforce signatures loads, tainting itself 'E'. depmod records that the
# module needs tun where tun is a module, so `modprobe vhost_net_rs` loads
# tun first. INSTALL_MOD_PATH is passed on: the kernel's make does not see
# this file's variables.
# A relative key is under the tree; a PKCS#11 URI counts as present.
SIG_KEY_CONFIG = $(patsubst "%",%,$(shell sed -n 's/^CONFIG_MODULE_SIG_KEY=//p' $(KDIR)/.config 2>/dev/null))
SIGN_KEY = $(if $(filter /% pkcs11:%,$(SIG_KEY_CONFIG)),$(SIG_KEY_CONFIG),$(KDIR)/$(SIG_KEY_CONFIG))
NO_SIGN = $(if $(shell grep -q '^CONFIG_MODULE_SIG_ALL=y' $(KDIR)/.config 2>/dev/null && echo y),$(if $(filter pkcs11:%,$(SIGN_KEY))$(wildcard $(SIGN_KEY)),,CONFIG_MODULE_SIG_ALL=))
install: install-check modules
	$(if $(NO_SIGN),@echo "note: $(KDIR) has no module signing key ($(SIGN_KEY)): installing the module unsigned")
	$(MAKE) -C $(KDIR) M=$(ROOT) $(KFLAGS) INSTALL_MOD_PATH=$(INSTALL_MOD_PATH) INSTALL_MOD_DIR=extra $(NO_SIGN) modules_install
	depmod $(if $(INSTALL_MOD_PATH),-b $(INSTALL_MOD_PATH)) $(KRELEASE)
	install -D -m 0644 $(ROOT)/etc/99-vhost-net-rs.rules $(DESTDIR)/etc/udev/rules.d/99-vhost-net-rs.rules
	install -D -m 0644 $(ROOT)/etc/vhost-net-rs.conf $(DESTDIR)/etc/modprobe.d/vhost-net-rs.conf
	install -D -m 0644 $(ROOT)/etc/modules-load.conf $(DESTDIR)/etc/modules-load.d/vhost-net-rs.conf
	@echo "Installed vhost-net-rs $$(cat $(ROOT)/VERSION) for Linux $(KRELEASE). Load it with: modprobe vhost_net_rs"

# DKMS's MAKE (dkms.conf): against the tree scripts/dkms-prebuild chose
# and built the module against, which it wrote to .vnr-kdir.
dkms-modules:
	@test -s $(ROOT)/.vnr-kdir || { echo "no .vnr-kdir: scripts/dkms-prebuild did not run (dkms.conf's PRE_BUILD)" >&2; exit 1; }
	$(MAKE) -f $(ROOT)/Makefile KDIR="$$(cat $(ROOT)/.vnr-kdir)" modules

# Needs no kernel tree: KDIR= (or the running kernel) only names the release.
uninstall:
	rm -f "$(MODDIR)/vhost-net-rs.ko" "$(MODDIR)"/vhost-net-rs.ko.* $(ETC_FILES)
	depmod $(if $(INSTALL_MOD_PATH),-b $(INSTALL_MOD_PATH)) $(KRELEASE)

# The package is built from the files git knows (without git, as in a copy
# made by git archive: all but what .gitignore names), in a scratch copy, with a
# debian/changelog made from VERSION and the last commit (one version, in
# one place). Needs debhelper and dh-dkms; lintian if installed. The .deb
# lands here.
DEB = vhost-net-rs-dkms_$(shell cat $(ROOT)/VERSION)_all.deb
deb:
	@command -v dpkg-buildpackage >/dev/null && command -v dh_dkms >/dev/null \
		|| { echo "make deb needs debhelper and dh-dkms: apt install debhelper dh-dkms" >&2; exit 1; }
	@set -e; v=$$(cat $(ROOT)/VERSION); w=$$(mktemp -d); trap 'rm -rf "$$w"' EXIT; \
	src=$$w/vhost-net-rs-$$v; mkdir -p "$$src"; \
	cd $(ROOT); if git rev-parse --git-dir >/dev/null 2>&1; then \
		git ls-files -co --exclude-standard -z | grep -zv '^results/' | xargs -0 cp --parents -t "$$src"; \
	else \
		tar --exclude-vcs --exclude-vcs-ignores --exclude=./results \
			$$(sed -n 's|^\([^#!*]*\)/$$|--exclude=./\1|p' .gitignore) -cf - . | tar -xf - -C "$$src"; \
	fi; \
	date=$$(git -C $(ROOT) log -1 --format=%aD 2>/dev/null || date -R); \
	rev=$$(git -C $(ROOT) rev-parse --short HEAD 2>/dev/null || echo unknown); \
	maint=$$(sed -n 's/^Maintainer: //p' $(ROOT)/debian/control); \
	printf 'vhost-net-rs (%s) unstable; urgency=medium\n\n  * vhost-net-rs %s (commit %s).\n\n -- %s  %s\n' \
		"$$v" "$$v" "$$rev" "$$maint" "$$date" >"$$src/debian/changelog"; \
	(cd "$$src" && dpkg-buildpackage -b -us -uc >"$$w/build.log" 2>&1) || { tail -n 30 "$$w/build.log"; exit 1; }; \
	cp "$$w/$(DEB)" $(ROOT)/; echo "built $(ROOT)/$(DEB)"; \
	if command -v lintian >/dev/null; then lintian --info $(ROOT)/$(DEB); else echo "lintian not installed: not checked"; fi

clean:
	@if [ -n "$(KDIR)" ]; then $(MAKE) -C $(KDIR) M=$(ROOT) $(KFLAGS) clean; fi
	rm -rf $(ROOT)/selftests/build $(ROOT)/vhost-net-rs-dkms_*_all.deb

setup:
	$(ROOT)/scripts/setup

check:
	$(ROOT)/scripts/check-docs
	$(ROOT)/selftests/run

quick:
	$(ROOT)/selftests/run --quick

check-e2e:
	VNR_E2E=full $(ROOT)/selftests/run

check-debug:
	$(ROOT)/selftests/run --debug

check-qemu:
	@$(ROOT)/scripts/debian-qemu prepare || \
		{ echo "check-qemu: scripts/debian-qemu prepare failed"; echo "0 passed, 1 failed"; exit 1; }
	VNR_TESTS="module.sh qemu-versions.sh libvirt.sh" $(ROOT)/selftests/run --vm-only

check-distro:
	$(ROOT)/scripts/distro-test $(ARGS)

check-package:
	$(ROOT)/scripts/package-test $(ARGS)

demo:
	$(ROOT)/scripts/demo $(ARGS)

bench:
	$(ROOT)/scripts/bench $(ARGS)

bench-nic:
	$(ROOT)/scripts/nicbench $(ARGS)

bench-kvm:
	$(ROOT)/scripts/kvmbench $(ARGS)

shell:
	$(ROOT)/scripts/vm --shell

host-test:
	cd $(ROOT)/tests/host && cargo test --release --quiet

# As the kernel's own rustfmt/rustfmtcheck targets: every .rs file git
# knows, with the kernel's .rustfmt.toml (copied at the top of the tree).
RUST_SOURCES = $(shell cd $(ROOT) && git ls-files -co --exclude-standard '*.rs' 2>/dev/null)
rustfmt:
	cd $(ROOT) && rustfmt --config-path .rustfmt.toml $(RUST_SOURCES)
rustfmtcheck:
	cd $(ROOT) && rustfmt --check --config-path .rustfmt.toml $(RUST_SOURCES)

FUZZ_SECS ?= 60
FUZZ_TARGET ?= vring
fuzz:
	mkdir -p $(ROOT)/tests/host/fuzz/corpus/$(FUZZ_TARGET)
	cd $(ROOT)/tests/host/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run $(FUZZ_TARGET) corpus/$(FUZZ_TARGET) -- \
		-max_total_time=$(FUZZ_SECS)

# The header's list above, which check-docs compares with these rules.
help:
	@sed -n '/^#   make/,/^#   make clean/p' $(ROOT)/Makefile | sed 's/^# \{0,1\}//'

check-docs:
	$(ROOT)/scripts/check-docs

results:
	$(ROOT)/scripts/results-summary

MINUTES ?= 10
soak:
	$(ROOT)/scripts/soak $(MINUTES)

endif
