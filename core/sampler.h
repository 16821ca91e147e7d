/* Sampling: logits -> next token id, plus log-probabilities.
 *
 * Order of transforms (as llama.cpp's default chain): penalties (repetition,
 * frequency, presence over the last repeat_last_n accepted tokens) -> top-k ->
 * top-p -> min-p -> temperature -> draw with the seeded RNG. temperature <= 0
 * is greedy (argmax after penalties; ties -> lowest id). Logprobs are those of
 * the model's full distribution: log_softmax of the raw logits, before any
 * transform. Same seed + same logits sequence = same output.
 *
 * The randomness of a draw is a function of (seed, position) only, position
 * counting the tokens this sampler drew before (from 0, or from where
 * weft_sampler_set_position put it): a stream cut after k tokens and
 * continued elsewhere with the same seed, position k and the same penalty
 * history (prompt + the k tokens accepted) samples what it would have. */
#ifndef WEFT_SAMPLER_H
#define WEFT_SAMPLER_H

#include <stdint.h>

#include "base/status.h"

#define WEFT_MAX_LOGPROBS 20

struct weft_sampling_params {
    float temperature;        /* default 0.8; <= 0 greedy */
    int32_t top_k;            /* default 40; <= 0 disables */
    float top_p;              /* default 0.95; >= 1 disables */
    float min_p;              /* default 0.05; <= 0 disables */
    float repeat_penalty;     /* default 1.0 (off) */
    int32_t repeat_last_n;    /* default 64 */
    float frequency_penalty;  /* default 0 */
    float presence_penalty;   /* default 0 */
    uint64_t seed;            /* default 0xfeedbeef... any fixed value */
    int32_t n_logprobs;       /* top-n logprobs to report, 0..WEFT_MAX_LOGPROBS */
    /* OpenAI's logit_bias: bias_val[i] (-100..100) added to the logit of
     * bias_id[i] before penalties and sampling (the logprobs reported stay
     * the raw distribution's); weft_sampler_init copies them. 0: none */
    const int32_t *bias_id;
    const float *bias_val;
    uint32_t n_bias;
    /* vLLM's min_tokens: while fewer than min_tokens tokens have been drawn
     * (the sampler's position), ban_id[0..n_ban) (the end-of-generation and
     * stop tokens) cannot be drawn; weft_sampler_init copies them. 0: none */
    uint32_t min_tokens;
    const int32_t *ban_id;
    uint32_t n_ban;
};

void weft_sampling_params_default(struct weft_sampling_params *p);

struct weft_sample {
    int32_t id;
    float logprob;                 /* of id under the raw distribution; NAN when
                                      n_logprobs is 0 (the pass is skipped) */
    int32_t n_top;
    int32_t top_id[WEFT_MAX_LOGPROBS];   /* descending logprob; ties -> lower id first */
    float top_logprob[WEFT_MAX_LOGPROBS];
};

struct weft_sampler;
/* Fails with WEFT_ERR_INVALID_ARG (message says which field) on out-of-range
 * params; *out is NULL on failure. */
weft_status weft_sampler_init(const struct weft_sampling_params *p, int32_t n_vocab,
                              struct weft_sampler **out);
void weft_sampler_free(struct weft_sampler *s);
/* Record a token in the penalty history (call for prompt tokens too if they
 * should be penalised; weft does for the prompt, as llama.cpp does). */
void weft_sampler_accept(struct weft_sampler *s, int32_t id);
/* Sample from logits[0..n_vocab) (not modified). */
weft_status weft_sampler_sample(struct weft_sampler *s, const float *logits, struct weft_sample *out);
/* As weft_sampler_sample, over the ids whose bit is set in allowed[] (bit
 * id % 32 of allowed[id / 32]) only: the others count as -inf logits before
 * penalties, top-k, top-p and min-p. The draw is number `retry` at the current
 * position (retry 0 is weft_sampler_sample's own draw; each retry is another
 * function of (seed, position, retry)). Greedy: the allowed id with the
 * highest logit (ties -> lowest id). With no allowed id with a finite logit
 * the lowest allowed id is chosen; with no allowed id at all,
 * WEFT_ERR_INVALID_ARG. Logprobs stay those of the raw distribution. Advances
 * the position by one, as weft_sampler_sample does. */
weft_status weft_sampler_sample_masked(struct weft_sampler *s, const float *logits, const uint32_t *allowed,
                                       uint32_t retry, struct weft_sample *out);
/* The position of the next draw (each successful sample advances it by one). */
void weft_sampler_set_position(struct weft_sampler *s, uint64_t pos);
uint64_t weft_sampler_position(const struct weft_sampler *s);

#endif
