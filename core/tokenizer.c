/* Tokenizer loading from GGUF metadata, vocab lookup, special-token
 * partitioning and the (streaming) detokenizer. The encoders live in
 * core/tok_spm.c and core/tok_bpe.c. */
#include "core/tokenizer.h"
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#include "core/tok_internal.h"
#include "base/unicode.h"

/* ---- small helpers ---- */

weft_status weft_tok_ids_push(struct tok_ids *o, int32_t id)
{
    if (o->n == o->cap) {
        int32_t *v = weft_grow(o->v, &o->cap, o->n + 1, sizeof *v);
        if (!v) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (ids)");
        o->v = v;
    }
    o->v[o->n++] = id;
    return WEFT_OK;
}

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(int32_t a, int32_t b)
{
    uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int32_t weft_tok_lookup(const struct weft_tokenizer *t, const char *s, size_t len)
{
    for (uint32_t i = hash_bytes(s, len) & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        int32_t id = t->hash[i];
        if (id < 0) return -1;
        if (t->len[id] == len && memcmp(t->text + t->off[id], s, len) == 0) return id;
    }
}

const struct tok_merge *weft_tok_merge_find(const struct weft_tokenizer *t, int32_t left, int32_t right)
{
    if (!t->merges) return NULL;
    for (uint32_t i = hash_pair(left, right) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const struct tok_merge *m = &t->merges[i];
        if (m->left < 0) return NULL;
        if (m->left == left && m->right == right) return m;
    }
}

/* ---- loading ---- */

/* Texts that end a turn in common chat templates (as llama.cpp's list). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<end_of_turn>", "<|end_of_text|>", "<end_of_utterance>",
};

static const char *arr_key_check(const struct weft_gguf *g, const char *key, enum weft_gguf_type want,
                                 int64_t n_vocab, int64_t *idx)
{
    *idx = weft_gguf_find_key(g, key);
    if (*idx < 0) return NULL;
    if (weft_gguf_kv_type(g, *idx) != WEFT_GGUF_ARRAY) return "is not an array";
    enum weft_gguf_type at = weft_gguf_arr_type(g, *idx);
    if (want == WEFT_GGUF_STRING ? at != WEFT_GGUF_STRING
                                 : (at == WEFT_GGUF_STRING || at == WEFT_GGUF_ARRAY))
        return "has the wrong element type";
    if (n_vocab >= 0 && (int64_t)weft_gguf_arr_len(g, *idx) != n_vocab) return "length differs from tokenizer.ggml.tokens";
    return NULL;
}

static weft_status special_id(const struct weft_gguf *g, const char *key, int32_t n_vocab, int32_t *id)
{
    uint32_t v;
    weft_status st = weft_gguf_get_u32(g, key, &v);
    if (st == WEFT_ERR_NOT_FOUND) return WEFT_OK;
    if (st == WEFT_ERR_TYPE) { /* a signed -1 also means "none" */
        int32_t sv;
        if (weft_gguf_get_i32(g, key, &sv) == WEFT_OK && sv == -1) { *id = -1; return WEFT_OK; }
    }
    if (st) return weft_error(WEFT_ERR_FORMAT, "tokenizer: %s: %s", key, weft_last_error());
    if (v == UINT32_MAX) { /* -1 stored as u32: no such token */
        *id = -1;
        return WEFT_OK;
    }
    if (v >= (uint32_t)n_vocab)
        return weft_error(WEFT_ERR_FORMAT, "tokenizer: %s = %u is out of range (vocab has %d tokens)",
                          key, v, n_vocab);
    *id = (int32_t)v;
    return WEFT_OK;
}

static weft_status get_flag(const struct weft_gguf *g, const char *key, bool *v)
{
    weft_status st = weft_gguf_get_bool(g, key, v);
    if (st == WEFT_ERR_NOT_FOUND) return WEFT_OK;
    if (st) return weft_error(WEFT_ERR_FORMAT, "tokenizer: %s: %s", key, weft_last_error());
    return WEFT_OK;
}

struct len_id {
    uint32_t len;
    int32_t id;
};

