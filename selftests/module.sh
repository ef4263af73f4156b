#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# module.sh: load, unload, device node and rmmod-while-open checks. KTAP output.
# Runs as root, in the test VM or (make -C selftests run_tests) on any kernel
# the module was built for. Unloads the module first if it is loaded; leaves
# it loaded on success so later tests can use it.
here=$(dirname "$0")
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"
# shellcheck source=ktap.sh
. "$here/ktap.sh"
KO=${KO:-$VNR_KO}
DEV=/dev/vhost-net-rs
node_ok() { [ -c "$DEV" ] && [ "$(stat -c %a "$DEV")" = 600 ] && [ "$(stat -c %u:%g "$DEV")" = 0:0 ]; }
modinfo_ok() {
	[ "$(modinfo -F license "$KO")" = GPL ] && [ -n "$(modinfo -F description "$KO")" ] &&
	[ -n "$(modinfo -F author "$KO")" ] && modinfo -F parm "$KO" | grep -q '^max_mem_regions:'
}

vnr_ktap_start
ktap_set_plan 14
if vnr_loaded vhost_net_rs; then
	vnr_detail "vhost_net_rs was loaded: unloading it first"
	rmmod vhost_net_rs || vnr_detail "rmmod failed (in use?): insmod below will fail"
fi
# insmod loads no dependency: tun first, where it is a module and not
# loaded (scripts/vm loads it in the test VM; a kselftest run on another
# kernel may not have).
vnr_loaded tun || modprobe -q tun 2>/dev/null || true
vnr_check "module_file_exists" test -f "$KO"
vnr_check "modinfo_fields" modinfo_ok
vnr_check "insmod" insmod "$KO"
vnr_wait_node "$DEV"
vnr_check "node_present_mode_0600" node_ok
vnr_check "sysfs_misc_entry" test -e /sys/class/misc/vhost-net-rs/dev

exec 3<>"$DEV"
if rmmod vhost_net_rs 2>/dev/null; then
	vnr_fail "rmmod_refused_while_open" "rmmod succeeded with $DEV open"
elif vnr_loaded vhost_net_rs; then
	vnr_pass "rmmod_refused_while_open"
else
	vnr_fail "rmmod_refused_while_open" "module gone"
fi
exec 3>&-

vnr_check "rmmod_after_close" rmmod vhost_net_rs
if ! vnr_loaded vhost_net_rs && [ ! -e "$DEV" ]; then
	vnr_pass "node_removed_on_unload"
else
	vnr_fail "node_removed_on_unload" "module or node still present"
fi
vnr_check "reload" insmod "$KO"
vnr_wait_node "$DEV"

# The parameters in effect, clamped, readable under sysfs; and the line the
# load leaves in the kernel log.
params_ok() {
	local p=/sys/module/vhost_net_rs/parameters
	rmmod vhost_net_rs && insmod "$KO" max_mem_regions=0 max_iotlb_entries=100000 workers=3 || return 1
	vnr_wait_node "$DEV"
	if [ "$(cat $p/max_mem_regions)" != 1 ] || [ "$(cat $p/max_iotlb_entries)" != 32768 ] ||
		[ "$(cat $p/workers)" != 1 ] ||
		[ "$(cat $p/drop_in)" != 0 ]; then
		vnr_detail "parameters: $(grep . $p/* 2>&1 | tr '\n' ' ')"
		return 1
	fi
	rmmod vhost_net_rs && insmod "$KO" && vnr_wait_node "$DEV" && [ "$(cat $p/max_mem_regions)" = 64 ]
}
vnr_check "params_in_sysfs_clamped" params_ok
# workers=2 (one worker per queue, the layout before the shared worker):
# traffic both ways, a queue reset beside the other queue's traffic, and
# kthread workers.
workers2_ok() {
	local p=/sys/module/vhost_net_rs/parameters rc
	rmmod vhost_net_rs && insmod "$KO" workers=2 && vnr_wait_node "$DEV" &&
		[ "$(cat $p/workers)" = 2 ] || return 1
	"$here/build/datapath" -t bulk_100k_each_way -t ring_reset_one_queue_while_the_other_runs \
		-t kthread_workers -t stop_and_restart_mid_stream >/tmp/vnr-workers2.log 2>&1
	rc=$?
	[ $rc = 0 ] || vnr_detail "$(grep -E '^(not ok|# .*Expected)' /tmp/vnr-workers2.log | head -3 | tr '\n' ' ')"
	rmmod vhost_net_rs && insmod "$KO" && vnr_wait_node "$DEV" && return $rc
}
vnr_check "workers_2_carries_traffic" workers2_ok
load_line_ok() {
	dmesg | grep -q "vhost_net_rs: version $(cat "$here/../VERSION") loaded: /dev/vhost-net-rs, max_mem_regions=64, max_iotlb_entries=2048, workers=1"
}
vnr_check "load_message" load_line_ok

