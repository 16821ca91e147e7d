#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/sampler.h"
#include "tests/check.h"

/* Test-local deterministic generator for logits (not the sampler's RNG). */
static uint64_t tl_state = 12345;
static double tl_uniform(void)
{
    tl_state = tl_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(tl_state >> 11) * 0x1.0p-53;
}

static struct weft_sampling_params plain_params(float temperature)
{
    struct weft_sampling_params p;
    weft_sampling_params_default(&p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

static struct weft_sampler *make(const struct weft_sampling_params *p, int32_t n_vocab)
{
    struct weft_sampler *s = NULL;
    weft_status st = weft_sampler_init(p, n_vocab, &s);
    CHECK_EQ_INT(st, WEFT_OK);
    return s;
}

static int32_t draw(struct weft_sampler *s, const float *logits)
{
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(s, logits, &o), WEFT_OK);
    return o.id;
}

/* log_softmax in double, the reference for the sampler's logprobs */
static void ref_log_softmax(const float *l, int n, double *out)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx)
            mx = l[i];
    for (int i = 0; i < n; i++)
        sum += exp((double)l[i] - mx);
    for (int i = 0; i < n; i++)
        out[i] = (double)l[i] - mx - log(sum);
}

static void greedy_picks_argmax_and_lowest_id_on_ties(void)
{
    struct weft_sampling_params p = plain_params(0.0f);
    struct weft_sampler *s = make(&p, 6);
    const float a[6] = { 0.1f, 2.0f, -1.0f, 1.9f, 0.0f, 1.0f };
    CHECK_EQ_INT(draw(s, a), 1);
    const float tie[6] = { 0.1f, 3.0f, -1.0f, 3.0f, 0.0f, 3.0f };
    CHECK_EQ_INT(draw(s, tie), 1);
    const float neg[6] = { -5.0f, -4.0f, -3.0f, -3.0f, -9.0f, -3.5f };
    CHECK_EQ_INT(draw(s, neg), 2);
    weft_sampler_free(s);
}

static void logprobs_match_double_reference_top_list_descending(void)
{
    enum { V = 1000, N = WEFT_MAX_LOGPROBS };
    static float l[V];
    static double ref[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)(tl_uniform() * 12.0 - 4.0);
    l[400] = 9.0f;    /* a tie at the top */
    l[17] = 9.0f;
    ref_log_softmax(l, V, ref);

    struct weft_sampling_params p = plain_params(0.0f);
    p.n_logprobs = N;
    struct weft_sampler *s = make(&p, V);
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(s, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.id, 17);   /* tie at 9.0 -> lower id */
    CHECK_NEAR(o.logprob, ref[17], 1e-6);
    CHECK_EQ_INT(o.n_top, N);
    CHECK_EQ_INT(o.top_id[0], 17);
    CHECK_EQ_INT(o.top_id[1], 400);
    for (int j = 0; j < o.n_top; j++) {
        CHECK_NEAR(o.top_logprob[j], ref[o.top_id[j]], 1e-6);
        if (j > 0)
            CHECK(o.top_logprob[j] <= o.top_logprob[j - 1]);
    }
    /* the top list is exactly the N largest of the reference */
    int n_greater = 0;
    for (int i = 0; i < V; i++)
        if (ref[i] > ref[o.top_id[N - 1]])
            n_greater++;
    CHECK_EQ_INT(n_greater, N - 1);

    double sum_top = 0.0;
    for (int j = 0; j < o.n_top; j++)
        sum_top += exp(o.top_logprob[j]);
    CHECK(sum_top < 1.0 + 1e-6);
    weft_sampler_free(s);
}

static void logprobs_over_whole_vocab_sum_to_one(void)
{
    /* With n_logprobs = V (small vocab) the top list covers the whole vocab. */
    enum { V = WEFT_MAX_LOGPROBS };
    float l[V];
    double ref[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)(tl_uniform() * 30.0 - 15.0);
    ref_log_softmax(l, V, ref);
    struct weft_sampling_params p = plain_params(1.0f);
    p.n_logprobs = V;
    struct weft_sampler *s = make(&p, V);
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(s, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.n_top, V);
    double total = 0.0;
    for (int j = 0; j < V; j++) {
        total += exp((double)o.top_logprob[j]);
        CHECK_NEAR(o.top_logprob[j], ref[o.top_id[j]], 1e-6);
    }
    CHECK_NEAR(total, 1.0, 1e-5);
    CHECK_NEAR(o.logprob, ref[o.id], 1e-6);
    weft_sampler_free(s);
}

