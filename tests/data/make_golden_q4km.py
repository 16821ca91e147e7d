#!/usr/bin/env python3
"""tests/data/qwen3-Q4_K_M-greedy.json from llamacpp_greedy's STEPS output (see
llamacpp_greedy.c): the prompts are the qwen3 golden's Q4_K cases, the model is
`weft quantize qwen3-F16.gguf OUT Q4_K_M` (the same tensor types and bytes as
llama-quantize's Q4_K_M; only the tensor order differs).
  python3 tests/data/make_golden_q4km.py ../shared/golden/arch-qwen3-greedy.json STEPS > tests/data/qwen3-Q4_K_M-greedy.json
"""
import json
import sys

src = json.load(open(sys.argv[1]))
cases = [dict(prompt=c["prompt"], prompt_ids=c["prompt_ids"], generated_ids=[], top5_logprobs_per_step=[])
         for c in src["cases_by_type"]["Q4_K"]]
for line in open(sys.argv[2]):
    f = line.split()
    c = cases[int(f[0])]
    top = [[int(f[2 + 2 * k]), float(f[3 + 2 * k])] for k in range(5)]
    c["generated_ids"].append(top[0][0])
    c["top5_logprobs_per_step"].append({"id": top[0][0], "logprob": top[0][1], "top": top})
out = {
    "models": "`weft quantize shared/models/arch/qwen3-F16.gguf OUT Q4_K_M` (llama.cpp's Q4_K_M recipe: Q4_K, "
              "Q6_K for token_embd and for blk.1.attn_v / blk.1.ffn_down; tensor data byte for byte llama-quantize's)",
    "reference": "llama.cpp 0c1e570 (the llama.cpp vendored in PyPI llama-cpp-python 0.3.36), CPU build "
                 "(GGML_NATIVE, AVX-512 VNNI), through tests/data/llamacpp_greedy.c: n_ctx 2048, n_batch 2048, "
                 "n_ubatch 512, 2 threads, default flash-attn and F16 KV cache; greedy, 32 new tokens; top-5 "
                 "logprobs of the softmax of the raw logits per step. The same tool reproduces the shared "
                 "qwen3 Q4_K golden's ids exactly, logprobs within 0.05. Measured with it: llama.cpp's own "
                 "Q4_K_M, teacher-forced along the Q4_K golden, differs from it by up to 4.90 (mean 1.42): "
                 "the mix is another model on these random weights.",
    "how_to_compare": "As ../shared/golden/arch-qwen3-greedy.json says for quantized files: teacher-force "
                      "prompt_ids + generated_ids, top-5 logprobs within about 1.0.",
    "cases_by_type": {"Q4_K_M": cases},
}
json.dump(out, sys.stdout, indent=1)
sys.stdout.write("\n")
