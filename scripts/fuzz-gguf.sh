#!/usr/bin/env bash
# Fuzz the GGUF reader: build tests/fuzz/fuzz_gguf.c with clang + libFuzzer +
# ASan/UBSan in build-fuzz/, seed a corpus with small GGUFs, run for a bounded time.
#   usage: scripts/fuzz-gguf.sh [seconds]   (default 60)
# Exits non-zero when the build fails or the fuzzer finds a crash, leak, UB or hang;
# the failing input is left in build-fuzz/fuzz-gguf-artifacts/.
set -euo pipefail

T=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${WEFT_SHARED_DIR:-$root/../shared}
build=$root/build-fuzz
corpus=$build/fuzz-gguf-corpus
artifacts=$build/fuzz-gguf-artifacts

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DWEFT_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_SHARED_DIR="$shared" >/dev/null
cmake --build "$build" --target fuzz_gguf -j"$(nproc)"

mkdir -p "$corpus" "$artifacts"
for m in stories260K.gguf synth256-Q4_0.gguf; do
    if [ -f "$shared/models/$m" ]; then cp -f "$shared/models/$m" "$corpus/"; fi
done
# Small generated seeds: every kv type, arrays, a few tensor types, v2 and v3.
if command -v python3 >/dev/null; then
python3 - "$corpus" <<'PY'
import struct, sys, os
out = sys.argv[1]
def s(x): x = x.encode(); return struct.pack('<Q', len(x)) + x
def kv(k, t, v): return s(k) + struct.pack('<I', t) + v
def arr(t, n, body): return struct.pack('<IQ', t, n) + body
def gguf(version, kvs, tensors, align=32):
    # tensors: (name, type, dims, nbytes)
    h = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    off, data = 0, b''
    for name, ty, dims, nb in tensors:
        h += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<q', d) for d in dims)
        h += struct.pack('<IQ', ty, off)
        blob = bytes((i * 7 + len(name)) & 255 for i in range(nb))
        pad = (-nb) % align
        data += blob + b'\0' * pad
        off += nb + pad
    h += b'\0' * ((-len(h)) % align)
    return h + data
kvs = [
    kv('general.architecture', 8, s('llama')),
    kv('general.alignment', 4, struct.pack('<I', 32)),
    kv('t.u8', 0, b'\x05'), kv('t.i8', 1, b'\xfb'), kv('t.u16', 2, struct.pack('<H', 600)),
    kv('t.i16', 3, struct.pack('<h', -600)), kv('t.i32', 5, struct.pack('<i', -7)),
    kv('t.f32', 6, struct.pack('<f', 1e-5)), kv('t.bool', 7, b'\x01'),
    kv('t.u64', 10, struct.pack('<Q', 1 << 40)), kv('t.i64', 11, struct.pack('<q', -(1 << 40))),
    kv('t.f64', 12, struct.pack('<d', 0.5)),
    kv('tokenizer.ggml.tokens', 9, arr(8, 3, s('<unk>') + s('a') + s(''))),
    kv('tokenizer.ggml.scores', 9, arr(6, 3, struct.pack('<3f', 0, -1, -2))),
    kv('tokenizer.ggml.token_type', 9, arr(5, 3, struct.pack('<3i', 2, 1, 1))),
    kv('a.u8', 9, arr(0, 2, b'\x01\x02')), kv('a.bool', 9, arr(7, 2, b'\x00\x01')),
    kv('a.u64', 9, arr(10, 1, struct.pack('<Q', 9))),
]
tensors = [('token_embd.weight', 0, [32, 3], 32 * 3 * 4), ('blk.0.q', 2, [64, 2], 2 * 2 * 18),
           ('blk.0.k', 12, [256], 144), ('blk.0.v', 1, [8, 2, 2, 1], 64), ('blk.0.o', 8, [32], 34),
           ('blk.0.bf', 30, [4], 8), ('blk.0.q6', 14, [256], 210)]
seeds = {
    'seed-v3-all.gguf': gguf(3, kvs, tensors),
    'seed-v2-all.gguf': gguf(2, kvs, tensors),
    'seed-empty.gguf': gguf(3, [], []),
    'seed-kv-only.gguf': gguf(3, kvs[:4], []),
    'seed-align64.gguf': gguf(3, [kv('general.alignment', 4, struct.pack('<I', 64))], tensors[:2], 64),
}
for name, b in seeds.items():
    with open(os.path.join(out, name), 'wb') as f: f.write(b)
PY
fi

echo "fuzz_gguf: ${T}s, corpus $(ls "$corpus" | wc -l) files in $corpus"
set +e
"$build/fuzz_gguf" "$corpus" -max_total_time="$T" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$artifacts/" -print_final_stats=1
rc=$?
set -e
if [ $rc -ne 0 ]; then
    echo "fuzz_gguf FAILED (exit $rc); reproducer(s) in $artifacts:" >&2
    ls -l "$artifacts" >&2
    exit 1
fi
echo "fuzz_gguf: no crash in ${T}s"
