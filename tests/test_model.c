/* Model loading: hyperparameter and tensor validation (each malformed class
 * gets a clear error, from the library and from `weft info`), and the
 * batched, paged forward pass (several sequences in one step give the same
 * logits as each alone). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/forward.h"
#include "core/session.h"
#include "tests/check.h"
#include "tests/weft_exec.h"
#include "tools/gen_model.h"

static char dir[256], base_path[300];

/* Rewrite base_path into `out` with key `key` replaced by a u32 / string
 * value (or removed when both are absent), and tensor `drop` left out. */
struct edit { const char *key; bool is_str, remove; uint32_t u; const char *s; const char *drop; const char *extra; };
static const char *skip_key;
static bool skip_fn(const char *k) { return skip_key && strcmp(k, skip_key) == 0; }

static bool rewrite(const struct edit *e, const char *out)
{
    struct weft_gguf *g = NULL;
    struct weft_gguf_writer *w = NULL;
    bool ok = false;
    if (weft_gguf_open(base_path, &g) != WEFT_OK || weft_gguf_writer_init(&w) != WEFT_OK) goto done;
    skip_key = e->key;
    if (weft_gguf_writer_copy_kvs(w, g, skip_fn) != WEFT_OK) goto done;
    if (e->key && !e->remove) {
        if (e->is_str) weft_gguf_writer_set_str(w, e->key, e->s);
        else weft_gguf_writer_set_u32(w, e->key, e->u);
    }
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        if (e->drop && !strcmp(t->name, e->drop)) continue;
        if (weft_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) != WEFT_OK) goto done;
    }
    static const float vec[64];
    const int64_t ne[4] = {64, 1, 1, 1};
    if (e->extra && weft_gguf_writer_add_tensor(w, e->extra, WEFT_TYPE_F32, 1, ne, vec) != WEFT_OK) goto done;
    ok = weft_gguf_writer_write(w, out) == WEFT_OK;
done:
    weft_gguf_writer_free(w);
    weft_gguf_close(g);
    return ok;
}

static void expect_load_error(const struct edit *e, const char *keyword)
{
    char path[400];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    CHECK(rewrite(e, path));
    struct weft_backend *be = NULL;
    struct weft_model *m = NULL;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK);
    weft_status st = weft_model_load(path, be, &m);
    CHECK_MSG(st != WEFT_OK && m == NULL, "%s: loaded a malformed model", keyword);
    CHECK_MSG(strstr(weft_last_error(), keyword) != NULL, "error '%s' lacks '%s'", weft_last_error(), keyword);
    weft_model_free(m);
    weft_backend_close(be);
    /* the CLI: exit code 1 and one line naming the problem, nothing on stdout */
    char args[600], *out = NULL;
    snprintf(args, sizeof args, "info '%s' 2>/dev/null", path);
    int rc = weft_exec(args, &out);
    CHECK_MSG(rc == 1, "weft info exit %d for %s", rc, keyword);
    CHECK(out && out[0] == '\0');
    free(out);
}

/* every tensor in a file is read, or the file is refused naming it */
static void unused_tensors_are_rejected(void)
{
    expect_load_error(&(struct edit){.extra = "blk.0.attn_q_norm.weight"}, "'blk.0.attn_q_norm.weight' is not used");
    expect_load_error(&(struct edit){.extra = "blk.0.attn_frobnicate.weight"}, "blk.0.attn_frobnicate.weight");
    expect_load_error(&(struct edit){.extra = "blk.7.attn_norm.weight"}, "blk.7.attn_norm.weight");
    /* phi3's LongRoPE factors: no llama reads them */
    expect_load_error(&(struct edit){.extra = "rope_factors_long.weight"}, "'rope_factors_long.weight' is not used");
}
static void unknown_rope_scaling_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.rope.scaling.type", .is_str = true, .s = "wobbly"}, "'wobbly'");
    expect_load_error(&(struct edit){.key = "general.architecture", .is_str = true, .s = "falcon9"}, "'falcon9'");
}
static void zero_head_count_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.attention.head_count", .u = 0}, "head_count");
}
static void heads_not_dividing_embedding_are_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.attention.head_count", .u = 3}, "divisible");
}
static void kv_heads_not_dividing_heads_are_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.attention.head_count_kv", .u = 3}, "divisible");
}
static void zero_embedding_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.embedding_length", .u = 0}, "embedding_length");
}
static void missing_block_count_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.block_count", .remove = true}, "block_count");
}
static void vocab_size_mismatch_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.vocab_size", .u = 500}, "vocab_size");
}
static void embedding_rows_must_match_vocab(void)
{
    /* more layers than tensors exist -> missing tensor; wrong ff -> shape */
    expect_load_error(&(struct edit){.key = "llama.feed_forward_length", .u = 384}, "shape");
}
static void missing_tensor_is_rejected(void)
{
    expect_load_error(&(struct edit){.drop = "blk.1.attn_q.weight"}, "blk.1.attn_q.weight");
}
static void bos_out_of_range_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "tokenizer.ggml.bos_token_id", .u = 100000}, "bos");
}
static void unknown_architecture_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "general.architecture", .is_str = true, .s = "mamba"}, "mamba");
}
static void odd_rope_dimension_is_rejected(void)
{
    expect_load_error(&(struct edit){.key = "llama.rope.dimension_count", .u = 7}, "rope.dimension_count");
}

