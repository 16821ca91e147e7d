/* Stop tokens, stop strings and their hold-back (core/stop.h). */
#include "core/stop.h"

#include <stdlib.h>
#include <string.h>

bool weft_stop_is_token(const struct weft_tokenizer *tok, bool ignore_eos, const int32_t *ids, uint32_t n_ids,
                        int32_t id)
{
    if (!ignore_eos && tok && weft_tokenizer_is_eog(tok, id)) return true;
    for (uint32_t i = 0; i < n_ids; i++)
        if (ids[i] == id) return true;
    return false;
}

static weft_status append(struct weft_stop *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap * 2 + n + 64;
        char *t = realloc(s->text, cap);
        if (!t) return weft_error(WEFT_ERR_NOMEM, "stop: out of memory (%zu bytes of output)", s->len + n);
        s->text = t;
        s->cap = cap;
    }
    memcpy(s->text + s->len, p, n);
    s->len += n;
    s->text[s->len] = '\0';
    return WEFT_OK;
}

weft_status weft_stop_init(struct weft_stop *s, const struct weft_stop_cfg *cfg)
{
    memset(s, 0, sizeof *s);
    if (!cfg || !cfg->tok) return weft_error(WEFT_ERR_INVALID_ARG, "stop: no tokenizer");
    s->cfg = *cfg;
    s->cfg.ids = NULL;
    s->cfg.strings = NULL;
    s->cfg.n_ids = s->cfg.n_strings = 0;
    if (cfg->n_ids) {
        if (!(s->own_ids = malloc(sizeof(int32_t) * cfg->n_ids))) goto nomem;
        memcpy(s->own_ids, cfg->ids, sizeof(int32_t) * cfg->n_ids);
        s->cfg.ids = s->own_ids;
        s->cfg.n_ids = cfg->n_ids;
    }
    if (cfg->n_strings) {
        if (!(s->own_strings = calloc(cfg->n_strings, sizeof(char *)))) goto nomem;
        for (uint32_t i = 0; i < cfg->n_strings; i++) {
            size_t n = strlen(cfg->strings[i]);
            if (n == 0) {
                weft_stop_free(s);
                return weft_error(WEFT_ERR_INVALID_ARG, "stop: stop string %u is empty", i);
            }
            if (!(s->own_strings[i] = strdup(cfg->strings[i]))) goto nomem;
            s->cfg.n_strings = i + 1;
            if (n > s->max_string) s->max_string = n;
        }
        s->cfg.strings = (const char *const *)s->own_strings;
    }
    if (cfg->n_render_ids) {
        if (!(s->own_render = malloc(sizeof(int32_t) * cfg->n_render_ids))) goto nomem;
        memcpy(s->own_render, cfg->render_ids, sizeof(int32_t) * cfg->n_render_ids);
        s->cfg.render_ids = s->own_render;
    }
    weft_detok_init(&s->dt, cfg->tok, false);
    s->dt.keep = s->own_render;
    s->dt.n_keep = cfg->n_render_ids;
    s->dt.first = !cfg->continues_prompt;
    weft_status st = append(s, "", 0);
    if (st != WEFT_OK) weft_stop_free(s);
    return st;
nomem:
    weft_stop_free(s);
    return weft_error(WEFT_ERR_NOMEM, "stop: out of memory");
}

void weft_stop_free(struct weft_stop *s)
{
    if (s->own_strings)
        for (uint32_t i = 0; i < s->cfg.n_strings; i++) free(s->own_strings[i]);
    free(s->own_strings);
    free(s->own_ids);
    free(s->own_render);
    free(s->text);
    if (s->dt.t) weft_detok_free(&s->dt);
    memset(s, 0, sizeof *s);
}

/* Earliest occurrence of any stop string in text[from..len); -1 if none. */
static long find_string(const struct weft_stop *s, size_t from)
{
    long best = -1;
    for (uint32_t i = 0; i < s->cfg.n_strings; i++) {
        const char *p = s->cfg.strings[i];
        size_t n = strlen(p);
        for (size_t at = from; at + n <= s->len; at++)
            if (!memcmp(s->text + at, p, n)) {
                if (best < 0 || (long)at < best) best = (long)at;
                break;
            }
    }
    return best;
}

/* Bytes at the end of the text that could still begin a stop string. */
static size_t holdback(const struct weft_stop *s)
{
    size_t hold = 0;
    for (uint32_t i = 0; i < s->cfg.n_strings; i++) {
        const char *p = s->cfg.strings[i];
        size_t n = strlen(p);
        for (size_t k = n - 1; k > hold; k--)
            if (k <= s->len && !memcmp(s->text + s->len - k, p, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

static void release(struct weft_stop *s, size_t upto, struct weft_stop_step *out)
{
    out->emit_from = s->released;
    out->emit_len = 0;
    if (upto > s->released) {
        out->emit_len = upto - s->released;
        s->released = upto;
    }
}

weft_status weft_stop_end(struct weft_stop *s, struct weft_stop_step *out)
{
    memset(out, 0, sizeof *out);
    out->stop = s->stopped;
    out->emit_from = s->released;
    if (s->stopped == WEFT_STOP_STRING) return WEFT_OK;  /* cut: nothing after the stop string */
    const char *piece;
    size_t n = 0;
    weft_status st = weft_detok_flush(&s->dt, &piece, &n);
    if (st == WEFT_OK && n) st = append(s, piece, n);
    release(s, s->len, out);
    return st;
}

weft_status weft_stop_push(struct weft_stop *s, int32_t id, struct weft_stop_step *out)
{
    memset(out, 0, sizeof *out);
    if (s->stopped) {
        out->stop = s->stopped;
        out->emit_from = s->released;
        return WEFT_OK;
    }
    if (weft_stop_is_token(s->cfg.tok, s->cfg.ignore_eos, s->cfg.ids, s->cfg.n_ids, id)) {
        s->stopped = WEFT_STOP_TOKEN;
        return weft_stop_end(s, out);
    }
    s->n_tokens++;
    out->first_piece = s->dt.first;
    out->tok_from = s->len;
    const char *piece;
    size_t n = 0;
    weft_status st = weft_detok_push(&s->dt, id, &piece, &n);
    if (st == WEFT_OK && n) st = append(s, piece, n);
    if (st != WEFT_OK) return st;
    out->tok_len = s->len - out->tok_from;
    if (s->cfg.n_strings && s->n_tokens >= s->cfg.min_tokens) {
        size_t from = out->tok_from >= s->max_string ? out->tok_from - s->max_string + 1 : 0;
        long at = find_string(s, from);
        if (at >= 0) {
            s->stopped = out->stop = WEFT_STOP_STRING;
            s->len = (size_t)at;   /* the bytes after stay in the buffer (tok_from/tok_len) */
            if (s->released > s->len) s->released = s->len;
            release(s, s->len, out);
            return WEFT_OK;
        }
    }
    release(s, s->len - holdback(s), out);
    return WEFT_OK;
}
