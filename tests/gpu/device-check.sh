#!/bin/sh
# device-check.sh: the one check to run on a machine with an NVIDIA GPU.
#
#	sh tests/gpu/device-check.sh [--quick] [--prebuilt DIR]
#
# From the repository root: installs missing build dependencies when it can,
# configures --with-cuda in a fresh build directory (build-device), builds
# the kernel tests and the benchmark, runs every kernel against its C
# reference and prints a table (kernel, shape, max abs err, pass/fail),
# times the matrix products on Llama-3-8B shapes against the H200
# rooflines, and runs the engine-level check (the CUDA backend against the
# CPU backend on stories260K, also through the tensor-parallel NCCL path
# on one GPU, and CUDA graphs on and off on both paths: the same greedy
# tokens, graphs captured once per shape and replayed), the NCCL test
# (four GPUs or more), and end-to-end decode (batch 1, 8, 64) and prompt
# (512, 4096) tokens/s of a Llama-3-8B-shaped model in F16 (also through
# NCCL, and decode with and without CUDA graphs on both paths), BF16,
# Q8_0 and Q4_K_M with the achieved HBM bandwidth and matrix TFLOP/s
# against the H200's peaks.  tests/gpu/emu-engine-check.sh runs the same
# engine check on the CPU emulation, as part of make check.
# When autotools or the libraries the daemon needs are missing and cannot
# be installed (an offline machine), the kernels and their tests are
# compiled directly with nvcc and cc instead: they need neither.
# Everything fits well within 10 minutes on one H200; --quick times
# 4 layers instead of 32.  Exits non-zero if a kernel check fails.
# Without a CUDA device the GPU sections say so and are skipped, the CPU
# kernel tests still run, and it exits 77 if those pass (1 if not).
#
# --prebuilt DIR runs the binaries of a build directory configured
# --with-cuda on another machine (the same CUDA major version) and builds
# nothing: for a GPU machine without the libraries or a network.
# tests/gpu/prebuilt.sh gathers DIR and the shared test data the binaries
# read.  Libraries they cannot find (cuBLAS, NCCL) are looked for under
# /usr/local and /opt.
# The shared test data is read from PHASED_SHARED, else ../shared.

set -u
quick=
prebuilt=
while [ $# -gt 0 ]; do
	case $1 in
	--quick)	quick=--quick ;;
	--prebuilt)	[ $# -ge 2 ] || { echo "--prebuilt needs a directory"; exit 2; }
			prebuilt=$(cd "$2" && pwd) || exit 2
			shift ;;
	*)		echo "usage: device-check.sh [--quick] [--prebuilt DIR]"
			exit 2 ;;
	esac
	shift
done
top=$(cd "$(dirname "$0")/../.." && pwd)
shared=${PHASED_SHARED:-$top/../shared}
PHASED_SHARED=$shared
export PHASED_SHARED
build=${BUILD_DIR:-$top/build-device}
jobs=$(nproc 2>/dev/null || echo 4)
PATH=$PATH:/usr/local/cuda/bin
export PATH
t0=$(date +%s)

say() { printf '\n== %s (%ss)\n' "$1" $(($(date +%s) - t0)); }

# built LOG TARGET...: the targets are there, made now unless prebuilt.
built() {
	log=$1
	shift
	case $mode in
	autotools)	make -j"$jobs" "$@" >"$log" 2>&1 ;;
	prebuilt)	for x in "$@"; do
				[ -x "$x" ] || { echo "$x: not in $build" >"$log"
				    return 1; }
			done ;;
	*)		return 1 ;;
	esac
}

say "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    2>/dev/null || echo "nvidia-smi not available"
nvcc --version 2>/dev/null | tail -1

say "host"
grep -m1 'model name' /proc/cpuinfo | sed 's/^[^:]*: //'
echo "$(nproc) CPUs; vector extensions:$(grep -m1 '^flags' /proc/cpuinfo |
    tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512bw|avx512_vnni|avx512_bf16|avx512_fp16|amx_tile|amx_int8|amx_bf16)$' |
    tr '\n' ' ' | sed 's/^/ /')"

