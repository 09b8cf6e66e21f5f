#!/bin/sh
# vs-llamacpp.sh: phased-bench against llama.cpp's llama-bench on the same
# TinyLlama-1.1B-shape GGUF files, interleaved, and a table of medians.
#
# usage: tests/bench/vs-llamacpp.sh [BUILDDIR] [MODELDIR]
#
# phased-synth writes one F16 model; llama-quantize (llama.cpp's own
# quantizer) makes every other type from it, so both tools read the very
# same file.  For each of ROUNDS rounds and each type, `llama-bench -r REPS`
# and `phased-bench -r REPS` run one after the other (which goes first
# alternates by round), so slow phases of a noisy machine hit both.  The
# table gives, for every prompt length of PP and for generation, medians,
# min-max spread and the ratios of the medians, and the peak resident
# memory (ru_maxrss) of each tool.  With generation it also gives phased's
# read share: each run's steps/s times the time its weights took to read
# alone just before it (phased-bench(1)), the fraction of the memory's
# pace that decode reached, measured at the same moment; and llama.cpp's
# read share, its runs' steps/s times the median read time of phased's
# runs of the same round (the same file's weights read alone, a minute or
# two apart): where it is near 100%, no engine can generate much faster.
#
# Type names: F16, BF16 and the 32-element block types (Q8_0, Q4_0, Q4_1,
# Q5_0, Q5_1) are llama-quantize's own (its default mixture keeps the
# output matrix at Q6_K); a K or IQ type alone (Q2_K, Q3_K, Q4_K, Q5_K,
# Q6_K, IQ4_NL, IQ4_XS) is made with --pure, every matrix of that type,
# into tl-TYPE-pure.gguf (llama-quantize's Q3_K, Q4_K and Q5_K are aliases
# of the _M mixtures); Q3_K_M, Q4_K_M, Q5_K_M are its mixtures and
# Q2_K_MIX is its Q2_K, a mixture without an _M name; F16_BF16 is the BF16
# model converted to F16 by llama-quantize, as an F16 file of a model
# trained in bf16 holds its weights (every value a bf16 value).  None of these needs
# an importance matrix (llama-quantize asks for one only for the IQ1, IQ2
# and Q2_K_S types); where one is asked for anyway the type is skipped with
# a message, or IMATRIX=FILE passes one to llama-quantize.
#
# llama-bench is taken from LLAMA_BENCH, else PATH, else
# /tmp/llama.cpp-build/bin; when none is there and LLAMA_SRC names a
# llama.cpp source tree it is built (CPU only) into LLAMA_BUILD.  Without
# it the script says so and exits 0 (a skip, not a failure).
#
# Environment: TYPES (default: all below), ROUNDS (5), REPS (1: runs of
# each test per tool invocation; ROUNDS=1 REPS=5 pays each tool's warm-up
# and load once per type instead of five times), THREADS (2),
# PP (512,2048: comma-separated prompt lengths; 0 leaves prompt
# processing out), NG (128; 0 leaves
# generation out), DEPTH (0: tokens already in the KV cache when each
# test starts, both tools' -d, so generation is measured with that much
# context), IMATRIX, KEEP=1
# keeps the raw per-run logs (the models in MODELDIR are always kept),
# CPUS (a taskset(1) list such as 4,5: both tools run on those CPUs only,
# so several instances with other TYPES can share a many-core machine;
# the models are made unpinned), QTHREADS (threads of
# phased-synth and llama-quantize, default THREADS).
set -eu
B=${1:-.}
M=${2:-/tmp/vs-llamacpp}
SHARED=${PHASED_SHARED:-$(dirname "$0")/../../../shared}
VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf
TYPES=${TYPES:-F16 BF16 F16_BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS Q2_K_MIX Q3_K_M Q4_K_M Q5_K_M}
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-1}
THREADS=${THREADS:-2}
PP=${PP:-512,2048}
NG=${NG:-128}
DEPTH=${DEPTH:-0}
DARG=
[ "$DEPTH" -gt 0 ] && DARG="-d $DEPTH"
LLAMA_BUILD=${LLAMA_BUILD:-/tmp/llama.cpp-build}
QTHREADS=${QTHREADS:-$THREADS}
PIN=
if [ -n "${CPUS:-}" ]; then
	command -v taskset >/dev/null 2>&1 ||
	    { echo "vs-llamacpp: CPUS needs taskset(1)" >&2; exit 1; }
	PIN="taskset -c $CPUS"
