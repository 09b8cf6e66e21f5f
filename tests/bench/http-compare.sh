#!/bin/sh
# http-compare.sh: the prefill/decode interference scenario run by one
# client, `phasectl bench --url`, against phased's HTTP front end and then
# against llama-server on the same model file and machine, one after the
# other, so that two servers are compared by the same measurements.
#
# usage: http-compare.sh [-b BUILDDIR] [-m MODEL.gguf] [-l LLAMA_SERVER]
#            [-t THREADS] [-o OUTFILE]
#
#   -b  build directory with phased, phasectl and policies/.libs (default:
#       $top_builddir, else the current directory)
#   -m  the model (default ../shared/models/stories260K.gguf)
#   -l  the llama-server binary (default: llama-server on PATH; skipped with
#       a note when there is none)
#   -t  threads of each server (default 2)
#   -o  where the reports go (default: standard output)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=${top_builddir:-$(pwd)}
model=$here/../../../shared/models/stories260K.gguf
llama=$(command -v llama-server || true)
threads=2
outfile=/dev/stdout
while getopts b:m:l:t:o: opt; do
	case $opt in
	b) build=$(cd "$OPTARG" && pwd) ;;
	m) model=$OPTARG ;;
	l) llama=$OPTARG ;;
	t) threads=$OPTARG ;;
	o) outfile=$OPTARG ;;
	*) sed -n '2,16p' "$0"; exit 2 ;;
	esac
done
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
dir=$(mktemp -d /tmp/phased-http-compare.XXXXXX)
trap 'kill $spid 2>/dev/null || true; rm -rf "$dir"' EXIT
spid=
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The scenario: 2 chats of 128 tokens decode while 3 prompts of 400
# tokens arrive one second apart (the model's context is 512).
scenario="--scenario interference --chats 2 --chat-output 128 \
--chat-prompt-len 32 --long-prompt-len 400 --long-output 8 --long-every 1 \
--long-count 3 --model-file $model --quiet"

wait_up() {
	i=0
	until curl -sf "http://127.0.0.1:$port$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 600 ] || { echo "server on $port did not start" >&2;
		    exit 1; }
		sleep 0.1
	done
}

{
	echo "## phased ($(basename "$model"), $threads threads, policy fcfs)"
	echo
	cat >"$dir/phased.conf" <<CONF
plugin-dir $build/policies/.libs
model m $model ctx=512 threads=$threads
http-listen 127.0.0.1:$port
CONF
	"$build/phased" -d -f "$dir/phased.conf" -s "$dir/phased.sock" \
	    >"$dir/phased.log" 2>&1 &
	spid=$!
	wait_up /health
	until curl -s "http://127.0.0.1:$port/health" | grep -q '"m":"ready"'
	do sleep 0.1; done
	echo '```'
	# shellcheck disable=SC2086
	"$build/phasectl" bench m --url "http://127.0.0.1:$port/v1" $scenario
	echo '```'
	kill $spid; wait $spid || true
	spid=
	echo
	echo "## llama-server (same model, $threads threads)"
	echo
	if [ -z "$llama" ] || [ ! -x "$llama" ]; then
		echo "not run: no llama-server on this machine (give -l PATH)"
	else
		"$llama" -m "$model" -c 2048 -np 4 -t "$threads" --port "$port" \
		    --host 127.0.0.1 >"$dir/llama.log" 2>&1 &
		spid=$!
		wait_up /health
		echo '```'
		# shellcheck disable=SC2086
		"$build/phasectl" bench m --url "http://127.0.0.1:$port/v1" \
		    $scenario
		echo '```'
	fi
} >"$outfile"
