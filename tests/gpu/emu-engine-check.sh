#!/bin/sh
# emu-engine-check.sh: run tests/gpu/test-engine-cuda on the CPU emulation
# of CUDA.
#
# The CUDA backend (kernels/cuda/backend_cuda.c) and the kernels are compiled by
# the host compilers against tests/gpu/emu (see emu-check.sh), with
# tests/gpu/emu-backend.{h,c} serving the pinned memory the backend adds,
# and linked with the model, tokenizer and GGUF libraries of a built
# tree.  The engine test then runs stories260K through the whole backend
# (weight upload, paged KV, ragged batches, kv_copy) against the CPU
# backend, so the backend's logic is checked without a GPU; speed, GPU
# rounding and real asynchrony need a device (tests/gpu/device-check.sh).
# The backend's NCCL calls (kernels/cuda/comm.c, built as if NCCL were
# present) go to the emulation's stand-in (tests/gpu/emu/nccl.c), so
# tensor-parallel groups of 2 and 4 emulated devices run too, and decode
# iterations as CUDA graphs (kernels/cuda/graph.c) on each, one graph per
# rank with its collectives, captured and replayed on the emulation's
# streams, and KV transfers beside compute (kernels/cuda/kv_xfer.c) on
# streams that hold their work until it is waited for.
# Prints TAP; skips without the tools or a built tree.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
CXX=${EMU_CXX:-g++}
CC=${EMU_CC:-cc}

for tool in "$CXX" "$CC" python3; do
	command -v "$tool" >/dev/null 2>&1 ||
	    { echo "1..0 # SKIP $tool not found"; exit 0; }
done
libs=
for l in model tokenizer kernels kernels_avx2 kernels_avx512 gguf util; do
	a="$top_builddir/.libs/libphased_$l.a"
	case $l in
	kernels_*)	[ -f "$a" ] || continue ;;
	*)		[ -f "$a" ] ||
			    { echo "1..0 # SKIP $a not built"; exit 0; } ;;
	esac
	libs="$libs $a"
done
# A tree built with sanitizers needs them at link time too.
nm "$top_builddir/.libs/libphased_util.a" 2>/dev/null | grep -q __asan_ &&
    EMU_SANITIZE=${EMU_SANITIZE:-1}
[ -f "$top_builddir/config.h" ] ||
    { echo "1..0 # SKIP no config.h in $top_builddir"; exit 0; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/phased-emu-engine.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

cp "$top_builddir/config.h" "$tmp/config.h"
printf '#undef HAVE_NCCL\n#define HAVE_NCCL 1\n' >>"$tmp/config.h"
san=
[ -n "${EMU_SANITIZE:-}" ] && san="-fsanitize=address,undefined \
    -fno-sanitize-recover=all -fno-omit-frame-pointer"
inc="-I$top_srcdir/tests/gpu/emu/include -I$top_srcdir/tests/gpu -I$tmp \
    -I$top_srcdir/kernels -I$top_srcdir/kernels/cuda -I$top_srcdir/lib \
    -I$top_srcdir/runtime -I$top_srcdir/tokenizer -I$top_srcdir/gguf \
    -I$top_srcdir/kernels/cpu"
pids=
. "$top_srcdir/tests/gpu/emu-kernels.sh"
for f in kernels/ref.c tests/gpu/emu-backend.c tests/gpu/test-engine-cuda.c \
    kernels/cuda/comm.c tests/gpu/emu/nccl.c; do
	$CC -std=gnu11 -O2 -g -pthread $san $inc -c \
	    -o "$tmp/$(basename "$f" .c).o" "$top_srcdir/$f" \
	    >"$tmp/$(basename "$f").log" 2>&1 &
	pids="$pids $!"
done
for f in backend_cuda kv_xfer graph; do
	$CC -std=gnu11 -O2 -g -pthread -Wall -Wextra -Wno-unused-parameter \
	    $san $inc -include emu-backend.h -c -o "$tmp/$f.o" \
	    "$top_srcdir/kernels/cuda/$f.c" >"$tmp/$f.c.log" 2>&1 &
	pids="$pids $!"
done
failed=0
for p in $pids; do wait "$p" || failed=1; done
if [ $failed = 1 ] || ! $CXX $san -pthread -o "$tmp/test-engine-cuda" \
    "$tmp"/*.o -Wl,--start-group $libs -Wl,--end-group -lm \
    >"$tmp/link.log" 2>&1; then
	cat "$tmp"/*.log | sed 's/^/# /'
	echo "Bail out! the emulated build failed"
	exit 1
fi
PHASED_SHARED=${PHASED_SHARED:-$top_srcdir/../shared} "$tmp/test-engine-cuda"