/* Without n_logprobs the vocabulary pass is skipped and logprob is NaN. */
static void no_logprobs_requested_skips_them(void)
{
    const float l[4] = { 2.0f, 1.0f, 0.5f, -1.0f };
    struct weft_sampling_params p = plain_params(0.0f);
    struct weft_sampler *s = make(&p, 4);
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(s, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.id, 0);
    CHECK(isnan(o.logprob));
    CHECK_EQ_INT(o.n_top, 0);
    weft_sampler_free(s);
}

static void logprobs_ignore_penalties_and_temperature(void)
{
    const float l[4] = { 2.0f, 1.0f, 0.5f, -1.0f };
    double ref[4];
    ref_log_softmax(l, 4, ref);
    struct weft_sampling_params p = plain_params(0.0f);
    p.repeat_penalty = 3.0f;
    p.n_logprobs = 1;
    struct weft_sampler *s = make(&p, 4);
    weft_sampler_accept(s, 0);
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(s, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.id, 1);
    CHECK_NEAR(o.logprob, ref[1], 1e-6);
    weft_sampler_free(s);
}

static void top_k_1_equals_greedy_at_any_temperature(void)
{
    enum { V = 3000 };
    static float l[V];
    const float temps[] = { 0.1f, 1.0f, 5.0f, 100.0f };
    struct weft_sampling_params pg = plain_params(0.0f);
    struct weft_sampler *g = make(&pg, V);
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        struct weft_sampling_params pk;
        weft_sampling_params_default(&pk);
        pk.temperature = temps[t];
        pk.top_k = 1;
        struct weft_sampler *k = make(&pk, V);
        for (int round = 0; round < 20; round++) {
            for (int i = 0; i < V; i++)   /* coarse values -> many ties */
                l[i] = (float)(int)(tl_uniform() * 50.0);
            int32_t a = draw(g, l), b = draw(k, l);
            CHECK_EQ_INT(a, b);
        }
        weft_sampler_free(k);
    }
    weft_sampler_free(g);
}

static void draws(uint64_t seed, int32_t *ids, int n, const float *l, int32_t V)
{
    struct weft_sampling_params p = plain_params(1.0f);
    p.seed = seed;
    struct weft_sampler *s = make(&p, V);
    for (int i = 0; i < n; i++)
        ids[i] = draw(s, l);
    weft_sampler_free(s);
}

static void same_seed_same_sequence_different_seed_different(void)
{
    enum { V = 50, N = 200 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)(tl_uniform() * 0.5);
    int32_t a[N], b[N], c[N];
    draws(42, a, N, l, V);
    draws(42, b, N, l, V);
    draws(43, c, N, l, V);
    CHECK(memcmp(a, b, sizeof a) == 0);
    int differ = 0;
    for (int i = 0; i < N; i++)
        differ += a[i] != c[i];
    CHECK_MSG(differ > N / 2, "only %d of %d draws differ", differ, N);
    /* and the draws are spread, not stuck */
    int seen[V] = { 0 }, distinct = 0;
    for (int i = 0; i < N; i++)
        if (!seen[a[i]]++)
            distinct++;
    CHECK(distinct > 30);
}

/* A draw depends on (seed, position) only: a sampler set to position k,
 * with the same penalty history, draws what an uninterrupted one drew at
 * its k-th token, for every k, with penalties on; the drawing position
 * advances on greedy samples too. */