mode=autotools
[ -n "${DEVICE_CHECK_DIRECT:-}" ] && mode=direct	# force the fallback
if [ -n "$prebuilt" ]; then
	say "prebuilt binaries in $prebuilt"
	build=$prebuilt
	mode=prebuilt
	# Add the folders of libraries the binaries miss to the search path.
	for lib in $(ldd "$build/phased-bench" "$build/tests/gpu/test-kernels" \
	    2>/dev/null | awk '/=> not found/ { print $1 }' | sort -u); do
		d=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null |
		    head -1)
		[ -n "$d" ] && LD_LIBRARY_PATH=$(dirname "$d")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		echo "$lib: ${d:-not found}"
	done
	export LD_LIBRARY_PATH
	if ldd "$build/phased-bench" "$build/tests/gpu/test-kernels" 2>&1 |
	    grep 'not found'; then
		echo "prebuilt binaries cannot run here; building instead"
		build=$top/build-device
		mode=autotools
	fi
fi

if [ $mode != prebuilt ]; then
say "build dependencies"
missing=
if command -v dpkg >/dev/null 2>&1; then
	for p in libevent-dev libprotobuf-c-dev protobuf-c-compiler autoconf \
	    automake libtool pkg-config; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
fi
if [ -n "$missing" ]; then
	echo "missing:$missing"
	if command -v apt-get >/dev/null 2>&1; then
		SUDO=
		[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO=sudo
		if timeout 120 $SUDO apt-get update -qq >/tmp/device-apt.log 2>&1 &&
		    DEBIAN_FRONTEND=noninteractive timeout 180 $SUDO apt-get \
		    install -y -qq $missing >>/tmp/device-apt.log 2>&1; then
			echo "installed"
		else
			echo "apt-get failed (offline?); see /tmp/device-apt.log"
		fi
	fi
else
	echo "all present"
fi

rm -rf "$build"
mkdir -p "$build" || exit 1
cd "$build" || exit 1

say "configure --with-cuda"
if [ $mode = autotools ] && [ ! -x "$top/configure" ]; then
	(cd "$top" && autoreconf -fi >"$build/autoreconf.log" 2>&1) ||
	    { echo "autoreconf failed"; mode=direct; }
fi
if [ $mode = autotools ]; then
	if "$top/configure" -q --with-cuda >configure.log 2>&1; then
		grep -E "define HAVE_(CUDA|NCCL)" config.h
	else
		tail -3 configure.log
		echo "configure failed"
		mode=direct
	fi
fi

say "build ($mode)"
if [ $mode = autotools ]; then
	if ! make -j"$jobs" tests/unit/test-kernels-ref tests/unit/test-matmul \
	    tests/unit/test-quant tests/gpu/test-kernels tests/gpu/bench-kernels \
	    >build.log 2>&1; then
		tail -40 build.log
		echo "make failed; trying the direct build"
		mode=direct
	fi
fi
if [ $mode = direct ]; then
	# The kernels need only lib/{util,log,tensor_type}.c and a config.h.
	mkdir -p direct tests/gpu || exit 1
	printf '#define _GNU_SOURCE 1\n#define HAVE_CUDA 1\n' >direct/config.h
	inc="-Idirect -I$top/lib -I$top/gguf -I$top/tokenizer -I$top/runtime \
	    -I$top/kernels -I$top/kernels/cpu -I$top/kernels/cuda -I/usr/local/cuda/include"
	nvflags="-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 \
	    -gencode arch=compute_90,code=compute_90 $inc"
	pids=
	for f in "$top"/kernels/cuda/*.cu; do
		nvcc $nvflags -c -o "direct/$(basename "$f" .cu).o" "$f" \
		    >"direct/$(basename "$f").log" 2>&1 &
		pids="$pids $!"
	done
	ok=1
	for p in $pids; do wait "$p" || ok=0; done
	cflags="-std=gnu11 -O2 -pthread $inc"
	for f in lib/util.c lib/log.c lib/tensor_type.c kernels/ref.c; do
		cc $cflags -c -o "direct/$(basename "$f" .c).o" "$top/$f" || ok=0
	done
	cudalibs="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
	    -lcublas -lcudart -lstdc++ -lm"
	[ $ok = 1 ] &&
	cc $cflags -o tests/gpu/test-kernels "$top/tests/gpu/test-kernels.c" \
	    direct/*.o $cudalibs &&
	cc $cflags -o tests/gpu/bench-kernels "$top/tests/gpu/bench-kernels.c" \
	    direct/*.o $cudalibs || ok=0
	if [ $ok = 0 ]; then
		cat direct/*.log
		echo "direct build failed"
		exit 1
	fi
fi
fi	# not prebuilt
cd "$build" || exit 1

say "kernel checks (each kernel against kernels/ref.c)"
status=0
if [ -x tests/unit/test-kernels-ref ]; then
	./tests/unit/test-kernels-ref >ref.tap 2>&1 || status=1
	echo "reference self-test: $(grep -c '^ok' ref.tap) ok," \
	    "$(grep -c '^not ok' ref.tap) not ok"
	grep -A2 '^not ok' ref.tap
fi
./tests/gpu/test-kernels >kernels.tap 2>&1 || status=1
# test-kernels asks the CUDA runtime; without a device the sections that
# run models on one are skipped, not failed.
nodev=
grep -q 'SKIP no CUDA device' kernels.tap && nodev=1
grep '^#' kernels.tap | head -5
awk '
BEGIN { printf "%-12s %-42s %-22s %s\n", "kernel", "shape", "max abs err", "result" }
/^(not )?ok [0-9]+ - / {
	res = ($1 == "not") ? "FAIL" : "pass"
	line = $0
	sub(/^(not )?ok [0-9]+ - /, "", line)
	kernel = line; sub(/ .*/, "", kernel)
	rest = substr(line, length(kernel) + 2)
	err = ""
	if ((i = index(rest, ": ")) > 0) {
		err = substr(rest, i + 2); rest = substr(rest, 1, i - 1)
		sub(/^max abs err /, "", err)
	}
	printf "%-12s %-42s %-22s %s\n", kernel, rest, err, res
	n++; if (res == "FAIL") bad++
}
/^#   / { print "             " $0 }
/^Bail out!/ { print; bad++ }
/^1\.\.0/ { print "skipped: " $0 }
END { printf "%d checks, %d failed\n", n, bad }' kernels.tap
[ -n "$nodev" ] || tail -1 kernels.tap | grep -q '^1\.\.[1-9]' || status=1

