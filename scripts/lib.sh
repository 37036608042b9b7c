# shellcheck shell=bash
# Shared by scripts/demo, scripts/test and scripts/bench: find the repository
# root, install what a fresh Debian 12 machine lacks (apt-get), locate the CUDA
# headers, and configure and build a Meson build directory. Sourced, never run.
#
# Every function returns non-zero on failure instead of exiting, and checks each
# step itself: callers use them in `if`, where bash ignores `set -e`.

GMT_SCRIPT=${GMT_SCRIPT:-gpumemtrace}

gmt_say() { printf '%s: %s\n' "$GMT_SCRIPT" "$*"; }
gmt_err() { printf '%s: %s\n' "$GMT_SCRIPT" "$*" >&2; }

# cd to the repository root, found from the calling script's own path, so the
# scripts run from any directory.
gmt_cd_root() {
	local here
	here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd) || return 1
	cd "$here/.." || return 1
	# shellcheck disable=SC2034 # for the callers
	GMT_ROOT=$(pwd)
}

# --- Dependencies -------------------------------------------------------------
# One probe per Debian package: what the build and the tests actually use. A probe
# checks that the thing works, not that dpkg knows the package, so tools installed
# another way (pip's meson, a distro's own gcc) count as present.

gmt__have() { command -v "$1" >/dev/null 2>&1; }

# A library's development files: pkg-config is what meson asks; without pkg-config
# (itself about to be installed) ask dpkg, the only place apt-get can fix it.
gmt__have_lib() {
	local pc=$1 pkg=$2
	if gmt__have pkg-config; then
		pkg-config --exists "$pc"
	elif gmt__have dpkg-query; then
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q ' installed$'
	else
		return 1
	fi
}

gmt__probe() {
	case $1 in
	meson)          gmt__have meson ;;
	ninja-build)    gmt__have ninja ;;
	pkg-config)     gmt__have pkg-config ;;
	gcc)            gmt__have gcc ;;
	g++)            gmt__have g++ ;;
	libc6-dev)      [ -e /usr/include/stdio.h ] ;;
	libunwind-dev)  gmt__have_lib libunwind libunwind-dev ;;
	libjansson-dev) gmt__have_lib jansson libjansson-dev ;;
	libdw-dev)      gmt__have_lib libdw libdw-dev ;;
	python3)        gmt__have python3 ;;
	binutils)       gmt__have readelf && gmt__have nm ;;
	# jsonschema 4.0 or newer (draft 2020-12) for the tests' snapshot checks,
	# seen by Debian's own interpreter: scripts/gpu-bundle carries Debian's
	# copy (pure Python) to GPU machines whose Python lacks it. NOTE: a python3
	# first on PATH (pyenv) does not see Debian's dist-packages;
	# tests/schema/schema_check.py tries it and /usr/bin/python3.
	python3-jsonschema) /usr/bin/python3 -c 'from jsonschema import Draft202012Validator' \
			>/dev/null 2>&1 ;;
	patchelf)       gmt__have patchelf ;;
	clang)          gmt__have clang ;;
	# numba.cuda, the real client of tests/frameworks/test_numba.py: Debian's,
	# for Debian's interpreter.
	python3-numba)  /usr/bin/python3 -c 'import numba.cuda' >/dev/null 2>&1 ;;
	# The wheel (pyproject.toml, tests/wheel): python3 -m build with
	# meson-python, for Debian's interpreter; python3-venv for its test's
	# environment.
	python3-build)  /usr/bin/python3 -c 'import build' >/dev/null 2>&1 ;;
	python3-mesonpy) /usr/bin/python3 -c 'import mesonpy' >/dev/null 2>&1 ;;
	python3-venv)   /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 ;;
	python3-pytest) python3 -c 'import pytest' >/dev/null 2>&1 ||
			/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 ;;
	chromium)       [ -x /usr/bin/chromium ] || gmt__have chromium ;;
	heaptrack)      gmt__have heaptrack ;;
	help2man)       gmt__have help2man ;;
	prometheus)     gmt__have prometheus && gmt__have promtool ;;
	prometheus-node-exporter) gmt__have prometheus-node-exporter ;;
	*)              return 1 ;;
	esac
}

GMT_PACKAGES=(meson ninja-build pkg-config gcc g++ libc6-dev libunwind-dev
	      libjansson-dev libdw-dev python3 binutils python3-jsonschema python3-pytest
	      patchelf clang help2man)

gmt__missing() {
	local p
	for p in "${GMT_PACKAGES[@]}"; do
		gmt__probe "$p" || printf '%s\n' "$p"
	done
}

