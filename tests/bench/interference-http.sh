#!/bin/sh
# interference-http.sh: the prefill/decode interference scenario measured by
# one client, `phasectl --json bench --url`, against phased under several
# scheduling policies and against llama-server, on the same model file, with
# the rounds interleaved (every server once per round, in the same order).
#
# usage: interference-http.sh [-b BUILDDIR] [-m MODEL.gguf] [-l LLAMA_SERVER]
#            [-r ROUNDS] [-t THREADS] [-p LABEL,...] [-c CHAT_TOKENS]
#            [-L LONG_TOKENS] [-e SECONDS]
#
#   -b  build directory with phased, phasectl and policies/.libs (default:
#       $top_builddir, else the current directory)
#   -m  the model (default /tmp/vs-llamacpp/tl-q4_0.gguf, a TinyLlama-1.1B
#       shape Q4_0 file written by tests/bench/vs-llamacpp.sh)
#   -l  the llama-server binary (default: llama-server on PATH, else
#       /tmp/llama.cpp-build/bin/llama-server; left out with a note when
#       there is none)
#   -r  rounds (default 3); -t threads of each server (default 2)
#   -p  only these labels (see the list below)
#   -c  tokens each chat request generates (default 250)
#   -L  tokens of the long prompt (default 700); -e seconds of chat decoding
#       before it arrives (default 3)
#
# The table gives, per server, the medians over the rounds of the chats'
# median and largest time between tokens, the long prompt's time to first
# token and the goodput (requests meeting TBT 150 ms and TTFT 10 s per
# second), with the spread (min-max) of the largest gap and of the TTFT.
# A round in which the client saw a request fail (an error, or a stream
# that ended without a token) is left out of the medians, with a note.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${top_builddir:-$(pwd)}
model=/tmp/vs-llamacpp/tl-q4_0.gguf
llama=$(command -v llama-server || echo /tmp/llama.cpp-build/bin/llama-server)
rounds=3
threads=2
only=
chat=250
long=700
every=3
while getopts b:m:l:r:t:p:c:L:e: opt; do
	case $opt in
	b) build=$(cd "$OPTARG" && pwd) ;;
	m) model=$OPTARG ;;
	l) llama=$OPTARG ;;
	r) rounds=$OPTARG ;;
	t) threads=$OPTARG ;;
	p) only=$OPTARG ;;
	c) chat=$OPTARG ;;
	L) long=$OPTARG ;;
	e) every=$OPTARG ;;
	*) sed -n '2,29p' "$0" >&2; exit 2 ;;
	esac
done
for p in phased phasectl; do
	[ -x "$build/$p" ] || { echo "interference-http: $build/$p not built (use -b BUILDDIR)" >&2; exit 2; }
