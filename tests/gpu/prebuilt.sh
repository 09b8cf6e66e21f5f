#!/bin/sh
# prebuilt.sh: gather what device-check.sh --prebuilt needs into one folder.
#
#	sh tests/gpu/prebuilt.sh BUILD OUT
#
# BUILD is a build directory configured --with-cuda; the binaries the
# device check runs are made there (make), stripped and copied to OUT/build
# with config.h, and the shared test data they read (stories260K, its
# golden continuation, the architectures the CUDA backend refuses, the
# llama vocabulary) to OUT/shared.  On the GPU machine, from a checkout:
#
#	PHASED_SHARED=OUT/shared sh tests/gpu/device-check.sh --prebuilt OUT/build
#
# The folder is about 25 MB.  The GPU machine needs the CUDA runtime of the
# same major version as BUILD's (cuBLAS, and NCCL when BUILD found it).
set -eu
[ $# -eq 2 ] || { echo "usage: prebuilt.sh BUILD OUT" >&2; exit 2; }
B=$(cd "$1" && pwd)
O=$2
top=$(cd "$(dirname "$0")/../.." && pwd)
S=${PHASED_SHARED:-$top/../shared}
grep -q 'define HAVE_CUDA 1' "$B/config.h" ||
    { echo "prebuilt.sh: $B is not configured --with-cuda" >&2; exit 1; }
bins="tests/unit/test-kernels-ref tests/unit/test-matmul tests/unit/test-quant
    tests/gpu/test-kernels tests/gpu/bench-kernels tests/gpu/test-engine-cuda
    tests/gpu/test-comm tests/bench/bench-bw tests/bench/bench-matmul
    phased-synth phased-bench"
# shellcheck disable=SC2086
make -C "$B" -j"$(nproc)" $bins >/dev/null
mkdir -p "$O/build/tests/unit" "$O/build/tests/gpu" "$O/build/tests/bench" \
    "$O/shared/models/arch" "$O/shared/golden" "$O/shared/vocab"
cp "$B/config.h" "$O/build/"
for f in $bins; do
	strip -o "$O/build/$f" "$B/$f"
done
cp "$S/models/stories260K.gguf" "$O/shared/models/"
for a in qwen2 gemma2 mistral-hd llama3; do
	cp "$S/models/arch/$a.gguf" "$O/shared/models/arch/"
done
cp "$S/golden/stories260K-once-upon-a-time.json" "$O/shared/golden/"
cp "$S/vocab/ggml-vocab-llama-spm.gguf" "$O/shared/vocab/"
du -sh "$O"
