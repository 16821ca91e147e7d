/* Request -> token ids (prompt.h). */
#include "server/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "core/kv.h"
#include "server/chat_template.h"

static weft_status fail(char *msg, size_t cap, weft_status st, const char *text)
{
    if (msg && cap) snprintf(msg, cap, "%s", text);
    return st;
}

static int32_t gguf_token(const struct weft_gguf *g, const char *key, int32_t n_vocab)
{
    uint32_t v;
    if (!g || weft_gguf_get_u32(g, key, &v) != WEFT_OK || v >= (uint32_t)n_vocab) return -1;
    return (int32_t)v;
}

void weft_prompt_rules_fim(struct prompt_rules *r, const struct weft_gguf *g)
{
    int32_t nv = weft_tokenizer_n_vocab(r->tok);
    r->fim_pre = gguf_token(g, "tokenizer.ggml.fim_pre_token_id", nv);
    r->fim_suf = gguf_token(g, "tokenizer.ggml.fim_suf_token_id", nv);
    r->fim_mid = gguf_token(g, "tokenizer.ggml.fim_mid_token_id", nv);
    static const char *const SPELL[][3] = {
        {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
        {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
        {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
         "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"},
        {"\xe2\x96\x81<PRE>", "\xe2\x96\x81<SUF>", "\xe2\x96\x81<MID>"},
        {"<PRE>", "<SUF>", "<MID>"},
    };
    for (size_t i = 0; i < sizeof SPELL / sizeof *SPELL && (r->fim_pre < 0 || r->fim_suf < 0 || r->fim_mid < 0); i++) {
        int32_t a = weft_tokenizer_find(r->tok, SPELL[i][0]), b = weft_tokenizer_find(r->tok, SPELL[i][1]);
        int32_t c = weft_tokenizer_find(r->tok, SPELL[i][2]);
        if (a >= 0 && b >= 0 && c >= 0) {
            r->fim_pre = a;
            r->fim_suf = b;
            r->fim_mid = c;
        }
    }
    if (r->fim_pre < 0 || r->fim_suf < 0 || r->fim_mid < 0) r->fim_pre = r->fim_suf = r->fim_mid = -1;
}

/* prefix-suffix-middle: [BOS] PRE prompt SUF suffix MID, the model writes the middle */
static weft_status fim_tokens(const struct prompt_rules *r, const struct gen_params *p, int32_t **ids, size_t *n,
                              char *msg, size_t msg_size)
{
    if (r->fim_pre < 0)
        return fail(msg, msg_size, WEFT_ERR_INVALID_ARG,
                    "'suffix' needs a model with fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id, "
                    "<|fim_prefix|>, ...): this model has none");
    int32_t *a = NULL, *b = NULL, *bos = NULL;
    size_t na = 0, nb = 0, nbos = 0;
    weft_status st = weft_tokenize(r->tok, p->prompt, strlen(p->prompt), false, false, &a, &na);
    if (st == WEFT_OK) st = weft_tokenize(r->tok, p->suffix, strlen(p->suffix), false, false, &b, &nb);
    if (st == WEFT_OK) st = weft_tokenize(r->tok, "", 0, true, false, &bos, &nbos);  /* the BOS the tokenizer adds */
    int32_t *out = st == WEFT_OK ? malloc(sizeof(int32_t) * (nbos + na + nb + 3)) : NULL;
    if (st == WEFT_OK && !out) st = weft_error(WEFT_ERR_NOMEM, "out of memory");
    if (out) {
        size_t k = 0;
        for (size_t i = 0; i < nbos; i++)
            if (bos[i] == weft_tokenizer_bos(r->tok)) out[k++] = bos[i];
        out[k++] = r->fim_pre;
        for (size_t i = 0; i < na; i++) out[k++] = a[i];
        out[k++] = r->fim_suf;
        for (size_t i = 0; i < nb; i++) out[k++] = b[i];
        out[k++] = r->fim_mid;
        *ids = out;
        *n = k;
    }
    free(a);
    free(b);
    free(bos);
    if (st != WEFT_OK && msg && msg_size) snprintf(msg, msg_size, "%s", weft_last_error());
    return st;
}

weft_status weft_prompt_tokens(const struct prompt_rules *r, const struct gen_params *p, int32_t **ids, size_t *n,
                               bool *in_think, char *msg, size_t msg_size)
{
    *ids = NULL;
    *n = 0;
    if (in_think) *in_think = false;
    if (p->prompt_ids) {
        int32_t nv = weft_tokenizer_n_vocab(r->tok);
        for (uint32_t i = 0; i < p->n_prompt_ids; i++)
            if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= nv) {
                if (msg && msg_size)
                    snprintf(msg, msg_size, "prompt token %u (%d) is outside the vocabulary of %d", i, p->prompt_ids[i],
                             nv);
                return WEFT_ERR_INVALID_ARG;
            }
        int32_t *out = malloc(sizeof(int32_t) * (p->n_prompt_ids ? p->n_prompt_ids : 1));
        if (!out) return fail(msg, msg_size, WEFT_ERR_NOMEM, "out of memory");
        memcpy(out, p->prompt_ids, sizeof(int32_t) * p->n_prompt_ids);
        *ids = out;
        *n = p->n_prompt_ids;
        return WEFT_OK;
    }
    weft_status st;
    if (p->chat) {
        char *text = NULL;
        size_t len = 0;
        if (!r->tmpl) return fail(msg, msg_size, WEFT_ERR_INVALID_ARG, "no chat template");
        st = weft_chat_template_render(r->tmpl, p, &text, &len, in_think, msg, msg_size);
        if (st != WEFT_OK) return st;
        /* the template's text has the special tokens it wants; a BOS the
         * tokenizer adds is added unless the text already begins with it */
        bool add = true;
        if (r->tmpl->bos[0] && !strncmp(text, r->tmpl->bos, strlen(r->tmpl->bos))) add = false;
        st = weft_tokenize(r->tok, text, len, add, true, ids, n);
        free(text);
    } else if (p->suffix) {
        st = fim_tokens(r, p, ids, n, msg, msg_size);
        if (st != WEFT_OK) return st;
    } else {
        st = weft_tokenize(r->tok, p->prompt, strlen(p->prompt), true, true, ids, n);
    }
    if (st != WEFT_OK && msg && msg_size) snprintf(msg, msg_size, "%s", weft_last_error());
    return st;
}

uint32_t weft_prompt_block_hashes(const int32_t *ids, size_t n, uint64_t *out, uint32_t cap)
{
    uint64_t parent = 0;
    uint32_t k = 0;
    for (size_t i = 0; i + WEFT_KV_BLOCK_TOKENS <= n && k < cap; i += WEFT_KV_BLOCK_TOKENS) {
        parent = weft_kv_block_hash(parent, ids + i);
        out[k++] = parent;
    }
    return k;
}

bool weft_prompt_embed_tokens(const struct prompt_rules *r, const json_t *input, uint64_t *n, char *msg,
                              size_t msg_size)
{
    *n = 0;
    bool one = json_is_string(input) || (json_is_array(input) && json_is_integer(json_array_get(input, 0)));
    size_t count = one ? 1 : json_array_size(input);
    if ((!one && !json_is_array(input)) || count == 0) {
        snprintf(msg, msg_size, "'input' must be a non-empty string, array of strings, array of token ids or array "
                 "of arrays of token ids");
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        const json_t *v = one ? input : json_array_get(input, i);
        if (json_is_string(v)) {
            int32_t *ids = NULL;
            size_t k = 0;
            if (weft_tokenize(r->tok, json_string_value(v), json_string_length(v), true, true, &ids, &k) != WEFT_OK) {
                snprintf(msg, msg_size, "input %zu: %s", i, weft_last_error());
                return false;
            }
            free(ids);
            *n += k;
        } else if (json_is_array(v)) {
            *n += json_array_size(v);
        } else {
            snprintf(msg, msg_size, "input %zu: the items of 'input' must all be strings, all token ids or all arrays "
                     "of token ids", i);
            return false;
        }
    }
    return true;
}