static void a_draw_is_a_function_of_seed_and_position(void)
{
    enum { V = 64, N = 120 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)(tl_uniform() * 0.7);
    struct weft_sampling_params p = plain_params(0.9f);
    p.seed = 77;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 16;
    p.presence_penalty = 0.2f;
    int32_t ref[N];
    struct weft_sampler *s = make(&p, V);
    weft_sampler_accept(s, 3);  /* a prompt */
    weft_sampler_accept(s, 5);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(weft_sampler_position(s), i);
        ref[i] = draw(s, l);
        weft_sampler_accept(s, ref[i]);
    }
    weft_sampler_free(s);
    for (int k = 0; k < N; k += 7) {
        struct weft_sampler *c = make(&p, V);
        weft_sampler_accept(c, 3);
        weft_sampler_accept(c, 5);
        for (int i = 0; i < k; i++) weft_sampler_accept(c, ref[i]);
        weft_sampler_set_position(c, (uint64_t)k);
        int same = 1;
        for (int i = k; i < N; i++) {
            int32_t id = draw(c, l);
            same &= id == ref[i];
            weft_sampler_accept(c, id);
        }
        CHECK_MSG(same, "continued at k=%d, the draws differ", k);
        weft_sampler_free(c);
    }
    /* position, not call count: two samplers at different positions differ */
    struct weft_sampler *a = make(&p, V), *b = make(&p, V);
    weft_sampler_set_position(b, 1000);
    int differ = 0;
    for (int i = 0; i < 50; i++) differ += draw(a, l) != draw(b, l);
    CHECK_MSG(differ > 25, "only %d of 50 draws differ between positions 0.. and 1000..", differ);
    weft_sampler_free(a);
    weft_sampler_free(b);
    /* greedy samples advance it as well */
    struct weft_sampling_params g = plain_params(0.0f);
    struct weft_sampler *gs = make(&g, V);
    draw(gs, l);
    draw(gs, l);
    CHECK_EQ_INT(weft_sampler_position(gs), 2);
    weft_sampler_free(gs);
}

/* Draw n times; compare frequencies with softmax(l[kept]/T) over `kept`. */
static void check_frequencies(const struct weft_sampling_params *p, const float *l, int V,
                              const int *kept, int n_kept, int n)
{
    struct weft_sampler *s = make(p, V);
    int count[64] = { 0 };
    for (int i = 0; i < n; i++) {
        int32_t id = draw(s, l);
        CHECK(id >= 0 && id < V);
        if (id >= 0 && id < V)
            count[id]++;
    }
    weft_sampler_free(s);

    double w[64] = { 0 }, sum = 0.0, mx = -INFINITY;
    for (int j = 0; j < n_kept; j++)
        mx = fmax(mx, l[kept[j]]);
    for (int j = 0; j < n_kept; j++)
        sum += (w[kept[j]] = exp(((double)l[kept[j]] - mx) / p->temperature));
    double chi2 = 0.0, max_err = 0.0;
    int n_in = 0;
    for (int i = 0; i < V; i++) {
        double expect = w[i] / sum;
        if (expect == 0.0) {
            CHECK_MSG(count[i] == 0, "id %d excluded but drawn %d times", i, count[i]);
            continue;
        }
        n_in++;
        double e = expect * n;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        max_err = fmax(max_err, fabs((double)count[i] / n - expect));
    }
    /* df = n_in - 1 <= 7: chi2 > 30 has p < 1e-4 */
    CHECK_MSG(chi2 < 30.0, "chi2 %.2f over %d ids", chi2, n_in);
    CHECK_MSG(max_err < 0.015, "max abs frequency error %.4f", max_err);
}

