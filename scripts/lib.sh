# shellcheck shell=bash
# Common settings for the vhost-net-rs scripts. Sourced, never run.
#
# Everything the project builds or downloads lives under $VNR_CACHE, outside
# the repository, so a fresh clone reuses a warm cache and `git clean` never
# throws away a 10-minute kernel build.

VNR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VNR_CACHE=${VNR_CACHE:-/var/cache/vhost-net-rs}
VNR_VENV=${VNR_VENV:-$VNR_CACHE/venv}
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