static int by_len_desc(const void *a, const void *b)
{
    const struct len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Decoded bytes of token i into dst (room for 2 * len bytes); returns the count. */
static size_t decode_piece(const struct weft_tokenizer *t, int32_t i, char *dst)
{
    const char *p = t->text + t->off[i];
    size_t n = t->len[i], o = 0;
    if (t->type[i] != TOK_TYPE_NORMAL && t->type[i] != TOK_TYPE_BYTE) {
        memcpy(dst, p, n);
        return n;
    }
    if (t->kind == TOK_SPM) {
        unsigned v;
        if (t->type[i] == TOK_TYPE_BYTE && n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>') {
            v = 0;
            for (int k = 3; k < 5; k++) {
                char c = p[k];
                v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0);
            }
            dst[0] = (char)v;
            return 1;
        }
        for (size_t k = 0; k < n;) {
            if (k + 3 <= n && memcmp(p + k, "\xe2\x96\x81", 3) == 0) { dst[o++] = ' '; k += 3; }
            else dst[o++] = p[k++];
        }
        return o;
    }
    for (size_t k = 0; k < n;) { /* GPT-2 byte map back to bytes */
        uint32_t cp;
        int m = weft_utf8_decode((const unsigned char *)p + k, n - k, &cp);
        int b = m ? weft_tok_cp_to_byte(cp) : -1;
        if (b >= 0) { dst[o++] = (char)b; k += (size_t)m; }
        else { m = m ? m : 1; memcpy(dst + o, p + k, (size_t)m); o += (size_t)m; k += (size_t)m; }
    }
    return o;
}

static weft_status load_vocab(const struct weft_gguf *g, struct weft_tokenizer *t)
{
    int64_t ki;
    const char *why = arr_key_check(g, "tokenizer.ggml.tokens", WEFT_GGUF_STRING, -1, &ki);
    if (ki < 0) return weft_error(WEFT_ERR_FORMAT, "tokenizer: missing tokenizer.ggml.tokens");
    if (why) return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens %s", why);
    uint64_t n = weft_gguf_arr_len(g, ki);
    if (n == 0) return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens is empty");
    if (n > (uint64_t)INT32_MAX / 4)
        return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens has %llu entries (too many)",
                          (unsigned long long)n);
    t->n_vocab = (int32_t)n;

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        if (!weft_gguf_arr_str(g, ki, i, &len)) return weft_error(WEFT_ERR_FORMAT, "tokenizer: token %llu unreadable", (unsigned long long)i);
        if (len > UINT32_MAX / 4) return weft_error(WEFT_ERR_FORMAT, "tokenizer: token %llu is too long", (unsigned long long)i);
        /* a vocabulary is text (GGUF strings are UTF-8; byte tokens are
         * spelled <0xXX>): a token that is not would reach clients as U+FFFD */
        const unsigned char *tx = (const unsigned char *)weft_gguf_arr_str(g, ki, i, &len);
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            int step = weft_utf8_decode(tx + k, len - k, &cp);
            if (!step)
                return weft_error(WEFT_ERR_FORMAT, "tokenizer: token %llu is not valid UTF-8 (byte %zu of %zu, 0x%02x)",
                                  (unsigned long long)i, k, len, tx[k]);
            k += (size_t)step;
        }
        total += len + 1;
    }
    t->text = malloc(total);
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    t->scores = calloc(n, sizeof *t->scores);
    t->type = malloc(n);
    t->eog = calloc(n, 1);
    t->hash_mask = pow2_at_least(2 * n) - 1;
    t->hash = malloc(((size_t)t->hash_mask + 1) * sizeof *t->hash);
    if (!t->text || !t->off || !t->len || !t->scores || !t->type || !t->eog || !t->hash)
        return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (vocab of %llu)", (unsigned long long)n);
    memset(t->hash, 0xff, ((size_t)t->hash_mask + 1) * sizeof *t->hash);
    size_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = weft_gguf_arr_str(g, ki, i, &len);
        memcpy(t->text + o, s, len);
        t->text[o + len] = 0;
        t->off[i] = o;
        t->len[i] = (uint32_t)len;
        o += len + 1;
        t->type[i] = TOK_TYPE_NORMAL;
        /* duplicates: the later id wins, as in llama.cpp */
        uint32_t h = hash_bytes(s, len) & t->hash_mask;
        for (;; h = (h + 1) & t->hash_mask) {
            int32_t id = t->hash[h];
            if (id < 0 || (t->len[id] == len && memcmp(t->text + t->off[id], s, len) == 0)) break;
        }
        t->hash[h] = (int32_t)i;
    }

    if ((why = arr_key_check(g, "tokenizer.ggml.scores", WEFT_GGUF_FLOAT32, (int64_t)n, &ki)))
        return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.scores %s", why);
    if (ki >= 0)
        for (uint64_t i = 0; i < n; i++) t->scores[i] = (float)weft_gguf_arr_f64(g, ki, i);
    if ((why = arr_key_check(g, "tokenizer.ggml.token_type", WEFT_GGUF_INT32, (int64_t)n, &ki)))
        return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.token_type %s", why);
    if (ki >= 0)
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = weft_gguf_arr_i64(g, ki, i);
            t->type[i] = v >= 1 && v <= 6 ? (uint8_t)v : TOK_TYPE_NORMAL; /* unknown kinds: normal */
        }
    return WEFT_OK;
}