static void empirical_frequencies_match_softmax_over_temperature(void)
{
    const float l[8] = { 1.0f, 0.5f, 0.0f, -0.5f, 2.0f, 1.2f, -1.0f, 0.3f };
    const int all[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    struct weft_sampling_params p = plain_params(0.7f);
    p.seed = 7;
    check_frequencies(&p, l, 8, all, 8, 20000);
    p.temperature = 1.5f;
    p.seed = 8;
    check_frequencies(&p, l, 8, all, 8, 20000);
}

static void top_k_renormalises_over_the_k_best(void)
{
    const float l[8] = { 1.0f, 0.5f, 0.0f, -0.5f, 2.0f, 1.2f, -1.0f, 0.3f };
    const int best3[3] = { 4, 5, 0 };
    struct weft_sampling_params p = plain_params(1.3f);
    p.top_k = 3;
    p.seed = 9;
    check_frequencies(&p, l, 8, best3, 3, 20000);
}

static void top_p_excludes_the_tail(void)
{
    /* probabilities 0.5, 0.3, 0.1, 0.05, 0.05 (ids shuffled) */
    const float l[5] = { logf(0.05f), logf(0.3f), logf(0.05f), logf(0.5f), logf(0.1f) };
    struct weft_sampling_params p = plain_params(1.0f);
    p.top_p = 0.75f;   /* 0.5 < 0.75 <= 0.8: keep {3, 1} */
    const int keep2[2] = { 3, 1 };
    check_frequencies(&p, l, 5, keep2, 2, 5000);
    p.top_p = 0.85f;   /* 0.8 < 0.85 <= 0.9: keep {3, 1, 4} */
    const int keep3[3] = { 3, 1, 4 };
    check_frequencies(&p, l, 5, keep3, 3, 5000);
    p.top_k = 4;       /* same through the top-k path */
    check_frequencies(&p, l, 5, keep3, 3, 5000);
    p.top_p = 0.01f;   /* at least one survives */
    const int keep1[1] = { 3 };
    check_frequencies(&p, l, 5, keep1, 1, 500);
}

static void min_p_excludes_unlikely_tokens(void)
{
    const float l[5] = { logf(0.05f), logf(0.3f), logf(0.05f), logf(0.5f), logf(0.1f) };
    struct weft_sampling_params p = plain_params(1.0f);
    p.min_p = 0.25f;   /* threshold 0.125: keep {3, 1} */
    const int keep2[2] = { 3, 1 };
    check_frequencies(&p, l, 5, keep2, 2, 5000);
    p.min_p = 0.15f;   /* threshold 0.075: keep {3, 1, 4} */
    const int keep3[3] = { 3, 1, 4 };
    check_frequencies(&p, l, 5, keep3, 3, 5000);
    p.top_k = 5;
    p.top_p = 0.99f;   /* combined with top-k/top-p (which keep all 5 here) */
    check_frequencies(&p, l, 5, keep3, 3, 5000);
}

static void top_k_on_large_vocab_draws_only_from_the_k_best(void)
{
    enum { V = 49152, K = 40 };
    static float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)(tl_uniform() * 10.0);
    /* the K largest, by brute force */
    static int is_top[V];
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!is_top[i] && (best < 0 || l[i] > l[best]))
                best = i;
        is_top[best] = 1;
    }
    struct weft_sampling_params p = plain_params(50.0f);   /* ~flat over the kept set */
    p.top_k = K;
    struct weft_sampler *s = make(&p, V);
    int seen = 0;
    static int hit[V];
    for (int n = 0; n < 2000; n++) {
        int32_t id = draw(s, l);
        CHECK(is_top[id]);
        if (!hit[id]++)
            seen++;
    }
    CHECK_EQ_INT(seen, K);
    weft_sampler_free(s);
}

static void top_k_handles_ascending_and_descending_vocab(void)
{
    /* ascending logits defeat the heap scan (every entry is an update) and
     * force the quickselect fallback; descending ones never update it */
    enum { V = 49152, K = 40 };
    static float l[V];
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < V; i++)
            l[i] = dir ? (float)(V - i) * 1e-3f : (float)i * 1e-3f;
        struct weft_sampling_params p = plain_params(1000.0f);
        p.top_k = K;
        struct weft_sampler *s = make(&p, V);
        int seen = 0;
        static int hit[2][V];
        for (int n = 0; n < 1000; n++) {
            int32_t id = draw(s, l);
            CHECK(dir ? id < K : id >= V - K);
            if (!hit[dir][id]++)
                seen++;
        }
        CHECK_EQ_INT(seen, K);
        weft_sampler_free(s);
    }
}

