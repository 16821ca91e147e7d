#!/usr/bin/env bash
# The GPU check: on a machine with a GPU, build every backend this machine can
# (CUDA for the GPU's own architecture, Vulkan if a loader and glslc are there,
# the HIP kernels through nvcc and the HIP-to-CUDA mapping header), then on
# every device found:
#   - the backend-ops test (every op x type x shape vs the CPU, support matrix),
#   - backend-specific tests (test_gpu_kernels for CUDA and HIP, test_vulkan_*),
#   - the stories260K golden (llama.cpp's ids) on the device and split cpu+device,
#   - greedy equality with the CPU, alone and 8 at once, and with a layer split,
#   - weft bench: SmolLM2-shape Q4_1, and Llama-3-8B-shape Q4_0 and Q8_0
#     (random weights from `weft gen`), decode tokens/s at batch 1, the fraction
#     of the GPU's memory bandwidth that is, and aggregate tokens/s at 64
#     concurrent sequences;
# and prints one summary table. Meant to finish in under 10 minutes.
#   tests/gpu/run.sh [--quick]      (--quick: no 8B models)
# Env: OUT (folder for logs, default gpu-out/), WEFT_SHARED_DIR (models + golden),
#      WEFT_GPU_BW_GBS (peak memory bandwidth, when the GPU is not in the table),
#      CUDA_ARCH (default: the first GPU's compute capability, e.g. 90).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
quick=0
[ "${1:-}" = "--quick" ] && quick=1
out=${OUT:-$root/gpu-out}
mkdir -p "$out/logs"
jobs=$(nproc 2>/dev/null || echo 4)
t_start=$(date +%s)
shared=${WEFT_SHARED_DIR:-}
for d in "$root/../shared" "$root/shared"; do [ -z "$shared" ] && [ -d "$d/models" ] && shared=$(cd "$d" && pwd); done
summary=()

# step NAME DEVICE TIMEOUT CMD... : run, log, one summary row
step() {
    local name=$1 dev=$2 limit=$3
    shift 3
    local log="$out/logs/${name// /_}-${dev//[:=,]/_}.log" t0 rc res detail
    t0=$(date +%s)
    timeout "$limit" "$@" >"$log" 2>&1
    rc=$?
    case $rc in
        0) res=PASS ;;
        77) res=SKIP ;;
        124) res=TIMEOUT ;;
        *) res=FAIL ;;
    esac
    detail=$(grep -E "cases, [0-9]+ failed|SKIP:|tests passed|FAIL" "$log" | tail -1 | cut -c1-70)
    summary+=("$(printf '%-28s %-16s %-7s %5ss  %s' "$name" "$dev" "$res" "$(($(date +%s) - t0))" "$detail")")
    echo "== $name [$dev]: $res ($log)"
    [ "$res" = PASS ] || tail -15 "$log"
    return $rc
}

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>/dev/null | tee "$out/gpu.csv"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
[ -n "$arch" ] || arch=90
command -v nvcc >/dev/null 2>&1 || export PATH=$PATH:/usr/local/cuda/bin

# ---- builds ----
B=$root/build-gpu
step "build (cpu, cuda, vulkan)" "sm_$arch" 300 bash -c "
    cmake -S '$root' -B '$B' -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=AUTO -DWEFT_VULKAN=AUTO -DWEFT_HIP=OFF \
          -DCMAKE_CUDA_ARCHITECTURES=$arch ${shared:+-DWEFT_SHARED_DIR=$shared} &&
    cmake --build '$B' -j$jobs" || { printf '%s\n' "${summary[@]}"; exit 1; }
BH=$root/build-gpu-hip
hip_ok=0
if [ -f "$root/backends/hip/CMakeLists.txt" ]; then
    step "build (hip kernels via nvcc)" "sm_$arch" 300 bash -c "
        cmake -S '$root' -B '$BH' -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=OFF -DWEFT_VULKAN=OFF -DWEFT_HIP=OFF \
              -DWEFT_HIP_NVCC=ON -DCMAKE_CUDA_ARCHITECTURES=$arch ${shared:+-DWEFT_SHARED_DIR=$shared} &&
        cmake --build '$BH' -j$jobs" && hip_ok=1
fi
W=$B/weft
$W devices | tee "$out/devices.txt"
devices=$($W devices --json | python3 -c 'import json,sys; print(" ".join(d["id"] for d in json.load(sys.stdin) if d.get("available") and d["backend"]!="cpu"))')
echo "devices: ${devices:-none}"

