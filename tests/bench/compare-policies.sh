#!/bin/sh
# compare-policies.sh: prefill/decode interference under each scheduling
# policy.  Two chat streams decode continuously while a ~700-token prompt
# arrives every few seconds; for each policy the script records the chats'
# time between tokens (median, p99, max), the long prompt's time to first
# token and the throughputs, then writes a Markdown table and an SVG of the
# chats' token timelines.
#
# usage: compare-policies.sh [-b BUILDDIR] [-o OUTDIR] [-r ROUNDS]
#            [-e SECONDS] [-m MODEL.gguf] [-p POLICY,...]
#
#   -b  build directory holding phased, phasectl, phased-synth and
#       policies/.libs (default: $top_builddir, else the current directory)
#   -o  where BENCHMARKS.md and the SVG go (default: the directory of this
#       script)
#   -r  long prompts per policy (default 2)
#   -e  seconds between long prompts (default 30: longer than the slowest
#       policy needs for one, so they do not queue behind each other)
#   -m  the model (default: a TinyLlama-1.1B-shape Q4_0 model synthesized
#       into /tmp if absent)
#   -p  only these policies (labels below, comma-separated)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${top_builddir:-$(pwd)}
out=$here
rounds=2
every=30
model=/tmp/phased-bench-tinyllama-1.1b-q4_0.gguf
only=
while getopts b:o:r:e:m:p: opt; do
	case $opt in
	b) build=$(cd "$OPTARG" && pwd) ;;
	o) out=$OPTARG ;;
	r) rounds=$OPTARG ;;
	e) every=$OPTARG ;;
	m) model=$OPTARG ;;
	p) only=$OPTARG ;;
	*) sed -n '9,21p' "$0" >&2; exit 2 ;;
	esac
done
for p in phased phasectl phased-synth; do
	if [ ! -x "$build/$p" ]; then
		echo "compare-policies: $build/$p not built (use -b BUILDDIR)" >&2
		exit 2
	fi
done
shared=${PHASED_SHARED:-$here/../../../shared}
vocab=$shared/vocab/ggml-vocab-llama-spm.gguf

if [ ! -f "$model" ]; then
	echo "compare-policies: synthesizing $model" >&2
	"$build/phased-synth" --shape tinyllama-1.1b --type Q4_0 \
	    --vocab "$vocab" -o "$model.tmp$$"
	mv "$model.tmp$$" "$model"
fi

work=$(mktemp -d /tmp/phased-compare.XXXXXX)
sock=$work/phased.sock
echo "plugin-dir $build/policies/.libs" > "$work/phased.conf"
"$build/phased" -d -s "$sock" -f "$work/phased.conf" > "$work/phased.log" 2>&1 &
dpid=$!
trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null; rm -rf "$work"' EXIT INT TERM
i=0
while [ ! -S "$sock" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ]; then
		echo "compare-policies: daemon did not start" >&2
		cat "$work/phased.log" >&2
		exit 1
	fi
	sleep 0.1
done
ctl() { "$build/phasectl" -s "$sock" "$@"; }

long=700
chat_out=64
bench_args="--scenario interference --chats 2 --chat-output $chat_out \
    --chat-prompt-len 16 --long-prompt-len $long --long-output 4 \
    --long-every $every --long-count $rounds --seed 7"

# label|load options (the model is loaded afresh for each policy)
policies="fcfs|policy=fcfs
decode-reserved|policy=decode-reserved policy.max_prefill_tokens=32
chunked-prefill-32|policy=chunked-prefill policy.budget=32
chunked-prefill-auto|policy=chunked-prefill policy.tbt_target_ms=TARGET policy.min_chunk=8
disaggregated|policy=disaggregated groups=prefill:cpu0/decode:cpu1"

runs=
target=
started=$(date -u '+%Y-%m-%d %H:%M UTC')
loads=
echo "$policies" | {
while IFS='|' read -r label opts; do
	if [ -n "$only" ] && ! echo ",$only," | grep -q ",$label,"; then
		continue
	fi
	if [ -z "$target" ]; then
		target=250
	fi
	opts=$(echo "$opts" | sed "s/TARGET/$target/")
	name=m-$label
	echo "compare-policies: $label ($opts), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	# shellcheck disable=SC2086
	if ! ctl load "$name" "$model" ctx=2048 threads=2 $opts >/dev/null; then
		echo "compare-policies: $label: load failed" >&2
		continue
	fi
	loads="$loads $label=$(cut -d' ' -f1 /proc/loadavg)"
	# shellcheck disable=SC2086
	ctl --json bench "$name" $bench_args --quiet \
	    --timeline "$work/$label.timeline.json" > "$work/$label.json" ||
	    echo "compare-policies: $label: bench reported errors" >&2
	ctl unload "$name" >/dev/null || true
	# The automatic target: 2.5x the chats' median TBT measured under fcfs.
	if [ "$label" = fcfs ]; then
		target=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(int(2.5*r["interference"]["chat_tbt"]["p50"]))' "$work/$label.json")
	fi
	runs="$runs $label:$work/$label.json:$work/$label.timeline.json"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
avx512=no
grep -q avx512f /proc/cpuinfo && avx512=yes
cat > "$work/meta.json" <<EOF
$(python3 - "$cpu" "$avx512" "$started" "$model" "$long" "$every" "$rounds" \
    "$chat_out" "$target" "$loads" <<'PY'
import json, os, sys
cpu, avx, date, model, long_, every, rounds, chat, target, loads = sys.argv[1:]
head = """# Prefill/decode interference by scheduling policy

Produced by `tests/bench/compare-policies.sh` on %s.

- Machine: %s, %d CPUs available, AVX-512: %s, about 31 GB/s memory
  bandwidth; shared with other work, so figures are noisy (1-minute load
  average when each policy started:%s).
- Model: `%s` (TinyLlama-1.1B shape, Q4_0, synthesized weights), loaded with
  `ctx=2048 threads=2`.
- Workload: `phasectl bench MODEL --scenario interference --chats 2
  --chat-output %s --chat-prompt-len 16 --long-prompt-len %s --long-output 4
  --long-every %s --long-count %s --seed 7`: two chat streams generate %s
  tokens per request and start the next request at once; a %s-token prompt
  arrives every %s s, %s times.
- chunked-prefill-auto uses `tbt_target_ms=%s` (2.5 times the chats' median
  TBT measured under fcfs) with `min_chunk=8`; chunked-prefill-32 a fixed
  budget of 32 tokens per iteration; decode-reserved `max_prefill_tokens=32`;
  disaggregated two single-CPU groups `groups=prefill:cpu0/decode:cpu1`.
- Chat TBT is the client-side gap between successive tokens of one request;
  long TTFT is from sending the long prompt to receiving its first token.

""" % (date, cpu, os.cpu_count(), avx, loads, model, chat, long_, every,
       rounds, chat, long_, every, rounds, target)
print(json.dumps({"header": head, "title": "chat token timelines, %s-token prompt every %s s" % (long_, every)}))
PY
)
EOF
# shellcheck disable=SC2086
python3 "$here/report.py" --md "$work/table.md" \
    --svg "$out/compare-policies.svg" --meta "$work/meta.json" $runs
cat "$work/table.md"
cp "$work/table.md" "$out/BENCHMARKS.md"
for f in $runs; do
	label=${f%%:*}
	mkdir -p "$out/results"
	cp "$work/$label.json" "$out/results/$label.json"
done
}