static void top_p_without_top_k_on_a_wide_vocab(void)
{
    /* 600 equal top logits scattered over 5000 ids, the rest far below: top-p
     * 0.5 keeps exactly the 300 lowest ids of the 600 (needs > 256 sorted) */
    enum { V = 5000 };
    static float l[V];
    static int is_high[V], keep[V];
    int n_high = 0;
    for (int i = 0; i < V; i++) {
        is_high[i] = (i * 7) % 50 < 6;   /* 12% of ids */
        l[i] = is_high[i] ? 2.0f : -40.0f;
        if (is_high[i] && n_high++ < 300)
            keep[i] = 1;
    }
    CHECK_EQ_INT(n_high, 600);
    struct weft_sampling_params p = plain_params(1.0f);
    p.top_p = 0.5f;
    struct weft_sampler *s = make(&p, V);
    int seen = 0;
    static int hit[V];
    for (int n = 0; n < 6000; n++) {
        int32_t id = draw(s, l);
        CHECK(keep[id]);
        if (!hit[id]++)
            seen++;
    }
    CHECK(seen > 280);
    weft_sampler_free(s);

    /* a peaked one: the kept prefix fits in the first window. Id i has rank
     * (i * 37) % V (a permutation): logit -0.01 * rank. */
    static double above[V];   /* mass of the ranks before r */
    double sum = 0.0;
    for (int r = 0; r < V; r++) {
        above[r] = sum;
        sum += exp(-0.01 * r);
    }
    for (int i = 0; i < V; i++)
        l[i] = -(float)((i * 37) % V) * 0.01f;
    p.top_p = 0.3f;
    s = make(&p, V);
    int max_rank = 0;
    for (int n = 0; n < 3000; n++) {
        int r = (draw(s, l) * 37) % V;
        CHECK(above[r] / sum < 0.3 + 1e-6);   /* kept iff the mass above it is < top_p */
        max_rank = r > max_rank ? r : max_rank;
    }
    CHECK(max_rank > 20);
    weft_sampler_free(s);
}

static void repetition_penalty_changes_argmax(void)
{
    struct weft_sampling_params p = plain_params(0.0f);
    p.repeat_penalty = 1.2f;
    struct weft_sampler *s = make(&p, 4);
    const float pos[4] = { 1.0f, 0.9f, 0.5f, 0.0f };
    CHECK_EQ_INT(draw(s, pos), 0);
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, pos), 1);       /* 1.0 / 1.2 < 0.9 */
    const float neg[4] = { -1.0f, -1.1f, -3.0f, -4.0f };
    CHECK_EQ_INT(draw(s, neg), 1);       /* -1.0 * 1.2 < -1.1 */
    weft_sampler_free(s);
}

static void repetition_window_forgets_old_tokens(void)
{
    struct weft_sampling_params p = plain_params(0.0f);
    p.repeat_penalty = 1.2f;
    p.repeat_last_n = 2;
    struct weft_sampler *s = make(&p, 8);
    const float l[8] = { 1.0f, 0.9f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    weft_sampler_accept(s, 0);
    weft_sampler_accept(s, 5);
    CHECK_EQ_INT(draw(s, l), 1);
    weft_sampler_accept(s, 6);           /* 0 leaves the window */
    CHECK_EQ_INT(draw(s, l), 0);
    weft_sampler_accept(s, 0);
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 1);
    weft_sampler_accept(s, 7);
    CHECK_EQ_INT(draw(s, l), 1);         /* one 0 still in the window */
    weft_sampler_accept(s, 7);
    CHECK_EQ_INT(draw(s, l), 0);
    weft_sampler_free(s);

    p.repeat_last_n = 0;                 /* no history at all */
    s = make(&p, 8);
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 0);
    weft_sampler_free(s);
}

static void frequency_penalty_scales_with_count(void)
{
    struct weft_sampling_params p = plain_params(0.0f);
    p.frequency_penalty = 0.06f;
    struct weft_sampler *s = make(&p, 4);
    const float l[4] = { 1.0f, 0.9f, 0.5f, 0.0f };
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 0);         /* 1.0 - 0.06 > 0.9 */
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 1);         /* 1.0 - 0.12 < 0.9 */
    weft_sampler_free(s);
}

static void frequency_counts_only_the_window(void)
{
    struct weft_sampling_params p = plain_params(0.0f);
    p.frequency_penalty = 0.06f;
    p.repeat_last_n = 2;
    struct weft_sampler *s = make(&p, 4);
    const float l[4] = { 1.0f, 0.9f, 0.5f, 0.0f };
    weft_sampler_accept(s, 0);
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 1);         /* count 2: 0.88 */
    weft_sampler_accept(s, 3);
    weft_sampler_accept(s, 3);           /* both 0s evicted */
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 0);         /* count 1 again: 0.94 */
    weft_sampler_free(s);
}