fi

# Locate llama-bench, or build it from LLAMA_SRC.
find_llama_bench() {
	if [ -n "${LLAMA_BENCH:-}" ]; then
		[ -x "$LLAMA_BENCH" ] && { echo "$LLAMA_BENCH"; return; }
		echo "vs-llamacpp: LLAMA_BENCH=$LLAMA_BENCH: not an executable" >&2
		return 1
	fi
	if command -v llama-bench >/dev/null 2>&1; then
		command -v llama-bench
		return
	fi
	if [ -x "$LLAMA_BUILD/bin/llama-bench" ]; then
		echo "$LLAMA_BUILD/bin/llama-bench"
		return
	fi
	if [ -n "${LLAMA_SRC:-}" ]; then
		echo "vs-llamacpp: building llama-bench from $LLAMA_SRC into $LLAMA_BUILD" >&2
		cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" -DCMAKE_BUILD_TYPE=Release \
		    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DGGML_CUDA=OFF \
		    -DLLAMA_BUILD_TESTS=OFF >&2 &&
		cmake --build "$LLAMA_BUILD" -j"$(nproc)" \
		    --target llama-bench llama-quantize >&2 &&
		echo "$LLAMA_BUILD/bin/llama-bench"
		return
	fi
	return 1
}

if ! LB=$(find_llama_bench); then
	echo "vs-llamacpp: skipped: no llama-bench (set LLAMA_BENCH to the" \
	    "binary, put it in PATH, or set LLAMA_SRC to a llama.cpp source" \
	    "tree to build it)"
	exit 0
fi
LQ=$(dirname "$LB")/llama-quantize
if [ ! -x "$LQ" ]; then
	echo "vs-llamacpp: skipped: no llama-quantize next to $LB"
	exit 0
fi
for t in phased-bench phased-synth; do
	if [ ! -x "$B/$t" ]; then
		echo "vs-llamacpp: $B/$t: not built (give the build directory)" >&2
		exit 1
	fi
done
[ -f "$VOCAB" ] || { echo "vs-llamacpp: $VOCAB: missing (set PHASED_SHARED)" >&2; exit 1; }

# model TYPE: the file of a type; pure TYPE: whether it is made with --pure;
# qname TYPE: llama-quantize's name of it.
model() {
	case $1 in
	Q2_K|Q3_K|Q4_K|Q5_K|Q6_K|IQ4_NL|IQ4_XS)
		echo "$M/tl-$(echo "$1" | tr 'A-Z' 'a-z')-pure.gguf" ;;
	Q2_K_MIX) echo "$M/tl-q2_k-mix.gguf" ;;
	*) echo "$M/tl-$(echo "$1" | tr 'A-Z' 'a-z').gguf" ;;
	esac
}
pure() {
	case $1 in
	Q2_K|Q3_K|Q4_K|Q5_K|Q6_K|IQ4_NL|IQ4_XS) return 0 ;;
	*) return 1 ;;
	esac
}
qname() {
	case $1 in
	Q2_K_MIX) echo Q2_K ;;
	F16_BF16) echo F16 ;;
	*) echo "$1" ;;
	esac
}
# srcfile TYPE: the file llama-quantize makes a type from.
srcfile() {
	[ "$1" = F16_BF16 ] && model BF16 || echo "$BASE"
}

mkdir -p "$M"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/vs-llamacpp.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$OUT"' EXIT

# The models: one F16 base from phased-synth, the rest by llama-quantize.
BASE=$M/tl-f16.gguf
[ -f "$BASE" ] || "$B/phased-synth" --shape tinyllama-1.1b --type F16 \
    --vocab "$VOCAB" --threads "$QTHREADS" -o "$BASE" >&2
