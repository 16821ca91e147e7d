#include "core/engine.h"
#include "base/buf.h"
#include "core/model_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/engine_internal.h"
#include "core/forward.h"
#include "core/stop.h"

#define RATE_ALPHA 0.2  /* weight of the newest step in the moving averages */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void ewma(double *avg, double sample)
{
    *avg = *avg > 0 ? *avg + RATE_ALPHA * (sample - *avg) : sample;
}

/* Attribute one step's time (lock held): a step of decodes only measures the
 * decode rate; a step that is mostly prefill measures the prefill rate, with
 * its decode rows' share taken out at the decode rate when that is known. */
static void measure_step(struct weft_engine *e, uint32_t prefill, uint32_t decode, double dt)
{
    if (dt <= 0) return;
    if (prefill == 0 && decode > 0) {
        ewma(&e->decode_tps, decode / dt);
        ewma(&e->decode_row_tps, 1.0 / dt);
        e->decode_rows = decode;
        weft_step_fit_add(&e->decode_fit, decode, dt);
        return;
    }
    if (prefill == 0) return;
    /* a step of a few prompt tokens (the last one after a prefix hit or a
     * fetch from the remote tier) costs mostly its fixed part: it would make
     * computing a block look far slower than it is, so it only counts while
     * nothing better has been measured */
    if (prefill < WEFT_KV_BLOCK_TOKENS && e->prefill_tps > 0) return;
    double t = dt, fixed, row;
    if (decode && weft_step_fit_get(&e->decode_fit, &fixed, &row)) t -= fixed + row * decode;
    if (t < dt * 0.25) {
        if (prefill < 4 * decode) return;  /* mostly decode: says little about prefill */
        t = dt;
    }
    ewma(&e->prefill_tps, prefill / t);
}

#define BT WEFT_KV_BLOCK_TOKENS

/* Lower-priority prompts always get this many tokens of a step (low_prefill_ms) */
#define LOW_PREFILL_MIN 16

/* low_prefill_ms in tokens at the measured prefill rate (lock held) */
static void size_low_prefill(struct weft_engine *e)
{
    if (!e->cfg.low_prefill_ms) return;
    double t = e->prefill_tps * e->cfg.low_prefill_ms / 1000.0;
    uint32_t n = t > LOW_PREFILL_MIN ? (t < 1e6 ? (uint32_t)t : 1000000u) : LOW_PREFILL_MIN;
    weft_sched_set_low_prefill(e->sched, n);
}

/* The cost model of the next step (lock held): the decode rows' cost fitted
 * to the measured decode steps (a fixed part and one per row), the measured
 * prompt-token cost, and the ITL target: itl_target_ms, strict; auto, a step
 * with prompt tokens costs at most ITL_AUTO_FACTOR times its decode rows
 * alone (so ITL's tail stays within that factor of its median), with the
 * prompt backlog spread over at most ITL_SPREAD_STEPS steps (so prompts keep
 * pace with arrivals where prefill is slow for the decode step, and
 * throughput is not traded for smoothness). 2 and 16: bench/itl.sh's
 * variants on the serve workload (README "Smooth streams").
 * Unmeasured: no limit. */
#ifndef ITL_AUTO_FACTOR  /* -D overrides: for bench/itl.sh comparisons */
#define ITL_AUTO_FACTOR 2.0
#endif
#ifndef ITL_SPREAD_STEPS
#define ITL_SPREAD_STEPS 16
#endif
static void set_step_cost(struct weft_engine *e)
{
    struct weft_sched_cost c = {0};
    if (weft_step_fit_get(&e->decode_fit, &c.decode_fixed_s, &c.decode_row_s) && e->prefill_tps > 0) {
        c.prefill_token_s = 1.0 / e->prefill_tps;
        if (e->cfg.itl_target_ms > 0) c.target_s = e->cfg.itl_target_ms / 1000.0;
        else if (e->cfg.itl_target_ms == 0) {
            c.target_factor = ITL_AUTO_FACTOR;
            c.spread_steps = ITL_SPREAD_STEPS;
        }
    }
    weft_sched_set_cost(e->sched, &c);
}

