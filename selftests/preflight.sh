#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# preflight.sh: host-side checks of what a user installing the module meets
# first. KTAP-style lines, one per case; exit 1 if any failed.
#
#   selftests/preflight.sh KDIR
#
# KDIR is a tree the module builds against (the test kernel). The cases:
#   - scripts/preflight accepts KDIR, and refuses copies of it that lack
#     one thing each (CONFIG_RUST, Linux 7.2, the rust/ build products, the
#     tree's rustc version, CONFIG_TUN), naming that thing;
#   - the built module's modinfo version, VERSION and dkms.conf agree;
#   - `make install` into a scratch root puts the module, the udev rule,
#     the modprobe options and the modules-load.d entry in place and
#     depmod indexes the module, with tun as its dependency where tun is a
#     module (the kernel's own modules are installed there first), and the
#     module carries symbol versions where the tree has MODVERSIONS;
#     `make uninstall` takes them away again.
#     The root is left in selftests/build/root for module.sh, which loads
#     the module from it with modprobe in the VM;
#   - without root or without the device node, a C selftest skips as a
#     whole (exit 4), and so does a shell selftest without root;
#   - dkms (if installed) adds the source, builds the module for KDIR's
#     kernel, installs and removes it, in private dkms trees.
cd "$(dirname "$0")/.." || exit 1
KDIR=${1:?usage: selftests/preflight.sh KDIR}
fail=0
ok() { echo "ok - $1"; }
notok() { echo "not ok - $1${2:+: $2}"; fail=1; }