done
[ -f "$model" ] || { echo "interference-http: $model: no such model (see -m)" >&2; exit 2; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
dir=$(mktemp -d /tmp/phased-interference.XXXXXX)
spid=
trap 'kill $spid 2>/dev/null || true; rm -rf "$dir"' EXIT INT TERM
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scenario="--scenario interference --chats 2 --chat-output $chat \
--chat-prompt-len 16 --long-prompt-len $long --long-output 4 \
--long-every $every --long-count 1 --slo-ttft-ms 10000 --slo-tbt-ms 150 \
--model-file $model --quiet"

# label|phased load options, or llama-server.  chunked-prefill-fixed plans
# at most 128 tokens an iteration whatever the build measures, so that two
# builds of different speeds are compared on the same chunks.
servers="fcfs|policy=fcfs
chunked-prefill|
chunked-prefill-fixed|policy=chunked-prefill policy.budget=128
decode-reserved|policy=decode-reserved
slo|policy=slo policy.tbt_ms=150 policy.ttft_ms=10000
disaggregated|policy=disaggregated groups=prefill:cpu0/decode:cpu1
disaggregated-lend-off|policy=disaggregated groups=prefill:cpu0/decode:cpu1 policy.lend=off
disaggregated-lend-prefill|policy=disaggregated groups=prefill:cpu0/decode:cpu1 policy.lend=prefill
disaggregated-lend-decode|policy=disaggregated groups=prefill:cpu0/decode:cpu1 policy.lend=decode
llama-server|llama-server"

# Where llama.cpp's AMX kernels fault, llama-server runs with AMX refused.
pre=
if [ -x "$llama" ]; then
	rc=0
	"$llama" --version >/dev/null 2>&1 || rc=$?
	cc -shared -fPIC -O2 -o "$dir/noamx.so" "$here/noamx.c" -ldl
	b=$(dirname "$llama")/llama-bench
	if [ -x "$b" ]; then
		"$b" -m "$model" -t "$threads" -p 8 -n 0 -r 1 >/dev/null 2>&1 || rc=$?
		if [ "$rc" -eq 132 ]; then
			pre=$dir/noamx.so
			echo "interference-http: llama.cpp's AMX faults here: llama-server runs with AMX refused" >&2
		fi
	fi
fi

# wait_up PATH: wait until the server on $port answers PATH.
wait_up() {
	i=0
	until curl -sf "http://127.0.0.1:$port$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 1200 ] || { echo "interference-http: server on $port did not start" >&2; return 1; }
		sleep 0.1
	done
}

# serve LABEL OPTS: start the server of a label on $port.
serve() {
	if [ "$2" = llama-server ]; then
		LD_PRELOAD=$pre "$llama" -m "$model" -c 4096 -np 4 -t "$threads" \
		    --port "$port" --host 127.0.0.1 >"$dir/$1.log" 2>&1 &
		spid=$!
		wait_up /health
		return
	fi
	cat >"$dir/phased.conf" <<CONF
plugin-dir $build/policies/.libs
model m $model ctx=2048 threads=$threads $2
http-listen 127.0.0.1:$port
CONF
	"$build/phased" -d -f "$dir/phased.conf" -s "$dir/phased.sock" \
	    >"$dir/$1.log" 2>&1 &
	spid=$!
	wait_up /health
	until curl -s "http://127.0.0.1:$port/health" | grep -q '"m":"ready"'; do
		kill -0 $spid 2>/dev/null || { cat "$dir/$1.log" >&2; return 1; }
		sleep 0.1
	done
}

echo "interference-http: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), model $model"
echo "client: phasectl --json bench m --url http://127.0.0.1:PORT/v1 $scenario"
r=1
while [ "$r" -le "$rounds" ]; do
	while IFS='|' read -r label opts; do
		if [ -n "$only" ] && ! echo ",$only," | grep -q ",$label,"; then
			continue
		fi
		if [ "$opts" = llama-server ] && [ ! -x "$llama" ]; then
			continue
		fi
		echo "interference-http: round $r, $label, load $(cut -d' ' -f1 /proc/loadavg)" >&2
		serve "$label" "$opts" || { kill $spid 2>/dev/null || true; continue; }
		# shellcheck disable=SC2086
		"$build/phasectl" --json bench m --url "http://127.0.0.1:$port/v1" \
		    $scenario --seed "$r" >"$dir/$label-r$r.json" ||
		    echo "interference-http: $label: the client reported errors" >&2
		kill $spid; wait $spid 2>/dev/null || true
		spid=
	done <<EOF
$servers
EOF
	r=$((r + 1))
done
[ -x "$llama" ] || echo "interference-http: llama-server: not run (no binary; give -l PATH)"
python3 - "$dir" $(echo "$servers" | cut -d'|' -f1) <<'PY'
import glob, json, os, statistics, sys
d = sys.argv[1]
rows = {l: [] for l in sys.argv[2:]}
for f in sorted(glob.glob(os.path.join(d, "*-r*.json"))):
    label = os.path.basename(f).rsplit("-r", 1)[0]
    try:
        j = json.load(open(f))
    except ValueError:
        continue
    if j.get("errors", 0) > 0:
        # A request that failed (an empty stream counts) has no TTFT or gaps.
        print("%s: left out, %d request(s) failed" % (os.path.basename(f),
            j["errors"]), file=sys.stderr)
        continue
    i = j["interference"]
    rows[label].append((i["chat_tbt"]["p50"], i["chat_tbt"]["max"],
        i["long_ttft"]["max"], j["goodput"]))
med = statistics.median
print("| server | rounds | chat TBT median | chat TBT max (spread) | long TTFT (spread) | goodput req/s |")
print("|---|---:|---:|---:|---:|---:|")
for label, v in rows.items():
    if not v:
        continue
    col = list(zip(*v))
    print("| %s | %d | %.0f ms | %.2f s (%.2f-%.2f) | %.2f s (%.2f-%.2f) | %.3f |" % (
        label, len(v), med(col[0]), med(col[1]) / 1e3, min(col[1]) / 1e3,
        max(col[1]) / 1e3, med(col[2]) / 1e3, min(col[2]) / 1e3,
        max(col[2]) / 1e3, med(col[3])))
PY