say "cpu kernels on this host's vector extensions"
# The CPU kernels pick AVX-512, AVX2 or plain C at run time; a GPU
# machine's processor may take paths the build machine cannot test.
for t in test-matmul test-quant; do
	if [ -x tests/unit/$t ]; then
		./tests/unit/$t >$t.tap 2>&1 || status=1
		echo "$t: $(grep -c '^ok' $t.tap) ok, $(grep -c '^not ok' $t.tap)" \
		    "not ok$(grep -m1 -i 'skip' $t.tap | sed 's/^/; /')"
		grep -m5 -A2 '^not ok' $t.tap
	else
		echo "$t: not built"
	fi
done

say "matrix-product timings (Llama-3-8B shapes)"
if [ -n "$nodev" ]; then
	echo "no CUDA device: skipped"
else
	./tests/gpu/bench-kernels $quick || status=1
fi

say "engine check: stories260K greedy tokens, GPU vs CPU"
# tests/gpu/test-engine-cuda runs stories260K greedily on the CUDA backend
# and on the CPU backend and compares the tokens with each other and with
# the golden file, then ragged batches and kv_copy.  In the direct build it
# is compiled from the sources of the backend, the model and what it needs.
engine=
if [ $mode != direct ]; then
	built engine-build.log tests/gpu/test-engine-cuda &&
	    engine=./tests/gpu/test-engine-cuda
