#!/bin/sh
# emu-check.sh: run tests/gpu/test-kernels on the CPU emulation of CUDA.
#
# The kernels' .cu files, rewritten by tests/gpu/emu/launch.py, are compiled
# by the host C++ compiler against tests/gpu/emu (mock CUDA headers and
# emu.cc, which runs every thread of a block as a coroutine), so every
# kernel runs unchanged, shuffles and barriers included, and is compared
# with kernels/ref.c by the same test program a GPU runs.  This checks the
# kernels' logic (indexing, block layouts, reductions, the online softmax,
# context splits, the cuBLAS argument mapping) on any machine; speed and
# GPU rounding need a device (tests/gpu/device-check.sh).  Prints TAP;
# skips without g++ or python3.  EMU_SANITIZE=1 adds AddressSanitizer and
# alignment checks (a misaligned vector load faults on a GPU).
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
CXX=${EMU_CXX:-g++}
CC=${EMU_CC:-cc}

for tool in "$CXX" "$CC" python3; do
	command -v "$tool" >/dev/null 2>&1 ||
	    { echo "1..0 # SKIP $tool not found"; exit 0; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/phased-emu.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ -f "$top_builddir/config.h" ]; then
	cp "$top_builddir/config.h" "$tmp/config.h"
else
	printf '#define _GNU_SOURCE 1\n' >"$tmp/config.h"
fi
san=
[ -n "${EMU_SANITIZE:-}" ] && san="-fsanitize=address,alignment \
    -fno-sanitize-recover=alignment -fno-omit-frame-pointer"
inc="-I$top_srcdir/tests/gpu/emu/include -I$tmp -I$top_srcdir/kernels \
    -I$top_srcdir/kernels/cuda -I$top_srcdir/lib -I$top_srcdir/runtime \
    -I$top_srcdir/tokenizer -I$top_srcdir/gguf -I$top_srcdir/kernels/cpu"
pids=
. "$top_srcdir/tests/gpu/emu-kernels.sh"
for f in lib/util.c lib/log.c lib/tensor_type.c kernels/ref.c \
    tests/gpu/test-kernels.c; do
	$CC -std=gnu11 -O2 -g -pthread $san $inc -c \
	    -o "$tmp/$(basename "$f" .c).o" "$top_srcdir/$f" \
	    >"$tmp/$(basename "$f").log" 2>&1 &
	pids="$pids $!"
done
failed=0
for p in $pids; do wait "$p" || failed=1; done
if [ $failed = 1 ] || ! $CXX $san -pthread -o "$tmp/test-kernels" "$tmp"/*.o \
    -lm >"$tmp/link.log" 2>&1; then
	cat "$tmp"/*.log | sed 's/^/# /'
	echo "Bail out! the emulated build failed"
	exit 1
fi
"$tmp/test-kernels"
