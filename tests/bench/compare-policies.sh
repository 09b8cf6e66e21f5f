#!/bin/sh
# compare-policies.sh: prefill/decode interference under each scheduling
# policy.  Two chat streams decode continuously while a ~700-token prompt
# arrives; for each policy the script records the chats' time between tokens
# (median, p99, max), the long prompt's time to first token and the
# throughputs, then writes a Markdown table and an SVG of the chats' token
# timelines.  Rounds are interleaved (every policy once per round, in the
# same order) so that a change in the machine's load hits all policies alike.
#
# usage: compare-policies.sh [-b BUILDDIR] [-o OUTDIR] [-r ROUNDS]
#            [-e SECONDS] [-m MODEL.gguf] [-p POLICY,...] [-t THREADS]
#
#   -b  build directory holding phased, phasectl, phased-synth and
#       policies/.libs (default: $top_builddir, else the current directory)
#   -o  where BENCHMARKS.md, compare-policies.svg and results/ go (default:
#       the directory of this script)
#   -r  rounds (default 3)
#   -e  seconds of chat decoding before the long prompt arrives (default 4)
#   -m  the model (default: a TinyLlama-1.1B-shape Q4_0 model synthesized
#       into /tmp if absent)
#   -p  only these policies (labels below, comma-separated; chunked-prefill
#       and decode-reserved-auto are the policies without parameters;
#       disaggregated lends idle cores, disaggregated-lend-* choose the
#       direction, disaggregated-one-cpu puts both groups on cpu1)
#   -t  threads of the colocated policies (default 2; disaggregated always
#       runs one group per CPU)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${top_builddir:-$(pwd)}
out=$here
rounds=3
every=4
model=/tmp/phased-bench-tinyllama-1.1b-q4_0.gguf
only=
threads=2
while getopts b:o:r:e:m:p:t: opt; do
	case $opt in
	b) build=$(cd "$OPTARG" && pwd) ;;
	o) out=$OPTARG ;;
	r) rounds=$OPTARG ;;
	e) every=$OPTARG ;;
	m) model=$OPTARG ;;
	p) only=$OPTARG ;;
	t) threads=$OPTARG ;;
	*) sed -n '10,27p' "$0" >&2; exit 2 ;;
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
    --long-every $every --long-count 1 --slo-ttft-ms 10000 --slo-tbt-ms 150"

# label|load options (the model is loaded afresh for each run)
policies="fcfs|policy=fcfs
decode-reserved|policy=decode-reserved policy.max_prefill_tokens=32
chunked-prefill-32|policy=chunked-prefill policy.budget=32
chunked-prefill-auto|policy=chunked-prefill policy.tbt_target_ms=TARGET policy.min_chunk=8
disaggregated|policy=disaggregated groups=prefill:cpu0/decode:cpu1
chunked-prefill|policy=chunked-prefill
decode-reserved-auto|policy=decode-reserved
chunked-prefill-slo|policy=chunked-prefill policy.tbt_p99_ms=150 policy.ttft_ms=10000
slo|policy=slo policy.tbt_ms=150 policy.ttft_ms=10000
disaggregated-lend-off|policy=disaggregated policy.lend=off groups=prefill:cpu0/decode:cpu1
disaggregated-lend-prefill|policy=disaggregated policy.lend=prefill groups=prefill:cpu0/decode:cpu1
disaggregated-lend-decode|policy=disaggregated policy.lend=decode groups=prefill:cpu0/decode:cpu1
disaggregated-one-cpu|policy=disaggregated policy.lend=off groups=prefill:cpu1/decode:cpu1"