static void presence_penalty_applies_once(void)
{
    struct weft_sampling_params p = plain_params(0.0f);
    p.presence_penalty = 0.15f;
    struct weft_sampler *s = make(&p, 4);
    const float l[4] = { 1.0f, 0.9f, 0.8f, 0.0f };
    weft_sampler_accept(s, 0);
    CHECK_EQ_INT(draw(s, l), 1);         /* 0.85 < 0.9 */
    weft_sampler_accept(s, 1);
    weft_sampler_accept(s, 1);
    weft_sampler_accept(s, 1);
    CHECK_EQ_INT(draw(s, l), 0);         /* 0.85 vs 0.75 vs 0.8: not count-scaled */
    weft_sampler_free(s);
}

static void invalid_params_rejected(void)
{
    struct weft_sampling_params base;
    weft_sampling_params_default(&base);
    static char sentinel;   /* init must reset *out to NULL on failure */
    struct weft_sampler *s = NULL;
    struct {
        const char *field;
        struct weft_sampling_params p;
        int32_t n_vocab;
    } bad[16];
    int n = 0;
#define BAD_(fieldname, mutation, nv) do { bad[n].field = fieldname; bad[n].p = base; \
        { struct weft_sampling_params *q = &bad[n].p; mutation; } bad[n].n_vocab = nv; n++; } while (0)
    BAD_("temperature", q->temperature = -0.5f, 10);
    BAD_("temperature", q->temperature = NAN, 10);
    BAD_("temperature", q->temperature = INFINITY, 10);
    BAD_("top_p", q->top_p = 0.0f, 10);
    BAD_("top_p", q->top_p = 1.5f, 10);
    BAD_("top_p", q->top_p = NAN, 10);
    BAD_("min_p", q->min_p = -0.1f, 10);
    BAD_("min_p", q->min_p = 1.01f, 10);
    BAD_("repeat_penalty", q->repeat_penalty = 0.0f, 10);
    BAD_("repeat_penalty", q->repeat_penalty = -1.0f, 10);
    BAD_("repeat_last_n", q->repeat_last_n = -1, 10);
    BAD_("n_logprobs", q->n_logprobs = -1, 10);
    BAD_("n_logprobs", q->n_logprobs = WEFT_MAX_LOGPROBS + 1, 10);
    BAD_("n_vocab", (void)q, 0);
    BAD_("n_vocab", (void)q, -3);
#undef BAD_
    for (int i = 0; i < n; i++) {
        s = (struct weft_sampler *)(void *)&sentinel;
        weft_clear_error();
        CHECK_EQ_INT(weft_sampler_init(&bad[i].p, bad[i].n_vocab, &s), WEFT_ERR_INVALID_ARG);
        CHECK(s == NULL);
        CHECK_MSG(strstr(weft_last_error(), bad[i].field) != NULL, "case %d: error '%s' lacks '%s'", i,
                  weft_last_error(), bad[i].field);
    }
    CHECK_EQ_INT(weft_sampler_init(NULL, 10, &s), WEFT_ERR_INVALID_ARG);
    CHECK(s == NULL);

    /* boundaries that are valid */
    struct weft_sampling_params ok = base;
    ok.temperature = 0.0f;
    ok.top_p = 1.0f;
    ok.min_p = 1.0f;
    ok.repeat_last_n = 0;
    ok.n_logprobs = WEFT_MAX_LOGPROBS;
    ok.top_k = -1;
    CHECK_EQ_INT(weft_sampler_init(&ok, 1, &s), WEFT_OK);
    CHECK(s != NULL);
    weft_sampler_free(s);
}

