#!/usr/bin/env bash
# The GPU check: on a machine with a GPU, build what this machine can (CUDA
# for the GPU's own architecture, Vulkan if a loader and glslc are there, the
# HIP kernels through nvcc and the HIP-to-CUDA mapping header), then on every
# GPU device found:
#   - the backend-ops test (every op x type x shape vs the CPU, support matrix),
#   - backend-specific tests (test_gpu_kernels and test_gpu_recurrent for CUDA and
#     HIP, test_vulkan_*, test_opencl, test_device_exact on Vulkan and OpenCL),
#   - the stories260K golden (llama.cpp's ids) on the device and split cpu+device,
#   - every model family's golden (test_arch_golden, the F16 files) on the device,
#     the hybrid qwen35 (SSM_CONV, DELTA_NET, the sigmoid gate) among them,
#   - greedy equality with the CPU, alone and 8 at once, and with a layer split,
#   - weft bench: SmolLM2-shape Q4_1, and Llama-3-8B-shape Q4_0 and Q8_0
#     (random weights from `weft gen`), decode tokens/s at batch 1, the fraction
#     of the GPU's memory bandwidth that is, and aggregate tokens/s at 64
#     concurrent sequences;
#   - weft bench --devices all: the default model on every device side by
#     side (a table, and devices.json/.svg/.png in OUT);
# and prints one summary table. Exit status: 0 when no step failed or timed
# out, 1 otherwise, 2 on a usage error.
#
#   tests/gpu/run.sh [--quick] [--dry-run]
#     --quick    no 8B-shape models
#     --dry-run  (or WEFT_GPU_DRYRUN=1) the same plumbing on a machine without
#                a GPU: builds what it can, runs on the devices there are
#                (Vulkan on lavapipe counts, as does the CPU harness of
#                test_gpu_kernels), tiny bench shapes and tiny stand-ins for
#                the 8B models, so paths, the tools' arguments, the table and
#                the exit status are exercised
#
# Time: the whole run keeps to WEFT_GPU_BUDGET_S seconds (default 540): each
# step's timeout is cut to what is left, a step that would start with less
# than a minimum left is recorded as SKIP (budget), and the 8B models are
# generated in the background while the correctness steps run. Order is by
# importance: builds, CUDA correctness, HIP-via-nvcc correctness, Vulkan,
# benchmarks.
#
# Env: OUT (folder for logs and the summary, default gpu-out/),
#      WEFT_SHARED_DIR (models + golden; default ../shared or ./shared),
#      WEFT_GPU_BUILD (build folder, default build-gpu/ or build-gpu-dry/;
#        the HIP-via-nvcc build is the same name + "-hip"),
#      WEFT_GPU_MODELS (where generated models go, default <build>/models: not
#        under OUT, whose files may be copied back),
#      WEFT_GPU_BW_GBS (peak memory bandwidth, when the GPU is not in the table),
#      CUDA_ARCH (default: the first GPU's compute capability, e.g. 90),
#      WEFT_GPU_PREBUILT=1 (use the binaries already in the build folders, built
#        on another machine for CUDA_ARCH: a GPU machine without libuv,
#        jansson or hiredis headers cannot build weft itself).
# shellcheck disable=SC2016,SC2317  # bash -c scripts take their arguments as $1..; build_tree runs through bash -c
set -uo pipefail

usage() {
    cat <<'EOF2'
usage: tests/gpu/run.sh [--quick] [--dry-run]
  --quick    no 8B-shape models
  --dry-run  (or WEFT_GPU_DRYRUN=1) the script's plumbing on a machine without a GPU:
             tiny shapes, Vulkan on lavapipe, the CPU harness of test_gpu_kernels
Env: OUT, WEFT_SHARED_DIR, WEFT_GPU_BUILD, WEFT_GPU_MODELS, WEFT_GPU_BUDGET_S (540),
     WEFT_GPU_BW_GBS, CUDA_ARCH, WEFT_GPU_PREBUILT (see the top of this file)
EOF2
}
quick=0
dry=0
prebuilt=0
case "${WEFT_GPU_PREBUILT:-0}" in 0 | "") ;; *) prebuilt=1 ;; esac
case "${WEFT_GPU_DRYRUN:-0}" in 0 | "") ;; *) dry=1 ;; esac
for a in "$@"; do
    case $a in
        --quick) quick=1 ;;
        --dry-run) dry=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "run.sh: unknown argument '$a'" >&2; usage >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/../.." || exit 2
