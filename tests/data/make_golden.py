#!/usr/bin/env python3
"""A greedy golden (the layout of ../shared/golden/arch-*-greedy.json) from llamacpp_greedy's
STEPS output (see llamacpp_greedy.c).

  python3 tests/data/make_golden.py PROMPTS STEPS TYPE MODELS REFERENCE > OUT.json

PROMPTS: a JSON list of {"prompt": text or null, "prompt_ids": [...]} in the order the prompts
went to llamacpp_greedy. TYPE: the key under cases_by_type. MODELS, REFERENCE: what the golden
describes (how the model file is made; what produced the steps).

tests/data/qwen3-Q4_K_M-greedy.json: PROMPTS = the Q4_K cases of arch-qwen3-greedy.json, the
model `weft quantize shared/models/arch/qwen3-F16.gguf OUT Q4_K_M`.
tests/data/deepseek-v3-tiny-greedy.json: PROMPTS = the F16 cases of arch-deepseek2-greedy.json
and 150 ids (BOS, then random.seed(7) randrange(3, 512)), the model from the `weft gen` line
in its "models" field.
"""
import json
import sys

prompts = json.load(open(sys.argv[1]))
cases = [dict(prompt=p.get("prompt"), prompt_ids=p["prompt_ids"], generated_ids=[], top5_logprobs_per_step=[])
         for p in prompts]
for line in open(sys.argv[2]):
    f = line.split()
    c = cases[int(f[0])]
    top = [[int(f[2 + 2 * k]), float(f[3 + 2 * k])] for k in range(5)]
    c["generated_ids"].append(top[0][0])
    c["top5_logprobs_per_step"].append({"id": top[0][0], "logprob": top[0][1], "top": top})
out = {
    "models": sys.argv[4],
    "reference": sys.argv[5],
    "how_to_compare": "Teacher-force prompt_ids + generated_ids and compare every step's top-5 logprobs, as "
                      "../shared/golden/arch-*-greedy.json say: within 0.1 for F16 weights, about 1.0 for "
                      "quantized ones.",
    "cases_by_type": {sys.argv[3]: cases},
}
json.dump(out, sys.stdout, indent=1)
sys.stdout.write("\n")