static void nan_logits_handled(void)
{
    const float l[5] = { NAN, 1.0f, NAN, 3.0f, 2.0f };
    double ref[5];
    const float fin[3] = { 1.0f, 3.0f, 2.0f };
    double rf[3];
    ref_log_softmax(fin, 3, rf);
    ref[0] = ref[2] = -INFINITY;
    ref[1] = rf[0];
    ref[3] = rf[1];
    ref[4] = rf[2];

    struct weft_sampling_params p = plain_params(0.0f);
    p.n_logprobs = 5;
    struct weft_sampler *g = make(&p, 5);
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(g, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.id, 3);
    CHECK_NEAR(o.logprob, ref[3], 1e-6);
    CHECK_EQ_INT(o.n_top, 5);
    CHECK_EQ_INT(o.top_id[0], 3);
    CHECK_EQ_INT(o.top_id[1], 4);
    CHECK_EQ_INT(o.top_id[2], 1);
    CHECK_EQ_INT(o.top_id[3], 0);        /* -inf ties: lower id first */
    CHECK_EQ_INT(o.top_id[4], 2);
    CHECK(isinf(o.top_logprob[3]) && o.top_logprob[3] < 0);
    weft_sampler_free(g);

    /* stochastic: NaN ids are never drawn */
    struct weft_sampling_params ps = plain_params(2.0f);
    ps.top_k = 4;
    ps.top_p = 0.999f;
    struct weft_sampler *s = make(&ps, 5);
    for (int i = 0; i < 2000; i++) {
        int32_t id = draw(s, l);
        CHECK(id != 0 && id != 2);
    }
    weft_sampler_free(s);

    /* all NaN / -inf: id 0, logprob -inf, greedy or not */
    const float dead[4] = { NAN, -INFINITY, NAN, -INFINITY };
    for (int t = 0; t < 2; t++) {
        struct weft_sampling_params pd = plain_params(t ? 1.0f : 0.0f);
        pd.n_logprobs = 2;
        pd.top_k = t ? 2 : 0;
        struct weft_sampler *d = make(&pd, 4);
        CHECK_EQ_INT(weft_sampler_sample(d, dead, &o), WEFT_OK);
        CHECK_EQ_INT(o.id, 0);
        CHECK(isinf(o.logprob) && o.logprob < 0);
        CHECK_EQ_INT(o.top_id[0], 0);
        CHECK_EQ_INT(o.top_id[1], 1);
        weft_sampler_free(d);
    }

    /* +inf wins outright and does not poison the rest */
    const float inf[4] = { 1.0f, INFINITY, 2.0f, NAN };
    struct weft_sampling_params pi = plain_params(1.0f);
    pi.n_logprobs = 1;
    struct weft_sampler *si = make(&pi, 4);
    for (int i = 0; i < 100; i++)
        CHECK_EQ_INT(draw(si, inf), 1);
    CHECK_EQ_INT(weft_sampler_sample(si, inf, &o), WEFT_OK);
    CHECK_NEAR(o.logprob, 0.0, 1e-6);
    weft_sampler_free(si);
}

static void defaults_are_valid_and_sample(void)
{
    struct weft_sampling_params p;
    weft_sampling_params_default(&p);
    enum { V = 49152 };
    static float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)(tl_uniform() * 8.0);
    struct weft_sampler *s = make(&p, V);
    for (int i = 0; i < 200; i++) {
        int32_t id = draw(s, l);
        CHECK(id >= 0 && id < V);
        weft_sampler_accept(s, id);
    }
    weft_sampler_free(s);
}

/* logit_bias: added to the logits before sampling (greedy moves with it),
 * the reported logprobs stay the raw distribution's; bad biases refused. */