root=$(pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out/logs" || exit 2
out=$(cd "$out" && pwd)
jobs=$(nproc 2>/dev/null || echo 4)
t_start=$(date +%s)
budget=${WEFT_GPU_BUDGET_S:-540}
shared=${WEFT_SHARED_DIR:-}
if [ -z "$shared" ]; then
    for d in "$root/../shared" "$root/shared"; do
        if [ -d "$d/models" ]; then shared=$(cd "$d" && pwd); break; fi
    done
fi
if [ $dry = 1 ]; then
    B=${WEFT_GPU_BUILD:-$root/build-gpu-dry}
else
    B=${WEFT_GPU_BUILD:-$root/build-gpu}
fi
BH=$B-hip
models=${WEFT_GPU_MODELS:-$B/models}
W=$B/weft
summary=()
bench_rows=()
devices_log=""
n_bad=0

elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((budget - $(elapsed))); }

# record NAME DEVICE RC SECONDS LOG: one summary row (SKIP on 77 or 75)
record() {
    local name=$1 dev=$2 rc=$3 secs=$4 log=$5 res detail
    case $rc in
        0) res=PASS ;;
        75) res=SKIP ;;
        77) res=SKIP ;;
        124 | 137) res=TIMEOUT n_bad=$((n_bad + 1)) ;;
        *) res=FAIL n_bad=$((n_bad + 1)) ;;
    esac
    detail=""
    [ -f "$log" ] && detail=$(grep -E "cases, [0-9]+ failed|SKIP:|tests passed|FAIL|budget|not fetched|unavailable" "$log" | tail -1 | cut -c1-70)
    summary+=("$(printf '%-42s %-16s %-7s %5ss  %s' "$name" "$dev" "$res" "$secs" "$detail")")
    echo "== $name [$dev]: $res (${secs}s, $log)"
    if [ "$res" != PASS ] && [ "$res" != SKIP ] && [ -f "$log" ]; then tail -15 "$log"; fi
}

# logname NAME DEVICE: the step's log file (letters, digits, . _ - only)
logname() {
    local s="$1-$2"
    echo "$out/logs/${s//[^A-Za-z0-9._-]/_}.log"
}

# step NAME DEVICE LIMIT CMD...: run CMD with at most LIMIT seconds (cut to
# the budget left), log it, record a row; returns CMD's status (75: no time)
last_log=""
step() {
    local name=$1 dev=$2 limit=$3 t0 rc lim
    shift 3
    last_log=$(logname "$name" "$dev")
    lim=$(($(left) - 10))
    [ "$lim" -lt "$limit" ] || lim=$limit
    if [ "$lim" -lt 20 ]; then
        echo "SKIP: budget (${budget}s) spent, $(left)s left" >"$last_log"
        record "$name" "$dev" 75 0 "$last_log"
        return 75
    fi
    t0=$(date +%s)
    # line-buffered, so a step cut off by its timeout keeps what it printed
    timeout -k 10 "$lim" stdbuf -oL -eL "$@" >"$last_log" 2>&1
    rc=$?
    record "$name" "$dev" "$rc" "$(($(date +%s) - t0))" "$last_log"
    return "$rc"
}

# step_if_built NAME DEVICE LIMIT BIN ARGS...: step, or a SKIP row when BIN is not
# there (a prebuilt folder packed before BIN existed)
step_if_built() {
    if [ -x "$4" ]; then
        step "$@"
        return
    fi
    last_log=$(logname "$1" "$2")
    echo "SKIP: $4 not built (a prebuilt folder without it)" >"$last_log"
    record "$1" "$2" 77 0 "$last_log"
}