static weft_status load_merges(const struct weft_gguf *g, struct weft_tokenizer *t)
{
    int64_t ki;
    const char *why = arr_key_check(g, "tokenizer.ggml.merges", WEFT_GGUF_STRING, -1, &ki);
    if (ki < 0) return weft_error(WEFT_ERR_FORMAT, "tokenizer: gpt2 vocab without tokenizer.ggml.merges");
    if (why) return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges %s", why);
    uint64_t n = weft_gguf_arr_len(g, ki);
    if (n > (uint64_t)INT32_MAX / 4) return weft_error(WEFT_ERR_FORMAT, "tokenizer: too many merges");
    t->merge_mask = pow2_at_least(2 * n + 1) - 1;
    t->merges = malloc(((size_t)t->merge_mask + 1) * sizeof *t->merges);
    size_t cap = 256;
    char *cat = malloc(cap);
    if (!t->merges || !cat) { free(cat); return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (merges)"); }
    for (uint32_t i = 0; i <= t->merge_mask; i++) t->merges[i].left = -1;
    weft_status st = WEFT_OK;
    for (uint64_t r = 0; r < n; r++) {
        size_t len;
        const char *s = weft_gguf_arr_str(g, ki, r, &len);
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL; /* "a b"; a may itself be " " */
        if (!s || !sp) {
            st = weft_error(WEFT_ERR_FORMAT, "tokenizer: merge %llu '%.40s' is not \"left right\"",
                            (unsigned long long)r, s ? s : "");
            break;
        }
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        if (la + lb > cap) {
            char *c2 = realloc(cat, la + lb);
            if (!c2) { st = weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (merges)"); break; }
            cat = c2;
            cap = la + lb;
        }
        int32_t a = weft_tok_lookup(t, s, la), b = weft_tok_lookup(t, sp + 1, lb);
        if (a < 0 || b < 0) continue; /* cannot apply to token sequences: ignore */
        memcpy(cat, s, la);
        memcpy(cat + la, sp + 1, lb);
        int32_t res = weft_tok_lookup(t, cat, la + lb);
        uint32_t h = hash_pair(a, b) & t->merge_mask;
        while (t->merges[h].left >= 0 && !(t->merges[h].left == a && t->merges[h].right == b))
            h = (h + 1) & t->merge_mask;
        if (t->merges[h].left >= 0) continue; /* repeated merge: the first rank wins */
        t->merges[h] = (struct tok_merge){ a, b, (int32_t)r, res };
    }
    free(cat);
    return st;
}

static weft_status load_pre(const struct weft_gguf *g, struct weft_tokenizer *t)
{
    const char *pre = "default";
    weft_status st = weft_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL);
    if (st && st != WEFT_ERR_NOT_FOUND)
        return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.pre: %s", weft_last_error());
    if (!strcmp(pre, "default")) t->pre = TOK_PRE_DEFAULT;
    else if (!strcmp(pre, "gpt2") || !strcmp(pre, "gpt-2")) t->pre = TOK_PRE_GPT2;
    else if (!strcmp(pre, "llama3") || !strcmp(pre, "llama-v3") || !strcmp(pre, "llama-bpe")) {
        t->pre = TOK_PRE_LLAMA3;
        t->ignore_merges = true;
    } else if (!strcmp(pre, "smollm")) t->pre = TOK_PRE_SMOLLM;
    else if (!strcmp(pre, "qwen2")) t->pre = TOK_PRE_QWEN2;
    else if (!strcmp(pre, "qwen35")) t->pre = TOK_PRE_QWEN35;
    else if (!strcmp(pre, "gpt-4o") || !strcmp(pre, "llama4") || !strcmp(pre, "minimax-m2")) t->pre = TOK_PRE_GPT4O;
    else if (!strcmp(pre, "tekken")) {
        t->pre = TOK_PRE_TEKKEN;
        t->ignore_merges = true;
    } else if (!strcmp(pre, "deepseek-v3") || !strcmp(pre, "hunyuan-dense")) t->pre = TOK_PRE_DEEPSEEK3;
    else if (!strcmp(pre, "falcon")) t->pre = TOK_PRE_FALCON;
    else if (!strcmp(pre, "kimi-k2")) t->pre = TOK_PRE_KIMI_K2;
    else return weft_error(WEFT_ERR_UNSUPPORTED, "tokenizer: unsupported pre-tokenizer '%s'", pre);
    return WEFT_OK;
}

static weft_status load_all(const struct weft_gguf *g, struct weft_tokenizer *t)
{
    const char *model = NULL;
    weft_status st = weft_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL);
    if (st == WEFT_ERR_NOT_FOUND) return weft_error(WEFT_ERR_FORMAT, "tokenizer: missing tokenizer.ggml.model");
    if (st) return weft_error(WEFT_ERR_FORMAT, "tokenizer: tokenizer.ggml.model: %s", weft_last_error());
    if (!strcmp(model, "llama")) t->kind = TOK_SPM;
    else if (!strcmp(model, "gpt2")) t->kind = TOK_BPE;
    else return weft_error(WEFT_ERR_UNSUPPORTED, "tokenizer: unsupported tokenizer model '%s'", model);

    if ((st = load_vocab(g, t))) return st;
    int32_t n = t->n_vocab;
    if (t->kind == TOK_BPE && ((st = load_pre(g, t)) || (st = load_merges(g, t)))) return st;

    /* defaults as llama.cpp: SPM <unk>=0 <s>=1 </s>=2 when they exist */
    t->bos = t->eos = t->unk = t->eot = t->eom = t->pad = -1;
    if (t->kind == TOK_SPM) {
        t->unk = n > 0 ? 0 : -1;
        t->bos = n > 1 ? 1 : -1;
        t->eos = n > 2 ? 2 : -1;
    }
    if ((st = special_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos)) ||
        (st = special_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos)) ||
        (st = special_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk)) ||
        (st = special_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad)) ||
        (st = special_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot)) ||
        (st = special_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom)))
        return st;
    t->add_bos = t->kind == TOK_SPM;
    t->add_eos = false;
    t->add_space_prefix = t->kind == TOK_SPM;
    if ((st = get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) ||
        (st = get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) ||
        (st = get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)))
        return st;
    if (t->add_bos && t->bos < 0) return weft_error(WEFT_ERR_FORMAT, "tokenizer: add_bos_token set but no BOS token");
    if (t->add_eos && t->eos < 0) return weft_error(WEFT_ERR_FORMAT, "tokenizer: add_eos_token set but no EOS token");

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t len;
        if (t->kind == TOK_SPM) {
            static const char hex[] = "0123456789ABCDEF";
            memcpy(s, "<0x", 3);
            s[3] = hex[b >> 4];
            s[4] = hex[b & 15];
            s[5] = '>';
            len = 6;
        } else {
            len = (size_t)weft_utf8_encode(weft_tok_byte_to_cp((unsigned char)b), s);
        }
        t->byte_tok[b] = weft_tok_lookup(t, s, len);
    }

    /* decoded pieces */
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += 2 * (size_t)t->len[i];
    t->dec = malloc(total + 1);
    t->dec_off = malloc(((size_t)n + 1) * sizeof *t->dec_off);
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!t->dec || !t->dec_off || !t->special) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory");
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        t->dec_off[i] = o;
        o += decode_piece(t, i, t->dec + o);
    }
    t->dec_off[n] = o;

    /* strings matched inside text, longest first */
    struct len_id *sp = malloc((size_t)n * sizeof *sp);
    if (!sp) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < n; i++) {
        uint8_t ty = t->type[i];
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) && t->len[i] > 0)
            sp[t->n_special++] = (struct len_id){ t->len[i], i };
    }
    qsort(sp, (size_t)t->n_special, sizeof *sp, by_len_desc);
    for (int32_t k = 0; k < t->n_special; k++) t->special[k] = sp[k].id;
    free(sp);

    /* end of generation */
    int32_t fixed[] = { t->eos, t->eot, t->eom };
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
        if (fixed[k] >= 0) t->eog[fixed[k]] = 1;
    for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts; k++) {
        int32_t id = weft_tok_lookup(t, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0) t->eog[id] = 1;
    }
    return WEFT_OK;
}

