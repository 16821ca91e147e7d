/* Sampling: penalties -> top-k -> top-p -> min-p -> temperature -> draw.
 *
 * Working state per call is one candidate array (logit, id) of n_vocab
 * entries, built from the caller's logits with NaN -> -inf and +inf -> FLT_MAX
 * (so max-subtraction never produces inf - inf). Candidates are ordered by
 * "logit descending, id ascending", a strict total order, so selection and
 * sorting are deterministic and ties always favour the lower id. */
#include "core/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct weft_cand {
    float logit;
    int32_t id;
};

struct weft_sampler {
    struct weft_sampling_params p;
    int32_t n_vocab;
    uint64_t seed_mix;          /* the seed, mixed once */
    uint64_t pos;               /* position of the next draw (tokens sampled before it) */
    /* penalty history: ring of the last repeat_last_n accepted ids */
    int32_t *hist;              /* (repeat_last_n) */
    int32_t hist_len, hist_pos;
    int32_t *count;             /* (n_vocab) occurrences of each id in hist */
    struct weft_cand *cand;     /* (n_vocab) scratch */
    double *w;                  /* (n_vocab) scratch: unnormalised probabilities */
    int32_t *ban_id;            /* (p.n_ban) a copy of the params' */
    int32_t *bias_id;           /* (p.n_bias) copies of the params' */
    float *bias_val;
};

/* ---- RNG: counter-based, a function of (seed, position) ----
 *
 * The draw for the token at position pos (0 = the first generated token) is
 * splitmix64's finaliser over the seed's mix and pos, so it depends on
 * nothing else: an interrupted stream continued elsewhere from its k tokens
 * (weft_sampler_set_position(k)) draws what the uninterrupted one would. */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform_at(uint64_t seed_mix, uint64_t pos)
{
    uint64_t z = mix64(seed_mix + (pos + 1) * 0x9e3779b97f4a7c15ULL);
    return (double)(mix64(z ^ 0xd1342543de82ef95ULL) >> 11) * 0x1.0p-53;
}

/* ---- parameters ---- */

void weft_sampling_params_default(struct weft_sampling_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->frequency_penalty = 0.0f;
    p->presence_penalty = 0.0f;
    p->seed = 0xfeedbeefcafef00dULL;
    p->n_logprobs = 0;
}

static weft_status check_params(const struct weft_sampling_params *p, int32_t n_vocab)
{
    if (n_vocab <= 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: n_vocab must be > 0 (got %d)", (int)n_vocab);
    if (!isfinite(p->temperature) || p->temperature < 0.0f)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: temperature must be finite and >= 0 (got %g)",
                          (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || !(p->repeat_penalty > 0.0f))
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: repeat_penalty must be finite and > 0 (got %g)",
                          (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: repeat_last_n must be >= 0 (got %d)",
                          (int)p->repeat_last_n);
    if (!isfinite(p->frequency_penalty))
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: frequency_penalty must be finite");
    if (!isfinite(p->presence_penalty))
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: presence_penalty must be finite");
    if (p->n_logprobs < 0 || p->n_logprobs > WEFT_MAX_LOGPROBS)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: n_logprobs must be in 0..%d (got %d)",
                          WEFT_MAX_LOGPROBS, (int)p->n_logprobs);
    if (p->n_bias && (!p->bias_id || !p->bias_val))
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: logit bias arrays are NULL");
    if (p->n_ban && !p->ban_id) return weft_error(WEFT_ERR_INVALID_ARG, "sampler: the min_tokens ban list is NULL");
    for (uint32_t i = 0; i < p->n_ban; i++)
        if (p->ban_id[i] < 0 || p->ban_id[i] >= n_vocab)
            return weft_error(WEFT_ERR_INVALID_ARG, "sampler: min_tokens bans token %d, outside the vocabulary of %d",
                              (int)p->ban_id[i], (int)n_vocab);
    for (uint32_t i = 0; i < p->n_bias; i++) {
        if (p->bias_id[i] < 0 || p->bias_id[i] >= n_vocab)
            return weft_error(WEFT_ERR_INVALID_ARG, "sampler: logit bias for token %d, outside the vocabulary of %d",
                              (int)p->bias_id[i], (int)n_vocab);
        if (!(p->bias_val[i] >= -100.0f && p->bias_val[i] <= 100.0f))
            return weft_error(WEFT_ERR_INVALID_ARG, "sampler: logit bias %g for token %d is not in -100..100",
                              (double)p->bias_val[i], (int)p->bias_id[i]);
    }
    return WEFT_OK;
}

