#!/usr/bin/env bash
# A host check of kernels-common's api 7, 9 and 10 device code without a GPU: the kernels compiled by
# g++ over emu.h (each block's threads as std::threads, shuffles and __syncthreads as
# barriers), their launchers included as they are (launch syntax rewritten by transform.py).
# check.cc compares MOE_ROUTE with the CPU backend's algorithm (the same expf: bit for bit),
# MATMUL_ID with MATMUL on each slot's expert (bit for bit; unchosen experts NaN), attention
# sinks and latent caches with a double reference, ROPE_KV's latent writes with the CPU's
# layout, SWIGLU_OAI with the CPU's formula (bit for bit); api 9's SSM_CONV and DELTA_NET with
# the CPU's algorithm (backends/cpu/ops/ops_recurrent.c, the same libm: outputs and states bit
# for bit; interleaved sequences, prefill runs beside decode rows, ops cut in two, every
# geometry the launcher picks, bad slots) and SILU_MUL's SIGMOID; api 10's ADD scale, ROPE_KV
# q_only (k, v and the cache untouched) and MOE_ROUTE expert_scale run through the backends'
# shared host code (backends/gpu: supports, encode) onto the emulated launchers, bit for bit
# with the CPU's algorithm (ops_elementwise.c, ops_attention.c with base/rope.h, ops_moe.c), a
# runtime without the new launchers refusing them. Slow (a thread per GPU thread): a few
# minutes; an argument (route, mmid, attn, rope, rec, api10) runs one part.
#   tests/gpu/emu/run.sh [part]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/transform.py" "$repo" "$work"
for f in types quant quant_k status; do gcc -O2 -std=gnu11 -I"$repo" -c "$repo/base/$f.c" -o "$work/$f.o"; done
# the CUDA and HIP backends' shared host code (api 10's checks run ops through it onto the
# emulated launchers)
for f in gpu_common gpu_encode; do gcc -O2 -std=gnu11 -I"$repo" -c "$repo/backends/gpu/$f.c" -o "$work/$f.o"; done
g++ -std=c++20 -O1 -Wall -Wno-unknown-pragmas -I"$work" -I"$repo" -I"$here" "$here/check.cc" \
    "$work/types.o" "$work/quant.o" "$work/quant_k.o" "$work/status.o" "$work/gpu_common.o" "$work/gpu_encode.o" \
    -o "$work/check" -lpthread -lm
"$work/check" "$@"
