#!/bin/sh
# offline.sh: phased-bench on TinyLlama-1.1B-shape models of each tensor type
# (synthesized into a temporary directory when absent), like llama-bench's
# pp512/tg128, plus batched generation and long prompts.  Prints Markdown.
# usage: tests/bench/offline.sh [BUILDDIR] [MODELDIR]
# TYPES="Q4_0 Q5_K ..." picks the types; QUICK=1 runs only pp512/tg128
# with 3 runs (no batched generation, no long prompts).
set -eu
B=${1:-.}
M=${2:-/tmp}
SHARED=${PHASED_SHARED:-$(dirname "$0")/../../../shared}
VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf
T=$(nproc)
echo "phased-bench, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
for type in ${TYPES:-Q8_0 Q4_0 Q4_K_M F16}; do
	f=$M/tl-$(echo $type | tr 'A-Z' 'a-z').gguf
	[ -f "$f" ] || "$B/phased-synth" --shape tinyllama-1.1b --type $type \
	    --vocab "$VOCAB" -o "$f" >&2
	echo
	echo "### $type ($f)"
	echo '```'
	if [ -n "${QUICK:-}" ]; then
		"$B/phased-bench" -m "$f" -p 512 -n 128 -b 1 -r 3 -t "$T"
	else
		"$B/phased-bench" -m "$f" -p 512 -n 128 -b 1 -r 5 -t "$T"
		"$B/phased-bench" -m "$f" -p 0 -n 32 -b 4,16,64 -r 3 -t "$T"
	fi
	echo '```'
done
[ -n "${QUICK:-}" ] && exit 0
echo
echo "### Q4_0, long prompts"
echo '```'
"$B/phased-bench" -m "$M/tl-q4_0.gguf" -p 2048,4096 -n 0 -r 3 -t "$T"
echo '```'