static void logit_bias_moves_the_choice(void)
{
    float l[8] = {0.5f, 1.0f, 2.0f, 0.0f, -1.0f, 3.0f, 0.2f, 0.1f};
    int32_t ids[2] = {5, 3};
    float vals[2] = {-100.0f, 2.5f};
    struct weft_sampling_params p = plain_params(0.0f);
    p.n_logprobs = 1;
    p.bias_id = ids;
    p.bias_val = vals;
    p.n_bias = 1;
    struct weft_sampler *s = make(&p, 8);
    struct weft_sample o;
    CHECK_EQ_INT(weft_sampler_sample(s, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.id, 2);              /* 5 pushed down: the next best */
    CHECK(o.top_id[0] == 5);            /* the raw distribution's logprobs */
    weft_sampler_free(s);
    p.n_bias = 2;                       /* and 3 pushed up past 2 (0 + 2.5 > 2) */
    s = make(&p, 8);
    CHECK_EQ_INT(weft_sampler_sample(s, l, &o), WEFT_OK);
    CHECK_EQ_INT(o.id, 3);
    weft_sampler_free(s);
    /* the copies are the sampler's own */
    vals[1] = -100.0f;
    p.n_bias = 2;
    p.temperature = 0.7f;
    s = make(&p, 8);
    vals[1] = 100.0f;
    for (int i = 0; i < 50; i++) CHECK(draw(s, l) != 3 && draw(s, l) != 5);
    weft_sampler_free(s);
    /* refused: a token outside the vocabulary, a bias past 100 */
    ids[0] = 8;
    struct weft_sampler *bad = NULL;
    CHECK(weft_sampler_init(&p, 8, &bad) == WEFT_ERR_INVALID_ARG && !bad);
    ids[0] = 5;
    vals[0] = 200.0f;
    CHECK(weft_sampler_init(&p, 8, &bad) == WEFT_ERR_INVALID_ARG && !bad);
}

/* min_tokens: the banned tokens (end of generation, stop ids) cannot be
 * drawn before that position, greedy or not; then they can; the ban list
 * is the sampler's own copy; a ban outside the vocabulary is refused. */
static void min_tokens_bans_the_end_until_then(void)
{
    float l[8] = {0.5f, 1.0f, 2.0f, 0.0f, -1.0f, 3.0f, 0.2f, 0.1f};
    int32_t ban[2] = {5, 2};
    for (int t = 0; t < 2; t++) {
        struct weft_sampling_params p = plain_params(t ? 0.9f : 0.0f);
        p.min_tokens = 3;
        p.ban_id = ban;
        p.n_ban = 2;
        struct weft_sampler *s = make(&p, 8);
        ban[0] = 7;  /* a copy: changing the caller's array changes nothing */
        for (int i = 0; i < 3; i++) {
            int32_t id = draw(s, l);
            CHECK_MSG(id != 5 && id != 2, "temp %d draw %d: %d", t, i, id);
            if (!t) CHECK_EQ_INT(id, 1);   /* greedy: the best one not banned */
        }
        if (!t) CHECK_EQ_INT(draw(s, l), 5);  /* the 4th may end */
        weft_sampler_free(s);
        ban[0] = 5;
    }
    struct weft_sampling_params p = plain_params(0.0f);
    p.min_tokens = 1;
    p.ban_id = ban;
    p.n_ban = 2;
    ban[1] = 8;
    struct weft_sampler *bad = NULL;
    CHECK(weft_sampler_init(&p, 8, &bad) == WEFT_ERR_INVALID_ARG && !bad);
    ban[1] = 2;
}

int main(void)
{
    RUN(greedy_picks_argmax_and_lowest_id_on_ties);
    RUN(logprobs_match_double_reference_top_list_descending);
    RUN(logprobs_over_whole_vocab_sum_to_one);
    RUN(logprobs_ignore_penalties_and_temperature);
    RUN(no_logprobs_requested_skips_them);
    RUN(top_k_1_equals_greedy_at_any_temperature);
    RUN(same_seed_same_sequence_different_seed_different);
    RUN(a_draw_is_a_function_of_seed_and_position);
    RUN(empirical_frequencies_match_softmax_over_temperature);
    RUN(top_k_renormalises_over_the_k_best);
    RUN(top_p_excludes_the_tail);
    RUN(min_p_excludes_unlikely_tokens);
    RUN(top_k_on_large_vocab_draws_only_from_the_k_best);
    RUN(top_k_handles_ascending_and_descending_vocab);
    RUN(top_p_without_top_k_on_a_wide_vocab);
    RUN(repetition_penalty_changes_argmax);
    RUN(repetition_window_forgets_old_tokens);
    RUN(frequency_penalty_scales_with_count);
    RUN(frequency_counts_only_the_window);
    RUN(presence_penalty_applies_once);
    RUN(invalid_params_rejected);
    RUN(nan_logits_handled);
    RUN(defaults_are_valid_and_sample);
    RUN(logit_bias_moves_the_choice);
    RUN(min_tokens_bans_the_end_until_then);
    return check_summary();
}
