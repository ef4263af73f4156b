#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# dropin.sh: the drop-in node. With drop_in=1, vhost-net-rs serves
# /dev/vhost-net (misc 10:238) itself, so QEMU and libvirt use it without
# being told; while the C vhost_net holds that minor, the load is refused
# and says why. KTAP output.
#
# Runs in the test VM as root, after module.sh (vhost-net-rs loaded, no fd
# open). Needs KDIR for the C modules (selftests/load-c-vhost). Leaves
# vhost-net-rs loaded without drop_in and the C vhost_net loaded.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"
# shellcheck source=ktap.sh
. "$here/ktap.sh"
KO=${KO:-$VNR_KO}
NODE=/dev/vhost-net

# log_mark: writes a line of its own to the kernel log and prints it; the
# log is a ring, so a line count would not find the same place again once
# it is full (the debug kernel fills it).
log_mark() {
	local mark="dropin.sh: mark $$.$RANDOM.$SECONDS"
	echo "$mark" >/dev/kmsg
	echo "$mark"
}

# log_since MARK: the kernel log after MARK.
log_since() { dmesg | sed -n "/$1/,\$p" | tail -n +2; }

# run_suite NAME PROG: PROG (a harness binary) against the drop-in node, as
# one result; its own output is shown only if it fails.
run_suite() {
	local name=$1 prog=$2 out rc
	out=$(VNR_DEV=$NODE timeout 600 "$here/$prog" 2>&1)
	rc=$?
	if [ "$rc" = 0 ]; then
		vnr_pass "$name" "$(echo "$out" | grep -E '^# (Totals|[0-9]+ passed)' | tail -n 1)"
	else
		vnr_fail "$name" "exit $rc" "$(echo "$out" | grep -E '^not ok|^#' | tail -n 20)"
	fi
}

vnr_ktap_start
ktap_set_plan 11

# --- refused while the C driver holds minor 238 ---------------------------------
"$here/load-c-vhost" >/dev/null 2>&1
vnr_loaded vhost_net_rs && rmmod vhost_net_rs
mark=$(log_mark)
if ! vnr_loaded vhost_net; then
	vnr_skip "refused_while_c_vhost_net_loaded" "the C vhost_net did not load"
elif insmod "$KO" drop_in=1 2>/dev/null; then
	vnr_fail "refused_while_c_vhost_net_loaded" "insmod drop_in=1 succeeded with vhost_net loaded"
	rmmod vhost_net_rs
elif log_since "$mark" | grep -q 'misc minor 238 (/dev/vhost-net) is taken.*modprobe -r vhost_net'; then
	vnr_pass "refused_while_c_vhost_net_loaded" "$(log_since "$mark" | grep -m1 'minor 238' | cut -c1-160)"
else
	vnr_fail "refused_while_c_vhost_net_loaded" "refused without the message" "$(log_since "$mark")"
fi
# The node still opens the C driver, and the minor is registered once.
c_node_ok() {
	local info
	exec 3<>"$NODE" || return 1
	info=$(cat /proc/$$/fdinfo/3)
	exec 3>&-
	! grep -q 'vhost-net-rs-owner:' <<<"$info" && [ "$(grep -c '^238 vhost-net$' /proc/misc)" = 1 ]
}
vnr_check "c_node_untouched_by_refusal" c_node_ok

mark=$(log_mark)
if insmod "$KO" drop_in=2 2>/dev/null; then
	vnr_fail "drop_in_value_checked" "drop_in=2 loaded"
	rmmod vhost_net_rs
elif log_since "$mark" | grep -q 'drop_in=2 is not 0 or 1'; then
	vnr_pass "drop_in_value_checked"
else
	vnr_fail "drop_in_value_checked" "refused without the message" "$(log_since "$mark")"
fi

# --- serves /dev/vhost-net once the C driver is gone ------------------------------
rmmod vhost_net 2>/dev/null
for _ in $(seq 50); do [ -e "$NODE" ] || break; sleep 0.1; done
vnr_check "insmod_drop_in" insmod "$KO" drop_in=1
vnr_wait_node "$NODE"
vnr_wait_node /dev/vhost-net-rs
# Major 10 (misc), minor 238, in hex as stat prints them.
if [ "$(stat -c %t:%T "$NODE" 2>/dev/null)" = a:ee ] && [ -c /dev/vhost-net-rs ]; then
	vnr_pass "node_is_misc_10_238" "$(stat -c '%n %t:%T' "$NODE")"
else
	vnr_fail "node_is_misc_10_238" "$(ls -l /dev/vhost-net* 2>&1)"
fi
aliases=$(modinfo -F alias "$KO" | sort | tr '\n' ' ')
if [ "$aliases" = "char-major-10-238 devname:vhost-net " ]; then
	vnr_pass "module_aliases" "$aliases"
else
	vnr_fail "module_aliases" "got: $aliases"
fi

# The node is vhost-net-rs: its fdinfo has vhost-net-rs's own lines.
exec 3<>"$NODE"
if grep -q '^vhost-net-rs-owner:' /proc/$$/fdinfo/3; then
	vnr_pass "node_opens_vhost_net_rs"
else
	vnr_fail "node_opens_vhost_net_rs" "$(cat /proc/$$/fdinfo/3)"
fi
if rmmod vhost_net_rs 2>/dev/null; then
	vnr_fail "rmmod_refused_while_node_open" "rmmod succeeded"
	insmod "$KO" drop_in=1
else
	vnr_pass "rmmod_refused_while_node_open"
fi
exec 3>&-

# The ABI rules and the data path, through the drop-in node (the harness
# sees vhost-net-rs there and checks what only it has, too).
run_suite "vhost_abi_on_drop_in_node" build/vhost_abi
run_suite "datapath_on_drop_in_node" build/datapath

# --- unloading gives the minor back -------------------------------------------------
rmmod vhost_net_rs
for _ in $(seq 50); do [ -e "$NODE" ] || break; sleep 0.1; done
if [ ! -e "$NODE" ] && "$here/load-c-vhost" >/dev/null 2>&1 && vnr_loaded vhost_net; then
	vnr_pass "c_vhost_net_loads_after_unload"
else
	vnr_fail "c_vhost_net_loads_after_unload" "$(ls -l /dev/vhost-net* 2>&1)"
fi
insmod "$KO"
vnr_wait_node /dev/vhost-net-rs
vnr_ktap_finish