weft_status weft_sampler_init(const struct weft_sampling_params *p, int32_t n_vocab,
                              struct weft_sampler **out)
{
    if (!out)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    if (!p)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: params is NULL");
    weft_status st = check_params(p, n_vocab);
    if (st != WEFT_OK)
        return st;

    struct weft_sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->seed_mix = mix64(p->seed ^ 0x6a09e667f3bcc909ULL);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (!s->count || !s->cand || !s->w)
        goto nomem;
    if (p->repeat_last_n > 0) {
        s->hist = malloc((size_t)p->repeat_last_n * sizeof *s->hist);
        if (!s->hist)
            goto nomem;
    }
    if (p->n_bias) {
        s->bias_id = malloc(p->n_bias * sizeof *s->bias_id);
        s->bias_val = malloc(p->n_bias * sizeof *s->bias_val);
        if (!s->bias_id || !s->bias_val)
            goto nomem;
        memcpy(s->bias_id, p->bias_id, p->n_bias * sizeof *s->bias_id);
        memcpy(s->bias_val, p->bias_val, p->n_bias * sizeof *s->bias_val);
        s->p.bias_id = s->bias_id;
        s->p.bias_val = s->bias_val;
    }
    if (p->n_ban) {
        if (!(s->ban_id = malloc(p->n_ban * sizeof *s->ban_id)))
            goto nomem;
        memcpy(s->ban_id, p->ban_id, p->n_ban * sizeof *s->ban_id);
        s->p.ban_id = s->ban_id;
    }
    *out = s;
    return WEFT_OK;

nomem:
    weft_sampler_free(s);
    return weft_error(WEFT_ERR_NOMEM, "sampler: out of memory (n_vocab %d)", (int)n_vocab);
}

void weft_sampler_free(struct weft_sampler *s)
{
    if (!s)
        return;
    free(s->hist);
    free(s->count);
    free(s->cand);
    free(s->w);
    free(s->bias_id);
    free(s->ban_id);
    free(s->bias_val);
    free(s);
}

void weft_sampler_accept(struct weft_sampler *s, int32_t id)
{
    /* Out-of-range ids are not tokens of this vocabulary: ignored. */
    if (!s || s->p.repeat_last_n == 0 || id < 0 || id >= s->n_vocab)
        return;
    int32_t cap = s->p.repeat_last_n;
    if (s->hist_len == cap)
        s->count[s->hist[s->hist_pos]]--;   /* evict the oldest */
    else
        s->hist_len++;
    s->hist[s->hist_pos] = id;
    s->count[id]++;
    s->hist_pos = (s->hist_pos + 1) % cap;
}

/* ---- candidate ordering ---- */