# Install the missing packages. `apt-get update` only when something must be
# installed; sudo only when not root; never a prompt (CI has no stdin).
gmt__install() {
	local -a sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		if ! gmt__have sudo; then
			gmt_err "missing packages: $*; not root and no sudo: as root run: apt-get install $*"
			return 1
		fi
		# NOTE: without a terminal, sudo must not wait for a password it cannot
		# read: -n makes it fail at once instead.
		if [ -t 0 ]; then sudo=(sudo); else sudo=(sudo -n); fi
	fi
	if ! gmt__have apt-get; then
		gmt_err "missing packages: $*; no apt-get here: install them with your package manager"
		return 1
	fi
	gmt_say "installing missing packages: $*"
	# NOTE: a fresh machine may still run unattended-upgrades; wait for its dpkg
	# lock instead of failing at once.
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q \
		-o DPkg::Lock::Timeout=300 >/dev/null || {
		gmt_err "apt-get update failed; install by hand: apt-get install $*"
		return 1
	}
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends -o DPkg::Lock::Timeout=300 "$@" </dev/null || {
		gmt_err "apt-get install failed; install by hand: apt-get install $*"
		return 1
	}
}

# The CUDA toolkit is not an apt package on Debian: find its headers where meson
# looks for them (CUDA_HOME, CUDA_PATH, /usr/local/cuda; first with include/cuda.h)
# and set GMT_CUDA_ROOT.
gmt_find_cuda() {
	local c
	GMT_CUDA_ROOT=
	for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
		if [ -n "$c" ] && [ -f "$c/include/cuda.h" ]; then
			# shellcheck disable=SC2034 # for the callers
			GMT_CUDA_ROOT=$c
			return 0
		fi
	done
	gmt_err "CUDA toolkit headers not found (no include/cuda.h in \$CUDA_HOME, \$CUDA_PATH or /usr/local/cuda): install the CUDA toolkit 13.0 (https://developer.nvidia.com/cuda-downloads, e.g. apt-get install cuda-toolkit-13-0 from NVIDIA's repository) or set CUDA_HOME to its root"
	return 1
}

# Check, install what is missing, check again.
gmt_ensure_deps() {
	local -a missing
	mapfile -t missing < <(gmt__missing)
	if [ "${#missing[@]}" -gt 0 ]; then
		gmt__install "${missing[@]}" || return 1
		mapfile -t missing < <(gmt__missing)
		if [ "${#missing[@]}" -gt 0 ]; then
			gmt_err "still missing after apt-get install: ${missing[*]}"
			return 1
		fi
	fi
	if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
		gmt_err "python3 is $(python3 -V 2>&1 | cut -d' ' -f2); the tools need 3.9 or newer"
		return 1
	fi
	gmt_find_cuda
}

# --- Build ----------------------------------------------------------------------

# gmt_configure DIR [MESON_OPTION...]: configure DIR if it is not configured
# yet, and reconfigure it only when the options asked for differ from those it
# was last set up with by these scripts.
gmt_configure() {
	local dir=$1 stamp want
	shift
	stamp="$dir/gmt-setup-options"
	want="$*"
	if [ ! -f "$dir/meson-private/coredata.dat" ]; then
		gmt_say "$dir: configuring"
		meson setup "$dir" "$@" || return 1
	elif [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
		gmt_say "$dir: reconfiguring with: ${want:-default options}"
		meson setup --reconfigure "$dir" "$@" || return 1
	fi
	printf '%s\n' "$want" >"$stamp" || return 1
}

# gmt_build DIR [MESON_OPTION...]: gmt_configure, then build everything. ninja
# re-runs meson by itself when a meson.build changes.
gmt_build() {
	gmt_configure "$@" || return 1
	gmt_say "$1: building"
	ninja -C "$1" || return 1
}

# The ThreadSanitizer build (Clang): the recording core's concurrent parts
# through their unit stress tests — the ring and its doorbell, the live
# table, stack interning, the unwinder's memos. NOTE: only those: the
# library itself, preloaded, cannot bring TSan's runtime into an
# uninstrumented program (the runtime must come first and initialise before
# anything calls dlsym), so the whole-library stress runs under ASan only.
# shellcheck disable=SC2034 # for scripts/test
GMT_TSAN_OPTIONS=(-Db_sanitize=thread -Db_lundef=false)
# shellcheck disable=SC2034
GMT_TSAN_TARGETS=(tests/recording/test_ring tests/recording/test_table tests/recording/test_streams tests/recording/test_stacks
		  tests/recording/test_stacks_nomalloc tests/recording/test_unwind)
# shellcheck disable=SC2034
GMT_TSAN_TESTS=(ring table streams stacks stacks-nomalloc unwind)

# Options of the sanitizer build: ASan and UBSan, every UBSan report fatal,
# and the tracer's internal checks (src/util/check.h) compiled in.
# NOTE: b_lundef=false because -fsanitize=address leaves the ASan runtime's
# symbols undefined in shared libraries, which -Wl,--no-undefined rejects.
# shellcheck disable=SC2034,SC2054 # for scripts/test; the commas are meson's
GMT_SAN_OPTIONS=(-Db_sanitize=address,undefined -Dc_args=-fno-sanitize-recover=all
		 -Db_lundef=false -Ddebug_checks=true)