# bg_start VAR NAME DEVICE LIMIT CMD...: as step, in the background; the
# pid goes into VAR, then bg_finish VAR NAME DEVICE waits and records it
declare -A bg_t0 bg_log
bg_start() {
    local var=$1 name=$2 dev=$3 limit=$4 lim log
    shift 4
    log=$(logname "$name" "$dev")
    lim=$(($(left) - 10))
    [ "$lim" -lt "$limit" ] || lim=$limit
    if [ "$lim" -lt 20 ]; then
        printf -v "$var" '%s' ""
        return 75
    fi
    bg_t0[$name]=$(date +%s)
    bg_log[$name]=$log
    rm -f "$log.end"
    (
        timeout -k 10 "$lim" "$@"
        rc=$?
        date +%s >"$log.end"
        exit $rc
    ) >"$log" 2>&1 &
    printf -v "$var" '%s' "$!"
}
bg_finish() {
    local pid=$1 name=$2 dev=$3 rc
    if [ -z "$pid" ]; then
        last_log=$(logname "$name" "$dev")
        echo "SKIP: budget (${budget}s) spent before it could start" >"$last_log"
        record "$name" "$dev" 75 0 "$last_log"
        return 75
    fi
    wait "$pid"
    rc=$?
    last_log=${bg_log[$name]}
    local t1
    t1=$(cat "$last_log.end" 2>/dev/null || date +%s)
    record "$name" "$dev" "$rc" "$((t1 - bg_t0[$name]))" "$last_log"
    return "$rc"
}