static inline bool cand_before(const struct weft_cand *a, const struct weft_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const struct weft_cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

static inline void cand_swap(struct weft_cand *a, struct weft_cand *b)
{
    struct weft_cand t = *a;
    *a = *b;
    *b = t;
}

static void cand_insertion_sort(struct weft_cand *c, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct weft_cand v = c[i];
        size_t j = i;
        while (j > 0 && cand_before(&v, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = v;
    }
}

/* Rearrange c[0..n) so that c[0..k) holds the k best candidates (any order).
 * Quickselect with median-of-three: expected O(n). After ~2 log2(n) rounds
 * without converging it sorts the remaining range instead, bounding the worst
 * case at O(n log n). */
static void cand_select(struct weft_cand *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    int budget = 16;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (hi - lo > 16) {
        if (budget-- == 0) {
            qsort(c + lo, hi - lo, sizeof *c, cand_cmp);
            return;
        }
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three into c[mid], then park the pivot at c[last] */
        if (cand_before(&c[mid], &c[lo]))
            cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[last], &c[lo]))
            cand_swap(&c[last], &c[lo]);
        if (cand_before(&c[last], &c[mid]))
            cand_swap(&c[last], &c[mid]);
        cand_swap(&c[mid], &c[last]);
        struct weft_cand pivot = c[last];
        size_t store = lo;
        for (size_t i = lo; i < last; i++)
            if (cand_before(&c[i], &pivot))
                cand_swap(&c[i], &c[store++]);
        cand_swap(&c[store], &c[last]);
        /* c[lo..store) beat the pivot, c[store] is the pivot, the rest lose */
        if (store == k || store + 1 == k)
            return;
        if (k < store)
            hi = store;
        else
            lo = store + 1;
    }
    cand_insertion_sort(c + lo, hi - lo);
}

/* Min-heap on c[0..n) whose root is the worst candidate. */
static void heap_sift_down(struct weft_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && cand_before(&h[w], &h[l]))
            w = l;
        if (r < n && cand_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        cand_swap(&h[i], &h[w]);
        i = w;
    }
}

/* Put the k best of c[0..n) into c[0..k), sorted best first. c[] must be in
 * id order (so a later entry beats the heap's worst only on a strictly greater
 * logit). One predictable compare per entry plus, on logits in no particular
 * order, ~k ln(n/k) heap updates; if updates pass n/8 (e.g. ascending input)
 * it switches to quickselect, so the whole stays O(n + k log k) expected. */
static void cand_top_k(struct weft_cand *c, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;)
        heap_sift_down(c, k, i);
    size_t budget = n / 8 + 64;
    for (size_t i = k; i < n; i++) {
        if (!(c[i].logit > c[0].logit))
            continue;
        if (budget-- == 0) {
            cand_select(c, n, k);   /* c[] is still a permutation */
            break;
        }
        cand_swap(&c[0], &c[i]);
        heap_sift_down(c, k, 0);
    }
    qsort(c, k, sizeof *c, cand_cmp);
}

/* NaN -> -inf; +inf -> FLT_MAX (keeps l - max finite). */
static inline float sanitize(float l)
{
    if (isnan(l))
        return -INFINITY;
    if (l > FLT_MAX)
        return FLT_MAX;
    return l;
}

/* ---- logprobs of the raw distribution ---- */

/* Fill out->logprob (for out->id) and the top-n list from log_softmax(raw).
 * raw_max: max of the sanitized raw logits. One exp per vocab entry, in
 * double: this pass is most of the cost of a greedy step. */
static void fill_logprobs(const struct weft_sampler *s, const float *logits, float raw_max,
                          struct weft_sample *out)
{
    int32_t V = s->n_vocab, n = s->p.n_logprobs;
    if (n == 0) {  /* nobody asked: skip the pass over the vocabulary */
        out->logprob = NAN;
        out->n_top = 0;
        return;
    }
    double mx = raw_max, sum = 0.0;
    if (mx != -INFINITY)
        for (int32_t i = 0; i < V; i++)
            sum += exp((double)sanitize(logits[i]) - mx);
    /* top-n by (logit desc, id asc): small sorted insertion list */
    struct weft_cand top[WEFT_MAX_LOGPROBS];
    int32_t n_top = 0;
    for (int32_t i = 0; n > 0 && i < V; i++) {
        struct weft_cand c = { sanitize(logits[i]), i };
        if (n_top == n && !cand_before(&c, &top[n - 1]))
            continue;
        int32_t j = n_top < n ? n_top++ : n - 1;
        while (j > 0 && cand_before(&c, &top[j - 1])) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = c;
    }
    double lse = mx == -INFINITY ? -INFINITY : mx + log(sum);
#define LOGPROB_(l) (lse == -INFINITY ? -INFINITY : (float)((double)(l) - lse))
    out->logprob = LOGPROB_(sanitize(logits[out->id]));
    out->n_top = n_top;
    for (int32_t j = 0; j < n_top; j++) {
        out->top_id[j] = top[j].id;
        out->top_logprob[j] = LOGPROB_(top[j].logit);
    }
#undef LOGPROB_
}

