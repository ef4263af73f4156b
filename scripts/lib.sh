# shellcheck shell=bash
# Common settings for the vhost-net-rs scripts. Sourced, never run.
#
# Everything the project builds or downloads lives under $VNR_CACHE, outside
# the repository, so a fresh clone reuses a warm cache and `git clean` never
# throws away a 10-minute kernel build.

VNR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VNR_CACHE=${VNR_CACHE:-/var/cache/vhost-net-rs}
VNR_VENV=${VNR_VENV:-$VNR_CACHE/venv}
# The module the VM tests load: this tree's build, or (scripts/distro-test)
# the one `make install` put into a distribution kernel's module tree.
VNR_KO=${VNR_KO:-$VNR_ROOT/vhost-net-rs.ko}
# Pinned so a fresh machine gets the toolchain this tree was tested with.
VNR_BINDGEN_VERSION=${VNR_BINDGEN_VERSION:-0.72.1}
VNR_CARGO_FUZZ_VERSION=${VNR_CARGO_FUZZ_VERSION:-0.13.2}
VNR_RUSTC=${VNR_RUSTC:-/usr/bin/rustc}
VNR_BINDGEN=${VNR_BINDGEN:-$HOME/.cargo/bin/bindgen}
export LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm-19/lib}

say()  { printf '\033[1m[%s]\033[0m %s\n' "${VNR_TAG:-vhost-net-rs}" "$*" >&2; }
die()  { printf '\033[1;31m[%s] error:\033[0m %s\n' "${VNR_TAG:-vhost-net-rs}" "$*" >&2; exit 1; }

# Kernel make flags for the Rust toolchain we depend on. The rustup toolchain
# in ~/.cargo has no rust-src, so the kernel must use Debian's rustc-web.
# A tree built with clang (the debug variant: KASAN with Rust needs
# CC_IS_CLANG) carries a .vnr-llvm marker, and its modules must be built
# with the same compiler.
vnr_kmake_flags() {
	printf '%s\n' "RUSTC=$VNR_RUSTC" "BINDGEN=$VNR_BINDGEN" \
		"HOSTRUSTC=$VNR_RUSTC" "RUSTDOC=/usr/bin/rustdoc" "RUSTFMT=/usr/bin/rustfmt" \
		"CLIPPY_DRIVER=/usr/bin/clippy-driver"
	if [ -n "${KDIR:-}" ] && [ -f "$KDIR/.vnr-llvm" ]; then
		echo "LLVM=$(cat "$KDIR/.vnr-llvm")"
	else
		echo "CC=gcc"
	fi
}

# Kernel make flags for building the module against $KDIR: the project's
# toolchain (vnr_kmake_flags) for trees scripts/setup built (they carry a
# .vnr-built marker); for any other tree, the kernel's own compilers, with
# $RUSTC passed on if set (the kernel's Makefile does not take it from the
# environment).
vnr_module_flags() {
	if [ -n "${KDIR:-}" ] && [ -f "$KDIR/.vnr-built" ]; then
		vnr_kmake_flags
		return
	fi
	# A distribution kernel's tree made by scripts/distro-kdir records the
	# compilers that match the distribution's.
	if [ -n "${KDIR:-}" ] && [ -f "$KDIR/.vnr-distro" ]; then
		if [ -n "${RUSTC:-}" ]; then grep -v '^RUSTC=' "$KDIR/.vnr-distro"; echo "RUSTC=$RUSTC"
		else cat "$KDIR/.vnr-distro"; fi
		return
	fi
	[ -z "${RUSTC:-}" ] || echo "RUSTC=$RUSTC"
	# A tree built with clang takes modules built with clang.
	! grep -q '^CONFIG_CC_IS_CLANG=y' "${KDIR:-/nonexistent}/.config" 2>/dev/null || echo "LLVM=1"
}

# vnr_debian_mirror: the Debian mirror URI this machine's apt sources name
# (never one written into the repo); fails if there is none.
vnr_debian_mirror() {
	local uri
	uri=$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
		| awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
			/etc/apt/sources.list)
	fi
	[ -n "$uri" ] && echo "$uri"
}

# vnr_distro_dir RELEASE: where scripts/distro-kdir puts the build tree it
# makes for distribution kernel RELEASE (the tree is its build/).
vnr_distro_dir() { echo "$VNR_CACHE/distro/$1"; }

# The test kernel's build directory. `scripts/setup` records the path of the
# newest successful build in $VNR_CACHE/kernel/current.
vnr_kdir() {
	local cur=$VNR_CACHE/kernel/current
	[ -L "$cur" ] || [ -d "$cur" ] || return 1
	readlink -f "$cur"
}

vnr_require_kdir() {
	KDIR=${KDIR:-$(vnr_kdir)} || die "no test kernel built yet: run scripts/setup first"
	[ -f "$KDIR/Module.symvers" ] || die "$KDIR is not a built kernel tree (no Module.symvers)"
	export KDIR
}

# vnr_loaded MODULE: whether MODULE (its name, vhost_net_rs) is loaded.
vnr_loaded() { grep -q "^$1 " /proc/modules 2>/dev/null; }