weft_status weft_tokenizer_load(const struct weft_gguf *g, struct weft_tokenizer **out)
{
    *out = NULL;
    if (!g) return weft_error(WEFT_ERR_INVALID_ARG, "tokenizer: no GGUF given");
    struct weft_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory");
    weft_status st = load_all(g, t);
    if (st) {
        weft_tokenizer_free(t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

void weft_tokenizer_free(struct weft_tokenizer *t)
{
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->dec);
    free(t->dec_off);
    free(t->scores);
    free(t->type);
    free(t->eog);
    free(t->hash);
    free(t->merges);
    free(t->special);
    free(t);
}

/* ---- queries ---- */

int32_t weft_tokenizer_n_vocab(const struct weft_tokenizer *t) { return t->n_vocab; }
int32_t weft_tokenizer_bos(const struct weft_tokenizer *t) { return t->bos; }
int32_t weft_tokenizer_eos(const struct weft_tokenizer *t) { return t->eos; }
bool weft_tokenizer_add_bos(const struct weft_tokenizer *t) { return t->add_bos; }
bool weft_tokenizer_add_eos(const struct weft_tokenizer *t) { return t->add_eos; }

bool weft_tokenizer_is_eog(const struct weft_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

bool weft_tokenizer_is_control(const struct weft_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->type[id] == TOK_TYPE_CONTROL;
}

int32_t weft_tokenizer_find(const struct weft_tokenizer *t, const char *piece)
{
    return piece ? weft_tok_lookup(t, piece, strlen(piece)) : -1;
}

const char *weft_tokenizer_piece(const struct weft_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->text + t->off[id] : NULL;
}

/* ---- tokenize ---- */

struct frag {            /* a piece of the input: raw text, or a special token */
    size_t start, len;
    int32_t id;          /* -1: raw text */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static weft_status frag_push(struct frags *f, struct frag x)
{
    if (x.id < 0 && x.len == 0) return WEFT_OK;
    if (f->n == f->cap) {
        struct frag *v = weft_grow(f->v, &f->cap, f->n + 1, sizeof *v);
        if (!v) return weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory (fragments)");
        f->v = v;
    }
    f->v[f->n++] = x;
    return WEFT_OK;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0 || nn > hn) return NULL;
    for (const char *p = h, *end = h + hn - nn + 1; p < end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
    }
    return NULL;
}

/* Split raw fragments on every special token string, longest tokens first
 * (llama.cpp's tokenizer_st_partition). User-defined tokens are always
 * split out; control and unknown ones only with parse_special. */
static weft_status partition(const struct weft_tokenizer *t, const char *text, size_t len,
                             bool parse_special, struct frags *cur)
{
    struct frags next = { 0 };
    weft_status st = frag_push(cur, (struct frag){ 0, len, -1 });
    for (int32_t k = 0; k < t->n_special && !st; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->type[id] != TOK_TYPE_USER_DEFINED) continue;
        const char *s = t->text + t->off[id];
        size_t sl = t->len[id];
        next.n = 0;
        for (size_t i = 0; i < cur->n && !st; i++) {
            struct frag f = cur->v[i];
            if (f.id >= 0 || f.len < sl) { st = frag_push(&next, f); continue; }
            size_t pos = f.start, end = f.start + f.len;
            const char *hit;
            while (!st && (hit = find_bytes(text + pos, end - pos, s, sl))) {
                size_t at = (size_t)(hit - text);
                if ((st = frag_push(&next, (struct frag){ pos, at - pos, -1 }))) break;
                st = frag_push(&next, (struct frag){ at, sl, id });
                pos = at + sl;
            }
            if (!st) st = frag_push(&next, (struct frag){ pos, end - pos, -1 });
        }
        struct frags tmp = *cur;
        *cur = next;
        next = tmp;
    }
    free(next.v);
    return st;
}

weft_status weft_tokenize(const struct weft_tokenizer *t, const char *text, size_t len,
                          bool add_special, bool parse_special, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return weft_error(WEFT_ERR_INVALID_ARG, "tokenize: NULL tokenizer or text");
    struct tok_ids out = { 0 };
    struct frags fr = { 0 };
    weft_status st = WEFT_OK;
    if (add_special && t->add_bos) st = weft_tok_ids_push(&out, t->bos);
    if (!st && len) st = partition(t, text, len, parse_special, &fr);
    bool prev_special = true; /* SPM: a space goes in front of text at the start or after a special token */
    for (size_t i = 0; i < fr.n && !st; i++) {
        struct frag f = fr.v[i];
        if (f.id >= 0) {
            st = weft_tok_ids_push(&out, f.id);
            prev_special = true;
        } else if (t->kind == TOK_SPM) {
            st = weft_tok_spm_encode(t, text + f.start, f.len, t->add_space_prefix && prev_special, &out);
            prev_special = false;
        } else {
            st = weft_tok_bpe_encode(t, text + f.start, f.len, &out);
        }
    }
    if (!st && add_special && t->add_eos) st = weft_tok_ids_push(&out, t->eos);
    free(fr.v);
    if (!st && !out.v) { /* empty result: still hand back a valid allocation */
        out.v = malloc(sizeof *out.v);
        if (!out.v) st = weft_error(WEFT_ERR_NOMEM, "tokenizer: out of memory");
    }
    if (st) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return WEFT_OK;
}

/* ---- detokenize ---- */

static const char REPLACEMENT[3] = { '\xef', '\xbf', '\xbd' }; /* U+FFFD */

static weft_status out_put(struct weft_detok *d, const void *p, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < d->len + n + 1) cap *= 2;
        char *b = realloc(d->buf, cap);
        if (!b) return weft_error(WEFT_ERR_NOMEM, "detokenize: out of memory");
        d->buf = b;
        d->cap = cap;
    }
    memcpy(d->buf + d->len, p, n);
    d->len += n;
    d->buf[d->len] = 0;
    return WEFT_OK;
}