finish() {
    echo
    echo "================ weft GPU check: ${gpu_name:-no GPU}$([ $dry = 1 ] && echo ' (dry run)') ($(elapsed) s of ${budget} s) ================"
    printf '%-42s %-16s %-7s %6s  %s\n' check device result time detail
    printf '%s\n' "${summary[@]}"
    if [ -s "$out/matrix.txt" ]; then
        echo
        cat "$out/matrix.txt"
    fi
    if [ ${#bench_rows[@]} -gt 0 ]; then
        echo
        echo "bench (tokens/s, medians; bandwidth: weights read per decoded token x tg rate / the GPU's peak)"
        printf '%s\n' "${bench_rows[@]}"
    fi
    if [ -n "$devices_log" ] && grep -q '^| ' "$devices_log" 2>/dev/null; then
        echo
        echo "weft bench --devices (the same model on each device; plot: $out/devices.png)"
        grep -E '^(\||model:|skipped)' "$devices_log"
    fi
    local rc=0
    [ "$n_bad" = 0 ] || rc=1
    echo "$n_bad failed or timed out; exit $rc"
    exit $rc
}

echo "== machine"
gpu_name=""
arch=${CUDA_ARCH:-}
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1 | tee "$out/gpu.csv"
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$arch" ] || arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
fi
[ -n "$arch" ] || arch=90
command -v nvcc >/dev/null 2>&1 || export PATH=$PATH:/usr/local/cuda/bin
if [ $dry = 0 ] && [ -z "$gpu_name" ]; then
    echo "run.sh: no NVIDIA GPU found (nvidia-smi); for a check of the script itself use --dry-run" >&2
fi
echo "build $B, HIP build $BH, models $models, shared ${shared:-none}, budget ${budget}s, $jobs jobs"
if [ -z "$shared" ] || [ ! -f "$shared/models/stories260K.gguf" ]; then
    # the golden and equality tests would skip: say so in the table
    log=$(logname "shared models" host)
    echo "FAIL: no stories260K (set WEFT_SHARED_DIR, or put shared/ with models/ and golden/ in the checkout)" >"$log"
    record "shared models" host 1 0 "$log"
fi

# ---- builds: only the targets the checks use ----
# build_tree DIR "TARGETS" CMAKE_ARGS...: configure, then build those of the
# targets the configuration has (a module whose toolchain is absent is not one)
build_tree() {
    local dir=$1 t want=()
    local -a targets
    read -r -a targets <<<"$2"
    shift 2
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release ${shared:+"-DWEFT_SHARED_DIR=$shared"} "$@" || return 1
    for t in "${targets[@]}"; do
        grep -qE "/$t\.dir\$" "$dir/CMakeFiles/TargetDirectories.txt" && want+=("$t")
    done
    echo "targets: ${want[*]}"
    cmake --build "$dir" -j"$jobs" --target "${want[@]}"
}
export -f build_tree
export root shared jobs
if [ $dry = 1 ]; then cuda_req=AUTO; else cuda_req=ON; fi
tests="test_backend_ops test_gpu_kernels test_gpu_recurrent test_golden test_arch_golden test_devices test_embed"
# prebuilt NAME DIR: a row saying the step's build was done elsewhere; fails
# when DIR holds no weft
prebuilt_row() {
    local log
    log=$(logname "$1" prebuilt)
    if [ -x "$2/weft" ]; then
        echo "SKIP: built elsewhere (WEFT_GPU_PREBUILT): $2 ($(ls "$2"/libweft-*.so 2>/dev/null | xargs -r -n1 basename | tr '\n' ' '))" >"$log"
        record "$1" prebuilt 77 0 "$log"
    else
        echo "FAIL: WEFT_GPU_PREBUILT is set but $2/weft is missing" >"$log"
        record "$1" prebuilt 1 0 "$log"
        return 1
    fi
}
if [ $prebuilt = 1 ]; then
    prebuilt_row "build (cpu, cuda, vulkan)" "$B" || finish
else
    step "build (cpu, cuda, vulkan)" "sm_$arch" 300 bash -c 'build_tree "$@"' _ "$B" \
        "weft weft-cuda weft-vulkan weft-opencl $tests test_vulkan_runtime test_vulkan_matmul test_device_exact test_opencl" \
        -DWEFT_CUDA=$cuda_req -DWEFT_VULKAN=AUTO -DWEFT_OPENCL=AUTO -DWEFT_HIP=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" || finish
fi
[ -x "$W" ] || finish

# The 8B-shape models (tiny stand-ins in a dry run) take minutes to write:
# in the background, while the checks run.
mkdir -p "$models"
if [ $dry = 1 ]; then
    l3=(--embd 256 --layers 2 --heads 8 --kv-heads 2 --ff 512 --vocab 2048 --ctx 1024 --untied --rope-base 500000)
    l3_name=llama3-shape-tiny
else
    l3=(--embd 4096 --layers 32 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256 --ctx 8192 --untied --rope-base 500000)
    l3_name=llama3-8b-shape
fi
gen_pids=()
if [ $quick = 0 ]; then
    for t in Q4_0 Q8_0; do
        f=$models/$l3_name-$t.gguf
        if [ -s "$f" ]; then
            gen_pids+=("exists")
        else
            # written under a temporary name, so a run cut short leaves no half model
            bg_start pid "gen $l3_name $t" host 400 bash -c '"$1" gen -o "$2.part" "${@:4}" --type "$3" && mv "$2.part" "$2"' \
                _ "$W" "$f" "$t" "${l3[@]}"
            gen_pids+=("$pid")
        fi
    done
fi

hip_ok=0
if [ $prebuilt = 1 ]; then
    [ -d "$BH" ] && prebuilt_row "build (hip kernels via nvcc)" "$BH" && hip_ok=1
elif [ -f "$root/backends/hip/CMakeLists.txt" ]; then
    step "build (hip kernels via nvcc)" "sm_$arch" 300 bash -c 'build_tree "$@"' _ "$BH" \
        "weft weft-hip $tests" \
        -DWEFT_CUDA=OFF -DWEFT_VULKAN=OFF -DWEFT_HIP=OFF -DWEFT_HIP_NVCC=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" &&
        hip_ok=1
fi

"$W" devices | tee "$out/devices.txt"
# GPU devices: every available non-CPU device; a Vulkan or OpenCL device on
# the CPU (lavapipe, PoCL) only in a dry run (CI covers it; here it would eat the budget).
# CUDA (and any other) devices first, then OpenCL, Vulkan last.
devices=$("$W" devices --json | python3 -c '
import json, sys
dry = sys.argv[1] == "1"
ds = [d for d in json.load(sys.stdin)
      if d.get("available") and d["backend"] != "cpu"
      and (dry or ("(CPU" not in d.get("name", "") and ", CPU" not in d.get("name", "")))]
print(" ".join(d["id"] for d in sorted(ds, key=lambda d: {"opencl": 1, "vulkan": 2}.get(d["backend"], 0))))' "$dry")
echo "devices: ${devices:-none}"
has_dev() { case " $devices " in *" $1"*) return 0 ;; esac; return 1; }

# check_device WEFT ID: a row saying whether device ID is there (FAIL with
# the backend's reason if not; SKIP in a dry run); its status
check_device() {
    local w=$1 id=$2 log rc
    log=$(logname device "$id")
    "$w" devices --json 2>&1 | python3 -c '
import json, sys
want = sys.argv[1]
try:
    ds = json.load(sys.stdin)
except ValueError:
    print("FAIL: weft devices --json gave no JSON"); sys.exit(1)
if any(d.get("id") == want and d.get("available") for d in ds):
    print(want, "available"); sys.exit(0)
why = [d.get("reason", "") for d in ds if d.get("backend") == want.split(":")[0]]
print("FAIL:", want, "unavailable:", (why or ["backend not loaded"])[0]); sys.exit(1)' "$id" >"$log"
    rc=$?
    if [ $rc != 0 ] && [ $dry = 1 ]; then
        sed -i 's/^FAIL: /SKIP: (dry run) /' "$log"
        rc=77
    fi
    record device "$id" $rc 0 "$log"
    return $rc
}

# In a dry run test_devices leaves SmolLM2 out (on lavapipe it takes many
# minutes): an empty cache folder. On a GPU it uses the fetched model
# (WEFT_CACHE_DIR or ~/.cache/weft; WEFT_MODEL) when there is one.
nocache=()
if [ $dry = 1 ]; then
    mkdir -p "$out/empty-cache"
    nocache=(WEFT_CACHE_DIR="$out/empty-cache" WEFT_MODEL=)
fi

# Without the real SmolLM2 (a device machine cannot fetch it), test_devices'
# SmolLM2 case runs on a random-weight SmolLM2-shape Q4_1 with SmolLM2's real
# vocabulary (shared/models/synth-smollm2-vocab.gguf); the bench reuses it.
if [ $dry = 0 ] && [ -z "${WEFT_TEST_SMOLLM2:-}" ] && [ -z "${WEFT_MODEL:-}" ] &&
    [ ! -f "${WEFT_CACHE_DIR:-$HOME/.cache/weft}/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    f=$models/smollm2-shape-Q4_1.gguf
    voc=()
    [ -f "$shared/models/synth-smollm2-vocab.gguf" ] && voc=(--vocab-from "$shared/models/synth-smollm2-vocab.gguf")
    if [ -s "$f" ] || step "gen smollm2-shape Q4_1 (equality)" host 120 "$W" gen -o "$f" --preset smollm2-135m \
        --type Q4_1 "${voc[@]}"; then
        export WEFT_TEST_SMOLLM2=$f
    fi
fi

# correct DEVICE: the golden (ids exact; logprobs within 2e-2: GPU attention
# accumulates in F32, the CPU in F16 as ggml), split cpu+device, equality
correct() {
    local d=$1
    step "golden" "$d" 300 env WEFT_TEST_DEVICE="$d" WEFT_TEST_LOGPROB_TOL=2e-2 "$B/test_golden"
    step "golden split" "cpu=1,$d" 300 env WEFT_TEST_DEVICE="cpu=1,$d" WEFT_TEST_LOGPROB_TOL=2e-2 "$B/test_golden"
    # every model family (the F16 files: llama.cpp's bounds, 0.1); no WEFT_TEST_FAMILIES, so
    # the hybrid qwen35 (its recurrent ops on the device) runs too, after the others
    step "arch goldens (every family)" "$d" 300 env WEFT_TEST_DEVICE="$d" WEFT_TEST_TYPES=F16 "$B/test_arch_golden"
    step "equality + split + batch" "$d" 400 env "${nocache[@]}" WEFT_TEST_DEVICES="$d" "$B/test_devices"
    step "embeddings vs cpu" "$d" 200 env WEFT_TEST_DEVICE="$d" "$B/test_embed"
}

# ---- correctness: CUDA, then the HIP kernels through nvcc ----
# Vulkan's backend-ops runs last with the other Vulkan checks (on the H200's
# NVIDIA driver it outran 100 s with the validation layer on)
step "backend-ops (cpu, cuda)" all 300 env WEFT_TEST_BACKENDS=cuda "$B/test_backend_ops"
sed -n '/support\/pass matrix/,$p' "$last_log" >"$out/matrix.txt" 2>/dev/null
if check_device "$W" cuda:0; then
    step "test_gpu_kernels" cuda:0 300 env WEFT_TEST_GPU=cuda "$B/test_gpu_kernels"
    step_if_built "test_gpu_recurrent" cuda:0 200 "$B/test_gpu_recurrent"
elif [ $dry = 1 ]; then
    # no GPU: at least the test's harness, against the CPU backend
    step "test_gpu_kernels (cpu harness)" cpu 300 env WEFT_TEST_GPU=cuda WEFT_TEST_GPU_SPEC=cpu "$B/test_gpu_kernels"
    # the launch geometry and the shared host code over a fake runtime (device cases skip)
    step_if_built "test_gpu_recurrent (no device)" cpu 100 "$B/test_gpu_recurrent"
fi
for d in $devices; do
    case $d in vulkan:* | opencl:*) ;; *) correct "$d" ;; esac
done
if [ $hip_ok = 1 ]; then
    step "backend-ops (hip via nvcc)" hip:0 300 "$BH/test_backend_ops"
    if check_device "$BH/weft" hip:0; then
        step "test_gpu_kernels" hip:0 300 env WEFT_TEST_GPU=hip "$BH/test_gpu_kernels"
        step_if_built "test_gpu_recurrent" hip:0 200 "$BH/test_gpu_recurrent"
        step "golden" hip:0 300 env WEFT_TEST_DEVICE=hip:0 WEFT_TEST_LOGPROB_TOL=2e-2 "$BH/test_golden"
        step "arch goldens (every family)" hip:0 300 env WEFT_TEST_DEVICE=hip:0 WEFT_TEST_TYPES=F16 "$BH/test_arch_golden"
        step "equality + split + batch" hip:0 400 env "${nocache[@]}" WEFT_TEST_DEVICES=hip:0 "$BH/test_devices"
    fi
fi

# ---- benchmarks ----
case "$gpu_name" in
    *H200*) bw=4800 ;;
    *H100*SXM* | *"H100 80GB HBM3"*) bw=3350 ;;
    *H100*) bw=2000 ;;
    *A100*80GB*) bw=2039 ;;
    *A100*) bw=1555 ;;
    *L40S* | *L40*) bw=864 ;;
    *) bw=0 ;;
