# emu-kernels.sh: sourced by emu-check.sh and emu-engine-check.sh.
#
# Rewrite every kernels/cuda/*.cu with tests/gpu/emu/launch.py and start
# compiling it, and the emulator itself, in the background into $tmp with
# $CXX, $san and $inc; the process ids are appended to $pids for the caller
# to wait on.
for f in "$top_srcdir"/kernels/cuda/*.cu; do
	b=$(basename "$f" .cu)
	python3 "$top_srcdir/tests/gpu/emu/launch.py" "$f" >"$tmp/$b.cc" ||
	    { echo "Bail out! cannot rewrite $f"; exit 1; }
	$CXX -std=c++17 -O2 -g -w $san $inc -c -o "$tmp/$b.o" "$tmp/$b.cc" \
	    >"$tmp/$b.log" 2>&1 &
	pids="$pids $!"
done
$CXX -std=c++17 -O2 -g -w $san $inc -c -o "$tmp/emu.o" \
    "$top_srcdir/tests/gpu/emu/emu.cc" >"$tmp/emu.log" 2>&1 &
pids="$pids $!"