weft_status weft_engine_create(const struct weft_model *m, const struct weft_engine_config *cfg,
                               struct weft_engine **out)
{
    *out = NULL;
    struct weft_engine_config c = cfg ? *cfg : (struct weft_engine_config){0};
    if (!c.n_ctx) c.n_ctx = m->hp.n_ctx_train;
    if (!c.max_step_tokens) c.max_step_tokens = 512;
    if (!c.max_seqs) c.max_seqs = 64;
    if (c.max_seqs > c.max_step_tokens) c.max_seqs = c.max_step_tokens;
    if (!c.max_waiting) c.max_waiting = 1024;
    if (!c.kv_mib) c.kv_mib = 1024;
    if (c.kv_type == WEFT_TYPE_F32) c.kv_type = WEFT_TYPE_F16;
    if (c.state_ckpt_tokens % BT)
        return weft_error(WEFT_ERR_INVALID_ARG, "engine: state checkpoints every %u tokens: a multiple of %d (the block "
                          "size) is needed", c.state_ckpt_tokens, BT);
    const struct weft_hparams *hp = &m->hp;
    uint32_t ctx_blocks = (c.n_ctx + BT - 1) / BT;
    /* the model's block (every layer, K and V): device and host tiers are sized in it */
    size_t lb = weft_kv_block_layer_bytes(c.kv_type, hp->n_head_kv, hp->head_dim) +
                weft_kv_block_layer_bytes(c.kv_type, hp->n_head_kv, hp->head_dim_v);
    /* a sliding layer's, when its shape is its own (Gemma 4) */
    const bool wshape = hp->head_dim_swa || hp->n_head_kv_swa;
    size_t wlb = lb;
    uint32_t n_kv_win = 0;  /* sliding layers that keep K/V */
    for (uint32_t l = 0; l < hp->n_layer; l++)
        n_kv_win += weft_hp_window(hp, l) && !weft_hp_recurrent(hp, l) && weft_hp_kv_source(hp, l) == l;
    if (wshape) {
        for (uint32_t l = 0; l < hp->n_layer; l++)
            if (weft_hp_window(hp, l)) {
                wlb = weft_kv_block_layer_bytes(c.kv_type, weft_hp_n_head_kv(hp, l), weft_hp_head_dim(hp, l)) +
                      weft_kv_block_layer_bytes(c.kv_type, weft_hp_n_head_kv(hp, l), weft_hp_head_dim_v(hp, l));
                break;
            }
    }
    /* every layer's K/V (a hybrid's recurrent layers keep none, nor do layers reading another's) */
    size_t bb = (size_t)(weft_hp_kv_layers(hp) - n_kv_win) * lb + (size_t)n_kv_win * wlb;
    /* a hybrid's recurrent state: a slot per running sequence, within half of kv_mib (the
     * running sequences are bounded by the slots) */
    uint32_t n_slots = 0;
    if (hp->full_attn_interval && !c.mock_prefill_tps) {
        const uint64_t slot = (uint64_t)weft_hp_state_layer_bytes(hp) * (hp->n_layer - weft_hp_kv_layers(hp));
        const uint64_t budget = ((uint64_t)c.kv_mib << 20) / 2, fit = slot ? budget / slot : c.max_seqs;
        n_slots = fit < c.max_seqs ? (uint32_t)(fit ? fit : 1) : c.max_seqs;
        if (n_slots < c.max_seqs) c.max_seqs = n_slots;  /* the state slots (metrics) bound it */
        bb = bb ? bb : 1;
    }
    size_t state_take = (size_t)n_slots * (hp->full_attn_interval ? weft_hp_state_layer_bytes(hp) *
                                                                     (hp->n_layer - weft_hp_kv_layers(hp)) : 0);
    /* sliding-window layers in their own group: its blocks first (what
     * max_seqs windows and a step's new blocks take, twice over so that the
     * prefix cache keeps windows too; at least one sequence's), then the
     * main group's blocks in the rest of kv_mib */
    bool mock = c.mock_prefill_tps > 0;
    bool *win_layer = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *win_layer);
    if (!win_layer) return weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
    uint32_t n_win = 0, window = 0, n_wblocks = 0;
    for (uint32_t l = 0; !mock && (!c.swa_full || wshape) && l < hp->n_layer; l++) {
        uint32_t w = weft_hp_window(hp, l);
        if (!w) continue;
        win_layer[l] = true;
        n_win++;
        window = w;
    }
    size_t wbytes = 0;
    if (n_win && window < c.n_ctx && !c.swa_full) {
        uint32_t per_seq = (window + BT - 2) / BT + 1, step = (c.max_step_tokens + BT - 1) / BT + 1;
        uint64_t want = 2 * ((uint64_t)c.max_seqs * per_seq + step), least = per_seq + step;
        wbytes = (size_t)n_kv_win * wlb;
        uint64_t fit = ((uint64_t)c.kv_mib << 20) / 2 / (wbytes ? wbytes : 1);
        n_wblocks = (uint32_t)(want < fit ? want : fit > least ? fit : least);
        bb -= wbytes;
    } else if (n_win && wshape) {
        /* sliding layers of their own shape keep their group, every block of it (a window
         * that drops nothing): one window block per block */
        window = UINT32_MAX;
    } else {
        n_win = window = 0;  /* a window as long as the context: nothing to drop */
    }
    if (!c.kv_blocks) {
        size_t total = ((size_t)c.kv_mib << 20) - state_take, wtake = (size_t)n_wblocks * wbytes;
        size_t budget = wtake < total / 2 ? total - wtake : total / 2;
        size_t n = budget / (bb ? bb : 1);
        size_t all = (size_t)c.max_seqs * ctx_blocks;  /* every sequence at full length */
        if (n > all) n = all;
        if (n < ctx_blocks) n = ctx_blocks;
        if (n > (1u << 24)) n = 1u << 24;
        c.kv_blocks = (uint32_t)n;
    }
    uint32_t host_cache_blocks = 0;
    if (c.host_cache_mib && !c.no_prefix_cache) {
        size_t n = ((size_t)c.host_cache_mib << 20) / (bb + wbytes ? bb + wbytes : 1);
        host_cache_blocks = n > (1u << 24) ? 1u << 24 : (uint32_t)n;
    }
    if (!c.host_blocks && !c.no_swap) c.host_blocks = c.kv_blocks;
    if (c.no_swap) c.host_blocks = 0;

    struct weft_engine *e = calloc(1, sizeof *e);
    if (!e) {
        free(win_layer);
        return weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
    }
    e->m = m;
    e->cfg = c;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->fwd_cv, NULL);
    struct weft_kv_config kc = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv, .head_dim = hp->head_dim,
                                .head_dim_v = hp->head_dim_v, .n_blocks = c.kv_blocks, .n_host_blocks = c.host_blocks, .type = c.kv_type,
                                .prefix_cache = !c.no_prefix_cache, .n_host_cache_blocks = host_cache_blocks,
                                .window = window, .window_layer = n_win ? win_layer : NULL,
                                .n_window_blocks = n_wblocks, .latent = hp->kv_latent, .n_state_slots = n_slots};
    if (mock) {
        /* the real block count, a token payload: one layer of one 8-wide head */
        kc.n_layer = 1;
        kc.n_kv_head = 1;
        kc.head_dim = 8;
        kc.head_dim_v = 0;
        kc.latent = false;
        if (!(c.mock_decode_tps > 0)) c.mock_decode_tps = 50;
    } else {
        weft_forward_kv_parts(m, &kc);
    }
    if (!mock && hp->full_attn_interval && !c.no_prefix_cache) {
        /* a hybrid's prefix cache: state checkpoints every state_ckpt_tokens */
        const uint32_t every = c.state_ckpt_tokens ? c.state_ckpt_tokens : 256, mib = c.state_ckpt_mib ? c.state_ckpt_mib : 256;
        const size_t slot = weft_hp_state_layer_bytes(hp) * (hp->n_layer - weft_hp_kv_layers(hp));
        const uint64_t n = slot ? ((uint64_t)mib << 20) / slot : 0;
        kc.state_ckpt_every = every;
        kc.n_state_ckpts = n > 4096 ? 4096 : (uint32_t)n;  /* kv.c finds them by a scan */
    }
    struct weft_sched_config sc = {.n_ctx = c.n_ctx, .max_step_tokens = c.max_step_tokens,
                                   .max_running = c.max_seqs, .max_waiting = c.max_waiting,
                                   .max_prefill_chunk = c.max_prefill_chunk,
                                   .low_prefill_tokens = c.low_prefill_ms ? LOW_PREFILL_MIN : 0,
                                   .align_chunks = kc.n_state_ckpts ? kc.state_ckpt_every : 0};
    weft_status st = weft_kv_pool_create(&e->kv, m->be, &kc);
    free(win_layer);
    if (st == WEFT_OK) st = weft_sched_create(&sc, &e->kv, &e->sched);
    if (st == WEFT_OK && !mock) st = weft_forward_init(m, &e->kv, c.max_step_tokens, c.max_seqs, ctx_blocks, &e->fw);
    if (st == WEFT_OK) {
        e->fseqs = calloc(c.max_seqs, sizeof *e->fseqs);
        e->cap_events = 2 * c.max_seqs + 16;
        e->events = calloc(e->cap_events, sizeof *e->events);
        if (!e->fseqs || !e->events) st = weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
    }
    if (st != WEFT_OK) {
        weft_engine_free(e);
        return st;
    }
    *out = e;
    return WEFT_OK;
}

