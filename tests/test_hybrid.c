/* Hybrid models' recurrent state (issue 38), on Qwen3.5's random-weight model (three Gated
 * DeltaNet layers, one attention layer):
 *   - the pool's state slots alone: taken zeroed with a sequence's first blocks, given back,
 *     refused when all are held (nothing taken), swapped out and into another slot with their
 *     bytes, the bytes per sequence the same at any length, no prefix cache without state
 *     checkpoints, and no block export or import (refused by name);
 *   - the forward pass, teacher-forced: eight sequences at once, prefilled in block-aligned
 *     chunks mixed with the others' decode rows, and one swapped out and back in mid-way while
 *     its slot served another, each give the logprobs of the sequence run alone: within the
 *     golden's tolerance (0.1) with the F16 weights (the CPU sums an F16 matmul of one row in
 *     another order than of several), bit for bit with the same model quantized to Q8_0 by
 *     weft (forward.h: a row's result is then batch-independent);
 *   - the engine (the Q8_0 model): more requests than state slots, and requests preempted
 *     (swapped, recomputed) give each one's outputs and logprobs alone, bit for bit, and leave
 *     every slot free;
 *   - prefix hits restore state checkpoints and continue as cold runs do, bit for bit. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/engine.h"
#include "core/forward.h"
#include "core/kv.h"
#include "core/model_impl.h"
#include "core/session.h"
#include "tests/check.h"
#include "tools/cli.h"

#define BT WEFT_KV_BLOCK_TOKENS
#define NSEQ 8
#define NDEC 24
#define MAXP 80

static struct weft_backend *be;
static struct weft_model *m;          /* the model the case runs on */
static struct weft_model *m16, *m8;   /* the F16 file; weft's Q8_0 of it */

/* ---- the pool alone ---- */

static const bool state_layers[4] = {true, true, true, false};

static void fill(struct weft_kv_pool *kv, const struct weft_kv_seq *s, unsigned char v)
{
    unsigned char buf[3 * 512];
    memset(buf, v, sizeof buf);
    const struct weft_kv_part *p = &kv->sparts[0];
    CHECK(p->be->iface->buffer_write(p->buf, (size_t)(s->state - 1) * p->block_bytes, buf, sizeof buf) == WEFT_OK);
}

static bool holds(struct weft_kv_pool *kv, const struct weft_kv_seq *s, unsigned char v)
{
    unsigned char buf[3 * 512];
    const struct weft_kv_part *p = &kv->sparts[0];
    CHECK(p->be->iface->buffer_read(p->buf, (size_t)(s->state - 1) * p->block_bytes, buf, sizeof buf) == WEFT_OK);
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != v) return false;
    return true;
}

