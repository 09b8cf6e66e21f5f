#!/bin/sh
# make.sh: remake llama.cpp's outputs for the quantized copies test-arch
# writes.  usage: sh tests/data/arch-quant/make.sh LLAMA_SRC LLAMA_BUILD BUILD
# (llama.cpp's source and build folders, the project's build folder); run
# from the source tree.  Needs a C compiler and libjansson.
set -eu
if [ $# -ne 3 ]; then
	echo "usage: make.sh LLAMA_SRC LLAMA_BUILD BUILD" >&2
	exit 2
fi
src=$1 lbuild=$2 build=$3
here=tests/data/arch-quant
shared=${PHASED_SHARED:-../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lib=$(dirname "$(find "$lbuild" -name 'libllama.so' | head -1)")
cc -O2 -I"$src/include" -I"$src/ggml/include" "$here/llamacpp-ref.c" \
    -o "$tmp/llamacpp-ref" -L"$lib" -lllama -lggml -lggml-base -ljansson \
    -Wl,-rpath,"$lib"
which=$(git -C "$src" rev-parse --short=9 HEAD 2>/dev/null || echo unknown)
make -C "$build" tests/unit/test-arch >/dev/null
TEST_ARCH_KEEP=$tmp PHASED_SHARED=$shared "$build/tests/unit/test-arch" \
    >/dev/null 2>&1 || true
for f in "$tmp"/*-*.gguf; do
	b=$(basename "$f" .gguf)
	name=${b%-*} type=${b##*-}
	"$tmp/llamacpp-ref" "$f" "$shared/golden/arch/$name.json" f16 \
	    "$name.gguf with its matrices as $type (test-arch)" \
	    "$which" > "$here/$b.json" 2> "$tmp/err" ||
	    { cat "$tmp/err" >&2; exit 1; }
	echo "$here/$b.json"
done
