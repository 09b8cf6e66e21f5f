#!/bin/sh
# emu-comm-check.sh: run tests/gpu/test-comm (kernels/cuda/comm.c) on the
# CPU emulation of CUDA and its NCCL stand-in (tests/gpu/emu/nccl.c).
#
# comm.c is compiled with HAVE_NCCL against the emulated nccl.h, so the
# code a real build runs on NCCL is the code tested here: several emulated
# devices in one process all-reduce and exchange buffers.  Prints TAP;
# skips without the compilers.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
CXX=${EMU_CXX:-g++}
CC=${EMU_CC:-cc}

for tool in "$CXX" "$CC"; do
	command -v "$tool" >/dev/null 2>&1 ||
	    { echo "1..0 # SKIP $tool not found"; exit 0; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/phased-emu-comm.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ -f "$top_builddir/config.h" ]; then
	cp "$top_builddir/config.h" "$tmp/config.h"
else
	printf '#define _GNU_SOURCE 1\n' >"$tmp/config.h"
fi
printf '#undef HAVE_NCCL\n#define HAVE_NCCL 1\n' >>"$tmp/config.h"
san=
[ -n "${EMU_SANITIZE:-}" ] && san="-fsanitize=address,undefined \
    -fno-sanitize-recover=all -fno-omit-frame-pointer"
inc="-I$top_srcdir/tests/gpu/emu/include -I$tmp -I$top_srcdir/kernels \
    -I$top_srcdir/kernels/cuda -I$top_srcdir/lib"
if ! $CXX -std=c++17 -O2 -g -w $san $inc -c -o "$tmp/emu.o" \
    "$top_srcdir/tests/gpu/emu/emu.cc" >"$tmp/emu.log" 2>&1; then
	sed 's/^/# /' "$tmp/emu.log"
	echo "Bail out! the emulated build failed"
	exit 1
fi
for f in lib/util.c lib/log.c lib/tensor_type.c kernels/ref.c \
    kernels/cuda/comm.c tests/gpu/emu/nccl.c tests/gpu/test-comm.c; do
	if ! $CC -std=gnu11 -O2 -g -pthread -Wall -Wextra $san $inc -c \
	    -o "$tmp/$(basename "$f" .c).o" "$top_srcdir/$f" \
	    >"$tmp/$(basename "$f").log" 2>&1; then
		sed 's/^/# /' "$tmp/$(basename "$f").log"
		echo "Bail out! the emulated build failed"
		exit 1
	fi
done
if ! $CXX $san -pthread -o "$tmp/test-comm" "$tmp"/*.o -lm \
    >"$tmp/link.log" 2>&1; then
	sed 's/^/# /' "$tmp/link.log"
	echo "Bail out! the emulated build failed"
	exit 1
fi
"$tmp/test-comm"