static void state_slots_in_the_pool(void)
{
    struct weft_kv_config c = {.n_layer = 4, .n_kv_head = 2, .head_dim = 32, .n_blocks = 16, .n_host_blocks = 16,
                               .type = WEFT_TYPE_F16, .prefix_cache = true, .state_layer = state_layers,
                               .state_layer_bytes = 512, .n_state_slots = 2};
    struct weft_kv_pool kv;
    CHECK_MSG(weft_kv_pool_create(&kv, be, &c) == WEFT_OK, "%s", weft_last_error());
    CHECK(!kv.prefix_cache);                                     /* none until checkpoints */
    CHECK_EQ_INT(kv.block_bytes, weft_kv_block_layer_bytes(WEFT_TYPE_F16, 2, 32) * 2);  /* one layer's K and V */
    for (uint32_t l = 0; l < 4; l++) {
        CHECK(weft_kv_layer_state(&kv, l) == state_layers[l]);
        CHECK((weft_kv_layer_view(&kv, l).buf != NULL) == !state_layers[l]);
        struct weft_kv_state_view sv = weft_kv_state_view(&kv, l);
        CHECK((sv.buf != NULL) == state_layers[l]);
        if (sv.buf) CHECK(sv.offset == l * 512 && sv.stride == 3 * 512 && sv.n_slots == 2);
    }
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = i + 3;
    struct weft_kv_seq a = {0}, b = {0}, x = {0};
    CHECK_EQ_INT(weft_kv_seq_match_prefix(&kv, &a, toks, 64), 0);
    CHECK(weft_kv_seq_reserve(&kv, &a, 20) == WEFT_OK && a.state);
    CHECK(holds(&kv, &a, 0));
    fill(&kv, &a, 0xab);
    weft_kv_seq_commit(&kv, &a, toks, 20);
    struct weft_kv_stats st;
    weft_kv_stats(&kv, &st);
    CHECK_EQ_INT(st.state_used, 1);
    CHECK_EQ_INT(st.state_bytes_per_seq, 3 * 512);
    /* a slot given back comes back zeroed */
    weft_kv_seq_release(&kv, &a);
    CHECK(weft_kv_seq_reserve(&kv, &a, 20) == WEFT_OK && holds(&kv, &a, 0));
    CHECK(weft_kv_seq_reserve(&kv, &b, 20) == WEFT_OK && b.state && b.state != a.state);
    /* both slots held: a third sequence is refused and takes nothing */
    uint32_t avail = weft_kv_available(&kv);
    CHECK(weft_kv_seq_reserve(&kv, &x, 20) == WEFT_ERR_NO_ROOM && strstr(weft_last_error(), "state slots"));
    CHECK(x.n_blocks == 0 && x.state == 0 && weft_kv_available(&kv) == avail);
    /* longer sequences: the same bytes each */
    CHECK(weft_kv_seq_reserve(&kv, &a, 64) == WEFT_OK);
    weft_kv_stats(&kv, &st);
    CHECK_EQ_INT(st.state_used, 2);
    CHECK_EQ_INT(st.state_bytes_per_seq, 3 * 512);
    /* swapped out: its slot serves another; back only when one is free, with its bytes */
    fill(&kv, &a, 0x5c);
    int32_t was = a.state;
    CHECK(weft_kv_seq_swap_out(&kv, &a) == WEFT_OK && a.swapped && a.state == 0);
    CHECK(weft_kv_seq_reserve(&kv, &x, 20) == WEFT_OK && x.state == was && holds(&kv, &x, 0));
    fill(&kv, &x, 0x11);
    CHECK(weft_kv_seq_swap_in(&kv, &a) == WEFT_ERR_NO_ROOM && a.swapped && a.state == 0);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    int32_t bslot = b.state;
    weft_kv_seq_release(&kv, &b);
    CHECK(weft_kv_seq_swap_in(&kv, &a) == WEFT_OK && !a.swapped && a.state == bslot);
    CHECK(holds(&kv, &a, 0x5c) && holds(&kv, &x, 0x11));
    weft_kv_stats(&kv, &st);
    CHECK_EQ_INT(st.state_swaps, 1);
    /* blocks alone cannot resume a hybrid sequence: without checkpoints (no prefix cache)
     * a block reads out, but neither it nor a checkpoint goes in, by name */
    unsigned char *blk = malloc(kv.block_bytes), st_bytes[3 * 512] = {0};
    bool added = false;
    CHECK(weft_kv_block_read(&kv, a.blocks[0], blk) == WEFT_OK);
    CHECK(weft_kv_import(&kv, 0, weft_kv_block_hash(0, toks), toks, blk, kv.block_bytes, &added) ==
              WEFT_ERR_INVALID_ARG && !added && strstr(weft_last_error(), "prefix cache"));
    CHECK(weft_kv_checkpoint_put(&kv, weft_kv_block_hash(0, toks), st_bytes, sizeof st_bytes, &added) ==
              WEFT_ERR_UNSUPPORTED && !added && strstr(weft_last_error(), "checkpoints"));
    CHECK(weft_kv_checkpoint(&kv, weft_kv_block_hash(0, toks)) == NULL);
    free(blk);
    weft_kv_seq_release(&kv, &a);
    weft_kv_seq_release(&kv, &x);
    weft_kv_stats(&kv, &st);
    CHECK_EQ_INT(st.state_used, 0);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_kv_pool_free(&kv);
    /* a config without slots is refused */
    c.n_state_slots = 0;
    CHECK(weft_kv_pool_create(&kv, be, &c) == WEFT_ERR_INVALID_ARG);
}

/* ---- the forward pass, teacher-forced ---- */

