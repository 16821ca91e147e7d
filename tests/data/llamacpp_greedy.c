/* Writes a greedy golden with llama.cpp's own library, in the layout of
 * ../shared/golden/arch-*-greedy.json: for each prompt (ids), 32 greedy steps
 * with the top-5 logprobs (softmax of the raw logits) of each. Not built by
 * weft's CMake; llama.cpp is built from its public source outside this
 * repository, then:
 *   cc -O2 tests/data/llamacpp_greedy.c -I$LLAMA/include -I$LLAMA/ggml/include \
 *      -L$LLAMA/build/bin -lllama -lggml -lggml-base -lm -o /tmp/llamacpp_greedy
 *   LD_LIBRARY_PATH=$LLAMA/build/bin /tmp/llamacpp_greedy MODEL.gguf < PROMPTS > STEPS
 * PROMPTS: one line per prompt, "n id1 .. idn". STEPS: one line per step,
 * "case step id1 lp1 .. id5 lp5" (id1 is the greedy choice). The context is the
 * goldens' (n_ctx 2048, n_batch 2048, n_ubatch 512, 2 threads); a fresh context
 * per prompt. tests/data/make_golden.py turns STEPS into the JSON. */
#include "llama.h"

#include <math.h>
#include <stdio.h>

#define STEPS 32
#define MAX_TOKENS 4096

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: llamacpp_greedy MODEL.gguf < PROMPTS\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!m) return 1;
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    static llama_token toks[MAX_TOKENS + STEPS];
    int n, c = 0;
    while (scanf("%d", &n) == 1 && n > 0 && n <= MAX_TOKENS) {
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 2048, cp.n_batch = 2048, cp.n_ubatch = 512, cp.n_threads = 2, cp.n_threads_batch = 2;
        struct llama_context *ctx = llama_init_from_model(m, cp);
        if (!ctx) return 1;
        for (int i = 0; i < n; i++)
            if (scanf("%d", &toks[i]) != 1) return 2;
        int len = n;
        if (llama_decode(ctx, llama_batch_get_one(toks, n))) return 3;
        for (int s = 0; s < STEPS; s++) {
            const float *lg = llama_get_logits_ith(ctx, -1);
            double mx = -INFINITY, sum = 0;
            for (int i = 0; i < nv; i++) mx = lg[i] > mx ? lg[i] : mx;
            for (int i = 0; i < nv; i++) sum += exp(lg[i] - mx);
            const double lse = mx + log(sum);
            int top[5];
            for (int k = 0; k < 5; k++) {   /* the k-th best; equal logits: the lower id */
                int b = -1;
                for (int i = 0; i < nv; i++) {
                    int taken = 0;
                    for (int q = 0; q < k; q++) taken |= top[q] == i;
                    if (!taken && (b < 0 || lg[i] > lg[b])) b = i;
                }
                top[k] = b;
            }
            printf("%d %d", c, s);
            for (int k = 0; k < 5; k++) printf(" %d %.6f", top[k], lg[top[k]] - lse);
            printf("\n");
            toks[len++] = top[0];
            if (s + 1 < STEPS && llama_decode(ctx, llama_batch_get_one(&toks[len - 1], 1))) return 3;
        }
        llama_free(ctx);
        c++;
    }
    llama_model_free(m);
    return 0;
}