/* Feed bytes through the UTF-8 assembler: complete characters go out,
 * invalid ones become U+FFFD, an incomplete tail stays in d->pend. */
static weft_status feed(struct weft_detok *d, const unsigned char *p, size_t n)
{
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && !st;) {
        unsigned char c = p[i];
        if (d->n_pend == 0) {
            int need = weft_utf8_need(c);
            if (need == 1) st = out_put(d, &c, 1);
            else if (need == 0) st = out_put(d, REPLACEMENT, 3);
            else d->pend[d->n_pend++] = c;
            i++;
            continue;
        }
        if (!weft_utf8_cont_ok(d->pend[0], d->n_pend, c)) {
            /* the held prefix is invalid: replace it and look at c afresh */
            d->n_pend = 0;
            st = out_put(d, REPLACEMENT, 3);
            continue;
        }
        d->pend[d->n_pend++] = c;
        i++;
        if (d->n_pend == weft_utf8_need(d->pend[0])) {
            st = out_put(d, d->pend, (size_t)d->n_pend);
            d->n_pend = 0;
        }
    }
    return st;
}

void weft_detok_init(struct weft_detok *d, const struct weft_tokenizer *t, bool render_special)
{
    memset(d, 0, sizeof *d);
    d->t = t;
    d->render_special = render_special;
    d->first = true;
}