# fake_tree DIR: the files scripts/preflight reads, copied from KDIR.
fake_tree() {
	mkdir -p "$1/include/config" "$1/rust"
	cp "$KDIR/.config" "$KDIR/Module.symvers" "$1/"
	cp "$KDIR/include/config/kernel.release" "$1/include/config/"
	cp -a "$KDIR"/rust/*.rmeta "$KDIR"/rust/*.so "$1/rust/"
	[ ! -f "$KDIR/.vnr-built" ] || touch "$1/.vnr-built"
}

# refused NAME WORDS: the fake tree is refused with a message containing WORDS.
refused() {
	local out
	if out=$(scripts/preflight "$tree" 2>&1); then notok "$1" "accepted"
	elif ! grep -qF -- "$2" <<<"$out"; then notok "$1" "message does not name '$2': $(tr '\n' '|' <<<"$out")"
	else ok "$1"; fi
}

if scripts/preflight --quiet "$KDIR"; then ok preflight_accepts_the_test_kernel
else notok preflight_accepts_the_test_kernel "$(scripts/preflight "$KDIR" 2>&1 | tr '\n' '|')"; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
fake_tree "$tree"
if scripts/preflight --quiet "$tree"; then ok preflight_accepts_a_copy
else notok preflight_accepts_a_copy "$(scripts/preflight "$tree" 2>&1 | tr '\n' '|')"; fi
sed -i 's/^CONFIG_RUST=y/# CONFIG_RUST is not set/' "$tree/.config"
refused preflight_names_missing_config_rust "CONFIG_RUST is not y"
rm -rf "$tree" && fake_tree "$tree"
echo 7.1.9 >"$tree/include/config/kernel.release"
refused preflight_names_a_kernel_too_old "needs 7.2 or newer"
rm -rf "$tree" && fake_tree "$tree"
rm -f "$tree/rust/libkernel.rmeta"
refused preflight_names_missing_rust_products "rust/libkernel.rmeta"
rm -rf "$tree" && fake_tree "$tree"
sed -i 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 0.0.0-vnr-preflight-test"/' "$tree/.config"
refused preflight_names_a_rustc_mismatch "same compiler version"
rm -rf "$tree" && fake_tree "$tree"
sed -i 's/^CONFIG_TUN=.*/# CONFIG_TUN is not set/' "$tree/.config"
refused preflight_names_missing_tun "no tun driver"
rm -rf "$tree" && fake_tree "$tree"
sed -i 's/^CONFIG_VHOST_TASK=.*/# CONFIG_VHOST_TASK is not set/' "$tree/.config"
refused preflight_names_missing_vhost_task "no vhost_task support"

version=$(cat VERSION)
kov=$(modinfo -F version vhost-net-rs.ko 2>/dev/null)
dkv=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' dkms.conf)
if [ -n "$version" ] && [ "$kov" = "$version" ] && [ "$dkv" = "$version" ]; then ok "version_agrees $version"
else notok version_agrees "VERSION '$version', modinfo '$kov', dkms.conf '$dkv'"; fi

root=$PWD/selftests/build/root
rel=$(cat "$KDIR/include/config/kernel.release")
rm -rf "$root"
files=("lib/modules/$rel/extra/vhost-net-rs.ko" etc/udev/rules.d/99-vhost-net-rs.rules
	etc/modprobe.d/vhost-net-rs.conf etc/modules-load.d/vhost-net-rs.conf)
ilog=$work/install.log
# The kernel's own modules go in first (from a full build tree; a headers
# tree has none to install), as a distribution's are installed before an
# out-of-tree one: where tun is a module, depmod then records it
# as the module's dependency, and module.sh checks that modprobe loads it.
if grep -q '=m$' "$KDIR/.config" && [ -f "$KDIR/modules.order" ]; then
	# shellcheck source=../scripts/lib.sh
	. scripts/lib.sh
	mapfile -t kflags < <(vnr_kmake_flags)
	if ! make -s -C "$KDIR" "${kflags[@]}" INSTALL_MOD_PATH="$root" modules_install >"$ilog" 2>&1; then
		notok kernel_modules_staged "$(tail -n 5 "$ilog" | tr '\n' '|')"
	elif grep -q '^CONFIG_TUN=m' "$KDIR/.config" && [ -z "$(find "$root/lib/modules/$rel/kernel" -name 'tun.ko*')" ]; then
		notok kernel_modules_staged "tun is a module in $KDIR but was not installed"
	else
		ok kernel_modules_staged
	fi
fi
# With MODVERSIONS (as Ubuntu and Fedora build their kernels; with Rust it
# takes gendwarfksyms) every kernel symbol the module uses carries its CRC.
if grep -q '^CONFIG_MODVERSIONS=y' "$KDIR/.config"; then
	nver=$(modprobe --dump-modversions vhost-net-rs.ko 2>/dev/null | wc -l)
	if [ "$nver" -gt 0 ]; then echo "# $nver versioned symbols"; ok module_has_symbol_versions
	else notok module_has_symbol_versions "no __versions in vhost-net-rs.ko, built against $KDIR"; fi
fi
# DESTDIR alone must also move the module tree (INSTALL_MOD_PATH defaults to it).
if ! make -s KDIR="$KDIR" CLIPPY=1 DESTDIR="$root" install >"$ilog" 2>&1; then
	notok make_install "$(tail -n 5 "$ilog" | tr '\n' '|')"
	notok make_uninstall "not tried: make install failed"
else
	missing=
	for f in "${files[@]}"; do [ -f "$root/$f" ] || missing+=" $f"; done
	if [ -n "$missing" ]; then notok make_install "missing:$missing"
	elif ! grep -q '^extra/vhost-net-rs.ko:' "$root/lib/modules/$rel/modules.dep"; then notok make_install "not in modules.dep"
	elif grep -q '^CONFIG_TUN=m' "$KDIR/.config" && ! grep -q '^extra/vhost-net-rs.ko:.*/tun\.ko' "$root/lib/modules/$rel/modules.dep"; then
		notok make_install "tun is a module but modules.dep does not list it as a dependency"
	else ok make_install; fi
	# A second root for uninstall, so that module.sh keeps the first.
	cp -a "$root" "$work/root2"
	if ! make -s KDIR="$KDIR" CLIPPY=1 DESTDIR="$work/root2" uninstall >"$ilog" 2>&1; then
		notok make_uninstall "$(tail -n 5 "$ilog" | tr '\n' '|')"
	else
		left=
		for f in "${files[@]}"; do [ ! -e "$work/root2/$f" ] || left+=" $f"; done
		if [ -n "$left" ]; then notok make_uninstall "left:$left"
		elif grep -q 'vhost-net-rs' "$work/root2/lib/modules/$rel/modules.dep"; then notok make_uninstall "still in modules.dep"
		else ok make_uninstall; fi
	fi
fi
# kselftest's convention: a test that cannot run skips as a whole (exit 4,
# "1..0 # SKIP") rather than failing, without the device or without root.
skips_whole() { # NAME COMMAND...: COMMAND exits 4 with a "1..0 # SKIP" plan
	local name=$1 out rc
	shift
	out=$("$@" 2>&1)
	rc=$?
	if [ $rc = 4 ] && grep -q '^1\.\.0 # SKIP' <<<"$out"; then ok "$name"
	else notok "$name" "exit $rc: $(head -n 3 <<<"$out" | tr '\n' '|')"; fi
}
# The unprivileged runs use copies in a directory anyone can read: the
# tree itself may sit under a private home.
pub=$work/pub
mkdir -p "$pub/selftests" "$pub/scripts"
cp selftests/module.sh selftests/ktap.sh "$pub/selftests/"
cp scripts/lib.sh "$pub/scripts/"
chmod -R a+rX "$work"
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ -x selftests/build/vhost_abi ]; then
	cp selftests/build/vhost_abi "$pub/selftests/" && chmod a+rx "$pub/selftests/vhost_abi"
	skips_whole selftest_skips_without_device env VNR_DEV=/nonexistent selftests/build/vhost_abi
	skips_whole selftest_skips_without_root "${nobody[@]}" "$pub/selftests/vhost_abi"