KEPT=
# F16_BF16 is made from BF16, made first where it is asked for too.
MAKE=$TYPES
case " $TYPES " in
*" F16_BF16 "*) MAKE="BF16 $(echo " $TYPES " | sed 's/ BF16 / /; s/ F16_BF16 / /') F16_BF16" ;;
esac
for t in $MAKE; do
	f=$(model "$t")
	if [ "$t" = F16 ] || [ -f "$f" ]; then
		KEPT="$KEPT $t"
		continue
	fi
	PURE=
	pure "$t" && PURE=--pure
	if "$LQ" ${PURE} ${IMATRIX:+--imatrix "$IMATRIX"} "$(srcfile "$t")" "$f.tmp" "$(qname "$t")" \
	    "$QTHREADS" >"$OUT/quantize-$t.log" 2>&1; then
		mv "$f.tmp" "$f"
		KEPT="$KEPT $t"
	elif grep -qi 'importance matrix' "$OUT/quantize-$t.log"; then
		rm -f "$f.tmp"
		echo "vs-llamacpp: $t skipped: llama-quantize needs an importance" \
		    "matrix for it (set IMATRIX=FILE)" >&2
	else
		rm -f "$f.tmp"
		echo "vs-llamacpp: llama-quantize to $t failed:" >&2
		tail -5 "$OUT/quantize-$t.log" >&2
		exit 1
	fi
done
# Measured in the order asked, BF16 only if asked.
KT=
for t in $TYPES; do
	case " $KEPT " in *" $t "*) KT="$KT $t" ;; esac
done
TYPES=${KT# }
[ -n "$TYPES" ] || { echo "vs-llamacpp: no type left to measure" >&2; exit 1; }

# run LOG CMD...: run a command, its stdout to LOG, its peak RSS (KiB) to LOG.rss.
run() {
	log=$1
	shift
	python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as f:
    rc = subprocess.call(sys.argv[2:], stdout=f, stderr=subprocess.DEVNULL)
with open(sys.argv[1] + ".rss", "w") as f:
    f.write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
# Killed by a signal: exit as a shell reports it (128 + the signal).
sys.exit(rc if rc >= 0 else 128 - rc)' "$log" $PIN "$@"
}

echo "vs-llamacpp: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs${CPUS:+ (running on $CPUS)}," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)"
# llama.cpp picks its AMX kernels from CPUID and the kernel's permission;
# where its tiles still fault (SIGILL on an unconfigured tile, as here, and
# only for the types it has AMX kernels for) the run is repeated, and every later one
# made, with arch_prctl's AMX request refused, so it falls back to its
# AVX-512 repacked kernels, the best it can do there.
PRE=
noamx() {
	cc -shared -fPIC -O2 -o "$OUT/noamx.so" "$(dirname "$0")/noamx.c" -ldl
	PRE=$OUT/noamx.so
	echo "llama-bench: AMX faults on this machine (SIGILL): run with AMX refused"
}
# llama LOG FILE: one llama-bench run on FILE.
llama() {
	rc=0
	LD_PRELOAD=$PRE run "$1" "$LB" -m "$2" -t "$THREADS" -p "$PP" -n "$NG" $DARG -r "$REPS" -o json ||
	    rc=$?
	if [ "$rc" -eq 132 ] && [ -z "$PRE" ]; then
		noamx
		LD_PRELOAD=$PRE run "$1" "$LB" -m "$2" -t "$THREADS" -p "$PP" -n "$NG" $DARG -r "$REPS" \
		    -o json || true
	fi
}
echo "commands: $LB -m F -t $THREADS -p $PP -n $NG $DARG -r $REPS -o json;" \
    "$B/phased-bench -m F -p $PP -n $NG -b 1 $DARG -r $REPS -t $THREADS --json; $ROUNDS rounds"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for t in $TYPES; do
		f=$(model "$t")
		l="$OUT/llama-$t-$r.json"
		p="$OUT/phased-$t-$r.json"
		if [ $((r % 2)) -eq 1 ]; then
			llama "$l" "$f"
			run "$p" "$B/phased-bench" -m "$f" -p "$PP" -n "$NG" -b 1 $DARG -r "$REPS" -t "$THREADS" --json || true
		else
			run "$p" "$B/phased-bench" -m "$f" -p "$PP" -n "$NG" -b 1 $DARG -r "$REPS" -t "$THREADS" --json || true
			llama "$l" "$f"
		fi
	done
	echo "round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	r=$((r + 1))
