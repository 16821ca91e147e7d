#include "core/session.h"
#include "core/model_impl.h"

#include <stdlib.h>

struct weft_session {
    const struct weft_model *m;
    struct weft_kv_pool kv;
    struct weft_kv_seq seq;
    struct weft_forward *fw;
    uint32_t n_ctx, max_batch, pos;
};

weft_status weft_session_init(const struct weft_model *m, uint32_t n_ctx, uint32_t max_batch,
                              struct weft_session **out)
{
    *out = NULL;
    if (n_ctx == 0) n_ctx = m->hp.n_ctx_train;
    if (max_batch == 0) max_batch = 512;
    if (max_batch > n_ctx) max_batch = n_ctx;
    struct weft_session *s = calloc(1, sizeof *s);
    if (!s) return weft_error(WEFT_ERR_NOMEM, "session: out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->max_batch = max_batch;
    uint32_t n_blocks = (n_ctx + WEFT_KV_BLOCK_TOKENS - 1) / WEFT_KV_BLOCK_TOKENS;
    struct weft_kv_config kc = {.n_kv_head = m->hp.n_head_kv, .head_dim = m->hp.head_dim,
                                .head_dim_v = m->hp.head_dim_v, .n_blocks = n_blocks,
                                .type = WEFT_TYPE_F16, .latent = m->hp.kv_latent};
    weft_forward_kv_parts(m, &kc);
    /* sliding layers of their own shape (Gemma 4) in their own group, every block of it (a
     * session keeps the whole context) */
    bool *win = NULL;
    if (kc.window_head_dim || kc.window_n_kv_head) {
        if (!(win = calloc(m->hp.n_layer, sizeof *win))) {
            free(s);
            return weft_error(WEFT_ERR_NOMEM, "session: out of memory");
        }
        for (uint32_t l = 0; l < m->hp.n_layer; l++) win[l] = weft_hp_window(&m->hp, l) > 0;
        kc.window = UINT32_MAX;
        kc.window_layer = win;
    }
    weft_status st = weft_kv_pool_create(&s->kv, m->be, &kc);
    free(win);
    if (st == WEFT_OK) st = weft_forward_init(m, &s->kv, max_batch, 1, n_blocks, &s->fw);
    if (st != WEFT_OK) {
        weft_session_free(s);
        return st;
    }
    *out = s;
    return WEFT_OK;
}

void weft_session_free(struct weft_session *s)
{
    if (!s) return;
    weft_forward_free(s->fw);
    if (s->kv.buf) {
        weft_kv_seq_release(&s->kv, &s->seq);
        weft_kv_pool_free(&s->kv);
    }
    free(s);
}

weft_status weft_session_eval(struct weft_session *s, const int32_t *tokens, size_t n, const float **logits)
{
    *logits = NULL;
    if (n == 0) return weft_error(WEFT_ERR_INVALID_ARG, "session: no tokens to evaluate");
    if (n > s->n_ctx - s->pos)
        return weft_error(WEFT_ERR_CONTEXT, "context is full: %u + %zu tokens > n_ctx %u", s->pos, n, s->n_ctx);
    weft_status st = weft_kv_seq_reserve(&s->kv, &s->seq, s->pos + (uint32_t)n);
    if (st != WEFT_OK) return st;
    for (size_t i = 0; i < n;) {
        uint32_t chunk = (uint32_t)(n - i < s->max_batch ? n - i : s->max_batch);
        struct weft_fwd_seq fs = {.tokens = tokens + i, .n_tokens = chunk, .pos0 = s->pos, .kv = &s->seq,
                                  .want_logits = i + chunk == n};
        uint32_t n_out;
        if ((st = weft_forward_step(s->fw, &fs, 1, logits, &n_out)) != WEFT_OK) return st;
        s->pos += chunk;
        i += chunk;
    }
    return WEFT_OK;
}

uint32_t weft_session_pos(const struct weft_session *s) { return s->pos; }

void weft_session_memory(const struct weft_session *s, uint64_t *kv_bytes_per_token, uint64_t *state_bytes)
{
    struct weft_kv_stats st;
    weft_kv_stats(&s->kv, &st);
    *kv_bytes_per_token = st.bytes_per_token;
    *state_bytes = st.state_bytes_per_seq;
}
uint32_t weft_session_n_ctx(const struct weft_session *s) { return s->n_ctx; }
void weft_session_reset(struct weft_session *s)
{
    s->pos = 0;
    /* the blocks are overwritten as positions come again; a recurrent state is not: a new
     * slot, zeroed, comes with the next eval's reserve */
    if (weft_kv_has_state(&s->kv)) weft_kv_seq_release(&s->kv, &s->seq);
}

weft_status weft_session_truncate(struct weft_session *s, uint32_t n)
{
    if (n >= s->pos) return WEFT_OK;
    if (weft_kv_has_state(&s->kv) && n > 0)
        return weft_error(WEFT_ERR_UNSUPPORTED, "session: a hybrid model's recurrent state cannot go back from "
                          "position %u to %u", s->pos, n);
    if (n == 0) weft_session_reset(s);
    s->pos = n;
    return WEFT_OK;
}
