#!/bin/sh
# offline.sh: phased-bench on TinyLlama-1.1B-shape models of each tensor type
# (synthesized into a temporary directory when absent), like llama-bench's
# pp512/tg128, plus batched generation and long prompts.  Prints Markdown.
# usage: tests/bench/offline.sh [BUILDDIR] [MODELDIR]
set -eu
B=${1:-.}
M=${2:-/tmp}
SHARED=${PHASED_SHARED:-$(dirname "$0")/../../../shared}
VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf
T=$(nproc)
echo "phased-bench, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
for type in Q8_0 Q4_0 Q4_K_M F16; do
	f=$M/tl-$(echo $type | tr 'A-Z' 'a-z').gguf
	[ -f "$f" ] || "$B/phased-synth" --shape tinyllama-1.1b --type $type \
	    --vocab "$VOCAB" -o "$f" >&2
	echo
	echo "### $type ($f)"
	echo '```'
	"$B/phased-bench" -m "$f" -p 512 -n 128 -b 1 -r 5 -t "$T"
	"$B/phased-bench" -m "$f" -p 0 -n 32 -b 4,16,64 -r 3 -t "$T"
	echo '```'
done
echo
echo "### Q4_0, long prompts"
echo '```'
"$B/phased-bench" -m "$M/tl-q4_0.gguf" -p 2048,4096 -n 0 -r 3 -t "$T"
echo '```'