# What `make install` put in a scratch root (selftests/preflight.sh, run by
# selftests/run on the host before the VM) loads by name with modprobe, as
# an installed module does, and reports the project's version. On a
# distribution kernel (scripts/distro-test) the install went into this
# VM's own root: VNR_INSTALL_ROOT=/.
ROOT_DIR=${VNR_INSTALL_ROOT:-$here/build/root}
# Where tun is a module (the test kernel, as distributions build it), depmod
# recorded it as the module's dependency and modprobe must load it first:
# it is unloaded beforehand when nothing holds it.
tun_dep() { modprobe -d "$ROOT_DIR" --show-depends vhost_net_rs 2>/dev/null | grep -q '/tun\.ko'; }
tun_note=
modprobe_from_root() {
	rmmod vhost_net_rs || return 1
	if vnr_loaded tun && ! rmmod tun 2>/dev/null; then tun_note="tun was in use before modprobe"; fi
	modprobe -d "$ROOT_DIR" vhost_net_rs || return 1
	vnr_loaded vhost_net_rs && vnr_wait_node "$DEV" &&
		[ "$(cat /sys/module/vhost_net_rs/version 2>/dev/null)" = "$(cat "$here/../VERSION")" ]
}
# The installed copy, if older than $KO, is an earlier build's
# (selftests/run --quick and --vm-only do not reinstall it).
root_ko=$(find "$ROOT_DIR/lib/modules/$(uname -r)" -name 'vhost-net-rs.ko*' 2>/dev/null | head -n 1)
if [ ! -d "$ROOT_DIR/lib/modules/$(uname -r)" ]; then
	vnr_skip "modprobe_after_make_install" "no install root for $(uname -r) (selftests/run makes it)"
	vnr_skip "modprobe_loaded_tun_first" "no install root"
elif [ "$ROOT_DIR" != / ] && [ -n "$root_ko" ] && [ "$root_ko" -ot "$KO" ]; then
	vnr_skip "modprobe_after_make_install" "$root_ko is older than $KO (selftests/preflight.sh reinstalls it)"
	vnr_skip "modprobe_loaded_tun_first" "stale install root"
elif modprobe_from_root; then
	vnr_pass "modprobe_after_make_install" "version $(cat /sys/module/vhost_net_rs/version)"
	if ! tun_dep; then
		if grep -q '^CONFIG_TUN=m' "${KDIR:-/nonexistent}/.config" 2>/dev/null; then
			vnr_fail "modprobe_loaded_tun_first" "tun is a module but not a dependency in $ROOT_DIR's modules.dep"
		else
			vnr_skip "modprobe_loaded_tun_first" "tun is not a module here"
		fi
	elif [ -n "$tun_note" ]; then vnr_skip "modprobe_loaded_tun_first" "$tun_note"
	elif vnr_loaded tun; then vnr_pass "modprobe_loaded_tun_first"
	else vnr_fail "modprobe_loaded_tun_first" "tun is not loaded"; fi
else
	vnr_fail "modprobe_after_make_install" "$(modprobe -d "$ROOT_DIR" -n -v vhost_net_rs 2>&1 | tr '\n' '|')"
	vnr_skip "modprobe_loaded_tun_first" "modprobe failed"
	vnr_loaded tun || modprobe -q tun 2>/dev/null || insmod "${KDIR:-}/drivers/net/tun.ko" 2>/dev/null
	vnr_loaded vhost_net_rs || insmod "$KO"
fi
# The suites after this one test the module just built, not the installed
# copy modprobe loaded.
if [ "$ROOT_DIR" != / ] && vnr_loaded vhost_net_rs && rmmod vhost_net_rs; then
	insmod "$KO" && vnr_wait_node "$DEV"
fi
vnr_ktap_finish
