#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# module.sh: load, unload, device node and rmmod-while-open checks. TAP output.
# Runs inside the test VM as root. Expects the module not to be loaded; leaves
# it loaded on success so later tests can use it.
KO=${KO:-$(dirname "$0")/../vhost-net-rs.ko}
DEV=/dev/vhost-net-rs
n=0 fails=0
ok()     { n=$((n + 1)); echo "ok $n $1"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n $1"; shift; for l in "$@"; do echo "# $l"; done; }
check()  { local name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name" "failed: $*"; fi; }
loaded() { grep -q '^vhost_net_rs ' /proc/modules; }
node_ok() { [ -c "$DEV" ] && [ "$(stat -c %a "$DEV")" = 600 ] && [ "$(stat -c %u:%g "$DEV")" = 0:0 ]; }

echo "TAP version 13"
echo "1..9"

check "module_file_exists" test -f "$KO"
modinfo_ok() {
	[ "$(modinfo -F license "$KO")" = GPL ] && [ -n "$(modinfo -F description "$KO")" ] &&
	[ -n "$(modinfo -F author "$KO")" ] && modinfo -F parm "$KO" | grep -q '^max_mem_regions:'
}
check "modinfo_fields" modinfo_ok
check "insmod" insmod "$KO"
# devtmpfs creates the node asynchronously; give it a moment.
for _ in $(seq 50); do [ -c "$DEV" ] && break; sleep 0.1; done
check "node_present_mode_0600" node_ok
check "sysfs_misc_entry" test -e /sys/class/misc/vhost-net-rs/dev

exec 3<>"$DEV"
if rmmod vhost_net_rs 2>/dev/null; then
	not_ok "rmmod_refused_while_open" "rmmod succeeded with $DEV open"
else
	loaded && ok "rmmod_refused_while_open" || not_ok "rmmod_refused_while_open" "module gone"
fi
exec 3>&-

check "rmmod_after_close" rmmod vhost_net_rs
if ! loaded && [ ! -e "$DEV" ]; then ok "node_removed_on_unload"; else not_ok "node_removed_on_unload" "module or node still present"; fi
check "reload" insmod "$KO"
for _ in $(seq 50); do [ -c "$DEV" ] && break; sleep 0.1; done
[ $fails = 0 ]