static void ereq_free(struct ereq *er)
{
    if (!er) return;
    weft_grammar_state_free(er->gst);
    free(er->gmask);
    weft_sampler_free(er->smp);
    free(er->stop_ids);
    weft_engine_embed_free(er->emb);
    free(er);
}

/* Queue an event for delivery once the lock is released. */
static void emit(struct weft_engine *e, struct ereq *er, const struct weft_sample *tok, enum weft_finish fin,
                 weft_status status)
{
    if (e->n_events == e->cap_events) {
        struct pending_event *p = weft_grow32(e->events, &e->cap_events, (size_t)e->n_events + 1, sizeof *p);
        if (!p) return;  /* cannot happen in practice; the event is lost rather than the engine */
        e->events = p;
    }
    const struct weft_sched_req *r = er->r;
    struct pending_event *pe = &e->events[e->n_events++];
    memset(pe, 0, sizeof *pe);
    pe->cb = er->cb;
    pe->user = er->user;
    pe->ev.id = er->id;
    pe->ev.has_token = tok != NULL;
    if (tok) pe->ev.token = *tok;
    pe->ev.finish = fin;
    pe->ev.status = status;
    pe->ev.n_prompt = r->n_prompt;
    pe->ev.n_cached = r->n_cached;
    pe->ev.n_generated = er->n_generated;
    pe->ev.n_preempt = r->n_preempt;
    pe->ev.queue_seconds = er->queue_seconds > 0 ? er->queue_seconds : 0;
    pe->ev.message = fin == WEFT_FINISH_ERROR ? e->message : NULL;
}

static void flush_events(struct weft_engine *e)
{
    /* the engine thread alone appends events, and only under the lock it
     * released before calling this */
    for (uint32_t i = 0; i < e->n_events; i++) {
        if (e->events[i].cb) e->events[i].cb(e->events[i].user, &e->events[i].ev);
        free(e->events[i].owned);
    }
    e->n_events = 0;
}

/* Final event and release (lock held). */
static void finish(struct weft_engine *e, struct ereq *er, const struct weft_sample *tok, enum weft_finish fin,
                   weft_status status)
{
    emit(e, er, tok, fin, status);
    weft_sched_finish(e->sched, er->r);
    e->finished++;
    if (fin == WEFT_FINISH_ABORT) e->aborted++;
    ereq_free(er);
}

static void reap_aborted(struct weft_engine *e)
{
    if (!e->n_aborted_pending) return;
    struct weft_sched_req *const *q;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t n = pass == 0 ? weft_sched_running(e->sched, &q) : weft_sched_waiting(e->sched, &q);
        for (uint32_t i = 0; i < n;) {
            struct ereq *er = q[i]->user;
            if (er->aborted) {
                finish(e, er, NULL, WEFT_FINISH_ABORT, WEFT_OK);
                n--;
            } else {
                i++;
            }
        }
    }
    e->n_aborted_pending = 0;
}

void weft_engine_free(struct weft_engine *e)
{
    if (!e) return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        e->wake++;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    if (e->sched) {
        struct weft_sched_req *const *q;
        while (weft_sched_running(e->sched, &q) || weft_sched_waiting(e->sched, &q)) {
            finish(e, q[0]->user, NULL, WEFT_FINISH_ABORT, WEFT_OK);
            if (e->n_events == e->cap_events) flush_events(e);
        }
        flush_events(e);
        weft_sched_free(e->sched);
    }
    weft_forward_free(e->fw);
    weft_grammar_vocab_free(e->gvocab);
    if (e->kv.buf) weft_kv_pool_free(&e->kv);
    free(e->fseqs);
    free(e->events);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->fwd_cv);
    pthread_cond_destroy(&e->cv);
    free(e);
}