/* ---- sampling ---- */

static bool penalties_active(const struct weft_sampler *s)
{
    const struct weft_sampling_params *p = &s->p;
    return s->hist_len > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static void apply_penalties(struct weft_sampler *s)
{
    const struct weft_sampling_params *p = &s->p;
    if (!penalties_active(s))
        return;
    /* cand[] is still in id order here. Each distinct id is penalised once:
     * its count is negated as a "done" mark, then restored. */
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t id = s->hist[i];
        int32_t cnt = s->count[id];
        if (cnt <= 0)
            continue;
        float *l = &s->cand[id].logit;
        if (*l > 0.0f)
            *l /= p->repeat_penalty;
        else
            *l *= p->repeat_penalty;
        *l -= (float)cnt * p->frequency_penalty + p->presence_penalty;
        *l = sanitize(*l);   /* -inf - -inf, or overflow past FLT_MAX */
        s->count[id] = -cnt;
    }
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t id = s->hist[i];
        if (s->count[id] < 0)
            s->count[id] = -s->count[id];
    }
}

static inline bool mask_has(const uint32_t *allowed, int32_t id)
{
    return !allowed || (allowed[id / 32] >> (id % 32) & 1u);
}

/* The draw for weft_sampler_sample (allowed NULL, retry 0) and
 * weft_sampler_sample_masked. first: the lowest allowed id (the choice when
 * nothing allowed has any probability). */