# vnr_wait_node DEV: waits up to 5 s for the character device DEV; devtmpfs
# creates a misc device's node asynchronously after insmod.
vnr_wait_node() {
	local _
	for _ in $(seq 50); do
		[ -c "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# vnr_load: loads vhost-net-rs from this tree (unless it is loaded) and the C
# vhost_net next to it, for the scripts that compare the two. In the test VM
# the C driver comes from the test kernel's tree (selftests/load-c-vhost)
# and must load; on a host it is modprobe'd, and the C paths are skipped
# without it.
vnr_load() {
	vnr_loaded vhost_net_rs || insmod "$VNR_KO" || die "insmod $VNR_KO failed"
	vnr_wait_node /dev/vhost-net-rs || die "no /dev/vhost-net-rs after loading the module"
	if [ -n "${VNR_IN_VM:-}" ]; then
		"$VNR_ROOT/selftests/load-c-vhost" || die "loading the C vhost_net failed"
	else
		modprobe vhost_net 2>/dev/null || say "note: no C vhost_net module; its paths will be skipped"
	fi
}

# The start of a scripts/vm command that loads both drivers in the test VM
# (it runs in the repo directory): "$VNR_VM_LOAD && scripts/...".
# shellcheck disable=SC2034  # used by the scripts that source this file
VNR_VM_LOAD='. scripts/lib.sh && vnr_load'

# vnr_build_load host|vm [--selftests] [--no-setup]: the build and load step
# of the scripts that run the module (bench, demo, nicbench, pingbench, soak).
#   host  this machine's own kernel: builds the module against
#         /lib/modules/$(uname -r)/build and loads it and vhost_net here
#         (vnr_load). Needs root.
#   vm    the test VM: runs scripts/setup and builds the module against the
#         test kernel (sets KDIR). The VM command loads: $VNR_VM_LOAD.
# --selftests also builds selftests/build/*, against the test kernel's
# headers in both modes (the kselftest harness and uapi headers come from
# its tree). --no-setup skips scripts/setup in vm mode, as selftests/run
# --no-setup does: the test kernel must already be built.
vnr_build_load() {
	local mode=$1 tests=0 setup=1 kb tk a
	shift
	for a in "$@"; do
		case "$a" in
		--selftests) tests=1 ;;
		--no-setup) setup=0 ;;
		*) die "vnr_build_load: unknown option '$a'" ;;
		esac
	done
	case "$mode" in
	host)
		[ "$(id -u)" = 0 ] || die "run as root (it loads modules)"
		kb=/lib/modules/$(uname -r)/build
		[ -d "$kb" ] || die "no kernel build tree at $kb (install your kernel's headers)"
		make -s -C "$VNR_ROOT" KDIR="$kb" >/dev/null || die "building the module against $kb failed"
		;;
	vm)
		[ $setup = 0 ] || "$VNR_ROOT/scripts/setup" || die "scripts/setup failed"
		vnr_require_kdir
		make -s -C "$VNR_ROOT" KDIR="$KDIR" >/dev/null || die "building the module against $KDIR failed"
		;;
	*) die "vnr_build_load: unknown mode '$mode' (host or vm)" ;;
	esac
	if [ $tests = 1 ]; then
		tk=${KDIR:-$(vnr_kdir)} || die "the selftests need the test kernel's tree: run scripts/setup"
		make -s -C "$VNR_ROOT/selftests" KDIR="$tk" >/dev/null || die "building the selftests failed"
	fi
	[ "$mode" = vm ] || vnr_load
}

# vnr_dmesg_bad: prints the kernel log's BUG, WARNING, Oops, KASAN and
# lockdep reports; fails when there are none.
vnr_dmesg_bad() {
	dmesg | grep -E 'BUG:|WARNING:|Oops|KASAN|possible recursive locking|circular locking|sleeping function called from invalid context|Call Trace'
}

# The test VM's lenses that the host's load does not move (scripts/bench
# --icount and --insns, scripts/demo): virtual time, where every guest
# instruction takes 2 ns and idle time is skipped.
# shellcheck disable=SC2034  # used by the scripts that source this file
VNR_ICOUNT_OPTS='-icount shift=1,sleep=off'

# vnr_insns_plugin SO: builds the instruction-counting QEMU plugin
# (scripts/insns-plugin.c) into SO; the VM's QEMU loads it with
# "-plugin file=SO,out=MARKS[,hist=HIST][,vcpus=N]". TCG only.
vnr_insns_plugin() {
	[ "${VNR_ACCEL:-tcg}" = tcg ] || die "the instruction counter runs under TCG only (VNR_ACCEL=tcg)"
	gcc -O2 -Wall -shared -fPIC -o "$1" "$VNR_ROOT/scripts/insns-plugin.c" || die "building the plugin failed"
}

# vnr_at CMD: the line a results file starts with: the commit measured
# (with "+dirty" when the tree had changes) and the command that measured.
vnr_at() {
	local rev
	rev=$(git -C "$VNR_ROOT" describe --always --abbrev=7 --dirty=+dirty 2>/dev/null) || rev=unknown
	# shellcheck disable=SC2016  # the backquotes are Markdown
	printf 'At %s: `%s`\n' "$rev" "$1"
}