void weft_detok_free(struct weft_detok *d)
{
    free(d->buf);
    d->buf = NULL;
    d->len = d->cap = 0;
}

weft_status weft_detok_push(struct weft_detok *d, int32_t id, const char **out, size_t *out_len)
{
    const struct weft_tokenizer *t = d->t;
    d->len = 0;
    const unsigned char *p = (const unsigned char *)"";
    size_t n = 0;
    if (id < 0 || id >= t->n_vocab) {
        p = (const unsigned char *)REPLACEMENT;
        n = 3;
    } else {
        switch (t->type[id]) {
        case TOK_TYPE_CONTROL: {
            bool keep = d->render_special;
            for (uint32_t k = 0; !keep && k < d->n_keep; k++) keep = d->keep[k] == id;
            if (keep) { p = (const unsigned char *)t->text + t->off[id]; n = t->len[id]; }
            break;
        }
        case TOK_TYPE_UNKNOWN:
            if (d->render_special) { p = (const unsigned char *)t->text + t->off[id]; n = t->len[id]; }
            else if (t->kind == TOK_SPM) { p = (const unsigned char *)"\xe2\x96\x85"; n = 3; } /* ▅ as llama.cpp */
            break;
        case TOK_TYPE_UNUSED:
            break;
        default:
            p = (const unsigned char *)t->dec + t->dec_off[id];
            n = t->dec_off[id + 1] - t->dec_off[id];
        }
    }
    if (n && d->first) {
        d->first = false;
        /* the space the SPM encoder put in front of the text */
        if (t->kind == TOK_SPM && t->add_space_prefix && p[0] == ' ' && t->type[id] != TOK_TYPE_CONTROL) { p++; n--; }
    }
    weft_status st = feed(d, p, n);
    if (!d->buf && !st) st = out_put(d, "", 0);
    *out = st ? NULL : d->buf;
    *out_len = st ? 0 : d->len;
    return st;
}