done
echo "end: $(date -u '+%H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"

DEPTH=$DEPTH python3 - "$OUT" "$ROUNDS" "$PP" "$NG" $TYPES <<'EOF'
import json, os, statistics, sys

out, rounds, ng = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
pps = [int(p) for p in sys.argv[3].split(",") if int(p) > 0]
types = sys.argv[5:]


def load(path):
    """A JSON file, or None when the run failed."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rss(path):
    """Peak resident memory of a run in MiB, or None."""
    try:
        with open(path + ".rss") as f:
            return int(f.read()) / 1024.0
    except (OSError, ValueError):
        return None


def runs(e):
    """Every run's tokens/s of one llama-bench test."""
    return e.get("samples_ts") or [e["avg_ts"]]


def cell(v):
    """Median (min-max) of samples, or a dash."""
    if not v:
        return "-"
    return "%.1f (%.1f-%.1f)" % (statistics.median(v), min(v), max(v))


def ratio(a, b):
    """Median ratio a / b, or a dash."""
    if not a or not b:
        return "-"
    return "%.2fx" % (statistics.median(a) / statistics.median(b))


# Tests as (key, label): each prompt length, then generation.
at = " @ d%d" % int(os.environ["DEPTH"]) if int(os.environ["DEPTH"]) > 0 else ""
tests = [("pp%d" % p, "pp%d%s" % (p, at)) for p in pps] + \
    ([("tg", "tg%d%s" % (ng, at))] if ng > 0 else [])
head = "| type |"
rule = "|---|"
for _, label in tests:
    head += " phased %s | llama.cpp %s | ratio |" % (label, label)
    rule += "---:|---:|---:|"
print()
share = ng > 0
if share:
    head += " phased read share | llama.cpp read share |"
    rule += "---:|---:|"
print(head + " phased RSS MiB | llama.cpp RSS MiB |")
print(rule + "---:|---:|")
for t in types:
    s = {}
    for r in range(1, rounds + 1):
        ltg, reads = [], []
        lj = load(os.path.join(out, "llama-%s-%d.json" % (t, r)))
        for e in lj or []:
            if e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0:
                s.setdefault(("l", "pp%d" % e["n_prompt"]), []).extend(runs(e))
            elif e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0:
                ltg = runs(e)
                s.setdefault(("l", "tg"), []).extend(ltg)
        pj = load(os.path.join(out, "phased-%s-%d.json" % (t, r)))
        for e in (pj or {}).get("results", []):
            k = "pp%d" % e["n_tokens"] if e["test"] == "pp" else "tg"
            s.setdefault(("p", k), []).extend(e.get("samples") or [e["tps_median"]])
            if k == "tg":
                sh = e.get("read_share") or []
                s.setdefault("share", []).extend(sh)
                # A run's read time: its share over its steps/s.
                reads = [a / b for a, b in zip(sh, e.get("samples") or []) if b > 0]
        # llama.cpp's share: its steps/s times the median read time of this
        # round's phased runs (the same file's weights, read alone).
        if ltg and reads:
            rt = statistics.median(reads)
            s.setdefault("lshare", []).extend(x * rt for x in ltg)
        for k, n in (("lr", "llama"), ("pr", "phased")):
            v = rss(os.path.join(out, "%s-%s-%d.json" % (n, t, r)))
            if v is not None:
                s.setdefault(k, []).append(v)
    row = "| %s |" % t
    for key, _ in tests:
        p, l = s.get(("p", key)), s.get(("l", key))
        row += " %s | %s | %s |" % (cell(p), cell(l), ratio(p, l))
    for k in ("share", "lshare") if share else ():
        v = s.get(k)
        row += " %s |" % ("%.0f%% (%.0f-%.0f%%)" % (100 * statistics.median(v), 100 * min(v),
                                                  100 * max(v)) if v else "-")
    row += " %s | %s |" % ("%.0f" % max(s["pr"]) if s.get("pr") else "-",
                           "%.0f" % max(s["lr"]) if s.get("lr") else "-")
    print(row)
EOF