weft_status weft_engine_tenant(struct weft_engine *e, const char *name, const struct weft_tenant_limits *lim)
{
    uint32_t idx;
    pthread_mutex_lock(&e->mu);
    weft_status st = weft_sched_tenant(e->sched, name, lim, &idx);
    pthread_mutex_unlock(&e->mu);
    return st;
}

bool weft_engine_tenant_prefill(struct weft_engine *e, uint32_t i, char name[WEFT_TENANT_NAME_MAX], uint64_t *tokens)
{
    pthread_mutex_lock(&e->mu);
    bool ok = i < weft_sched_n_tenants(e->sched);
    if (ok) {
        snprintf(name, WEFT_TENANT_NAME_MAX, "%s", weft_sched_tenant_name(e->sched, i));
        *tokens = weft_sched_tenant_prefill(e->sched, i);
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

/* The grammar index, built once (any thread; the first one kept). */
static weft_status grammar_vocab(struct weft_engine *e, struct weft_grammar_vocab **out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->gvocab;
    pthread_mutex_unlock(&e->mu);
    if (*out) return WEFT_OK;
    if (!e->m->tok) return weft_error(WEFT_ERR_UNSUPPORTED, "request: a grammar needs the model's tokenizer");
    struct weft_grammar_vocab *v;
    weft_status st = weft_grammar_vocab_create(e->m->tok, 0, &v);
    if (st != WEFT_OK) return st;
    pthread_mutex_lock(&e->mu);
    if (!e->gvocab) e->gvocab = v;
    else weft_grammar_vocab_free(v);
    *out = e->gvocab;
    pthread_mutex_unlock(&e->mu);
    return WEFT_OK;
}

/* The request's grammar state, with a continuation's generated tokens (the
 * last sample_pos of the prompt) replayed into it. */
static weft_status grammar_start(struct weft_engine *e, struct ereq *er, const struct weft_request *req)
{
    if (req->sample_pos > req->n_prompt)
        return weft_error(WEFT_ERR_INVALID_ARG, "request: sample_pos %u is past the prompt's %u tokens",
                          req->sample_pos, req->n_prompt);
    struct weft_grammar_vocab *v;
    weft_status st = grammar_vocab(e, &v);
    if (st == WEFT_OK) st = weft_grammar_state_new(req->grammar, v, &er->gst);
    if (st != WEFT_OK) return st;
    er->gmask = malloc(weft_grammar_mask_words(v) * sizeof *er->gmask);
    if (!er->gmask) return weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
    for (uint32_t i = req->n_prompt - req->sample_pos; i < req->n_prompt; i++) {
        st = weft_grammar_advance(er->gst, req->prompt[i]);
        if (st == WEFT_ERR_NOMEM) return st;
        if (st != WEFT_OK)
            return weft_error(WEFT_ERR_INVALID_ARG, "request: generated token %u of the continuation (id %d) does "
                              "not fit the grammar", i - (req->n_prompt - req->sample_pos), req->prompt[i]);
    }
    return WEFT_OK;
}

weft_status weft_engine_submit(struct weft_engine *e, const struct weft_request *req, uint64_t *id)
{
    *id = 0;
    if (!req->prompt || req->n_prompt == 0) return weft_error(WEFT_ERR_INVALID_ARG, "request: empty prompt");
    bool embed = req->embed != WEFT_EMBED_NONE;
    if (embed && req->embed != WEFT_EMBED_MEAN && req->embed != WEFT_EMBED_LAST)
        return weft_error(WEFT_ERR_INVALID_ARG, "request: unknown embedding pooling %d", (int)req->embed);
    if (embed && req->grammar) return weft_error(WEFT_ERR_INVALID_ARG, "request: an embedding takes no grammar");
    if (req->max_tokens == 0 && !embed) return weft_error(WEFT_ERR_INVALID_ARG, "request: max_tokens must be at least 1");
    for (uint32_t i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || (uint32_t)req->prompt[i] >= e->m->hp.n_vocab)
            return weft_error(WEFT_ERR_INVALID_ARG, "request: prompt token %d is outside the vocabulary of %u",
                              req->prompt[i], e->m->hp.n_vocab);
    struct ereq *er = calloc(1, sizeof *er);
    if (!er) return weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
    er->cb = req->cb;
    er->t_submit = now_s();
    er->queue_seconds = -1;
    er->user = req->user;
    er->max_tokens = req->max_tokens;
    er->ignore_eos = req->ignore_eos;
    weft_status st = WEFT_OK;
    if (embed) {
        /* nothing is sampled: no sampler, no stop ids */
        if (!(er->emb = weft_engine_embed_new(req->embed, e->m->hp.n_embd))) {
            ereq_free(er);
            return weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
        }
        goto queue;
    }
    st = weft_sampler_init(&req->sampling, (int32_t)e->m->hp.n_vocab, &er->smp);
    if (st == WEFT_OK && req->n_stop_ids) {
        er->stop_ids = malloc(sizeof(int32_t) * req->n_stop_ids);
        if (!er->stop_ids) st = weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
        else memcpy(er->stop_ids, req->stop_ids, sizeof(int32_t) * req->n_stop_ids);
        er->n_stop_ids = req->n_stop_ids;
    }
    if (st != WEFT_OK) {
        ereq_free(er);
        return st;
    }
    if (st == WEFT_OK && req->grammar) st = grammar_start(e, er, req);
    if (st != WEFT_OK) {
        ereq_free(er);
        return st;
    }
    for (uint32_t i = 0; i < req->n_prompt; i++) weft_sampler_accept(er->smp, req->prompt[i]);
    weft_sampler_set_position(er->smp, req->sample_pos);

queue:
    pthread_mutex_lock(&e->mu);
    struct weft_sched_stats ss0;
    weft_sched_stats(e->sched, &ss0);
    if (!ss0.running && !ss0.waiting) e->last_progress = now_s();  /* an idle engine: its clock starts now */
    uint32_t tenant = 0;
    if (req->tenant && req->tenant[0]) st = weft_sched_tenant(e->sched, req->tenant, NULL, &tenant);
    er->id = e->next_id;
    if (st == WEFT_OK)
        st = weft_sched_add(e->sched, er->id, req->prompt, req->n_prompt, embed ? 0 : req->max_tokens, req->priority,
                            tenant, er, &er->r);
    if (st == WEFT_OK && req->embed == WEFT_EMBED_MEAN) er->r->no_prefix_hits = true;  /* it pools every row */
    if (st == WEFT_OK) {
        e->next_id++;
        e->submitted++;
        e->wake++;
        pthread_cond_signal(&e->cv);
        *id = er->id;
    } else {
        e->rejected++;
    }
    pthread_mutex_unlock(&e->mu);
    if (st != WEFT_OK) ereq_free(er);
    return st;
}

weft_status weft_engine_abort(struct weft_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    struct weft_sched_req *r = weft_sched_find(e->sched, id);
    struct ereq *er = r ? r->user : NULL;
    weft_status st = WEFT_OK;
    if (!er || er->aborted) {
        st = weft_error(WEFT_ERR_NOT_FOUND, "engine: no running request %llu", (unsigned long long)id);
    } else {
        er->aborted = true;
        e->n_aborted_pending++;
        e->wake++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

static bool is_stop(const struct weft_engine *e, const struct ereq *er, int32_t id)
{
    return weft_stop_is_token(e->m->tok, er->ignore_eos, er->stop_ids, er->n_stop_ids, id);
}

static void take_sample(struct weft_engine *e, struct ereq *er, struct weft_sample smp);

/* Sample one item's next token and emit it (lock held). With a grammar:
 * the ordinary draw, kept when the grammar allows it; otherwise the mask
 * and a second draw (retry 1) at the same position over the allowed tokens
 * only. For plain sampling (no top-k/top-p/min-p) the two together draw from
 * exactly the masked distribution: P(t) = p(t) + (1 - Z) p(t) / Z = p(t) / Z
 * for an allowed t, Z the allowed tokens' total mass. With truncation the
 * first draw is from the truncated full distribution and the second from the
 * truncation of the masked one (top-k/top-p/min-p then count allowed tokens
 * only). Greedy: the argmax if allowed, else the best allowed token. */
static void sample_item(struct weft_engine *e, struct ereq *er, const float *logits)
{
    struct weft_sample smp;
    if (er->gst && weft_grammar_finished(er->gst)) {   /* a continuation that had already ended */
        finish(e, er, NULL, WEFT_FINISH_STOP, WEFT_OK);
        return;
    }
    uint64_t pos = weft_sampler_position(er->smp);
    weft_status st = weft_sampler_sample(er->smp, logits, &smp);
    const double tg = er->gst ? now_s() : 0;
    if (st == WEFT_OK && er->gst && !weft_grammar_allowed(er->gst, smp.id)) {
        e->grammar_resampled++;
        st = weft_grammar_mask(er->gst, er->gmask);
        weft_sampler_set_position(er->smp, pos);
        if (st == WEFT_OK) st = weft_sampler_sample_masked(er->smp, logits, er->gmask, 1, &smp);
        if (st == WEFT_ERR_INVALID_ARG)
            st = weft_error(WEFT_ERR_INVALID_ARG, "grammar: no token of the vocabulary can continue the text");
    }
    if (er->gst) e->grammar_seconds += now_s() - tg;
    if (st != WEFT_OK) {
        snprintf(e->message, sizeof e->message, "%s", weft_last_error());
        finish(e, er, NULL, WEFT_FINISH_ERROR, st);
        return;
    }
    take_sample(e, er, smp);
}

/* A mock's token (lock held): a function of the sequence's last token and
 * length, skipping control and end-of-generation ids, probability 1. */
static void mock_sample_item(struct weft_engine *e, struct ereq *er)
{
    const struct weft_sched_req *r = er->r;
    uint32_t nv = e->m->hp.n_vocab, n = r->n_tokens;
    uint32_t last = n ? (uint32_t)r->tokens[n - 1] : 0;
    uint32_t id = (uint32_t)((last * 2654435761u + n * 40503u) % nv);
    for (uint32_t k = 0; k < nv && (weft_tokenizer_is_eog(e->m->tok, (int32_t)id) ||
                                    weft_tokenizer_is_control(e->m->tok, (int32_t)id)); k++)
        id = (id + 1) % nv;
    if (er->gst && !weft_grammar_allowed(er->gst, (int32_t)id)) {
        /* the lowest allowed id instead; none: the grammar has ended */
        size_t nw = weft_grammar_mask_words(e->gvocab), w = 0;
        if (weft_grammar_mask(er->gst, er->gmask) != WEFT_OK) w = nw;
        while (w < nw && !er->gmask[w]) w++;
        if (w == nw) {
            finish(e, er, NULL, WEFT_FINISH_STOP, WEFT_OK);
            return;
        }
        id = (uint32_t)(w * 32 + (size_t)__builtin_ctz(er->gmask[w]));
    }
    struct weft_sample smp = {.id = (int32_t)id};
    take_sample(e, er, smp);
}

static void take_sample(struct weft_engine *e, struct ereq *er, struct weft_sample smp)
{
    weft_status st;
    /* with a grammar, end of generation ends it even under ignore_eos: the
     * grammar allowed it, so the text is complete */
    if (is_stop(e, er, smp.id) || (er->gst && weft_tokenizer_is_eog(e->m->tok, smp.id))) {
        finish(e, er, NULL, WEFT_FINISH_STOP, WEFT_OK);
        return;
    }
    const double tg = er->gst ? now_s() : 0;
    st = er->gst ? weft_grammar_advance(er->gst, smp.id) : WEFT_OK;
    if (er->gst) e->grammar_seconds += now_s() - tg;
    if (st != WEFT_OK) {
        snprintf(e->message, sizeof e->message, "%s", weft_last_error());
        finish(e, er, NULL, WEFT_FINISH_ERROR, st);
        return;
    }
    weft_sampler_accept(er->smp, smp.id);
    er->n_generated++;
    e->generated++;
    if (er->gst && weft_grammar_finished(er->gst)) {   /* nothing can follow: no further step */
        finish(e, er, &smp, WEFT_FINISH_STOP, WEFT_OK);
        return;
    }
    if (er->n_generated >= er->max_tokens) {
        finish(e, er, &smp, WEFT_FINISH_LENGTH, WEFT_OK);
        return;
    }
    if ((st = weft_sched_append(e->sched, er->r, smp.id)) != WEFT_OK) {
        snprintf(e->message, sizeof e->message, "%s", weft_last_error());
        finish(e, er, &smp, WEFT_FINISH_ERROR, st);
        return;
    }
    emit(e, er, &smp, WEFT_FINISH_NONE, WEFT_OK);
}

/* An embedding request's rows of this step (lock held): pooled; after its
 * last chunk, the vector goes out with the final event. */
static void embed_item(struct weft_engine *e, const struct weft_sched_item *it, const float *hidden)
{
    struct ereq *er = it->req->user;
    if (er->aborted) return;  /* reaped at the next boundary */
    if (e->fw && !hidden && weft_engine_embed_rows(er->emb, it)) {
        snprintf(e->message, sizeof e->message, "engine: the step returned no hidden states");
        finish(e, er, NULL, WEFT_FINISH_ERROR, WEFT_ERR_INVALID_ARG);
        return;
    }
    weft_engine_embed_take(er->emb, it, hidden);
    if (!it->sample) return;
    float *vec = weft_engine_embed_vector(er->emb);
    if (!vec) {
        snprintf(e->message, sizeof e->message, "engine: out of memory");
        finish(e, er, NULL, WEFT_FINISH_ERROR, WEFT_ERR_NOMEM);
        return;
    }
    uint32_t n_prompt = er->r->n_prompt, before = e->n_events;
    finish(e, er, NULL, WEFT_FINISH_STOP, WEFT_OK);
    if (e->n_events == before) {  /* the event could not be queued (out of memory) */
        free(vec);
        return;
    }
    struct pending_event *pe = &e->events[e->n_events - 1];
    pe->ev.embedding = pe->owned = vec;
    pe->ev.n_embedding = e->m->hp.n_embd;
    e->embed_requests++;
    e->embed_tokens += n_prompt;
}

/* One step; the caller holds no lock. */
static weft_status step(struct weft_engine *e, bool *did_work)
{
    *did_work = false;
    pthread_mutex_lock(&e->mu);
    while (e->kv_waiters) pthread_cond_wait(&e->fwd_cv, &e->mu);  /* block I/O goes between steps */
    reap_aborted(e);
    size_low_prefill(e);
    set_step_cost(e);
    struct weft_sched_item *items;
    uint32_t n_items;
    weft_status st = weft_sched_schedule(e->sched, &items, &n_items);
    const struct weft_sched_plan *plan = weft_sched_last_plan(e->sched);
    if (plan->decode_rows) e->itl_target_s = plan->target_s;
    if (st != WEFT_OK || n_items == 0) {
        pthread_mutex_unlock(&e->mu);
        flush_events(e);
        return st;
    }
    double t0 = now_s();
    uint32_t n_prefill = 0, n_decode = 0;
    for (uint32_t i = 0; i < n_items; i++) {
        const struct weft_sched_item *it = &items[i];
        struct ereq *er = it->req->user;
        e->fseqs[i] = (struct weft_fwd_seq){.tokens = it->req->tokens + it->pos0, .n_tokens = it->n,
                                            .pos0 = it->pos0, .kv = &it->req->kv, .want_logits = it->sample && !er->emb,
                                            .n_hidden = er->emb ? weft_engine_embed_rows(er->emb, it) : 0};
        if (er->queue_seconds < 0) er->queue_seconds = t0 - er->t_submit;
        /* a prompt's tokens (first pass or recompute after preemption) vs one generated row */
        if (it->n == 1 && it->pos0 >= it->req->n_prompt) n_decode++;
        else n_prefill += it->n;
    }
    e->in_forward = true;  /* KV block I/O from other threads waits (engine_kv.c): backends are not shared */
    pthread_mutex_unlock(&e->mu);

    /* submit() and abort() may run meanwhile: neither touches running
     * requests' tokens or blocks */
    const float *logits = NULL;
    uint32_t n_logits = 0;
    if (e->cfg.mock_prefill_tps > 0) {
        /* the speed model's time, spent waiting */
        double t = n_prefill / e->cfg.mock_prefill_tps + (n_decode ? 1.0 / e->cfg.mock_decode_tps : 0);
        struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {}
        st = WEFT_OK;
    } else {
        st = weft_forward_step(e->fw, e->fseqs, n_items, &logits, &n_logits);
    }

    double dt = now_s() - t0;
    pthread_mutex_lock(&e->mu);
    e->in_forward = false;
    pthread_cond_broadcast(&e->fwd_cv);
    if (st == WEFT_OK) measure_step(e, n_prefill, n_decode, dt);
    if (st != WEFT_OK) {
        snprintf(e->message, sizeof e->message, "%s", weft_last_error());
        for (uint32_t i = 0; i < n_items; i++) finish(e, items[i].req->user, NULL, WEFT_FINISH_ERROR, st);
        pthread_mutex_unlock(&e->mu);
        flush_events(e);
        *did_work = true;
        return WEFT_OK;  /* the requests failed, not the engine */
    }
    weft_sched_step_done(e->sched, items, n_items);
    uint32_t li = 0;
    for (uint32_t i = 0; i < n_items; i++) {
        if (((struct ereq *)items[i].req->user)->emb) {
            embed_item(e, &items[i], e->fw ? weft_forward_hidden(e->fw, i) : NULL);
            continue;
        }
        if (!items[i].sample) continue;
        struct ereq *er = items[i].req->user;
        const float *lg = logits ? logits + (size_t)li * e->m->hp.n_vocab : NULL;
        li++;
        if (er->aborted) continue;  /* reaped at the next boundary */
        if (lg) sample_item(e, er, lg);
        else mock_sample_item(e, er);
    }
    pthread_mutex_unlock(&e->mu);
    flush_events(e);
    *did_work = true;
    return WEFT_OK;
}

weft_status weft_engine_step(struct weft_engine *e, bool *did_work)
{
    if (e->started) return weft_error(WEFT_ERR_INVALID_ARG, "engine: step() while the engine thread runs");
    return step(e, did_work);
}

weft_status weft_engine_run_all(struct weft_engine *e)
{
    for (;;) {
        bool did;
        weft_status st = weft_engine_step(e, &did);
        if (st != WEFT_OK) return st;
        if (!did) {
            /* nothing runnable: either nothing is left or the pending aborts
             * were just reaped */
            struct weft_sched_req *const *q;
            pthread_mutex_lock(&e->mu);
            uint32_t left = weft_sched_running(e->sched, &q) + weft_sched_waiting(e->sched, &q);
            pthread_mutex_unlock(&e->mu);
            if (!left) return WEFT_OK;
            return weft_error(WEFT_ERR_NO_ROOM, "engine: %u requests cannot be scheduled", left);
        }
    }
}

static void *engine_main(void *arg)
{
    struct weft_engine *e = arg;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        seen = e->wake;
        if (e->test_paused) {
            /* weft_engine_test_pause: work waits, the watchdog's clock runs */
            while (!e->stop && e->test_paused) pthread_cond_wait(&e->cv, &e->mu);
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        bool did;
        weft_status st = step(e, &did);
        if (st == WEFT_OK && did) {
            pthread_mutex_lock(&e->mu);
            e->last_progress = now_s();
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        /* idle (or a scheduler failure): sleep until something changes */
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->wake == seen) pthread_cond_wait(&e->cv, &e->mu);
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}

void weft_engine_test_pause(struct weft_engine *e, bool paused)
{
    pthread_mutex_lock(&e->mu);
    e->test_paused = paused;
    e->wake++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

weft_status weft_engine_start(struct weft_engine *e)
{
    if (e->started) return WEFT_OK;
    e->last_progress = now_s();
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
        return weft_error(WEFT_ERR_DEVICE, "engine: cannot start the engine thread");
    e->started = true;
    return WEFT_OK;
}

void weft_engine_stats(struct weft_engine *e, struct weft_engine_stats *out)
{
    struct weft_sched_stats ss;
    pthread_mutex_lock(&e->mu);
    weft_sched_stats(e->sched, &ss);
    memset(out, 0, sizeof *out);
    out->running = ss.running;
    out->waiting = ss.waiting;
    out->swapped = ss.swapped;
    out->stalled_s = ss.running || ss.waiting ? now_s() - e->last_progress : 0;
    weft_kv_stats(&e->kv, &out->kv);
    out->steps = ss.steps;
    out->step_tokens = ss.step_tokens;
    out->generated_tokens = e->generated;
    out->prefill_tokens = ss.prefill_tokens;
    out->prefix_hit_tokens = ss.prefix_hit_tokens;
    out->preempt_swap = ss.preempt_swap;
    out->preempt_recompute = ss.preempt_recompute;
    out->low_prefill_limited = ss.low_prefill_limited;
    out->low_prefill_tokens = ss.low_prefill_tokens;
    out->itl_target_s = e->itl_target_s;
    out->itl_limited = ss.itl_limited;
    out->itl_over = ss.itl_over;
    out->itl_spread = ss.itl_spread;
    out->share_deferred = ss.share_deferred;
    out->last_plan = ss.last;
    out->submitted = e->submitted;
    out->finished = e->finished;
    out->aborted = e->aborted;
    out->rejected = e->rejected;
    out->prefill_tps = e->prefill_tps;
    out->decode_tps = e->decode_tps;
    out->decode_rows = e->decode_rows;
    out->decode_row_tps = e->decode_row_tps;
    weft_step_fit_get(&e->decode_fit, &out->decode_fixed_s, &out->decode_row_s);
    if (e->gvocab) {
        struct weft_grammar_cache_stats gs;
        weft_grammar_vocab_stats(e->gvocab, &gs);
        out->grammar_masks = gs.lookups;
        out->grammar_mask_hits = gs.hits;
    }
    out->grammar_resampled = e->grammar_resampled;
    out->grammar_seconds = e->grammar_seconds;
    out->embed_requests = e->embed_requests;
    out->embed_tokens = e->embed_tokens;
    struct weft_sched_req *const *q;
    uint32_t n = weft_sched_waiting(e->sched, &q);
    for (uint32_t i = 0; i < n; i++)
        if (q[i]->n_prompt > q[i]->n_computed) out->queued_prefill_tokens += q[i]->n_prompt - q[i]->n_computed;
    n = weft_sched_running(e->sched, &q);
    for (uint32_t i = 0; i < n; i++)
        if (q[i]->n_prompt > q[i]->n_computed) out->queued_prefill_tokens += q[i]->n_prompt - q[i]->n_computed;
    pthread_mutex_unlock(&e->mu);
}

uint32_t weft_engine_n_ctx(const struct weft_engine *e) { return e->cfg.n_ctx; }
struct weft_kv_pool *weft_engine_kv(struct weft_engine *e) { return &e->kv; }

#define CALIB_WARMUP_PROMPT 64u
#define CALIB_MAX_PROMPT 1024u
#define CALIB_TARGET_S 0.25
#define CALIB_ROWS 4u      /* sequences decoding together in the last run (the per-row cost) */
#define CALIB_ROW_PROMPT 8u

static void calib_event(void *user, const struct weft_event *ev) { (void)user; (void)ev; }

weft_status weft_engine_calibrate(struct weft_engine *e, uint32_t n_prompt)
{
    if (e->started) return weft_error(WEFT_ERR_INVALID_ARG, "engine: calibrate() while the engine thread runs");
    bool autosize = n_prompt == 0;
    uint32_t cap = autosize ? CALIB_MAX_PROMPT : n_prompt;
    if (cap + 8 > e->cfg.n_ctx) cap = e->cfg.n_ctx > 16 ? e->cfg.n_ctx - 8 : 1;
    n_prompt = autosize ? (CALIB_WARMUP_PROMPT < cap ? CALIB_WARMUP_PROMPT : cap) : cap;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    if (!ids) return weft_error(WEFT_ERR_NOMEM, "engine: out of memory");
    /* spread over the vocabulary, away from the control ids at its start */
    uint32_t nv = e->m->hp.n_vocab;
    for (uint32_t i = 0; i < cap; i++) ids[i] = (int32_t)((nv > 300 ? 256 : 0) + (i * 7919u) % (nv > 300 ? nv - 256 : nv));
    struct weft_request rq = {.prompt = ids, .n_prompt = n_prompt, .max_tokens = 4, .ignore_eos = true,
                              .cb = calib_event};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    weft_status st = WEFT_OK;
    /* twice: the first run pays for first touches (weights paged in, buffers
     * allocated) and only the second one's rates are kept */
    for (int pass = 0; pass < 2 && st == WEFT_OK; pass++) {
        ids[0] = (int32_t)((uint32_t)(ids[0] + 1) % nv);  /* another prompt: no prefix-cache hit */
        double t0 = now_s();
        st = weft_engine_submit(e, &rq, &id);
        if (st == WEFT_OK) st = weft_engine_run_all(e);
        if (pass == 0 && autosize) {
            /* the measured run: about CALIB_TARGET_S of prefill at the warm-up's rate */
            double dt = now_s() - t0;
            double want = dt > 0 ? rq.n_prompt * (CALIB_TARGET_S / dt) : cap;
            rq.n_prompt = want >= cap ? cap : want > rq.n_prompt ? (uint32_t)want : rq.n_prompt;
        }
        if (pass == 0) {
            pthread_mutex_lock(&e->mu);
            e->prefill_tps = e->decode_tps = e->decode_row_tps = 0;
            e->decode_fit = (struct weft_step_fit){0};
            pthread_mutex_unlock(&e->mu);
        }
    }
    /* then one prompt decoding alone and CALIB_ROWS decoding together, at
     * the same context (a quarter of the measured prompt, so the two runs'
     * prefill costs about the measured one's): the decode cost's part per
     * row, for the ITL cost model (only the fit keeps these runs). Best
     * effort: a queue too short for them leaves the fit to the traffic. */
    uint32_t row_prompt = rq.n_prompt / CALIB_ROWS > CALIB_ROW_PROMPT ? rq.n_prompt / CALIB_ROWS : CALIB_ROW_PROMPT;
    if (st == WEFT_OK && row_prompt <= cap && e->cfg.max_seqs >= CALIB_ROWS && e->cfg.max_waiting >= CALIB_ROWS) {
        pthread_mutex_lock(&e->mu);
        double keep[3] = {e->prefill_tps, e->decode_tps, e->decode_row_tps};
        uint32_t keep_rows = e->decode_rows;
        e->decode_fit = (struct weft_step_fit){0};
        pthread_mutex_unlock(&e->mu);
        rq.n_prompt = row_prompt;
        rq.max_tokens = 6;
        const uint32_t runs[2] = {1, CALIB_ROWS};
        for (int run = 0; run < 2 && st == WEFT_OK; run++) {
            for (uint32_t k = 0; k < runs[run]; k++) {
                ids[0] = (int32_t)((uint32_t)(ids[0] + 1) % nv);  /* no two alike: no prefix-cache hit */
                if (weft_engine_submit(e, &rq, &id) != WEFT_OK) break;
            }
            st = weft_engine_run_all(e);  /* what went in */
        }
        pthread_mutex_lock(&e->mu);
        e->prefill_tps = keep[0];
        e->decode_tps = keep[1];
        e->decode_row_tps = keep[2];
        e->decode_rows = keep_rows;
        pthread_mutex_unlock(&e->mu);
    }
    free(ids);
    /* not the traffic's: the counters start from zero */
    pthread_mutex_lock(&e->mu);
    e->generated = e->submitted = e->finished = e->aborted = e->rejected = 0;
    e->itl_target_s = 0;
    weft_sched_reset_totals(e->sched);
    pthread_mutex_unlock(&e->mu);
    return st;
}

void weft_engine_on_kv_event(struct weft_engine *e, weft_kv_event_fn fn, void *user)
{
    pthread_mutex_lock(&e->mu);
    e->kv.on_event = fn;
    e->kv.on_event_user = user;
    pthread_mutex_unlock(&e->mu);
}