static weft_status sample_impl(struct weft_sampler *s, const float *logits, const uint32_t *allowed,
                               int32_t first, uint32_t retry, struct weft_sample *out)
{
    const struct weft_sampling_params *p = &s->p;
    int32_t V = s->n_vocab;
    struct weft_cand *c = s->cand;

    bool banning = s->pos < p->min_tokens && p->n_ban;
    if (p->temperature <= 0.0f && !penalties_active(s) && !p->n_bias && !banning) {
        /* greedy with nothing to adjust: one read-only pass (the general
         * path below writes a candidate per id first); the same choice */
        float best = sanitize(logits[first]), raw_max = best;
        int32_t chosen = first;
        for (int32_t i = 0; i < V; i++) {
            float l = sanitize(logits[i]);
            raw_max = l > raw_max ? l : raw_max;
            if (l > best && mask_has(allowed, i)) {
                best = l;
                chosen = i;
            }
        }
        out->id = chosen;
        fill_logprobs(s, logits, raw_max, out);
        s->pos++;
        return WEFT_OK;
    }

    float raw_max = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        float l = sanitize(logits[i]);
        c[i].logit = l;
        c[i].id = i;
        raw_max = l > raw_max ? l : raw_max;
    }
    for (uint32_t i = 0; i < p->n_bias; i++) {
        float *l = &c[p->bias_id[i]].logit;
        *l = sanitize(*l + p->bias_val[i]);
    }
    if (banning)  /* min_tokens not reached: no end yet */
        for (uint32_t i = 0; i < p->n_ban; i++) c[p->ban_id[i]].logit = -INFINITY;
    apply_penalties(s);
    if (allowed)
        for (int32_t i = 0; i < V; i++)
            if (!mask_has(allowed, i))
                c[i].logit = -INFINITY;

    int32_t chosen = first;
    if (p->temperature <= 0.0f) {
        /* greedy: strict > keeps the lowest id on ties; all -inf -> first */
        float best = c[first].logit;
        for (int32_t i = 0; i < V; i++)
            if (c[i].logit > best) {
                best = c[i].logit;
                chosen = i;
            }
        goto done;
    }

    /* top-k: c[0..n) = the k best, sorted */
    size_t n = (size_t)V;
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < V) {
        n = (size_t)p->top_k;
        cand_top_k(c, (size_t)V, n);
        sorted = true;
    }

    double mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > mx)
            mx = c[i].logit;
    if (mx == -INFINITY) {   /* nothing has any probability: lowest (allowed) id */
        chosen = first;
        goto done;
    }

    /* top-p on the T=1 distribution of the current set: smallest prefix (in
     * candidate order) whose mass reaches top_p, at least one. Without top-k
     * the prefix is found in a sorted window of the m best, m growing x8
     * until the window holds enough mass (a full sort only when it must). */
    if (p->top_p < 1.0f) {
        double sum = 0.0;
        for (size_t i = 0; i < n; i++)
            sum += exp((double)c[i].logit - mx);
        double target = (double)p->top_p * sum;
        size_t m = sorted ? n : 256, keep = 0;
        while (keep == 0) {
            if (m >= n) {
                m = n;
                if (!sorted)
                    qsort(c, n, sizeof *c, cand_cmp);
            } else {
                cand_select(c, n, m);
                qsort(c, m, sizeof *c, cand_cmp);
            }
            double cum = 0.0;
            for (size_t i = 0; i < m && keep == 0; i++) {
                cum += exp((double)c[i].logit - mx);
                if (cum >= target)
                    keep = i + 1;
            }
            if (keep == 0 && m == n)
                keep = n;   /* rounding: the whole set */
            m *= 8;
        }
        n = keep;
    }

    /* min-p: keep p >= min_p * p_max, i.e. l - max >= log(min_p) */
    if (p->min_p > 0.0f) {
        double thr = mx + log((double)p->min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if ((double)c[i].logit >= thr)
                c[kept++] = c[i];
        n = kept;   /* >= 1: the max passes since log(min_p) <= 0 */
    }

    /* temperature on the kept logits, then draw */
    double inv_t = 1.0 / (double)p->temperature, sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (s->w[i] = exp(((double)c[i].logit - mx) * inv_t));
    /* retry r > 0 draws from another stream: the seed's mix moved by r */
    uint64_t seed_mix = retry ? mix64(s->seed_mix + retry * 0xd1b54a32d192ed03ULL) : s->seed_mix;
    double u = rng_uniform_at(seed_mix, s->pos) * sum, acc = 0.0;
    size_t pick = n;
    for (size_t i = 0; i < n; i++) {
        acc += s->w[i];
        if (u < acc) {
            pick = i;
            break;
        }
    }
    if (pick == n) {   /* rounding left u at the top: last candidate with mass */
        pick = 0;
        for (size_t i = n; i-- > 0;)
            if (s->w[i] > 0.0) {
                pick = i;
                break;
            }
    }
    chosen = c[pick].id;

done:
    out->id = chosen;
    fill_logprobs(s, logits, raw_max, out);
    s->pos++;
    return WEFT_OK;
}

weft_status weft_sampler_sample(struct weft_sampler *s, const float *logits, struct weft_sample *out)
{
    if (!s || !logits || !out)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: NULL argument to weft_sampler_sample");
    return sample_impl(s, logits, NULL, 0, 0, out);
}

weft_status weft_sampler_sample_masked(struct weft_sampler *s, const float *logits, const uint32_t *allowed,
                                       uint32_t retry, struct weft_sample *out)
{
    if (!s || !logits || !allowed || !out)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: NULL argument to weft_sampler_sample_masked");
    int32_t first = -1;
    for (int32_t w = 0; w < (s->n_vocab + 31) / 32 && first < 0; w++)
        if (allowed[w])
            first = w * 32 + __builtin_ctz(allowed[w]);
    if (first < 0 || first >= s->n_vocab)
        return weft_error(WEFT_ERR_INVALID_ARG, "sampler: the mask allows no token");
    return sample_impl(s, logits, allowed, first, retry, out);
}

void weft_sampler_set_position(struct weft_sampler *s, uint64_t pos) { s->pos = pos; }

uint64_t weft_sampler_position(const struct weft_sampler *s) { return s->pos; }
