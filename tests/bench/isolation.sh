#!/bin/sh
# isolation.sh: decode throughput of a model with its policy in-process
# (policy-isolation no) and in a policy host (yes), alternating runs since
# the machine may be shared, and the plan round trip of bench-isolation.
# usage: tests/bench/isolation.sh [BUILDDIR] [MODEL] [ROUNDS]
# environment: REQUESTS (96), OUTPUT (128 tokens each), THREADS (1)
set -eu
B=$(cd "${1:-.}" && pwd)
SHARED=${PHASED_SHARED:-$(dirname "$0")/../../../shared}
MODEL=${2:-$SHARED/models/stories260K.gguf}
ROUNDS=${3:-3}
REQUESTS=${REQUESTS:-96}
OUTPUT=${OUTPUT:-128}
THREADS=${THREADS:-1}
T=$(mktemp -d /tmp/phased-iso.XXXXXX)
trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT
PID=
echo "isolation.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model $MODEL, $REQUESTS requests of $OUTPUT tokens, 8 in flight, $THREADS threads"
run() {
	printf 'plugin-dir %s/policies/.libs\npolicy-isolation %s\n' "$B" "$1" >"$T/conf"
	"$B/phased" -d -f "$T/conf" -s "$T/sock" 2>"$T/log" &
	PID=$!
	while [ ! -S "$T/sock" ]; do sleep 0.1; done
	"$B/phasectl" -s "$T/sock" load m "$MODEL" policy=fcfs ctx=512 threads=$THREADS >/dev/null
	"$B/phasectl" -s "$T/sock" bench m --concurrency 8 --requests $REQUESTS \
	    --prompt-len 16 --output-len $OUTPUT --seed 1 2>&1 |
	    grep '^throughput' | sed "s/^/isolation $1: /"
	kill $PID
	wait $PID 2>/dev/null || true
	rm -f "$T/sock"
}
i=0
while [ $i -lt "$ROUNDS" ]; do
	run no
	run yes
	i=$((i + 1))
done
"$B/tests/bench/bench-isolation" "$B/policies/.libs" "$B/phased-policy-host" 2>/dev/null
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
