#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# signing.sh: on the distribution-like test kernel, which enforces module
# signatures (scripts/distro-test --like boots it), what Secure Boot asks of
# the module: DKMS's build, signed with the key the operator named (here the
# kernel's own, which it trusts), loads; the unsigned build is refused with
# the messages README.md (Install, Secure Boot) documents. KTAP output.
#
# VNR_SIGNED_KO and VNR_UNSIGNED_KO name the two modules; skips without
# them (no dkms on the host). Leaves the module loaded as it found it.
here=$(dirname "$0")
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"
# shellcheck source=ktap.sh
. "$here/ktap.sh"
DEV=/dev/vhost-net-rs

vnr_ktap_start
ktap_set_plan 3
if [ -z "${VNR_SIGNED_KO:-}" ] || [ -z "${VNR_UNSIGNED_KO:-}" ]; then
	for t in signatures_enforced unsigned_refused_with_documented_messages dkms_signed_loads; do
		vnr_skip "$t" "no DKMS-signed build (dkms is not installed on the host)"
	done
	vnr_ktap_finish
fi
if [ "$(cat /sys/module/module/parameters/sig_enforce 2>/dev/null)" = Y ]; then
	vnr_pass signatures_enforced
else
	vnr_fail signatures_enforced "sig_enforce is not Y"
fi
was_loaded=0
vnr_loaded vhost_net_rs && was_loaded=1
rmmod vhost_net_rs 2>/dev/null
modprobe tun 2>/dev/null
# insmod takes a compressed module only through the kernel's decompressor:
# give it the plain file.
plain() { case "$1" in *.xz) xz -dc "$1" >/tmp/vnr-sig.ko ;; *.zst) zstd -dqc "$1" >/tmp/vnr-sig.ko ;; *) cp "$1" /tmp/vnr-sig.ko ;; esac; }

before=$(dmesg | wc -l)
plain "$VNR_UNSIGNED_KO"
err=$(insmod /tmp/vnr-sig.ko 2>&1)
rc=$?
klog=$(dmesg | tail -n +"$((before + 1))")
if [ $rc != 0 ] && [[ $err == *"Key was rejected by service"* ]] && [[ $klog == *"Loading of unsigned module is rejected"* ]] \
	&& ! vnr_loaded vhost_net_rs; then
	vnr_pass unsigned_refused_with_documented_messages "$err"
else
	vnr_fail unsigned_refused_with_documented_messages "insmod status $rc: $err; kernel: $(tr '\n' '|' <<<"$klog")"
	rmmod vhost_net_rs 2>/dev/null
fi

plain "$VNR_SIGNED_KO"
if insmod /tmp/vnr-sig.ko && vnr_wait_node "$DEV"; then
	vnr_pass dkms_signed_loads "signer '$(modinfo -F signer /tmp/vnr-sig.ko)', tainted=$(cat /proc/sys/kernel/tainted)"
else
	vnr_fail dkms_signed_loads "$(dmesg | tail -n 3 | tr '\n' '|')"
fi
rmmod vhost_net_rs 2>/dev/null
rm -f /tmp/vnr-sig.ko
[ $was_loaded = 0 ] || modprobe vhost_net_rs
vnr_ktap_finish