/* Two sequences of different lengths in one step == each run alone. */
static void batched_sequences_match_single_runs(void)
{
    struct weft_backend *be = NULL;
    struct weft_model *m = NULL;
    CHECK(weft_backend_open("cpu", 2, &be) == WEFT_OK);
    CHECK(weft_model_load(base_path, be, &m) == WEFT_OK);
    if (!m) { weft_backend_close(be); return; }
    uint32_t V = weft_model_hparams(m)->n_vocab;
    int32_t a[37], b[21];
    for (int i = 0; i < 37; i++) a[i] = (i * 7 + 3) % (int32_t)V;
    for (int i = 0; i < 21; i++) b[i] = (i * 13 + 5) % (int32_t)V;
    /* alone */
    float *la = malloc(V * sizeof(float)), *lb = malloc(V * sizeof(float));
    const float *lg;
    struct weft_session *s;
    CHECK(weft_session_init(m, 64, 64, &s) == WEFT_OK);
    CHECK(weft_session_eval(s, a, 37, &lg) == WEFT_OK);
    memcpy(la, lg, V * sizeof(float));
    weft_session_reset(s);
    CHECK(weft_session_eval(s, b, 21, &lg) == WEFT_OK);
    memcpy(lb, lg, V * sizeof(float));
    /* context overflow is an ordinary error that appends nothing */
    uint32_t pos = weft_session_pos(s);
    int32_t many[64] = {0};
    CHECK(weft_session_eval(s, many, 64, &lg) == WEFT_ERR_CONTEXT);
    CHECK(weft_session_pos(s) == pos);
    weft_session_free(s);

    /* together, with interleaved, non-contiguous block tables */
    struct weft_kv_pool kv;
    CHECK(weft_kv_pool_init(&kv, be, weft_model_hparams(m)->n_layer, weft_model_hparams(m)->n_head_kv, weft_model_hparams(m)->head_dim, 16) == WEFT_OK);
    struct weft_kv_seq sa = {0}, sb = {0};
    for (uint32_t n = 16; n <= 48; n += 16) {
        CHECK(weft_kv_seq_reserve(&kv, &sa, n) == WEFT_OK);
        CHECK(weft_kv_seq_reserve(&kv, &sb, n > 32 ? 32 : n) == WEFT_OK);
    }
    struct weft_forward *fw;
    CHECK(weft_forward_init(m, &kv, 64, 2, 8, &fw) == WEFT_OK);
    /* step 1: a[0..30) and b[0..20) prefill chunks; step 2: a[30..37) + b[20] */
    struct weft_fwd_seq st1[2] = {{a, 30, 0, &sa, false, 0}, {b, 20, 0, &sb, false, 0}};
    uint32_t n_out;
    CHECK(weft_forward_step(fw, st1, 2, &lg, &n_out) == WEFT_OK && n_out == 0);
    struct weft_fwd_seq st2[2] = {{a + 30, 7, 30, &sa, true, 0}, {b + 20, 1, 20, &sb, true, 0}};
    CHECK(weft_forward_step(fw, st2, 2, &lg, &n_out) == WEFT_OK && n_out == 2);
    double ea = 0, eb = 0, na = 0, nb = 0;
    for (uint32_t i = 0; i < V; i++) {
        ea += (lg[i] - la[i]) * (double)(lg[i] - la[i]);
        na += (double)la[i] * la[i];
        eb += (lg[V + i] - lb[i]) * (double)(lg[V + i] - lb[i]);
        nb += (double)lb[i] * lb[i];
    }
    printf("  batched vs alone: nmse a %.3g, b %.3g\n", ea / na, eb / nb);
    CHECK(ea / na < 1e-10 && eb / nb < 1e-10);
    /* "no room" is an ordinary answer */
    struct weft_kv_seq sc = {0};
    CHECK(weft_kv_seq_reserve(&kv, &sc, 16 * 100) == WEFT_ERR_NO_ROOM);
    CHECK(sc.n_blocks == 0);
    weft_forward_free(fw);
    weft_kv_seq_release(&kv, &sa);
    weft_kv_seq_release(&kv, &sb);
    CHECK(kv.n_free == kv.n_blocks);
    weft_kv_pool_free(&kv);
    free(la);
    free(lb);
    weft_model_free(m);
    weft_backend_close(be);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/weft-test-model.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(base_path, sizeof base_path, "%s/tiny.gguf", dir);
    struct weft_gen_params p;
    weft_gen_preset(&p, "tiny");
    p.type = WEFT_TYPE_F32;
    p.n_embd = 64; p.n_head = 4; p.n_head_kv = 2; p.n_ff = 128; p.n_layer = 2;
    if (weft_gen_model(&p, base_path) != WEFT_OK) { fprintf(stderr, "gen: %s\n", weft_last_error()); return 1; }
    RUN(zero_head_count_is_rejected);
    RUN(unused_tensors_are_rejected);
    RUN(unknown_rope_scaling_is_rejected);
    RUN(heads_not_dividing_embedding_are_rejected);
    RUN(kv_heads_not_dividing_heads_are_rejected);
    RUN(zero_embedding_is_rejected);
    RUN(missing_block_count_is_rejected);
    RUN(vocab_size_mismatch_is_rejected);
    RUN(embedding_rows_must_match_vocab);
    RUN(missing_tensor_is_rejected);
    RUN(bos_out_of_range_is_rejected);
    RUN(unknown_architecture_is_rejected);
    RUN(odd_rope_dimension_is_rejected);
    RUN(batched_sequences_match_single_runs);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary();
}