# ---- correctness ----
step "backend-ops (all devices)" all 300 "$B/test_backend_ops"
sed -n '/support\/pass matrix/,$p' "$out/logs/backend-ops_(all_devices)-all.log" > "$out/matrix.txt" 2>/dev/null
step "test_gpu_kernels" cuda:0 300 env WEFT_TEST_GPU=cuda "$B/test_gpu_kernels"
for t in "$B"/test_vulkan_*; do [ -x "$t" ] && step "$(basename "$t")" vulkan:0 300 "$t"; done
if [ $hip_ok = 1 ]; then
    step "backend-ops (hip via nvcc)" hip:0 300 "$BH/test_backend_ops"
    step "test_gpu_kernels" hip:0 300 env WEFT_TEST_GPU=hip "$BH/test_gpu_kernels"
    step "golden" hip:0 300 env WEFT_TEST_DEVICE=hip:0 WEFT_TEST_LOGPROB_TOL=2e-2 "$BH/test_golden"
    step "equality + split + batch" hip:0 400 env WEFT_TEST_DEVICES=hip:0 "$BH/test_devices"
fi
# ids exact; logprobs within 2e-2 (GPU attention accumulates in F32, the CPU in F16 as ggml)
for d in $devices; do
    step "golden" "$d" 300 env WEFT_TEST_DEVICE="$d" WEFT_TEST_LOGPROB_TOL=2e-2 "$B/test_golden"
    step "golden split" "cpu=1,$d" 300 env WEFT_TEST_DEVICE="cpu=1,$d" WEFT_TEST_LOGPROB_TOL=2e-2 "$B/test_golden"
    step "equality + split + batch" "$d" 400 env WEFT_TEST_DEVICES="$d" "$B/test_devices"
done

# ---- benchmarks ----
models=$out/models
mkdir -p "$models"
gen() { [ -f "$models/$1.gguf" ] || $W gen -o "$models/$1.gguf" "${@:2}" >/dev/null; }
gen smollm2-shape-Q4_1 --preset smollm2-135m --type Q4_1
bench_models=(smollm2-shape-Q4_1)
if [ $quick = 0 ]; then
    l3="--embd 4096 --layers 32 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256 --ctx 8192 --untied --rope-base 500000"
    for t in Q4_0 Q8_0; do
        step "gen llama3-8b-shape $t" host 300 $W gen -o "$models/llama3-8b-shape-$t.gguf" $l3 --type $t &&
            bench_models+=("llama3-8b-shape-$t")
    done
fi
case "$gpu_name" in
    *H200*) bw=4800 ;;
    *H100*SXM*|*H100\ 80GB\ HBM3*) bw=3350 ;;
    *H100*) bw=2000 ;;
    *A100*80GB*) bw=2039 ;;
    *A100*) bw=1555 ;;
    *L40S*|*L40*) bw=864 ;;
    *) bw=${WEFT_GPU_BW_GBS:-0} ;;
esac
bw=${WEFT_GPU_BW_GBS:-$bw}
bench_rows=()
for d in $devices; do
    for m in "${bench_models[@]}"; do
        f=$models/$m.gguf
        j=$out/bench-$m-${d//:/_}.json
        step "bench $m" "$d" 300 bash -c "$W bench -m '$f' -d $d -p 512 -n 64 -r 3 --json > '$j'" || continue
        c=$out/conc-$m-${d//:/_}.json
        step "bench 64 concurrent $m" "$d" 300 bash -c "$W bench --concurrency 64 -m '$f' -d $d -p 128 -n 64 -r 1 --json > '$c'"
        bench_rows+=("$(python3 - "$j" "$c" "$f" "$bw" "$d" "$m" <<'PY'
import json, os, sys
j, c, f, bw, d, m = sys.argv[1:7]
def load(p):
    try:
        txt = open(p).read()
        return json.loads(txt[txt.index('{'):]) if '{' in txt else {}
    except Exception:
        return {}
b, cc = load(j), load(c)
res = {e.get('test'): e.get('tps_median', 0) for e in b.get('results', [])}
pp, tg = res.get('pp512', 0), res.get('tg64', 0)
wb = b.get('weight_bytes_per_token') or os.path.getsize(f)
frac = (wb * float(tg) / (float(bw) * 1e9)) if float(bw) > 0 else 0
agg = (cc.get('results') or [{}])[0].get('gen_tps_median', 0)
print(f"{m:<24} {d:<10} pp512 {float(pp):9.1f}  tg64 {float(tg):8.1f} t/s  {100*frac:5.1f}% of {bw} GB/s  64 conc {float(agg):8.1f} t/s")
PY
)")
    done
done

echo
echo "================ weft GPU check: ${gpu_name:-no GPU} ($(($(date +%s) - t_start)) s) ================"
printf '%-28s %-16s %-7s %6s  %s\n' check device result time detail
printf '%s\n' "${summary[@]}"
echo
[ -s "$out/matrix.txt" ] && cat "$out/matrix.txt"
echo
printf '%s\n' "${bench_rows[@]}"
printf '%s\n' "${summary[@]}" | grep -qE " (FAIL|TIMEOUT) " && exit 1
exit 0
