#!/usr/bin/env bash
# Fuzz the HTTP request parser: build tests/fuzz/fuzz_http.c with clang +
# libFuzzer + ASan/UBSan in build-fuzz/ (shared with fuzz-gguf.sh), seed a
# corpus with small requests, run for a bounded time with an HTTP dictionary.
#   usage: scripts/fuzz-http.sh [seconds]   (default 60)
# Exits non-zero when the build fails or the fuzzer finds a crash, leak, UB,
# a broken invariant (abort) or a hang; the failing input is left in
# build-fuzz/fuzz-http-artifacts/. Byte 0 of an input picks the limits and
# the split (see tests/fuzz/fuzz_http.c); seeds start with it.
set -euo pipefail

T=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${WEFT_FUZZ_BUILD:-$root/build-fuzz}
corpus=$build/fuzz-http-corpus
artifacts=$build/fuzz-http-artifacts
dict=$build/fuzz-http.dict

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DWEFT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_http -j"$(nproc)"

mkdir -p "$corpus" "$artifacts"
python3 - "$corpus" "$dict" <<'PY'
import os, sys
out, dict_path = sys.argv[1], sys.argv[2]
reqs = [
    b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"prompt\":1}\n",
    b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\nTrailer: t\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\nHEAD /h HTTP/1.1\r\nConnection: keep-alive\r\n\r\nGET /c HTTP/1.0\r\n\r\n",
    b"POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    b"GET http://h:80/p?q#f HTTP/1.1\r\nX-Empty:\r\nX-Fold: a\r\n b\r\n\r\n",
    b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
    b"CONNECT h:443 HTTP/1.1\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"FOO / HTTP/1.1\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00",
]
for i, r in enumerate(reqs):
    for sel in (0, 1 | (2 << 2), 3 | (5 << 2)):
        with open(os.path.join(out, "seed-%02d-%d" % (i, sel)), "wb") as f:
            f.write(bytes([sel]) + r)
toks = ["GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", "CONNECT ", "PRI * HTTP/2.0", " HTTP/1.1\r\n",
        " HTTP/1.0\r\n", "\r\n", "\r\n\r\n", "Host: ", "Content-Length: ", "Transfer-Encoding: ", "chunked",
        "Connection: ", "close", "keep-alive", "Upgrade", "Expect: ", "100-continue", "0\r\n\r\n", "?", "#",
        "http://", "/v1/chat/completions", ": ", ";ext=1", "ffffffff", "\t"]
with open(dict_path, "w") as f:
    for t in toks:
        f.write('"%s"\n' % "".join(c if c.isalnum() or c in " /:.-?#;=*" else "\\x%02x" % ord(c) for c in t))
PY

echo "fuzz_http: ${T}s, corpus $(ls "$corpus" | wc -l) files in $corpus"
set +e
"$build/fuzz_http" "$corpus" -dict="$dict" -max_total_time="$T" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -artifact_prefix="$artifacts/" -print_final_stats=1
rc=$?
set -e
if [ $rc -ne 0 ]; then
    echo "fuzz_http FAILED (exit $rc); reproducer(s) in $artifacts:" >&2
    ls -l "$artifacts" >&2
    exit 1
fi
echo "fuzz_http: no crash in ${T}s"