esac
bw=${WEFT_GPU_BW_GBS:-$bw}
if [ $dry = 1 ]; then
    sm_gen=(--preset tiny) sm_name=tiny
    pp=32 tg=8 reps=1 conc=4 cpp=16
else
    sm_gen=(--preset smollm2-135m) sm_name=smollm2-shape
    pp=512 tg=64 reps=3 conc=64 cpp=128
fi
bench_models=()
if [ -n "$devices" ]; then
    f=$models/$sm_name-Q4_1.gguf
    if [ -s "$f" ] || step "gen $sm_name Q4_1" host 120 "$W" gen -o "$f" "${sm_gen[@]}" --type Q4_1; then
        bench_models+=("$sm_name-Q4_1")
    fi
fi
i=0
for t in Q4_0 Q8_0; do
    [ $quick = 0 ] || break
    pid=${gen_pids[$i]:-}
    i=$((i + 1))
    f=$models/$l3_name-$t.gguf
    if [ "$pid" = exists ] || bg_finish "$pid" "gen $l3_name $t" host; then
        [ -s "$f" ] && bench_models+=("$l3_name-$t")
    fi
done

bench_row() { # JSON CONC_JSON MODEL_FILE DEVICE MODEL
    python3 - "$@" "$bw" "$pp" "$tg" "$conc" <<'PY'
import json, os, sys
j, c, f, d, m, bw, pp, tg, conc = sys.argv[1:10]
def load(p):
    try:
        txt = open(p).read()
        return json.loads(txt[txt.index('{'):]) if '{' in txt else {}
    except Exception:
        return {}
b, cc = load(j), load(c)
res = {e.get('test'): e.get('tps_median', 0) for e in b.get('results', [])}
p, t = float(res.get('pp' + pp, 0)), float(res.get('tg' + tg, 0))
wb = b.get('weight_bytes_per_token') or os.path.getsize(f)
frac = f"{100 * wb * t / (float(bw) * 1e9):5.1f}% of {bw} GB/s" if float(bw) > 0 else "  bandwidth n/a"
agg = float((cc.get('results') or [{}])[0].get('gen_tps_median', 0))
print(f"{m:<26} {d:<10} pp{pp} {p:9.1f}  tg{tg} {t:8.1f} t/s  {frac}  {conc} conc {agg:8.1f} t/s")
PY
}
for d in $devices; do
    for m in "${bench_models[@]}"; do
        f=$models/$m.gguf
        j=$out/bench-$m-${d//:/_}.json
        c=$out/conc-$m-${d//:/_}.json
        step "bench $m" "$d" 300 bash -c '"$1" bench -m "$2" -d "$3" -p "$4" -n "$5" -r "$6" --json >"$7"' \
            _ "$W" "$f" "$d" "$pp" "$tg" "$reps" "$j" || continue
        step "bench $conc concurrent $m" "$d" 300 bash -c \
            '"$1" bench --concurrency "$4" -m "$2" -d "$3" -p "$5" -n "$6" -r 1 --json >"$7"' \
            _ "$W" "$f" "$d" "$conc" "$cpp" "$tg" "$c"
        bench_rows+=("$(bench_row "$j" "$c" "$f" "$d" "$m")")
    done
done

# The vendor comparison: `weft bench --devices all`, the default model (the
# SmolLM2-shape stand-in when it was not fetched; stories260K in a dry run) on
# every device, one table (kept in the log, shown in the summary) and
# devices.json/.svg/.png in OUT. WEFT_GPU_BW_GBS, when set, is the CUDA and
# HIP devices' bandwidth; otherwise weft's table of known GPUs gives it.
dev_args=(-p 128 -n 32 --levels "1,8,32" -r 1)
dev_model=()
if [ $dry = 1 ]; then
    dev_args=(-p 16 -n 4 --levels "1,4" -r 1)
    dev_model=(-m "$shared/models/stories260K.gguf")
elif [ -z "${WEFT_MODEL:-}" ] && [ -n "${WEFT_TEST_SMOLLM2:-}" ] &&
    [ ! -f "${WEFT_CACHE_DIR:-$HOME/.cache/weft}/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    dev_model=(-m "$WEFT_TEST_SMOLLM2")
fi
# all but a Vulkan device on the CPU (lavapipe), outside a dry run: there it
# would take the whole budget
dev_list=all
if [ $dry = 0 ] && "$W" devices | grep -q '(CPU, Vulkan'; then
    dev_list=cpu${devices:+,${devices// /,}}
fi
bw_env=()
[ -n "${WEFT_GPU_BW_GBS:-}" ] && bw_env=(WEFT_CUDA_BW_GBS="$WEFT_GPU_BW_GBS" WEFT_HIP_BW_GBS="$WEFT_GPU_BW_GBS")
step "bench --devices $dev_list" all 240 env "${bw_env[@]}" "$W" bench --devices "$dev_list" "${dev_model[@]}" "${dev_args[@]}" \
    --out "$out/devices"
devices_log=$last_log

# ---- OpenCL (an OpenCL GPU: NVIDIA's ICD when the machine has it) ----
for d in $devices; do
    case $d in opencl:*) correct "$d" ;; esac
done
if has_dev opencl:; then
    step "backend-ops (cpu, opencl)" opencl:0 240 env WEFT_TEST_BACKENDS=opencl "$B/test_backend_ops"
    sed -n '/support\/pass matrix/,$p' "$last_log" >>"$out/matrix.txt" 2>/dev/null
    [ -x "$B/test_opencl" ] && step "test_opencl" opencl:0 200 "$B/test_opencl"
    step "test_device_exact (opencl)" opencl:0 300 env WEFT_TEST_DEVICE=opencl:0 "$B/test_device_exact"
fi

# ---- Vulkan, last ----
for d in $devices; do
    case $d in vulkan:*) correct "$d" ;; esac
done
if has_dev vulkan:; then
    step "backend-ops (cpu, vulkan)" vulkan:0 240 env WEFT_TEST_BACKENDS=vulkan "$B/test_backend_ops"
    sed -n '/support\/pass matrix/,$p' "$last_log" >>"$out/matrix.txt" 2>/dev/null
    for t in "$B"/test_vulkan_*; do
        [ -x "$t" ] && step "$(basename "$t")" vulkan:0 300 "$t"
    done
    step "test_device_exact (vulkan)" vulkan:0 300 env WEFT_TEST_DEVICE=vulkan:0 "$B/test_device_exact"
fi
wait
finish