else
	notok selftest_skips_without_device "selftests/build/vhost_abi not built"
	notok selftest_skips_without_root "selftests/build/vhost_abi not built"
fi
skips_whole script_skips_without_root "${nobody[@]}" bash "$pub/selftests/module.sh"

# DKMS, in private trees so that nothing under /usr/src, /var/lib/dkms or
# /lib/modules changes: add, build against KDIR as dkms would for that
# kernel, install, remove.
if ! command -v dkms >/dev/null; then
	echo "ok - dkms_build # SKIP dkms not installed"
	echo "ok - dkms_install_and_remove # SKIP dkms not installed"
else
	src=$work/src/vhost-net-rs-$version
	mkdir -p "$src"
	git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src" 2>/dev/null
	mkdir -p "$work/dkms" "$work/inst"
	dk=(--dkmstree "$work/dkms" --sourcetree "$work/src" --installtree "$work/inst")
	ko=$work/dkms/vhost-net-rs/$version/$rel/$(uname -m)/module/vhost-net-rs.ko
	if ! dkms add "${dk[@]}" -m vhost-net-rs -v "$version" >"$ilog" 2>&1; then
		notok dkms_build "dkms add: $(tail -n 3 "$ilog" | tr '\n' '|')"
	elif ! dkms build "${dk[@]}" -m vhost-net-rs -v "$version" -k "$rel" --kernelsourcedir "$KDIR" >"$ilog" 2>&1; then
		notok dkms_build "dkms build: $(tail -n 5 "$ilog" | tr '\n' '|') $(tail -n 5 "$work"/dkms/vhost-net-rs/"$version"/build/make.log 2>/dev/null | tr '\n' '|')"
	elif ! ls "$ko"* >/dev/null 2>&1; then
		notok dkms_build "no module at $ko"
	else
		ok dkms_build
	fi
	# Install into the private tree (depmod is make install's business,
	# and the test kernel is not this host's), then remove it all again.
	inst=$work/inst/$rel/updates/dkms
	mkdir -p "$work/inst/$rel"   # the kernel's module tree, as installed
	if ! ls "$ko"* >/dev/null 2>&1; then
		notok dkms_install_and_remove "not tried: dkms build failed"
	elif ! dkms install "${dk[@]}" -m vhost-net-rs -v "$version" -k "$rel" --no-depmod >"$ilog" 2>&1 \
		|| ! ls "$inst"/vhost-net-rs.ko* >/dev/null 2>&1; then
		notok dkms_install_and_remove "dkms install: $(tail -n 5 "$ilog" | tr '\n' '|') $(find "$work/inst" -type f | tr '\n' ' ')"
	elif ! dkms remove "${dk[@]}" -m vhost-net-rs -v "$version" --all --no-depmod >"$ilog" 2>&1 \
		|| ls "$inst"/vhost-net-rs.ko* >/dev/null 2>&1; then
		notok dkms_install_and_remove "dkms remove: $(tail -n 5 "$ilog" | tr '\n' '|')"
	else
		ok dkms_install_and_remove
	fi
fi
exit $fail