struct tseq {
    int32_t toks[MAXP + NDEC];     /* the prompt, then the forced continuation */
    uint32_t n_prompt;
    double lp[NDEC][5];            /* alone: the logprobs of its top 5 at each decode step */
    int32_t top[NDEC][5];
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t draw(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % n;
}

static double lse_of(const float *lg, uint32_t n)
{
    double mx = lg[0], s = 0;
    for (uint32_t i = 1; i < n; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (uint32_t i = 0; i < n; i++) s += exp(lg[i] - mx);
    return mx + log(s);
}

/* the logits after the prompt and each forced token, one step at a time, alone */
static void run_alone(struct tseq *t)
{
    const uint32_t V = m->hp.n_vocab;
    struct weft_session *s = NULL;
    CHECK_MSG(weft_session_init(m, 256, 64, &s) == WEFT_OK, "%s", weft_last_error());
    if (!s) return;
    const float *lg = NULL;
    CHECK(weft_session_eval(s, t->toks, t->n_prompt, &lg) == WEFT_OK);
    for (uint32_t d = 0; d < NDEC && lg; d++) {
        double lse = lse_of(lg, V);
        for (int k = 0; k < 5; k++) {  /* the top 5 */
            int32_t best = -1;
            for (uint32_t i = 0; i < V; i++) {
                bool taken = false;
                for (int j = 0; j < k; j++) taken |= t->top[d][j] == (int32_t)i;
                if (!taken && (best < 0 || lg[i] > lg[best])) best = (int32_t)i;
            }
            t->top[d][k] = best;
            t->lp[d][k] = lg[best] - lse;
        }
        if (d + 1 < NDEC) CHECK(weft_session_eval(s, &t->toks[t->n_prompt + d], 1, &lg) == WEFT_OK);
    }
    weft_session_free(s);
}

static double compare(const struct tseq *t, uint32_t d, const float *lg)
{
    const double lse = lse_of(lg, m->hp.n_vocab);
    double worst = 0;
    for (int k = 0; k < 5; k++) {
        double e = fabs(lg[t->top[d][k]] - lse - t->lp[d][k]);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Eight sequences (a ninth borrowing the swapped one's slot), in steps of at most one
 * block-aligned 16-token prefill chunk or one decode row each; sequence 0 is swapped out for
 * steps [swap_at, swap_at + 4) while sequence 8 starts in its slot. */
static void concurrent_on(const char *what, double tol)
{
    static struct tseq ts[NSEQ + 1];
    for (uint32_t i = 0; i <= NSEQ; i++) {
        ts[i].n_prompt = 5 + draw(MAXP - 5);
        ts[i].toks[0] = 1;
        for (uint32_t k = 1; k < ts[i].n_prompt + NDEC; k++) ts[i].toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
        run_alone(&ts[i]);
    }
    struct weft_kv_config kc = {.n_kv_head = m->hp.n_head_kv, .head_dim = m->hp.head_dim,
                                .head_dim_v = m->hp.head_dim_v, .n_blocks = 64, .n_host_blocks = 16,
                                .type = WEFT_TYPE_F16, .n_state_slots = NSEQ};
    weft_forward_kv_parts(m, &kc);
    struct weft_kv_pool kv;
    CHECK_MSG(weft_kv_pool_create(&kv, be, &kc) == WEFT_OK, "%s", weft_last_error());
    struct weft_forward *fw = NULL;
    CHECK_MSG(weft_forward_init(m, &kv, 256, NSEQ, 16, &fw) == WEFT_OK, "%s", weft_last_error());
    if (!fw) {
        weft_kv_pool_free(&kv);
        return;
    }
    struct weft_kv_seq ks[NSEQ + 1] = {0};
    uint32_t done[NSEQ + 1] = {0}, start[NSEQ + 1];   /* tokens computed; the step a sequence starts */
    for (uint32_t i = 0; i <= NSEQ; i++) start[i] = i < NSEQ ? i / 2 : 4;  /* staggered: prefill beside decode */
    const uint32_t swap_at = 3;
    double worst = 0;
    uint32_t checked = 0, mixed = 0;
    for (uint32_t step = 0; step < 200; step++) {
        if (step == swap_at) CHECK(weft_kv_seq_swap_out(&kv, &ks[0]) == WEFT_OK);
        if (step == swap_at + 4) {
            /* sequence 8 is done by now; its slot comes back to sequence 0 */
            CHECK_EQ_INT(done[NSEQ], ts[NSEQ].n_prompt + NDEC - 1);
            weft_kv_seq_release(&kv, &ks[NSEQ]);
            CHECK(weft_kv_seq_swap_in(&kv, &ks[0]) == WEFT_OK);
        }
        struct weft_fwd_seq fs[NSEQ];
        uint32_t who[NSEQ], n = 0, prefill = 0, decode = 0;
        for (uint32_t i = 0; i <= NSEQ && n < NSEQ; i++) {
            const struct tseq *t = &ts[i];
            const uint32_t total = t->n_prompt + NDEC - 1;
            if (step < start[i] || done[i] == total || ks[i].swapped) continue;
            if (i == NSEQ && step < swap_at + 1) continue;      /* the borrower starts after the swap */
            if (i == NSEQ && step >= swap_at + 4) continue;
            /* a prefill chunk ends on a block boundary or at the prompt's end */
            uint32_t len = done[i] < t->n_prompt ? BT - done[i] % BT : 1;
            if (done[i] < t->n_prompt && done[i] + len > t->n_prompt) len = t->n_prompt - done[i];
            if (i == NSEQ) len = total - done[i] < 64 ? total - done[i] : 64;  /* the borrower in big chunks */
            CHECK(weft_kv_seq_reserve(&kv, &ks[i], done[i] + len) == WEFT_OK);
            fs[n] = (struct weft_fwd_seq){.tokens = t->toks + done[i], .n_tokens = len, .pos0 = done[i],
                                          .kv = &ks[i], .want_logits = done[i] + len >= t->n_prompt};
            who[n++] = i;
            if (done[i] < t->n_prompt) prefill++;
            else decode++;
        }
        if (!n) break;
        mixed += prefill && decode;
        const float *lg = NULL;
        uint32_t n_lg = 0;
        CHECK_MSG(weft_forward_step(fw, fs, n, &lg, &n_lg) == WEFT_OK, "%s", weft_last_error());
        if (!lg) break;
        for (uint32_t j = 0, o = 0; j < n; j++) {
            const uint32_t i = who[j];
            done[i] += fs[j].n_tokens;
            if (!fs[j].want_logits) continue;
            const uint32_t d = done[i] - ts[i].n_prompt;   /* logits after the prompt and d forced tokens */
            if (i < NSEQ || d + 1 == NDEC) {
                double e = compare(&ts[i], d, lg + (size_t)o * m->hp.n_vocab);
                worst = e > worst ? e : worst;
                CHECK_MSG(e <= tol, "%s: sequence %u, decode step %u: logprob error %.4g", what, i, d, e);
                checked++;
            }
            o++;
        }
    }
    for (uint32_t i = 0; i < NSEQ; i++) CHECK_EQ_INT(done[i], ts[i].n_prompt + NDEC - 1);
    printf("  %s: %u sequences (+1 in a swapped one's slot): %u steps checked against alone, worst logprob "
           "error %.2g; %u steps mixed prefill and decode rows\n", what, NSEQ, checked, worst, mixed);
    CHECK(mixed > 0);
    struct weft_kv_stats st;
    weft_kv_stats(&kv, &st);
    CHECK_EQ_INT(st.state_swaps, 1);
    CHECK_EQ_INT(st.state_used, NSEQ);
    for (uint32_t i = 0; i <= NSEQ; i++) weft_kv_seq_release(&kv, &ks[i]);
    CHECK(weft_kv_check(&kv) == WEFT_OK);
    weft_forward_free(fw);
    weft_kv_pool_free(&kv);
}

static void concurrent_sequences_match_alone(void)
{
    m = m16;
    concurrent_on("F16", 0.1);
    m = m8;
    if (m8) concurrent_on("Q8_0", 0);
}

/* ---- the engine ---- */

#define NREQ 12
#define NGEN 20

struct out {
    int32_t ids[NGEN];
    float lp[NGEN];
    uint32_t n, n_cached;
    bool done;
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    if (ev->has_token && o->n < NGEN) {
        o->lp[o->n] = ev->token.logprob;
        o->ids[o->n++] = ev->token.id;
    }
    if (ev->finish != WEFT_FINISH_NONE) {
        CHECK_MSG(ev->finish != WEFT_FINISH_ERROR, "request failed: %s", ev->message ? ev->message : "?");
        o->n_cached = ev->n_cached;
        o->done = true;
    }
}

static void submit(struct weft_engine *e, const struct tseq *t, struct out *o)
{
    memset(o, 0, sizeof *o);
    struct weft_request rq = {.prompt = t->toks, .n_prompt = t->n_prompt, .max_tokens = NGEN, .ignore_eos = true,
                              .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    rq.sampling.n_logprobs = 1;
    uint64_t id;
    CHECK_MSG(weft_engine_submit(e, &rq, &id) == WEFT_OK, "%s", weft_last_error());
}

static struct weft_engine *engine(uint32_t kv_blocks, uint32_t kv_mib, bool no_swap)
{
    struct weft_engine_config c = {.n_ctx = 256, .max_step_tokens = 64, .max_seqs = NREQ, .kv_blocks = kv_blocks,
                                   .kv_mib = kv_mib, .no_swap = no_swap};
    struct weft_engine *e = NULL;
    CHECK_MSG(weft_engine_create(m, &c, &e) == WEFT_OK, "%s", weft_last_error());
    return e;
}

static void engine_requests_match_alone(void)
{
    m = m8;
    if (!m) return;
    static struct tseq ts[NREQ];
    static struct out alone[NREQ], many[NREQ];
    for (uint32_t i = 0; i < NREQ; i++) {
        ts[i].n_prompt = 5 + draw(60);
        ts[i].toks[0] = 1;
        for (uint32_t k = 1; k < ts[i].n_prompt; k++) ts[i].toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
    }
    struct weft_engine *e = engine(0, 0, false);
    if (!e) return;
    for (uint32_t i = 0; i < NREQ; i++) {
        submit(e, &ts[i], &alone[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK && alone[i].done);
    }
    weft_engine_free(e);
    /* all at once: with room for all; with fewer state slots than requests (kv_mib 1: half of it
     * holds 8 of this model's 57 KiB states); with a pool so small that sequences are preempted,
     * swapped or recomputed */
    static const struct { uint32_t blocks, mib; bool no_swap; const char *what; } modes[] = {
        {0, 0, false, "room for all"}, {0, 1, false, "slots for a few"}, {12, 0, false, "preempted, swapped"},
        {12, 0, true, "preempted, recomputed"}};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        e = engine(modes[k].blocks, modes[k].mib, modes[k].no_swap);
        if (!e) return;
        for (uint32_t i = 0; i < NREQ; i++) submit(e, &ts[i], &many[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK);
        double worst = 0;
        uint32_t differ = 0;
        for (uint32_t i = 0; i < NREQ; i++) {
            CHECK(many[i].done && many[i].n == NGEN);
            differ += memcmp(many[i].ids, alone[i].ids, sizeof many[i].ids) != 0;
            for (uint32_t t = 0; t < NGEN && many[i].ids[t] == alone[i].ids[t]; t++) {
                double d = fabs(many[i].lp[t] - alone[i].lp[t]);
                worst = d > worst ? d : worst;
            }
        }
        struct weft_engine_stats st;
        weft_engine_stats(e, &st);
        printf("  engine, %s: %u state slots, %llu swapped, %llu recomputed (%llu states to host); %u of %u "
               "outputs differ from alone, worst logprob error %.2g\n", modes[k].what, st.kv.n_state_slots,
               (unsigned long long)st.preempt_swap, (unsigned long long)st.preempt_recompute,
               (unsigned long long)st.kv.state_swaps, differ, NREQ, worst);
        CHECK_EQ_INT(differ, 0);
        CHECK(worst == 0);
        CHECK_EQ_INT(st.kv.state_used, 0);
        CHECK_EQ_INT(st.kv.used, 0);
        if (modes[k].mib) CHECK(st.kv.n_state_slots < NREQ);
        if (modes[k].blocks) CHECK(st.preempt_swap + st.preempt_recompute > 0);
        if (modes[k].blocks && !modes[k].no_swap) CHECK(st.kv.state_swaps > 0);
        CHECK(weft_kv_check(weft_engine_kv(e)) == WEFT_OK);
        weft_engine_free(e);
    }
}

/* Prefix caching with state checkpoints (every 32 tokens here): a prompt's state is
 * checkpointed at each 32-token boundary its chunks end at (the scheduler cuts them there); a
 * later prompt sharing its first 100 tokens restores the checkpoint at 96 (the hit stops at
 * the last checkpoint, not the last full block), one sharing 40 the one at 32, and each
 * continues as it does cold (a fresh engine without a prefix cache): the same ids, the same
 * logprobs (Q8_0: bit for bit). A bound of a few checkpoints replaces the oldest. */
static void prefix_hits_restore_state_checkpoints(void)
{
    m = m8;
    if (!m) return;
    static struct tseq a, b, c;
    a.n_prompt = 100;
    a.toks[0] = 1;
    for (uint32_t k = 1; k < a.n_prompt; k++) a.toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
    b = a;
    b.n_prompt = 104;
    for (uint32_t k = 100; k < b.n_prompt; k++) b.toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
    c = a;
    for (uint32_t k = 40; k < c.n_prompt; k++) c.toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
    const struct tseq *ts[3] = {&a, &b, &c};
    static struct out cold[3], warm[3];
    struct weft_engine_config cc = {.n_ctx = 256, .max_step_tokens = 64, .max_seqs = 4, .no_prefix_cache = true};
    struct weft_engine *e = NULL;
    CHECK_MSG(weft_engine_create(m, &cc, &e) == WEFT_OK, "%s", weft_last_error());
    if (!e) return;
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    CHECK_EQ_INT(st.kv.n_ckpts, 0);  /* no prefix cache: no checkpoints */
    for (int i = 0; i < 3; i++) {
        submit(e, ts[i], &cold[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK && cold[i].done);
    }
    weft_engine_free(e);
    cc.no_prefix_cache = false;
    cc.state_ckpt_tokens = 32;
    cc.state_ckpt_tokens = 32;
    CHECK_MSG(weft_engine_create(m, &cc, &e) == WEFT_OK, "%s", weft_last_error());
    if (!e) return;
    const uint32_t want_cached[3] = {0, 96, 32};
    for (int i = 0; i < 3; i++) {
        submit(e, ts[i], &warm[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK && warm[i].done);
        weft_engine_stats(e, &st);
        CHECK_MSG(warm[i].n_cached == want_cached[i], "request %d: %u cached, not %u", i, warm[i].n_cached,
                  want_cached[i]);
        CHECK_MSG(!memcmp(warm[i].ids, cold[i].ids, sizeof warm[i].ids) && !memcmp(warm[i].lp, cold[i].lp, sizeof warm[i].lp),
                  "request %d: not the cold run's ids and logprobs", i);
    }
    /* a: 32, 64, 96 (its chunks cut there); b: none of its own (it ends at 124); c: 64, 96 */
    printf("  checkpoints every %u tokens: %llu stored, %llu restored, %u held of %u (%llu bytes each)\n",
           st.kv.ckpt_every, (unsigned long long)st.kv.ckpts_stored, (unsigned long long)st.kv.ckpt_hits,
           st.kv.ckpts_used, st.kv.n_ckpts, (unsigned long long)st.kv.ckpt_bytes);
    CHECK_EQ_INT(st.kv.ckpt_hits, 2);
    CHECK_EQ_INT(st.kv.ckpts_stored, 5);
    CHECK_EQ_INT(st.kv.ckpt_bytes, st.kv.state_bytes_per_seq);
    CHECK(st.kv.state_used == 0 && st.kv.used == 0 && weft_kv_check(weft_engine_kv(e)) == WEFT_OK);
    weft_engine_free(e);
    /* a bound of 1 MiB: 18 of this model's checkpoints; more prompts replace the oldest */
    cc.state_ckpt_tokens = 16;
    cc.state_ckpt_mib = 1;
    CHECK_MSG(weft_engine_create(m, &cc, &e) == WEFT_OK, "%s", weft_last_error());
    if (!e) return;
    for (int i = 0; i < 3; i++) {
        submit(e, ts[i], &warm[i]);
        CHECK(weft_engine_run_all(e) == WEFT_OK && warm[i].done);
        CHECK(!memcmp(warm[i].ids, cold[i].ids, sizeof warm[i].ids));
    }
    for (int i = 0; i < 2; i++) {  /* two more prompts of their own: 7 checkpoints each */
        static struct tseq d;
        static struct out od;
        d = a;
        for (uint32_t k = 1; k < d.n_prompt; k++) d.toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
        submit(e, &d, &od);
        CHECK(weft_engine_run_all(e) == WEFT_OK && od.done);
    }
    weft_engine_stats(e, &st);
    printf("  a bound of %u checkpoints: %llu stored, %llu replaced\n", st.kv.n_ckpts,
           (unsigned long long)st.kv.ckpts_stored, (unsigned long long)st.kv.ckpts_replaced);
    CHECK(st.kv.ckpts_used == st.kv.n_ckpts && st.kv.ckpts_replaced > 0);
    weft_engine_free(e);
    /* not a multiple of the block: refused by name */
    cc.state_ckpt_tokens = 40;
    CHECK(weft_engine_create(m, &cc, &e) == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "multiple of 16"));
}

/* The blocks of an exported prefix: each block's flags, in order (n at most 64). */
static uint32_t stream_flags(const unsigned char *buf, size_t n, uint32_t *flags)
{
    struct weft_kvb_header h;
    if (weft_kvb_read_header(buf, n, &h) != WEFT_OK) return 0;
    size_t off = h.header_bytes;
    uint32_t k = 0;
    while (off < n && k < 64) {
        struct weft_kvb_block b;
        if (weft_kvb_read_block(&h, NULL, buf + off, n - off, &b) != WEFT_OK) return 0;
        flags[k++] = b.flags;
        off += weft_kvb_record_bytes_flags(&h, b.flags);
    }
    return k;
}

/* A stream with every state checkpoint left out (its blocks as they were). */
static size_t strip_checkpoints(const unsigned char *buf, size_t n, unsigned char *out)
{
    struct weft_kvb_header h;
    if (weft_kvb_read_header(buf, n, &h) != WEFT_OK) return 0;
    memcpy(out, buf, h.header_bytes);
    size_t off = h.header_bytes, o = h.header_bytes;
    while (off < n) {
        struct weft_kvb_block b;
        if (weft_kvb_read_block(&h, NULL, buf + off, n - off, &b) != WEFT_OK) return 0;
        weft_kvb_write_block(&h, NULL, b.parent, b.hash, b.tokens, b.flags & ~WEFT_KVB_BLOCK_STATE, b.payload, NULL,
                             out + o);
        off += weft_kvb_record_bytes_flags(&h, b.flags);
        o += weft_kvb_record_bytes(&h);
    }
    return o;
}

/* Stage (c): a prefix exported from one engine carries its state checkpoints (every 32
 * tokens and at the prompt's last full block, 80 of 90); another engine that imports it
 * resumes from the last one and answers as a cold run, to the bit. Without the checkpoints
 * the blocks alone are no hit; a checkpoint's corrupted byte is refused. */
static void checkpoints_travel_with_their_blocks(void)
{
    m = m8;
    if (!m) return;
    static struct tseq a;
    a.n_prompt = 90;
    a.toks[0] = 1;
    for (uint32_t k = 1; k < a.n_prompt; k++) a.toks[k] = 3 + (int32_t)draw(m->hp.n_vocab - 3);
    static struct out cold, src, warm;
    struct weft_engine_config cc = {.n_ctx = 256, .max_step_tokens = 64, .max_seqs = 4, .no_prefix_cache = true};
    struct weft_engine *e = NULL, *f = NULL;
    CHECK_MSG(weft_engine_create(m, &cc, &e) == WEFT_OK, "%s", weft_last_error());
    if (!e) return;
    submit(e, &a, &cold);
    CHECK(weft_engine_run_all(e) == WEFT_OK && cold.done);
    weft_engine_free(e);
    cc.no_prefix_cache = false;
    cc.state_ckpt_tokens = 32;
    CHECK(weft_engine_create(m, &cc, &e) == WEFT_OK && weft_engine_create(m, &cc, &f) == WEFT_OK);
    if (!e || !f) goto out;
    submit(e, &a, &src);
    CHECK(weft_engine_run_all(e) == WEFT_OK && src.done && !memcmp(src.ids, cold.ids, sizeof src.ids));
    unsigned char *buf = NULL, *bare = NULL;
    size_t n = 0;
    uint32_t nb = 0, flags[64], added = 0;
    CHECK_MSG(weft_engine_kv_export_prefix(e, a.toks, a.n_prompt, &buf, &n, &nb) == WEFT_OK, "%s", weft_last_error());
    CHECK_EQ_INT(nb, 5);  /* 5 full blocks: 80 tokens */
    CHECK_EQ_INT(stream_flags(buf, n, flags), 5);
    for (uint32_t i = 0; i < 5; i++)  /* the blocks ending at 32, 64 and 80 carry theirs */
        CHECK_MSG(!!(flags[i] & WEFT_KVB_BLOCK_STATE) == (i == 1 || i == 3 || i == 4), "block %u: flags %#x", i,
                  flags[i]);
    struct weft_engine_stats st;
    weft_engine_stats(e, &st);
    struct weft_kvb_header h;
    CHECK(weft_kvb_read_header(buf, n, &h) == WEFT_OK && h.state_bytes == st.kv.ckpt_bytes);
    struct weft_engine_kv_stats io;
    weft_engine_kv_stats(e, &io);
    CHECK_EQ_INT(io.ckpts_out, 3);
    /* a hand-off's export: only the checkpoint it resumes from (the last block's) */
    {
        uint64_t hs[5], x = 0;
        unsigned char *one = NULL;
        size_t n1 = 0;
        uint32_t nb1 = 0;
        for (uint32_t i = 0; i < 5; i++) hs[i] = x = weft_kv_block_hash(x, a.toks + 16 * i);
        CHECK(weft_engine_kv_export_hashes_ckpt(e, hs, 5, hs[4], &one, &n1, &nb1) == WEFT_OK && nb1 == 5);
        CHECK(stream_flags(one, n1, flags) == 5 && n1 == n - 2 * (size_t)h.state_bytes);
        for (uint32_t i = 0; i < 5; i++) CHECK(!!(flags[i] & WEFT_KVB_BLOCK_STATE) == (i == 4));
        free(one);
    }
    /* the blocks without their checkpoints: taken, but no hit */
    bare = malloc(n);
    size_t nbare = bare ? strip_checkpoints(buf, n, bare) : 0;
    CHECK(nbare == n - 3 * (size_t)h.state_bytes);
    CHECK(weft_engine_kv_import(f, bare, nbare, &added) == WEFT_OK && added == 5);
    submit(f, &a, &warm);
    CHECK(weft_engine_run_all(f) == WEFT_OK && warm.done && warm.n_cached == 0);
    CHECK(!memcmp(warm.ids, cold.ids, sizeof warm.ids));
    weft_engine_free(f);
    f = NULL;
    CHECK(weft_engine_create(m, &cc, &f) == WEFT_OK);
    if (!f) goto out;
    /* a byte of the last checkpoint changed: its block (and the chain after) refused */
    buf[n - 100] ^= 0x40;
    CHECK(weft_engine_kv_import(f, buf, n, &added) == WEFT_ERR_FORMAT && added == 4);
    weft_engine_kv_stats(f, &io);
    CHECK_EQ_INT(io.rejected, 1);
    buf[n - 100] ^= 0x40;
    /* the whole stream: the blocks and 3 checkpoints taken; the prompt resumes at 80 */
    CHECK(weft_engine_kv_import(f, buf, n, &added) == WEFT_OK && added == 1);
    weft_engine_kv_stats(f, &io);
    CHECK_EQ_INT(io.ckpts_in, 3);
    submit(f, &a, &warm);
    CHECK(weft_engine_run_all(f) == WEFT_OK && warm.done);
    CHECK_MSG(warm.n_cached == 80, "%u cached", warm.n_cached);
    CHECK(!memcmp(warm.ids, cold.ids, sizeof warm.ids) && !memcmp(warm.lp, cold.lp, sizeof warm.lp));
    weft_engine_stats(f, &st);
    CHECK_EQ_INT(st.kv.ckpt_hits, 1);
    CHECK_EQ_INT(st.kv.ckpts_imported, 3);
    printf("  a 90-token prompt's export: %u blocks, 3 checkpoints of %u bytes (%zu bytes); imported, resumed at %u\n",
           nb, h.state_bytes, n, warm.n_cached);
    free(bare);
    free(buf);
out:
    weft_engine_free(e);
    weft_engine_free(f);
}

int main(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/models/arch/qwen35-F16.gguf", WEFT_SHARED_DIR);
    FILE *f = fopen(path, "rb");
    if (!f) SKIP_ALL("no %s", path);
    fclose(f);
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK);
    CHECK_MSG(weft_model_load(path, be, &m16) == WEFT_OK, "%s", weft_last_error());
    if (!m16) return check_summary();
    /* weft quantize's Q8_0 of it (its per-tensor lines to /dev/null) */
    char q8[1200];
    const char *tmp = getenv("TMPDIR");
    snprintf(q8, sizeof q8, "%s/weft-test-qwen35-q8-%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    char *argv[] = {"quantize", path, q8, "Q8_0"};
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    int rc = weft_cmd_quantize(4, argv);
    fflush(stdout);
    if (saved >= 0) { dup2(saved, 1); close(saved); }
    if (null >= 0) close(null);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(rc || weft_model_load(q8, be, &m8) == WEFT_OK, "%s", weft_last_error());
    unlink(q8);
    RUN(state_slots_in_the_pool);
    RUN(concurrent_sequences_match_alone);
    RUN(engine_requests_match_alone);
    RUN(prefix_hits_restore_state_checkpoints);
    RUN(checkpoints_travel_with_their_blocks);
    weft_model_free(m8);
    weft_model_free(m16);
    weft_backend_close(be);
    return check_summary();
}
