#!/bin/sh
# The official openai and ollama npm clients against phased's HTTP front
# end (streaming and not).  The packages are installed from npm into the
# build tree on first use; without node, npm or the registry the test is
# skipped.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
shared=${PHASED_SHARED:-$top_srcdir/../shared}
model=$shared/models/stories260K.gguf
prefix=$(cd "$top_builddir" && pwd)/tests/npm

[ -f "$model" ] || { echo "1..0 # SKIP no $model"; exit 0; }
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
	{ echo "1..0 # SKIP node and npm are not installed"; exit 0; }
command -v curl >/dev/null 2>&1 ||
	{ echo "1..0 # SKIP curl is not installed"; exit 0; }
if [ ! -d "$prefix/node_modules/openai" ] ||
    [ ! -d "$prefix/node_modules/ollama" ]; then
	mkdir -p "$prefix"
	timeout 300 npm install --prefix "$prefix" --no-audit --no-fund \
	    --loglevel=error openai ollama >"$prefix/install.log" 2>&1 ||
		{ echo "1..0 # SKIP npm install failed (no registry?)"; exit 0; }
fi

dir=$(mktemp -d /tmp/phased-http-clients.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/phased.conf" <<CONF
plugin-dir $(cd "$top_builddir" && pwd)/policies/.libs
model stories $model ctx=512
http-listen 127.0.0.1:$port
CONF
"$top_builddir/phased" -d -f "$dir/phased.conf" -s "$dir/phased.sock" \
    >"$dir/log" 2>&1 &
pid=$!
i=0
until curl -sf "http://127.0.0.1:$port/health" 2>/dev/null |
    grep -q '"stories":"ready"'; do
	i=$((i + 1))
	if [ $i -gt 200 ] || ! kill -0 $pid 2>/dev/null; then
		echo "1..1"; echo "not ok 1 - phased did not start"
		sed 's/^/# /' "$dir/log"; kill $pid 2>/dev/null; rm -rf "$dir"
		exit 1
	fi
	sleep 0.05
done
node "$top_srcdir/tests/integration/http-clients.js" "$prefix" \
    "http://127.0.0.1:$port" stories
rc=$?
kill $pid
wait $pid
rm -rf "$dir"
exit $rc