weft_status weft_detok_flush(struct weft_detok *d, const char **out, size_t *out_len)
{
    d->len = 0;
    weft_status st = d->n_pend ? out_put(d, REPLACEMENT, 3) : out_put(d, "", 0);
    d->n_pend = 0;
    *out = st ? NULL : d->buf;
    *out_len = st ? 0 : d->len;
    return st;
}

weft_status weft_detokenize(const struct weft_tokenizer *t, const int32_t *ids, size_t n,
                            bool render_special, char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    struct weft_detok d;
    weft_detok_init(&d, t, render_special);
    char *acc = NULL;
    size_t len = 0, cap = 0;
    weft_status st = WEFT_OK;
    for (size_t i = 0; i <= n && !st; i++) {
        const char *piece;
        size_t pl;
        st = i < n ? weft_detok_push(&d, ids[i], &piece, &pl) : weft_detok_flush(&d, &piece, &pl);
        if (st) break;
        if (len + pl + 1 > cap) {
            size_t c2 = cap ? cap : 64;
            while (c2 < len + pl + 1) c2 *= 2;
            char *a2 = realloc(acc, c2);
            if (!a2) { st = weft_error(WEFT_ERR_NOMEM, "detokenize: out of memory"); break; }
            acc = a2;
            cap = c2;
        }
        memcpy(acc + len, piece, pl);
        len += pl;
        acc[len] = 0;
    }
    weft_detok_free(&d);
    if (st) {
        free(acc);
        return st;
    }
    *out = acc;
    if (out_len) *out_len = len;
    return WEFT_OK;
}
