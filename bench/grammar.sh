#!/usr/bin/env bash
# Constrained decoding cost on the default model (SmolLM2-135M, 49,152-token
# vocabulary): `weft run` with and without a grammar on the same prompt, each
# REPS times; medians of decode time per generated token (ms/token), of the
# time the grammar itself took per token (checks, masks, advances: measured
# inside the generation loop), and the mask-cache hit rate. Cases: the built-in
# JSON object grammar greedy and sampled (--temp 0.8), and a grammar of
# lowercase words that refuses most of what the model wants (the mask every
# step: the cache's case).
#   bench/grammar.sh [-t THREADS] [-r REPS] [-n TOKENS]
# Needs build/weft (WEFT_BIN=path for another build) and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 reps=3 n=128
while [ $# -gt 0 ]; do
    case $1 in
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -n) n=$2; shift 2 ;;
        *) echo "usage: bench/grammar.sh [-t THREADS] [-r REPS] [-n TOKENS]" >&2; exit 2 ;;
    esac
done
. bench/common.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'root ::= [a-z]+ (" " [a-z]+)*\n' > "$tmp/words.gbnf"
prompt=$'<|im_start|>user\nList ten famous books as a JSON object: for each book its title, author, year and a one-line summary.<|im_end|>\n<|im_start|>assistant\n'

run() {  # label, extra args...
    local label=$1; shift
    for r in $(seq "$reps"); do
        "$weft" run -m "$default" -t "$threads" -n "$n" --json -p "$prompt" "$@" 2>/dev/null | sed "s/^/$label\t/"
    done
}
{
    run none --temp 0
    run json --temp 0 --grammar-json
    run none-t0.8 --temp 0.8 --seed 7
    run json-t0.8 --temp 0.8 --seed 7 --grammar-json
    run words --temp 0 --grammar "$tmp/words.gbnf"
} > "$tmp/out.tsv"

python3 - "$tmp/out.tsv" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, js = line.rstrip('\n').split('\t', 1)
    rows.setdefault(label, []).append(json.loads(js))
def med(xs): return statistics.median(xs)
# gen_ms covers the decode steps after the first token (which comes with the prompt)
def per_tok(d): return d['timings']['gen_ms'] / max(d['timings']['gen_tokens'] - 1, 1)
base = {'json': 'none', 'words': 'none', 'json-t0.8': 'none-t0.8'}
print('%-10s %6s %10s %12s %10s %8s %10s' % ('case', 'tokens', 'ms/token', 'grammar ms/t', 'overhead', 'masks', 'cache hit'))
for label in ['none', 'json', 'words', 'none-t0.8', 'json-t0.8']:
    rs = rows.get(label, [])
    if not rs: continue
    ms = med([per_tok(d) for d in rs])
    toks = med([d['timings']['gen_tokens'] for d in rs])
    if 'grammar' in rs[0]:
        g = med([d['grammar']['grammar_ms'] / max(d['timings']['gen_tokens'], 1) for d in rs])
        b = med([per_tok(d) for d in rows[base[label]]])
        masks = med([d['grammar']['masks'] for d in rs])
        hits = sum(d['grammar']['mask_hits'] for d in rs) / max(sum(d['grammar']['masks'] for d in rs), 1)
        print('%-10s %6d %10.2f %12.3f %9.1f%% %8d %9.0f%%' % (label, toks, ms, g, 100 * g / b, masks, 100 * hits))
    else:
        print('%-10s %6d %10.2f %12s %10s %8s %10s' % (label, toks, ms, '-', '-', '-', '-'))
print('(medians of %d runs; overhead = grammar time per token / the unconstrained ms/token of the same sampling;'
      % len(rows['none']))
print(' the cache hit rate is per process: each run starts with an empty cache)')
PY