else
	mkdir -p direct/engine || exit 1
	ok=1
	pids=
	for f in model forward kvcache backend_cpu sampler quant matmul \
	    threadpool tokenizer tok_spm tok_bpe unicode unicode_tables gguf \
	    gguf_write quantize backend_cuda comm graph quant_avx2 \
	    quant_avx512; do
		x=
		case $f in
		quant_avx2)	x="-mavx2 -mfma -mf16c" ;;
		quant_avx512)	x="-mavx2 -mfma -mf16c -mavx512f -mavx512bw \
				    -mavx512vl -mavx512dq -mavx512vnni \
				    -mavx512bf16" ;;
		esac
		src=$(ls "$top"/lib/$f.c "$top"/gguf/$f.c "$top"/tokenizer/$f.c \
		    "$top"/runtime/$f.c "$top"/kernels/cpu/$f.c \
		    "$top"/kernels/cuda/$f.c 2>/dev/null | head -1)
		cc $cflags -O3 -ffp-contract=off $x -c -o "direct/engine/$f.o" \
		    "$src" >"direct/engine/$f.log" 2>&1 &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p" || ok=0; done
	if [ $ok = 1 ] && cc $cflags -o tests/gpu/test-engine-cuda \
	    "$top/tests/gpu/test-engine-cuda.c" direct/engine/*.o direct/*.o \
	    $cudalibs >direct/engine/link.log 2>&1; then
		engine=./tests/gpu/test-engine-cuda
	else
		cat direct/engine/*.log >engine-build.log
	fi
fi
if [ -n "$engine" ]; then
	$engine >engine.tap 2>&1 || status=1
	cat engine.tap
	[ -n "$nodev" ] || tail -1 engine.tap | grep -q '^1\.\.[1-9]' || status=1
else
	tail -40 engine-build.log
	echo "engine check: build failed"
	status=1
fi

say "nccl (kernels/cuda/comm.c) between the devices"
# The engine check above already ran stories260K on one GPU through the
# tensor-parallel (NCCL) code path when NCCL was found; test-comm needs
# four GPUs and skips on fewer.
if [ $mode != direct ] && grep -q "define HAVE_NCCL" config.h; then
	built comm-build.log tests/gpu/test-comm &&
	    ./tests/gpu/test-comm | tail -3 || status=1
else
	echo "nccl not found at configure time (or the direct build): skipped"
fi

say "cuda graphs on and off (stories260K, from the engine check)"
# test-engine-cuda's graph checks: 200 greedy tokens with graphs equal to
# those without and to the CPU's, 5 shapes captured and replayed, a stale
# graph dropped after the buffers move; on one GPU and on one GPU through
# NCCL (graphs by default there), 2 and 4 GPUs where there are.
if [ -n "$nodev" ]; then
	echo "no CUDA device: skipped"
elif [ -f engine.tap ]; then
	grep -E '^(not )?ok [0-9]+ - graphs on ' engine.tap |
	    sed -e 's/^ok [0-9]* - /pass  /' -e 's/^not ok [0-9]* - /FAIL  /'
	grep -q '^not ok [0-9]* - graphs on ' engine.tap && status=1
	grep -q '^ok [0-9]* - graphs on 1 device through nccl: the same 200' \
	    engine.tap || echo "(no nccl: graphs through the nccl path not run)"
	grep -q '^ok [0-9]* - graphs on 1 device: the same 200' engine.tap ||
	    { echo "FAIL  no graph check ran"; status=1; }
else
	echo "engine check not built: skipped"
fi

say "end-to-end tokens/s, Llama-3-8B shape (${DEVICE_BENCH_LAYERS:-8} of 32 layers)"
# phased-synth writes a Llama-3-8B-shaped model of random weights with
# DEVICE_BENCH_LAYERS layers (default 8, so four files fit the disk and
# the time) and the shared 32000-token llama vocabulary (a quarter of
# Llama-3's, so its embedding and output matrices are smaller); phased-bench runs it through the whole CUDA backend.  The
# weights are read once per decode step, so achieved HBM bandwidth is
# steps/s x weight bytes; prompt TFLOP/s counts 2 x parameters per token
# (the attention's own products are left out, a few percent at 4096).
# Peaks: H200 4800 GB/s HBM3e, 989 TFLOP/s dense BF16.  Each type is
# skipped once the script has run 8 minutes, to stay under 10.
layers=${DEVICE_BENCH_LAYERS:-8}
bench_tmp=${TMPDIR:-/tmp}/phased-device-bench.$$
if [ -n "$nodev" ]; then
	echo "no CUDA device: skipped"
elif [ $mode != direct ] && built bench-build.log phased-synth phased-bench &&
    command -v python3 >/dev/null 2>&1; then
	mkdir -p "$bench_tmp"
	printf '%-7s %-20s %10s %10s %8s\n' type test tok/s achieved "% peak" \
	    >bench-table.txt
	for ty in F16 BF16 Q8_0 Q4_K_M; do
		if [ $(($(date +%s) - t0)) -gt 480 ]; then
			printf '%-7s skipped: the 10-minute budget\n' "$ty" \
			    >>bench-table.txt
			continue
		fi
		f="$bench_tmp/llama3-8b-$ty.gguf"
		if ! timeout 120 ./phased-synth --shape llama-3-8b --type "$ty" \
		    --layers "$layers" --threads "$jobs" \
		    --vocab "$shared/vocab/ggml-vocab-llama-spm.gguf" \
		    -o "$f" >synth-$ty.log 2>&1; then
			printf '%-7s phased-synth failed (synth-%s.log)\n' \
			    "$ty" "$ty" >>bench-table.txt
			rm -f "$f"
			continue
		fi
		# F16 decode with graphs on and off, on one GPU and through
		# NCCL; prompts (graphs never apply) once per path.
		runs=plain
		[ "$ty" = F16 ] && runs="plain graphs"
		[ "$ty" = F16 ] && grep -q "define HAVE_NCCL" config.h &&
		    runs="$runs collectives nccl-graphs"
		for run in $runs; do
			x=--no-graphs
			pp=512,4096
			case $run in
			collectives)	x="--collectives --no-graphs" ;;
			graphs)		x=--graphs; pp=0 ;;
			nccl-graphs)	x="--collectives --graphs"; pp=0 ;;
			esac
			timeout 150 ./phased-bench -m "$f" --backend cuda $x \
			    -p $pp -n 32 -b 1,8,64 -r 2 --bw 4800 --json \
			    >bench-$ty-$run.json 2>bench-$ty-$run.log ||
			    { printf '%-7s phased-bench failed (%s)\n' "$ty" \
			    "bench-$ty-$run.log" >>bench-table.txt; continue; }
			python3 - "$ty" "$run" bench-$ty-$run.json \
			    >>bench-table.txt <<'PY'
import json, sys
ty, run, path = sys.argv[1:4]
j = json.load(open(path))
wb = j["roofline"]["weight_bytes_per_step"]
label = ty + {"plain": "", "graphs": "/graphs", "collectives": "/nccl",
              "nccl-graphs": "/nccl/graphs"}[run]
for r in j["results"]:
    tps = r["tps_median"]
    if r["test"] == "tg":
        gbs = tps / r["batch"] * wb / 1e9
        print("%-7s %-20s %10.1f %7.0f GB/s %7.1f%%" % (label,
              "decode batch %d" % r["batch"], tps, gbs, 100 * gbs / 4800))
    else:
        tf = 2 * j["n_params"] * tps / 1e12
        print("%-7s %-20s %10.1f %5.0f TFLOP/s %5.1f%%" % (label,
              "prompt %d" % r["n_tokens"], tps, tf, 100 * tf / 989))
PY
			# A failed capture turns graphs off with a warning.
			grep -m1 "decode graphs turned off" bench-$ty-$run.log |
			    sed "s/^/$ty $run: /" >>bench-table.txt
		done
		rm -f "$f"
	done
	rm -rf "$bench_tmp"
	cat bench-table.txt
	echo "targets: decode batch 1 >= 80% of HBM, prompt >= 60% of the" \
	    "bf16 matrix peak"
else
	echo "skipped: needs the autotools or prebuilt phased-synth, phased-bench" \
	    "and python3"
fi

if [ -n "$nodev" ]; then
	say "done: no CUDA device, GPU checks skipped; the rest $( [ $status = 0 ] &&
	    echo PASS || echo FAIL )"
	[ $status = 0 ] && exit 77
fi
say "done: $( [ $status = 0 ] && echo PASS || echo FAIL )"
exit $status