started=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$here" log -1 --format='%h %cd' --date=iso 2>/dev/null || true)
t_start=$(date +%s)
target=250
runs=
loads=
mkdir -p "$out/results"
rm -f "$out"/results/*.json
round=1
while [ "$round" -le "$rounds" ]; do
	loads="$loads
  - round $round:"
	while IFS='|' read -r label opts; do
		if [ -n "$only" ] && ! echo ",$only," | grep -q ",$label,"; then
			continue
		fi
		opts=$(echo "$opts" | sed "s/TARGET/$target/")
		name=m-$label
		load1=$(cut -d' ' -f1 /proc/loadavg)
		echo "compare-policies: round $round, $label ($opts), load $load1" >&2
		# shellcheck disable=SC2086
		if ! ctl load "$name" "$model" ctx=2048 threads="$threads" $opts >/dev/null; then
			echo "compare-policies: $label: load failed" >&2
			continue
		fi
		loads="$loads $label $load1,"
		res=$work/$label-r$round
		# shellcheck disable=SC2086
		ctl --json bench "$name" $bench_args --seed "$round" --quiet \
		    --timeline "$res.timeline.json" > "$res.json" ||
		    echo "compare-policies: $label: bench reported errors" >&2
		ctl --json stats "$name" > "$res.stats.json" || true
		ctl unload "$name" >/dev/null || true
		# The automatic target: 2.5x the chats' median TBT under fcfs.
		if [ "$label" = fcfs ] && [ "$round" = 1 ]; then
			target=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(max(1, round(2.5 * r["interference"]["chat_tbt"]["p50"])))' "$res.json")
		fi
		cp "$res.json" "$out/results/"
		if [ "$round" = 1 ]; then
			cp "$res.timeline.json" "$res.stats.json" "$out/results/"
		fi
		runs="$runs $label:$res.json:$res.timeline.json"
	done <<EOF
$policies
EOF
	round=$((round + 1))
done
elapsed=$(( $(date +%s) - t_start ))

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
avx512=no
grep -q avx512f /proc/cpuinfo && avx512=yes
python3 - "$cpu" "$avx512" "$started" "$model" "$long" "$every" "$rounds" \
    "$chat_out" "$target" "$loads" "$elapsed" "$threads" \
    "$commit" \
    > "$work/meta.json" <<'PY'
import json, os, sys
(cpu, avx, date, model, long_, every, rounds, chat, target, loads, el,
 threads, commit) = sys.argv[1:]
head = """# Prefill/decode interference by scheduling policy

Produced by `tests/bench/compare-policies.sh` on %s (%s s).

- Machine: %s, %d CPUs, AVX-512: %s, about 31 GB/s memory bandwidth; shared
  with other work, so figures are noisy.  One-minute load average when each
  run started:%s
- Tree: %s (plus any uncommitted changes).
- Model: `%s`%s, loaded
  afresh for each run with `ctx=2048 threads=%s`.
- Workload, per run: `phasectl bench MODEL --scenario interference --chats 2
  --chat-output %s --chat-prompt-len 16 --long-prompt-len %s --long-output 4
  --long-every %s --long-count 1 --seed ROUND`: two chat streams generate %s
  tokens per request and start the next request at once; one %s-token prompt
  arrives after %s s; the chats are cancelled when it is answered.  %s
  rounds, every policy once per round.
- chunked-prefill-auto uses `tbt_target_ms=%s` (2.5 times the chats' median
  TBT measured under fcfs in round 1) with `min_chunk=8`; chunked-prefill-32
  a fixed budget of 32 tokens per iteration; decode-reserved
  `max_prefill_tokens=32`; disaggregated two single-CPU groups
  `groups=prefill:cpu0/decode:cpu1`.
- Chat TBT is the client-side gap between successive tokens of one request
  (pooled over the rounds); long TTFT is from sending the long prompt to
  receiving its first token.  results/ holds each run's `--json` report and
  round 1's `--timeline` and `phasectl stats --json`; compare-policies.svg
  draws round 1.

""" % (date, el, cpu, os.cpu_count(), avx, loads.rstrip(","),
       commit or "unknown", model,
       " (TinyLlama-1.1B shape, Q4_0, synthesized weights)"
       if "tinyllama" in model else "", threads, chat,
       long_, every, chat, long_, every, rounds, target)
print(json.dumps({"header": head,
                  "title": "chat token timelines, one %s-token prompt (round 1)" % long_}))
PY
# shellcheck disable=SC2086
python3 "$here/report.py" --md "$work/table.md" \
    --svg "$out/compare-policies.svg" --meta "$work/meta.json" $runs
cat "$work/table.md"
# Hand-written notes below the marker survive a new run.
marker='<!-- notes: kept by compare-policies.sh -->'
if [ -f "$out/BENCHMARKS.md" ] && grep -q "^$marker" "$out/BENCHMARKS.md"; then
	printf '\n' >> "$work/table.md"
	sed -n "/^$marker/,\$p" "$out/BENCHMARKS.md" >> "$work/table.md"
fi
cp "$work/table.md" "$out/BENCHMARKS.md"
