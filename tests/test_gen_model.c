/* tools/gen_model (weft gen), tools/quantize (weft quantize) and the default
 * model path: generated files load, have llama.cpp's names/shapes/keys, are
 * deterministic, and survive a requantization with bounded error; the
 * families with experts (qwen3moe, llama, gpt-oss, deepseek2) load and run. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "core/gguf.h"
#include "base/quant.h"
#include "core/model.h"
#include "core/session.h"
#include "core/tokenizer.h"
#include "tests/weft_exec.h"
#include "tests/check.h"
#include "tools/cli.h"
#include "tools/gen_model.h"

#ifndef WEFT_SHARED_DIR
#define WEFT_SHARED_DIR "../shared"
#endif

static char tmpdir[512];
static int n_files;

/* A fresh path inside the test's temp dir (removed at the end). */
static const char *tmp_path(const char *stem)
{
    static char bufs[8][640];
    static int next;
    char *p = bufs[next++ % 8];
    snprintf(p, sizeof bufs[0], "%s/%02d-%s.gguf", tmpdir, n_files++, stem);
    return p;
}

static void rm_tree(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

static struct weft_gen_params small_params(enum weft_type type)
{
    struct weft_gen_params p;
    weft_gen_preset(&p, "tiny");
    bool k = weft_type_get(type) && weft_type_get(type)->block_size == WEFT_QK_K;
    p.n_embd = k ? 256 : 64;
    p.n_ff = k ? 512 : 128;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_vocab = 300;
    p.n_ctx = 128;
    p.type = type;
    p.seed = 42;
    return p;
}

static bool read_file(const char *path, unsigned char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n + 1);
    *len = fread(*buf, 1, (size_t)n, f);
    fclose(f);
    return *len == (size_t)n;
}

static uint32_t get_u32(const struct weft_gguf *g, const char *key)
{
    uint32_t v = 0xdeadbeef;
    CHECK_MSG(weft_gguf_get_u32(g, key, &v) == WEFT_OK, "key %s", key);
    return v;
}

static const struct weft_gguf_tensor *tensor(const struct weft_gguf *g, const char *name)
{
    int64_t i = weft_gguf_find_tensor(g, name);
    CHECK_MSG(i >= 0, "tensor %s missing", name);
    return i >= 0 ? weft_gguf_tensor(g, i) : NULL;
}

static void check_shape(const struct weft_gguf *g, const char *name, enum weft_type type, int64_t ne0, int64_t ne1)
{
    const struct weft_gguf_tensor *t = tensor(g, name);
    if (!t) return;
    CHECK_MSG(t->type == type, "%s: type %s, want %s", name, weft_type_name(t->type), weft_type_name(type));
    CHECK_MSG(t->ne[0] == ne0 && t->ne[1] == ne1, "%s: [%" PRId64 ", %" PRId64 "], want [%" PRId64 ", %" PRId64 "]",
              name, t->ne[0], t->ne[1], ne0, ne1);
    CHECK_EQ_INT(t->n_dims, ne1 == 1 && strstr(name, "norm") ? 1 : 2);
}

/* Whole tensor dequantized into a malloc'd array of ne0*ne1 floats. */
static float *dequant(const struct weft_gguf_tensor *t)
{
    int64_t n = t->ne[0] * t->ne[1];
    float *y = malloc(sizeof *y * (size_t)n);
    size_t rs = weft_row_size(t->type, t->ne[0]);
    for (int64_t r = 0; r < t->ne[1]; r++)
        weft_dequantize_row(t->type, (const unsigned char *)t->data + (size_t)r * rs, y + r * t->ne[0], t->ne[0]);
    return y;
}

/* --arch qwen3: the family's keys and tensors (QK-norm, q width H·D != E),
 * and weft loads and runs what it wrote */
static void gen_writes_other_families(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F32);
    p.arch = "qwen3";
    p.n_embd = 96; p.n_head = 4; p.n_head_kv = 2; p.n_ff = 160; p.n_layer = 2; p.head_dim = 32;
    const char *path = tmp_path("qwen3");
    CHECK_EQ_INT(weft_gen_model(&p, path), WEFT_OK);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (!g) return;
    const char *s = NULL;
    CHECK(weft_gguf_get_str(g, "general.architecture", &s, NULL) == WEFT_OK && strcmp(s, "qwen3") == 0);
    CHECK_EQ_INT(get_u32(g, "qwen3.attention.key_length"), 32);
    CHECK_EQ_INT(get_u32(g, "qwen3.embedding_length"), 96);
    CHECK_EQ_INT(weft_gguf_n_tensors(g), 2 * 11 + 3);
    check_shape(g, "blk.1.attn_q.weight", WEFT_TYPE_F32, 96, 128);
    check_shape(g, "blk.1.attn_output.weight", WEFT_TYPE_F32, 128, 96);
    check_shape(g, "blk.0.attn_q_norm.weight", WEFT_TYPE_F32, 32, 1);
    check_shape(g, "blk.0.attn_k_norm.weight", WEFT_TYPE_F32, 32, 1);
    weft_gguf_close(g);
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'hello' -n 4 --temp 0 -t 1 2>&1", path);
    CHECK_EQ_INT(weft_exec(args, &out), 0);
    free(out);
    /* every other family: written, loaded, run */
    static const char *const fams[] = {"qwen2", "phi3", "gemma3"};
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        p.arch = fams[i];
        p.head_dim = 0;
        p.n_swa = 4;
        p.swa_pattern = 2;
        const char *fp = tmp_path(fams[i]);
        CHECK_MSG(weft_gen_model(&p, fp) == WEFT_OK, "%s: %s", fams[i], weft_last_error());
        snprintf(args, sizeof args, "run -m '%s' -p 'hello there, how are you' -n 12 --temp 0 -t 1 2>&1", fp);
        CHECK_MSG(weft_exec(args, &out) == 0, "%s: %s", fams[i], out ? out : "");
        free(out);
        out = NULL;
    }
    p.arch = "gemma9";
    CHECK(weft_gen_validate(&p) == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "gemma9"));
}

/* --arch qwen35: the hybrid's keys and its two kinds of layers' tensors, a negative decay
 * rate, the 0.8B preset's shape; weft loads and runs it; DeltaNet sizes on another family and
 * v heads that are no multiple of the q/k heads are refused */
static void gen_writes_hybrid_qwen35(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_Q8_0);
    p.arch = "qwen35";
    p.n_embd = 128; p.n_layer = 4; p.head_dim = 32; p.n_ff = 256;
    const char *path = tmp_path("qwen35");
    CHECK_MSG(weft_gen_model(&p, path) == WEFT_OK, "%s", weft_last_error());
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (!g) return;
    CHECK_EQ_INT(get_u32(g, "qwen35.full_attention_interval"), 4);
    CHECK_EQ_INT(get_u32(g, "qwen35.ssm.conv_kernel"), 4);
    CHECK_EQ_INT(get_u32(g, "qwen35.ssm.state_size"), 32);
    CHECK_EQ_INT(get_u32(g, "qwen35.ssm.group_count"), 2);
    CHECK_EQ_INT(get_u32(g, "qwen35.ssm.time_step_rank"), 4);
    CHECK_EQ_INT(get_u32(g, "qwen35.ssm.inner_size"), 128);
    CHECK_EQ_INT(get_u32(g, "qwen35.rope.dimension_count"), 8);  /* a quarter of the head */
    /* layers 0-2 recurrent: qkv (2·2 + 4)·32 = 256 wide; layer 3 attention: q with its gate */
    check_shape(g, "blk.0.attn_qkv.weight", WEFT_TYPE_Q8_0, 128, 256);
    check_shape(g, "blk.2.ssm_out.weight", WEFT_TYPE_Q8_0, 128, 128);
    check_shape(g, "blk.3.attn_q.weight", WEFT_TYPE_Q8_0, 128, 2 * 4 * 32);
    CHECK(weft_gguf_find_tensor(g, "blk.3.attn_qkv.weight") < 0 && weft_gguf_find_tensor(g, "blk.0.attn_q.weight") < 0);
    const struct weft_gguf_tensor *a = tensor(g, "blk.1.ssm_a"), *c = tensor(g, "blk.1.ssm_conv1d.weight");
    for (int i = 0; a && i < 4; i++) CHECK(((const float *)a->data)[i] < 0);
    CHECK(c && c->type == WEFT_TYPE_F32 && c->ne[0] == 4 && c->ne[1] == 256);
    weft_gguf_close(g);
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'hello there, how are you' -n 12 --temp 0 -t 1 2>&1", path);
    CHECK_MSG(weft_exec(args, &out) == 0, "%s", out ? out : "");
    free(out);
    struct weft_gen_params q = p;
    q.ssm_v_heads = 3;
    CHECK(weft_gen_validate(&q) == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "v heads"));
    q = p;
    q.arch = "qwen3";
    q.ssm_state = 64;
    CHECK(weft_gen_validate(&q) == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "qwen35's"));
    CHECK_EQ_INT(weft_gen_preset(&q, "qwen35-0.8b"), WEFT_OK);
    q.type = WEFT_TYPE_Q4_K;
    q.mixed = true;
    CHECK_MSG(weft_gen_validate(&q) == WEFT_OK, "%s", weft_last_error());
}

/* stdout of `weft info ARGS...` (malloc'd), or NULL */
static char *info_output(int argc, char **argv)
{
    const char *txt = tmp_path("info-txt");
    fflush(stdout);
    int saved = dup(1), fd = open(txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1);
    int rc = weft_cmd_info(argc, argv);
    fflush(stdout);
    if (saved >= 0) { dup2(saved, 1); close(saved); }
    if (fd >= 0) close(fd);
    CHECK_EQ_INT(rc, 0);
    unsigned char *buf = NULL;
    size_t len = 0;
    if (!read_file(txt, &buf, &len)) { free(buf); return NULL; }
    buf[len] = 0;
    return (char *)buf;
}

/* weft_model_load on the CPU, a prompt, then a few greedy tokens: every logit finite, not all equal. */
static void load_and_generate(const char *path, const char *what)
{
    struct weft_backend *be = NULL;
    struct weft_model *m = NULL;
    struct weft_session *s = NULL;
    CHECK_MSG(weft_backend_open("cpu", 1, &be) == WEFT_OK, "cpu: %s", weft_last_error());
    if (be) CHECK_MSG(weft_model_load(path, be, &m) == WEFT_OK, "%s: %s", what, weft_last_error());
    if (m) CHECK_MSG(weft_session_init(m, 64, 16, &s) == WEFT_OK, "%s: %s", what, weft_last_error());
    if (s) {
        const char *text = "hello there, how are you today?";
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(weft_tokenize(weft_model_tokenizer(m), text, strlen(text), true, false, &ids, &n) == WEFT_OK);
        const uint32_t V = weft_model_hparams(m)->n_vocab;
        const float *lg = NULL;
        weft_status st = ids ? weft_session_eval(s, ids, n, &lg) : WEFT_ERR_INVALID_ARG;
        int steps = 0;
        for (; steps < 4 && st == WEFT_OK && lg; steps++) {
            int32_t best = 0;
            int bad = 0;
            float lo = lg[0];
            for (uint32_t i = 0; i < V; i++) {
                bad += !isfinite(lg[i]);
                if (lg[i] > lg[best]) best = (int32_t)i;
                if (lg[i] < lo) lo = lg[i];
            }
            CHECK_MSG(bad == 0 && lg[best] > lo, "%s: step %d: %d non-finite logits, range [%g, %g]", what, steps, bad,
                      lo, lg[best]);
            st = weft_session_eval(s, &best, 1, &lg);
        }
        CHECK_MSG(st == WEFT_OK && steps == 4, "%s: %s", what, weft_last_error());
        free(ids);
    }
    weft_session_free(s);
    weft_model_free(m);
    weft_backend_close(be);
}

static void check_dims(const struct weft_gguf *g, const char *name, enum weft_type type, uint32_t n_dims,
                       int64_t ne0, int64_t ne1, int64_t ne2)
{
    const struct weft_gguf_tensor *t = tensor(g, name);
    if (!t) return;
    CHECK_MSG(t->type == type, "%s: type %s, want %s", name, weft_type_name(t->type), weft_type_name(type));
    CHECK_MSG(t->n_dims == n_dims && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2,
              "%s: %u dims [%" PRId64 ", %" PRId64 ", %" PRId64 "], want %u [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
              name, t->n_dims, t->ne[0], t->ne[1], t->ne[2], n_dims, ne0, ne1, ne2);
}

/* `weft gen --preset tiny --arch X --experts 8` for each family with experts
 * (qwen3moe, llama in Mixtral's layout, gpt-oss, deepseek2), in F16 and
 * quantized: llama.cpp's keys; experts 3-D [row, rows, experts] and quantized
 * like the matrices (MXFP4_MOE: MXFP4), the router, biases and sinks F32; each
 * file loads with weft_model_load and generates, and weft info lists its experts. */
static void gen_writes_moe_families(void)
{
    static const struct {
        const char *arch, *types[3], *flags[14];
    } fams[] = {
        {"qwen3moe", {"F16", "Q4_K_M"}, {"--expert-ff", "256"}},
        {"llama", {"F16", "Q4_K_M"}, {"--expert-ff", "256", "--experts-used", "3"}},
        {"gpt-oss", {"F16", "Q4_K_M", "MXFP4_MOE"}, {"--expert-ff", "256", "--swa", "4"}},
        {"deepseek2", {"F16", "Q4_K_M"}, {"--expert-ff", "256", "--q-lora", "128", "--dense-lead", "1",
                                          "--shared-experts", "1", "--gating", "sigmoid", "--weights-scale",
                                          "2.5", "--weights-norm"}},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        const char *a = fams[f].arch;
        for (int k = 0; k < 3 && fams[f].types[k]; k++) {
            const char *ty = fams[f].types[k], *path = tmp_path(a);
            char *argv[32] = {"gen", "--preset", "tiny", "--arch", (char *)a, "--experts", "8", "--vocab", "300",
                              "--type", (char *)ty, "-o", (char *)path};
            int argc = 13;
            for (int j = 0; fams[f].flags[j]; j++) argv[argc++] = (char *)fams[f].flags[j];
            CHECK_MSG(weft_cmd_gen(argc, argv) == 0, "%s %s: %s", a, ty, weft_last_error());
            struct weft_gguf *g = NULL;
            CHECK_MSG(weft_gguf_open(path, &g) == WEFT_OK, "%s %s: %s", a, ty, weft_last_error());
            if (!g) continue;
            char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
            CHECK_EQ_INT(get_u32(g, KEY("expert_count")), 8);
            CHECK_EQ_INT(get_u32(g, KEY("expert_used_count")), strcmp(a, "llama") ? 2 : 3);
            /* Mixtral's layout: feed_forward_length is the expert's, no expert key */
            if (!strcmp(a, "llama")) {
                CHECK_EQ_INT(get_u32(g, KEY("feed_forward_length")), 256);
                CHECK_EQ_INT(weft_gguf_find_key(g, KEY("expert_feed_forward_length")), -1);
            } else {
                CHECK_EQ_INT(get_u32(g, KEY("expert_feed_forward_length")), 256);
                CHECK_EQ_INT(get_u32(g, KEY("feed_forward_length")), 512);
            }
            bool f16 = !strcmp(ty, "F16"), mxfp4 = !strcmp(ty, "MXFP4_MOE");
            /* per llama-quantize's mixes: experts Q4_K (the last layer's down Q6_K) or MXFP4 */
            enum weft_type ex = f16 ? WEFT_TYPE_F16 : mxfp4 ? WEFT_TYPE_MXFP4 : WEFT_TYPE_Q4_K;
            enum weft_type down1 = f16 || mxfp4 ? ex : WEFT_TYPE_Q6_K;
            const uint32_t el = strcmp(a, "deepseek2") ? 0 : 1; /* deepseek2's layer 0 is dense */
            char nm[96];
#define T(fmt) (snprintf(nm, sizeof nm, "blk.%u." fmt, el), nm)
            check_dims(g, T("ffn_gate_inp.weight"), WEFT_TYPE_F32, 2, 256, 8, 1);
            check_dims(g, T("ffn_gate_exps.weight"), ex, 3, 256, 256, 8);
            check_dims(g, T("ffn_up_exps.weight"), ex, 3, 256, 256, 8);
            check_dims(g, "blk.1.ffn_down_exps.weight", down1, 3, 256, 256, 8);
            if (strcmp(a, "deepseek2"))
                check_dims(g, "blk.0.ffn_down_exps.weight", ex, 3, 256, 256, 8);
            if (!strcmp(a, "qwen3moe")) {
                CHECK_EQ_INT(get_u32(g, KEY("attention.key_length")), 64);
                check_dims(g, "blk.0.attn_k_norm.weight", WEFT_TYPE_F32, 1, 64, 1, 1);
                /* 8 experts: llama.cpp's mixes give attn_v and attn_k Q8_0 */
                check_dims(g, "blk.0.attn_v.weight", f16 ? WEFT_TYPE_F16 : WEFT_TYPE_Q8_0, 2, 256, 128, 1);
            } else if (!strcmp(a, "gpt-oss")) {
                CHECK_EQ_INT(get_u32(g, KEY("attention.sliding_window")), 4);
                CHECK_EQ_INT(get_u32(g, KEY("rope.scaling.original_context_length")), 4096);
                check_dims(g, "blk.0.attn_sinks.weight", WEFT_TYPE_F32, 1, 4, 1, 1);
                check_dims(g, "blk.0.attn_q.bias", WEFT_TYPE_F32, 1, 256, 1, 1);
                check_dims(g, "blk.1.attn_output.bias", WEFT_TYPE_F32, 1, 256, 1, 1);
                check_dims(g, "blk.0.post_attention_norm.weight", WEFT_TYPE_F32, 1, 256, 1, 1);
                check_dims(g, "blk.0.ffn_gate_inp.bias", WEFT_TYPE_F32, 1, 8, 1, 1);
                check_dims(g, "blk.0.ffn_gate_exps.bias", WEFT_TYPE_F32, 2, 256, 8, 1);
                check_dims(g, "blk.1.ffn_down_exps.bias", WEFT_TYPE_F32, 2, 256, 8, 1);
                if (mxfp4) check_dims(g, "blk.0.attn_q.weight", WEFT_TYPE_Q8_0, 2, 256, 256, 1);
                CHECK_EQ_INT(weft_gguf_find_tensor(g, "blk.0.ffn_norm.weight"), -1);
            } else if (!strcmp(a, "deepseek2")) {
                /* MLA: one KV head of [rope 32 | latent 256], per head b = 64 */
                CHECK_EQ_INT(get_u32(g, KEY("attention.head_count_kv")), 1);
                CHECK_EQ_INT(get_u32(g, KEY("attention.key_length")), 32 + 256);
                CHECK_EQ_INT(get_u32(g, KEY("attention.value_length")), 256);
                CHECK_EQ_INT(get_u32(g, KEY("attention.key_length_mla")), 96);
                CHECK_EQ_INT(get_u32(g, KEY("attention.value_length_mla")), 64);
                CHECK_EQ_INT(get_u32(g, KEY("attention.kv_lora_rank")), 256);
                CHECK_EQ_INT(get_u32(g, KEY("attention.q_lora_rank")), 128);
                CHECK_EQ_INT(get_u32(g, KEY("rope.dimension_count")), 32);
                CHECK_EQ_INT(get_u32(g, KEY("leading_dense_block_count")), 1);
                CHECK_EQ_INT(get_u32(g, KEY("expert_shared_count")), 1);
                CHECK_EQ_INT(get_u32(g, KEY("expert_gating_func")), 2);
                float sc = 0;
                bool norm = false;
                CHECK(weft_gguf_get_f32(g, KEY("expert_weights_scale"), &sc) == WEFT_OK && sc == 2.5f);
                CHECK(weft_gguf_get_bool(g, KEY("expert_weights_norm"), &norm) == WEFT_OK && norm);
                /* the per-head up-projections, 3-D over the 4 heads (rows of 64 fall back to Q5_0 under Q4_K) */
                check_dims(g, "blk.0.attn_k_b.weight", f16 ? WEFT_TYPE_F16 : WEFT_TYPE_Q5_0, 3, 64, 256, 4);
                check_dims(g, "blk.1.attn_v_b.weight", f16 ? WEFT_TYPE_F16 : WEFT_TYPE_Q4_K, 3, 256, 64, 4);
                check_dims(g, "blk.0.attn_kv_a_mqa.weight", f16 ? WEFT_TYPE_F16 : WEFT_TYPE_Q4_K, 2, 256, 288, 1);
                check_dims(g, "blk.0.attn_q_a_norm.weight", WEFT_TYPE_F32, 1, 128, 1, 1);
                check_dims(g, "blk.0.ffn_gate.weight", f16 ? WEFT_TYPE_F16 : WEFT_TYPE_Q4_K, 2, 256, 512, 1);
                check_dims(g, "blk.1.exp_probs_b.bias", WEFT_TYPE_F32, 1, 8, 1, 1);
                check_dims(g, "blk.1.ffn_up_shexp.weight", f16 ? WEFT_TYPE_F16 : WEFT_TYPE_Q4_K, 2, 256, 256, 1);
                CHECK_EQ_INT(weft_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight"), -1);
                CHECK_EQ_INT(weft_gguf_find_tensor(g, "blk.1.ffn_gate.weight"), -1);
            }
#undef T
#undef KEY
            weft_gguf_close(g);
            char what[64];
            snprintf(what, sizeof what, "%s %s", a, ty);
            load_and_generate(path, what);
            char *iargv[] = {"info", (char *)path};
            char *s = info_output(2, iargv);
            char want[64];
            snprintf(want, sizeof want, "%d of 8 experts of 256 rows", strcmp(a, "llama") ? 2 : 3);
            CHECK_MSG(s && strstr(s, want), "%s: no '%s' in\n%s", what, want, s ? s : "");
            if (!strcmp(a, "deepseek2")) CHECK_MSG(s && strstr(s, "1 shared") && strstr(s, "latent KV"), "%s", s);
            free(s);
        }
    }
    /* params the families refuse */
    struct weft_gen_params base, p;
    weft_gen_preset(&base, "tiny-moe");
    base.n_vocab = 300;
    base.type = WEFT_TYPE_Q4_0; /* rows of 32 */
    const char *path = tmp_path("bad-moe");
    int n = 0;
#define BAD(stmt) do { p = base; stmt; n++; weft_clear_error(); \
        CHECK_MSG(weft_gen_model(&p, path) == WEFT_ERR_INVALID_ARG, "accepted: %s", #stmt); \
        CHECK_MSG(*weft_last_error() != '\0', "no message for: %s", #stmt); \
        CHECK_MSG(access(path, F_OK) != 0, "file written for: %s", #stmt); } while (0)
    BAD(p.n_expert_used = 9);                          /* more than the experts */
    BAD(p.n_expert = 1000);                            /* past WEFT_MAX_EXPERTS */
    BAD(p.arch = "qwen3");                             /* a dense family */
    BAD(p.arch = "llama"; p.n_expert = 0);             /* expert ff without experts */
    BAD(p.n_ff_exp = 100);                             /* down_exps rows fit no block */
    BAD(p.n_expert_shared = 1);                        /* deepseek2's */
    BAD(p.arch = "deepseek2"; p.mla_qk = 32);          /* not past the rope dims (32) */
    BAD(p.arch = "deepseek2"; p.head_dim = 64);        /* not rope + kv_lora */
    BAD(p.arch = "deepseek2"; p.expert_gating = 3);
#undef BAD
    CHECK(n == 9);
    /* the presets: the MoE ones resolve and validate (not written: they are big) */
    static const char *const presets[] = {"tiny-moe", "mixtral-8x7b", "olmoe-1b-7b", "qwen3-30b-a3b",
                                          "qwen3-30b-a3b-l8", "gpt-oss-20b", "deepseek-v2-lite"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        CHECK_EQ_INT(weft_gen_preset(&p, presets[i]), WEFT_OK);
        CHECK_MSG(p.n_expert >= 8, "%s", presets[i]);
        p.type = WEFT_TYPE_Q4_K;
        p.mixed = true;
        CHECK_MSG(weft_gen_validate(&p) == WEFT_OK, "%s: %s", presets[i], weft_last_error());
    }
}

static void gen_has_llama_names_shapes_and_keys(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F32);
    p.n_embd = 96; p.n_head = 6; p.n_head_kv = 2; p.n_ff = 160; p.n_layer = 3;
    p.rope_freq_base = 100000.0f; p.rms_eps = 1e-6f; p.name = "unit";
    const char *path = tmp_path("f32");
    CHECK_EQ_INT(weft_gen_model(&p, path), WEFT_OK);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (!g) return;
    const char *s = NULL;
    CHECK(weft_gguf_get_str(g, "general.architecture", &s, NULL) == WEFT_OK && strcmp(s, "llama") == 0);
    CHECK(weft_gguf_get_str(g, "general.name", &s, NULL) == WEFT_OK && strcmp(s, "unit") == 0);
    CHECK_EQ_INT(get_u32(g, "llama.context_length"), 128);
    CHECK_EQ_INT(get_u32(g, "llama.embedding_length"), 96);
    CHECK_EQ_INT(get_u32(g, "llama.block_count"), 3);
    CHECK_EQ_INT(get_u32(g, "llama.feed_forward_length"), 160);
    CHECK_EQ_INT(get_u32(g, "llama.attention.head_count"), 6);
    CHECK_EQ_INT(get_u32(g, "llama.attention.head_count_kv"), 2);
    CHECK_EQ_INT(get_u32(g, "llama.rope.dimension_count"), 16);
    CHECK_EQ_INT(get_u32(g, "llama.vocab_size"), 300);
    CHECK_EQ_INT(get_u32(g, "general.file_type"), 0);
    float f = 0;
    CHECK(weft_gguf_get_f32(g, "llama.rope.freq_base", &f) == WEFT_OK && f == 100000.0f);
    CHECK(weft_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == WEFT_OK && f == 1e-6f);

    CHECK_EQ_INT(weft_gguf_n_tensors(g), 3 * 9 + 3);
    check_shape(g, "token_embd.weight", WEFT_TYPE_F32, 96, 300);
    check_shape(g, "output_norm.weight", WEFT_TYPE_F32, 96, 1);
    check_shape(g, "output.weight", WEFT_TYPE_F32, 96, 300);
    for (int l = 0; l < 3; l++) {
        char nm[64];
#define SHAPE(suffix, ne0, ne1) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), check_shape(g, nm, WEFT_TYPE_F32, ne0, ne1))
        SHAPE("attn_norm.weight", 96, 1);
        SHAPE("attn_q.weight", 96, 96);
        SHAPE("attn_k.weight", 96, 32); /* n_embd / n_head * n_head_kv */
        SHAPE("attn_v.weight", 96, 32);
        SHAPE("attn_output.weight", 96, 96);
        SHAPE("ffn_norm.weight", 96, 1);
        SHAPE("ffn_gate.weight", 96, 160);
        SHAPE("ffn_up.weight", 96, 160);
        SHAPE("ffn_down.weight", 160, 96);
#undef SHAPE
    }
    /* norms near 1, weights zero-mean with std scale/sqrt(row length) */
    const struct weft_gguf_tensor *t = tensor(g, "blk.1.ffn_norm.weight");
    if (t) for (int i = 0; i < 96; i++) CHECK(fabsf(((const float *)t->data)[i] - 1.0f) < 0.15f);
    t = tensor(g, "blk.0.ffn_down.weight");
    if (t) {
        const float *x = t->data;
        double sum = 0, sq = 0;
        int64_t n = t->ne[0] * t->ne[1];
        for (int64_t i = 0; i < n; i++) { sum += x[i]; sq += (double)x[i] * x[i]; }
        CHECK_NEAR(sum / n, 0.0, 0.01);
        CHECK_NEAR(sqrt(sq / n), 1.0 / sqrt(160.0), 0.05 / sqrt(160.0));
    }
    weft_gguf_close(g);
}

static void gen_vocab_is_spm_with_byte_tokens(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F16);
    p.n_vocab = 2000;
    const char *path = tmp_path("vocab");
    CHECK_EQ_INT(weft_gen_model(&p, path), WEFT_OK);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (!g) return;
    const char *s = NULL;
    CHECK(weft_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL) == WEFT_OK && strcmp(s, "llama") == 0);
    CHECK_EQ_INT(get_u32(g, "tokenizer.ggml.bos_token_id"), 1);
    CHECK_EQ_INT(get_u32(g, "tokenizer.ggml.eos_token_id"), 2);
    CHECK_EQ_INT(get_u32(g, "tokenizer.ggml.unknown_token_id"), 0);
    int64_t kt = weft_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t ks = weft_gguf_find_key(g, "tokenizer.ggml.scores");
    int64_t ky = weft_gguf_find_key(g, "tokenizer.ggml.token_type");
    CHECK(kt >= 0 && ks >= 0 && ky >= 0);
    if (kt < 0 || ks < 0 || ky < 0) { weft_gguf_close(g); return; }
    CHECK_EQ_INT(weft_gguf_arr_len(g, kt), 2000);
    CHECK_EQ_INT(weft_gguf_arr_len(g, ks), 2000);
    CHECK_EQ_INT(weft_gguf_arr_len(g, ky), 2000);
    CHECK_EQ_INT(weft_gguf_arr_type(g, ky), WEFT_GGUF_INT32);
    CHECK(strcmp(weft_gguf_arr_str(g, kt, 0, NULL), "<unk>") == 0);
    CHECK(strcmp(weft_gguf_arr_str(g, kt, 1, NULL), "<s>") == 0);
    CHECK(strcmp(weft_gguf_arr_str(g, kt, 2, NULL), "</s>") == 0);
    CHECK_EQ_INT(weft_gguf_arr_i64(g, ky, 0), 2);
    CHECK_EQ_INT(weft_gguf_arr_i64(g, ky, 1), 3);
    for (int b = 0; b < 256; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        CHECK_MSG(strcmp(weft_gguf_arr_str(g, kt, 3 + b, NULL), want) == 0, "byte token %d", b);
        CHECK_EQ_INT(weft_gguf_arr_i64(g, ky, 3 + b), 6);
    }
    CHECK(strcmp(weft_gguf_arr_str(g, kt, 259, NULL), "\xe2\x96\x81") == 0);
    /* every piece distinct and normal, scores non-increasing */
    char **toks = calloc(2000, sizeof *toks);
    for (int i = 0; i < 2000; i++) toks[i] = strdup(weft_gguf_arr_str(g, kt, (uint64_t)i, NULL));
    int dups = 0;
    for (int i = 0; i < 2000; i++)
        for (int j = i + 1; j < 2000; j++) dups += strcmp(toks[i], toks[j]) == 0;
    CHECK_EQ_INT(dups, 0);
    for (int i = 259; i < 2000; i++) {
        CHECK(weft_gguf_arr_i64(g, ky, (uint64_t)i) == 1);
        CHECK(strlen(toks[i]) > 0);
        if (i > 259) CHECK(weft_gguf_arr_f64(g, ks, (uint64_t)i) < weft_gguf_arr_f64(g, ks, (uint64_t)i - 1));
    }
    for (int i = 0; i < 2000; i++) free(toks[i]);
    free(toks);
    weft_gguf_close(g);
}

/* The generated vocab is one core/tokenizer loads, and text round-trips
 * through it (ASCII via pieces, the rest via byte tokens). */
static void gen_vocab_loads_and_round_trips(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_Q8_0);
    p.n_vocab = 1000;
    const char *path = tmp_path("tok");
    CHECK_EQ_INT(weft_gen_model(&p, path), WEFT_OK);
    struct weft_gguf *g = NULL;
    struct weft_tokenizer *t = NULL;
    CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
    if (!g) return;
    CHECK_MSG(weft_tokenizer_load(g, &t) == WEFT_OK, "%s", weft_last_error());
    weft_gguf_close(g);
    if (!t) return;
    CHECK_EQ_INT(weft_tokenizer_n_vocab(t), 1000);
    CHECK_EQ_INT(weft_tokenizer_bos(t), 1);
    CHECK_EQ_INT(weft_tokenizer_eos(t), 2);
    CHECK(weft_tokenizer_is_eog(t, 2));
    const char *text = "Hello world, the cat sat. \xc3\xbcn\xc3\xaf" "c\xc3\xb8" "d\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(weft_tokenize(t, text, strlen(text), true, false, &ids, &n), WEFT_OK);
    CHECK(n > 2 && ids && ids[0] == 1);
    for (size_t i = 0; ids && i < n; i++) CHECK(ids[i] != 0); /* byte fallback: never <unk> */
    char *back = NULL;
    size_t len = 0;
    if (ids) CHECK_EQ_INT(weft_detokenize(t, ids, n, false, &back, &len), WEFT_OK);
    CHECK_MSG(back && strcmp(back, text) == 0, "round trip gave '%s'", back ? back : "(null)");
    free(back);
    free(ids);
    weft_tokenizer_free(t);
}

/* Every generable type: the 2-D tensors carry it, norms stay F32, and the
 * dequantized weights have roughly the intended std (K-quants are drawn
 * directly, so this checks their d/scales are chosen right). */
static void gen_every_type_loads_with_intended_std(void)
{
    const enum weft_type types[] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16, WEFT_TYPE_Q8_0,
                                    WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_1,
                                    WEFT_TYPE_Q4_K, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K, WEFT_TYPE_Q2_K,
                                    WEFT_TYPE_Q3_K, WEFT_TYPE_IQ4_NL, WEFT_TYPE_IQ4_XS, WEFT_TYPE_MXFP4};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum weft_type ty = types[k];
        struct weft_gen_params p = small_params(ty);
        p.tied_output = k % 2;
        const char *path = tmp_path(weft_type_name(ty));
        CHECK_MSG(weft_gen_model(&p, path) == WEFT_OK, "%s: %s", weft_type_name(ty), weft_last_error());
        struct weft_gguf *g = NULL;
        CHECK_MSG(weft_gguf_open(path, &g) == WEFT_OK, "%s: %s", weft_type_name(ty), weft_last_error());
        if (!g) continue;
        CHECK_EQ_INT(get_u32(g, "general.file_type"), weft_gen_ftype(ty));
        CHECK_EQ_INT(weft_gguf_n_tensors(g), 2 * 9 + 2 + (p.tied_output ? 0 : 1));
        CHECK_EQ_INT(weft_gguf_find_tensor(g, "output.weight") >= 0, !p.tied_output);
        for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
            const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
            enum weft_type want = t->n_dims == 1 ? WEFT_TYPE_F32 : ty;
            CHECK_MSG(t->type == want, "%s: %s is %s", weft_type_name(ty), t->name, weft_type_name(t->type));
        }
        const char *names[] = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "token_embd.weight"};
        for (int j = 0; j < 3; j++) {
            const struct weft_gguf_tensor *t = tensor(g, names[j]);
            if (!t) continue;
            float *y = dequant(t);
            int64_t n = t->ne[0] * t->ne[1];
            double sum = 0, sq = 0;
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                bad += !isfinite(y[i]);
                sum += y[i];
                sq += (double)y[i] * y[i];
            }
            double want = 1.0 / sqrt((double)t->ne[0]), std = sqrt(sq / n - (sum / n) * (sum / n));
            CHECK_EQ_INT(bad, 0);
            CHECK_MSG(fabs(std / want - 1.0) < 0.2, "%s %s: std %g, want %g", weft_type_name(ty), t->name, std, want);
            CHECK_MSG(fabs(sum / n) < 0.1 * want, "%s %s: mean %g", weft_type_name(ty), t->name, sum / n);
            free(y);
        }
        weft_gguf_close(g);
    }
}

static void gen_is_deterministic_in_seed(void)
{
    const enum weft_type types[] = {WEFT_TYPE_Q4_0, WEFT_TYPE_Q6_K};
    for (int k = 0; k < 2; k++) {
        struct weft_gen_params p = small_params(types[k]);
        const char *a = tmp_path("seed-a"), *b = tmp_path("seed-b"), *c = tmp_path("seed-c");
        CHECK_EQ_INT(weft_gen_model(&p, a), WEFT_OK);
        CHECK_EQ_INT(weft_gen_model(&p, b), WEFT_OK);
        p.seed = 43;
        CHECK_EQ_INT(weft_gen_model(&p, c), WEFT_OK);
        unsigned char *da = NULL, *db = NULL, *dc = NULL;
        size_t la = 0, lb = 0, lc = 0;
        CHECK(read_file(a, &da, &la) && read_file(b, &db, &lb) && read_file(c, &dc, &lc));
        CHECK(la > 0 && la == lb && la == lc);
        CHECK(da && db && la == lb && memcmp(da, db, la) == 0);
        CHECK(da && dc && la == lc && memcmp(da, dc, la) != 0);
        free(da);
        free(db);
        free(dc);
    }
}

static bool has_tokenizer_keys(const struct weft_gguf *g)
{
    return weft_gguf_find_key(g, "tokenizer.ggml.model") >= 0 && weft_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0;
}

static void gen_vocab_from_copies_tokenizer_keys(void)
{
    /* from a generated model */
    struct weft_gen_params p = small_params(WEFT_TYPE_F16);
    p.n_vocab = 777;
    const char *src = tmp_path("vsrc"), *dst = tmp_path("vdst");
    CHECK_EQ_INT(weft_gen_model(&p, src), WEFT_OK);
    p.n_vocab = 300; /* ignored: taken from the source */
    p.vocab_from = src;
    CHECK_EQ_INT(weft_gen_model(&p, dst), WEFT_OK);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(dst, &g), WEFT_OK);
    if (g) {
        CHECK(has_tokenizer_keys(g));
        CHECK_EQ_INT(get_u32(g, "llama.vocab_size"), 777);
        const struct weft_gguf_tensor *t = tensor(g, "token_embd.weight");
        if (t) CHECK_EQ_INT(t->ne[1], 777);
        weft_gguf_close(g);
    }

    /* from the real stories260K (SPM, 512 tokens), if shared/ is there */
    char real[1024];
    snprintf(real, sizeof real, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    if (access(real, R_OK) != 0) {
        printf("  (no %s: skipping the stories260K part)\n", real);
        return;
    }
    p.vocab_from = real;
    p.tied_output = false;
    dst = tmp_path("vreal");
    CHECK_MSG(weft_gen_model(&p, dst) == WEFT_OK, "%s", weft_last_error());
    struct weft_gguf *s = NULL;
    g = NULL;
    CHECK_EQ_INT(weft_gguf_open(dst, &g), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_open(real, &s), WEFT_OK);
    if (g && s) {
        CHECK_EQ_INT(get_u32(g, "llama.vocab_size"), 512);
        const struct weft_gguf_tensor *t = tensor(g, "output.weight");
        if (t) CHECK_EQ_INT(t->ne[1], 512);
        int n_tok = 0;
        for (int64_t i = 0; i < weft_gguf_n_kv(s); i++) {
            const char *key = weft_gguf_key(s, i);
            if (strncmp(key, "tokenizer.", 10) != 0) continue;
            n_tok++;
            int64_t j = weft_gguf_find_key(g, key);
            CHECK_MSG(j >= 0 && weft_gguf_kv_type(g, j) == weft_gguf_kv_type(s, i), "key %s", key);
        }
        CHECK(n_tok >= 4);
        int64_t a = weft_gguf_find_key(g, "tokenizer.ggml.tokens"), b = weft_gguf_find_key(s, "tokenizer.ggml.tokens");
        if (a >= 0 && b >= 0)
            for (uint64_t i = 0; i < 512; i += 37)
                CHECK(strcmp(weft_gguf_arr_str(g, a, i, NULL), weft_gguf_arr_str(s, b, i, NULL)) == 0);
        /* nothing but tokenizer.* is copied: our own hyperparameters win */
        CHECK_EQ_INT(get_u32(g, "llama.embedding_length"), p.n_embd);
    }
    if (g) weft_gguf_close(g);
    if (s) weft_gguf_close(s);
}

/* Rows that do not fit a K-quant's 256 blocks fall back as llama-quantize does. */
static void k_quant_rows_that_do_not_fit_fall_back(void)
{
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q4_K, 576), WEFT_TYPE_Q5_0);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q4_K, 1536), WEFT_TYPE_Q4_K);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q5_K, 64), WEFT_TYPE_Q5_1);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q6_K, 64), WEFT_TYPE_Q8_0);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q4_0, 64), WEFT_TYPE_Q4_0);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q2_K, 64), WEFT_TYPE_Q4_0);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_Q3_K, 576), WEFT_TYPE_Q4_0);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_IQ4_XS, 96), WEFT_TYPE_IQ4_NL);
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_IQ4_NL, 48), WEFT_TYPE_IQ4_NL); /* no fallback: does not fit */
    CHECK_EQ_INT(weft_gen_row_type(WEFT_TYPE_MXFP4, 64), WEFT_TYPE_MXFP4);
}

/* The tensor -> type map of `weft gen` / `weft quantize` with llama.cpp's
 * mixes (llama_tensor_get_type): Q4_K_M / Q5_K_M give the output head
 * (token_embd when tied) Q6_K, and attn_v and ffn_down Q6_K in the layers
 * use_more_bits picks (of 8: 0, 3, 6, 7); MXFP4_MOE gives a model without
 * experts Q8_0 throughout. Generated and requantized files agree. */
static void gen_and_quantize_follow_llama_cpp_mixes(void)
{
    static const struct { const char *target; int ftype; enum weft_type base, more; } mixes[] = {
        {"Q4_K_M", 15, WEFT_TYPE_Q4_K, WEFT_TYPE_Q6_K},
        {"Q5_K_M", 17, WEFT_TYPE_Q5_K, WEFT_TYPE_Q6_K},
        {"MXFP4_MOE", 38, WEFT_TYPE_Q8_0, WEFT_TYPE_Q8_0},
    };
    for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
        for (int tied = 0; tied < 2; tied++) {
            struct weft_gen_params p = small_params(WEFT_TYPE_Q4_K);
            struct weft_qtarget q = {0};
            CHECK(weft_qtarget_parse(mixes[k].target, &q) && q.mixed);
            CHECK(strcmp(weft_qtarget_name(q), mixes[k].target) == 0);
            p.type = q.type;
            p.mixed = true;
            p.n_layer = 8;
            p.tied_output = tied;
            const char *path = tmp_path(mixes[k].target);
            CHECK_MSG(weft_gen_model(&p, path) == WEFT_OK, "%s: %s", mixes[k].target, weft_last_error());
            /* the same model in F16, requantized: the same map */
            struct weft_gen_params pf = p;
            pf.type = WEFT_TYPE_F16;
            pf.mixed = false;
            const char *src = tmp_path("mix-src"), *req = tmp_path("mix-req");
            CHECK_EQ_INT(weft_gen_model(&pf, src), WEFT_OK);
            char *argv[] = {"quantize", (char *)src, (char *)req, (char *)mixes[k].target};
            CHECK_EQ_INT(weft_cmd_quantize(4, argv), 0);
            struct weft_gguf *g = NULL, *r = NULL;
            CHECK_EQ_INT(weft_gguf_open(path, &g), WEFT_OK);
            CHECK_EQ_INT(weft_gguf_open(req, &r), WEFT_OK);
            if (!g || !r) goto next;
            CHECK_EQ_INT(get_u32(g, "general.file_type"), mixes[k].ftype);
            CHECK_EQ_INT(get_u32(r, "general.file_type"), mixes[k].ftype);
            for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
                const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
                int layer = -1;
                sscanf(t->name, "blk.%d.", &layer);
                bool more = layer == 0 || layer == 3 || layer == 6 || layer == 7;
                enum weft_type want = mixes[k].base;
                if (t->n_dims == 1) want = WEFT_TYPE_F32;
                else if (!strcmp(t->name, "output.weight") || (tied && !strcmp(t->name, "token_embd.weight")))
                    want = mixes[k].more;
                else if (more && (strstr(t->name, "attn_v.weight") || strstr(t->name, "ffn_down.weight")))
                    want = mixes[k].more;
                CHECK_MSG(t->type == want, "%s%s: %s is %s, want %s", mixes[k].target, tied ? " tied" : "", t->name,
                          weft_type_name(t->type), weft_type_name(want));
                const struct weft_gguf_tensor *u = tensor(r, t->name);
                if (u) CHECK_MSG(u->type == t->type, "%s: requantized %s is %s", mixes[k].target, t->name,
                                 weft_type_name(u->type));
            }
        next:
            if (g) weft_gguf_close(g);
            if (r) weft_gguf_close(r);
        }
    }
    /* names the parser takes and rejects */
    struct weft_qtarget q;
    CHECK(weft_qtarget_parse("q5_k_m", &q) && q.mixed && q.type == WEFT_TYPE_Q5_K);
    CHECK(weft_qtarget_parse("Q4_K", &q) && !q.mixed && q.type == WEFT_TYPE_Q4_K);
    CHECK(!weft_qtarget_parse("Q4_K_L", &q));
    CHECK(weft_qtarget_parse("Q8_K", &q) && !weft_qtarget_writable(q));
    /* and the CLI takes a mix for --type */
    const char *out = tmp_path("cli-mix");
    char *argv[] = {"gen", "-o", (char *)out, "--type", "q4_k_m", "--embd", "256", "--ff", "512", "--vocab", "300"};
    CHECK_EQ_INT(weft_cmd_gen((int)(sizeof argv / sizeof argv[0]), argv), 0);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(out, &g), WEFT_OK);
    if (g) {
        CHECK_EQ_INT(get_u32(g, "general.file_type"), 15);
        const struct weft_gguf_tensor *t = tensor(g, "blk.1.ffn_down.weight"); /* 2 layers: layer 1 gets more bits */
        if (t) CHECK(t->type == WEFT_TYPE_Q6_K);
        if ((t = tensor(g, "blk.0.ffn_down.weight"))) CHECK(t->type == WEFT_TYPE_Q4_K);
        weft_gguf_close(g);
    }
}

/* `weft info --tensors` lists each tensor's type: a Q4_K_M model's mix shows. */
static void info_lists_per_tensor_types(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_Q4_K);
    p.mixed = true; /* Q4_K_M */
    const char *model = tmp_path("info-q4km"), *txt = tmp_path("info-out");
    CHECK_EQ_INT(weft_gen_model(&p, model), WEFT_OK);
    char *argv[] = {"info", (char *)model, "--tensors"};
    fflush(stdout);
    int saved = dup(1), fd = open(txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1);
    int rc = weft_cmd_info(3, argv);
    fflush(stdout);
    if (saved >= 0) { dup2(saved, 1); close(saved); }
    if (fd >= 0) close(fd);
    CHECK_EQ_INT(rc, 0);
    unsigned char *buf = NULL;
    size_t len = 0;
    CHECK(read_file(txt, &buf, &len));
    if (!buf) return;
    buf[len] = 0;
    const char *s = (const char *)buf;
    /* the summary line, then one line per tensor (2 layers: layer 1 gets the more bits) */
    CHECK_MSG(strstr(s, "types:       Q4_K 13, F32 5, Q6_K 3") != NULL, "%s", s);
    const char *want[][2] = {{"blk.0.ffn_down.weight", "Q4_K"}, {"blk.1.ffn_down.weight", "Q6_K"},
                             {"blk.1.attn_v.weight", "Q6_K"}, {"output.weight", "Q6_K"},
                             {"token_embd.weight", "Q4_K"}, {"blk.0.attn_norm.weight", "F32"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char key[80], name[64], type[16];
        snprintf(key, sizeof key, " %s ", want[i][0]); /* not attn_output.weight for output.weight */
        const char *line = strstr(s, key);
        CHECK_MSG(line && sscanf(line, "%63s %15s", name, type) == 2 && !strcmp(type, want[i][1]),
                  "%s: want %s in\n%s", want[i][0], want[i][1], s);
    }
    free(buf);
}

/* weft quantize with K/IQ targets: rows that do not fit 256 take llama-quantize's
 * fallback (Q4_K -> Q5_0, Q2_K -> Q4_0, IQ4_XS -> IQ4_NL; Q6_K -> Q8_0 in a mix);
 * a type without one (IQ4_NL on rows of 48) keeps the tensor's type. */
static void quantize_k_rows_fall_back_as_llama_quantize(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F16); /* rows of 64 and 128 */
    const char *src = tmp_path("fb-src");
    CHECK_EQ_INT(weft_gen_model(&p, src), WEFT_OK);
    static const struct { const char *target; enum weft_type want, head; } cases[] = {
        {"Q4_K", WEFT_TYPE_Q5_0, WEFT_TYPE_Q5_0}, {"Q2_K", WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_0},
        {"IQ4_XS", WEFT_TYPE_IQ4_NL, WEFT_TYPE_IQ4_NL}, {"Q5_K_M", WEFT_TYPE_Q5_1, WEFT_TYPE_Q8_0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *dst = tmp_path(cases[k].target);
        char *argv[] = {"quantize", (char *)src, (char *)dst, (char *)cases[k].target};
        CHECK_EQ_INT(weft_cmd_quantize(4, argv), 0);
        struct weft_gguf *g = NULL;
        CHECK_EQ_INT(weft_gguf_open(dst, &g), WEFT_OK);
        if (!g) continue;
        const struct weft_gguf_tensor *t;
        if ((t = tensor(g, "blk.0.attn_q.weight")))
            CHECK_MSG(t->type == cases[k].want, "%s: attn_q %s", cases[k].target, weft_type_name(t->type));
        /* the output head: Q6_K in the mix, whose row of 64 falls back to Q8_0 */
        if ((t = tensor(g, "output.weight")))
            CHECK_MSG(t->type == cases[k].head, "%s: output %s", cases[k].target, weft_type_name(t->type));
        weft_gguf_close(g);
    }
    /* no fallback: rows of 48 keep F16 under IQ4_NL (llama-quantize would stop) */
    p.n_embd = 48; p.n_head = 4; p.n_head_kv = 2; p.n_ff = 128;
    const char *odd = tmp_path("fb-odd"), *dst = tmp_path("fb-odd-iq4nl");
    CHECK_EQ_INT(weft_gen_model(&p, odd), WEFT_OK);
    char *argv[] = {"quantize", (char *)odd, (char *)dst, "IQ4_NL"};
    CHECK_EQ_INT(weft_cmd_quantize(4, argv), 0);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(dst, &g), WEFT_OK);
    if (!g) return;
    const struct weft_gguf_tensor *t;
    if ((t = tensor(g, "blk.0.attn_q.weight"))) CHECK(t->type == WEFT_TYPE_F16);
    if ((t = tensor(g, "blk.0.ffn_down.weight"))) CHECK(t->type == WEFT_TYPE_IQ4_NL);
    CHECK_EQ_INT(get_u32(g, "general.file_type"), 25);
    weft_gguf_close(g);
}

static void gen_rejects_bad_params(void)
{
    struct weft_gen_params base = small_params(WEFT_TYPE_Q4_0), p;
    const char *path = tmp_path("bad");
    int n = 0;
#define BAD(stmt) do { p = base; stmt; n++; weft_clear_error(); \
        CHECK_MSG(weft_gen_model(&p, path) == WEFT_ERR_INVALID_ARG, "accepted: %s", #stmt); \
        CHECK_MSG(*weft_last_error() != '\0', "no message for: %s", #stmt); \
        CHECK_MSG(access(path, F_OK) != 0, "file written for: %s", #stmt); } while (0)
    BAD(p.n_head = 5);                           /* 64 % 5 */
    BAD(p.n_head_kv = 3);                        /* 4 % 3 */
    BAD(p.n_head = 64; p.n_head_kv = 1);         /* head dim 1: odd */
    BAD(p.n_embd = 48; p.n_head = 4);            /* not a multiple of 32 */
    BAD(p.n_ff = 100);                           /* ffn_down rows */
    BAD(p.type = WEFT_TYPE_Q4_K; p.n_ff = 80);   /* 80 fits neither Q4_K nor its Q5_0 fallback */
    BAD(p.type = WEFT_TYPE_Q8_1);                /* activation type */
    BAD(p.type = WEFT_TYPE_Q8_K);
    BAD(p.type = (enum weft_type)4);             /* not a type at all */
    BAD(p.n_layer = 0);
    BAD(p.n_vocab = 100);                        /* no room for 3 specials + 256 bytes */
    BAD(p.n_ctx = 0);
    BAD(p.n_head_kv = 0);
    BAD(p.rms_eps = 0.0f);
    BAD(p.rope_freq_base = -1.0f);
    BAD(p.scale = NAN);
    BAD(p.n_embd = 592; p.n_head = 8; p.n_head_kv = 4; p.n_ff = 1536; p.type = WEFT_TYPE_Q6_K); /* 592 fits neither Q6_K nor Q8_0 */
#undef BAD
    CHECK(n == 17);
    /* a missing --vocab-from file is an error too (not INVALID_ARG: it comes from the reader) */
    p = base;
    p.vocab_from = "/nonexistent/x.gguf";
    CHECK(weft_gen_model(&p, path) != WEFT_OK);
    CHECK(access(path, F_OK) != 0);
}

static void gen_cli_parses_flags(void)
{
    const char *out = tmp_path("cli");
    char *ok[] = {"gen", "-o", (char *)out, "--type", "q8_0", "--embd", "64", "--layers", "1", "--heads", "2",
                  "--kv-heads", "1", "--ff", "96", "--vocab", "320", "--ctx", "64", "--rope-base", "500000",
                  "--tied", "--seed", "7", "--name", "clitest"};
    CHECK_EQ_INT(weft_cmd_gen((int)(sizeof ok / sizeof ok[0]), ok), 0);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(out, &g), WEFT_OK);
    if (g) {
        CHECK_EQ_INT(get_u32(g, "llama.embedding_length"), 64);
        CHECK_EQ_INT(get_u32(g, "llama.block_count"), 1);
        CHECK_EQ_INT(get_u32(g, "llama.attention.head_count"), 2);
        CHECK_EQ_INT(get_u32(g, "llama.attention.head_count_kv"), 1);
        CHECK_EQ_INT(get_u32(g, "llama.feed_forward_length"), 96);
        CHECK_EQ_INT(get_u32(g, "llama.vocab_size"), 320);
        CHECK_EQ_INT(get_u32(g, "general.file_type"), 7);
        CHECK_EQ_INT(weft_gguf_find_tensor(g, "output.weight"), -1);
        const struct weft_gguf_tensor *t = tensor(g, "blk.0.attn_k.weight");
        if (t) CHECK(t->type == WEFT_TYPE_Q8_0 && t->ne[0] == 64 && t->ne[1] == 32);
        float f = 0;
        CHECK(weft_gguf_get_f32(g, "llama.rope.freq_base", &f) == WEFT_OK && f == 500000.0f);
        weft_gguf_close(g);
    }
    /* preset smollm2-135m shape, overridden down to one layer so it stays quick */
    const char *out2 = tmp_path("cli-preset");
    char *pre[] = {"gen", "--layers", "1", "--preset", "smollm2-135m", "--vocab", "1000", "-o", (char *)out2};
    CHECK_EQ_INT(weft_cmd_gen(9, pre), 0);
    g = NULL;
    CHECK_EQ_INT(weft_gguf_open(out2, &g), WEFT_OK);
    if (g) {
        CHECK_EQ_INT(get_u32(g, "llama.embedding_length"), 576);
        CHECK_EQ_INT(get_u32(g, "llama.block_count"), 1);
        CHECK_EQ_INT(get_u32(g, "llama.attention.head_count_kv"), 3);
        CHECK_EQ_INT(get_u32(g, "llama.rope.dimension_count"), 64);
        CHECK_EQ_INT(weft_gguf_find_tensor(g, "output.weight"), -1);
        weft_gguf_close(g);
    }
    char *no_out[] = {"gen", "--type", "f16"};
    CHECK_EQ_INT(weft_cmd_gen(3, no_out), 2);
    char *bad_num[] = {"gen", "-o", (char *)out, "--embd", "12x"};
    CHECK_EQ_INT(weft_cmd_gen(5, bad_num), 2);
    char *bad_type[] = {"gen", "-o", (char *)out, "--type", "Q9_9"};
    CHECK_EQ_INT(weft_cmd_gen(5, bad_type), 2);
    char *bad_flag[] = {"gen", "-o", (char *)out, "--frobnicate"};
    CHECK_EQ_INT(weft_cmd_gen(4, bad_flag), 2);
    char *bad_preset[] = {"gen", "-o", (char *)out, "--preset", "huge"};
    CHECK_EQ_INT(weft_cmd_gen(5, bad_preset), 2);
    char *bad_shape[] = {"gen", "-o", (char *)out, "--heads", "7"};
    CHECK_EQ_INT(weft_cmd_gen(5, bad_shape), 2);
    char *missing_val[] = {"gen", "-o"};
    CHECK_EQ_INT(weft_cmd_gen(2, missing_val), 2);
}

/* normalised squared error of b against a: sum (a-b)^2 / sum a^2 */
static double nmse(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)a[i] * a[i];
    }
    return den > 0 ? num / den : num;
}

static void quantize_round_trip(enum weft_type to, int want_ftype, double max_nmse)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F16);
    p.name = "rt";
    const char *src = tmp_path("q-src"), *dst = tmp_path(weft_type_name(to));
    CHECK_EQ_INT(weft_gen_model(&p, src), WEFT_OK);
    char *argv[] = {"quantize", (char *)src, (char *)dst, (char *)weft_type_name(to)};
    CHECK_EQ_INT(weft_cmd_quantize(4, argv), 0);
    struct weft_gguf *a = NULL, *b = NULL;
    CHECK_EQ_INT(weft_gguf_open(src, &a), WEFT_OK);
    CHECK_EQ_INT(weft_gguf_open(dst, &b), WEFT_OK);
    if (!a || !b) goto out;
    CHECK_EQ_INT(get_u32(b, "general.file_type"), want_ftype);
    const char *s = NULL;
    CHECK(weft_gguf_get_str(b, "general.name", &s, NULL) == WEFT_OK && strcmp(s, "rt") == 0);
    CHECK_EQ_INT(get_u32(b, "llama.block_count"), 2);
    int64_t k = weft_gguf_find_key(b, "tokenizer.ggml.tokens");
    CHECK(k >= 0 && weft_gguf_arr_len(b, k) == 300);
    CHECK_EQ_INT(weft_gguf_n_tensors(b), weft_gguf_n_tensors(a));
    for (int64_t i = 0; i < weft_gguf_n_tensors(a); i++) {
        const struct weft_gguf_tensor *ta = weft_gguf_tensor(a, i);
        const struct weft_gguf_tensor *tb = tensor(b, ta->name);
        if (!tb) continue;
        enum weft_type want = ta->n_dims == 1 ? WEFT_TYPE_F32 : to;
        CHECK_MSG(tb->type == want, "%s: %s", ta->name, weft_type_name(tb->type));
        CHECK(tb->ne[0] == ta->ne[0] && tb->ne[1] == ta->ne[1] && tb->n_dims == ta->n_dims);
        float *ya = dequant(ta), *yb = dequant(tb);
        double e = nmse(ya, yb, ta->ne[0] * ta->ne[1]);
        CHECK_MSG(e <= (ta->n_dims == 1 ? 0.0 : max_nmse), "%s -> %s: nmse %g", ta->name, weft_type_name(to), e);
        free(ya);
        free(yb);
    }
out:
    if (a) weft_gguf_close(a);
    if (b) weft_gguf_close(b);
}

static void quantize_f16_to_q8_0_is_close(void) { quantize_round_trip(WEFT_TYPE_Q8_0, 7, 1e-4); }
static void quantize_f16_to_q4_0_is_close(void) { quantize_round_trip(WEFT_TYPE_Q4_0, 2, 2e-2); }
static void quantize_f16_to_bf16_is_close(void) { quantize_round_trip(WEFT_TYPE_BF16, 32, 1e-4); }

/* Rows that are not a multiple of the target block keep their type. */
static void quantize_keeps_unblockable_rows(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F16);
    p.n_embd = 48; p.n_head = 4; p.n_head_kv = 2; p.n_ff = 128;
    const char *src = tmp_path("odd-src"), *dst = tmp_path("odd-dst");
    CHECK_MSG(weft_gen_model(&p, src) == WEFT_OK, "%s", weft_last_error());
    char *argv[] = {"quantize", (char *)src, (char *)dst, "Q4_1"};
    CHECK_EQ_INT(weft_cmd_quantize(4, argv), 0);
    struct weft_gguf *g = NULL;
    CHECK_EQ_INT(weft_gguf_open(dst, &g), WEFT_OK);
    if (!g) return;
    const struct weft_gguf_tensor *t;
    if ((t = tensor(g, "blk.0.attn_q.weight"))) CHECK(t->type == WEFT_TYPE_F16);  /* rows of 48 */
    if ((t = tensor(g, "blk.0.ffn_down.weight"))) CHECK(t->type == WEFT_TYPE_Q4_1); /* rows of 128 */
    if ((t = tensor(g, "blk.0.ffn_norm.weight"))) CHECK(t->type == WEFT_TYPE_F32);
    CHECK_EQ_INT(get_u32(g, "general.file_type"), 3);
    weft_gguf_close(g);
}

static void quantize_rejects_bad_input(void)
{
    struct weft_gen_params p = small_params(WEFT_TYPE_F32);
    const char *src = tmp_path("qe-src"), *dst = tmp_path("qe-dst");
    CHECK_EQ_INT(weft_gen_model(&p, src), WEFT_OK);
    char *usage[] = {"quantize", (char *)src, (char *)dst};
    CHECK_EQ_INT(weft_cmd_quantize(3, usage), 2);
    char *unknown[] = {"quantize", (char *)src, (char *)dst, "Q3_X"};
    CHECK_EQ_INT(weft_cmd_quantize(4, unknown), 2);
    char *not_weight[] = {"quantize", (char *)src, (char *)dst, "I32"};
    CHECK_EQ_INT(weft_cmd_quantize(4, not_weight), 1);
    char *act[] = {"quantize", (char *)src, (char *)dst, "Q8_K"};
    CHECK_EQ_INT(weft_cmd_quantize(4, act), 1);
    char *missing[] = {"quantize", "/nonexistent/in.gguf", (char *)dst, "Q8_0"};
    CHECK_EQ_INT(weft_cmd_quantize(4, missing), 1);
    char *same[] = {"quantize", (char *)src, (char *)src, "Q8_0"};
    CHECK_EQ_INT(weft_cmd_quantize(4, same), 1);
    CHECK(access(dst, F_OK) != 0);
    /* not a GGUF */
    const char *junk = tmp_path("junk");
    FILE *f = fopen(junk, "wb");
    if (f) { fputs("definitely not gguf", f); fclose(f); }
    char *bad[] = {"quantize", (char *)junk, (char *)dst, "Q8_0"};
    CHECK_EQ_INT(weft_cmd_quantize(4, bad), 1);
}

static void default_model_path_follows_env(void)
{
    char *saved[3];
    const char *names[3] = {"WEFT_MODEL", "WEFT_CACHE_DIR", "XDG_CACHE_HOME"};
    for (int i = 0; i < 3; i++) saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;

    const char *model = tmp_path("model");
    FILE *f = fopen(model, "wb");
    if (f) fclose(f);
    setenv("WEFT_MODEL", model, 1);
    char *p = weft_default_model_path();
    CHECK(p && strcmp(p, model) == 0);
    free(p);
    setenv("WEFT_MODEL", "/nonexistent/model.gguf", 1);
    CHECK(weft_default_model_path() == NULL);

    unsetenv("WEFT_MODEL");
    char cache[700], file[800];
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    snprintf(file, sizeof file, "%s/models", cache);
    mkdir(cache, 0755);
    mkdir(file, 0755);
    snprintf(file, sizeof file, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    setenv("WEFT_CACHE_DIR", cache, 1);
    CHECK(weft_default_model_path() == NULL); /* not there yet */
    f = fopen(file, "wb");
    if (f) fclose(f);
    p = weft_default_model_path();
    CHECK(p && strcmp(p, file) == 0);
    free(p);
    /* XDG_CACHE_HOME/weft when WEFT_CACHE_DIR is unset */
    unsetenv("WEFT_CACHE_DIR");
    setenv("XDG_CACHE_HOME", tmpdir, 1);
    snprintf(file, sizeof file, "%s/weft", tmpdir);
    CHECK(rename(cache, file) == 0);
    snprintf(file, sizeof file, "%s/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf", tmpdir);
    p = weft_default_model_path();
    CHECK(p && strcmp(p, file) == 0);
    free(p);

    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
        free(saved[i]);
    }
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/weft-test-gen-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(gen_has_llama_names_shapes_and_keys);
    RUN(gen_writes_other_families);
    RUN(gen_writes_hybrid_qwen35);
    RUN(gen_writes_moe_families);
    RUN(gen_vocab_is_spm_with_byte_tokens);
    RUN(gen_vocab_loads_and_round_trips);
    RUN(gen_every_type_loads_with_intended_std);
    RUN(gen_is_deterministic_in_seed);
    RUN(gen_vocab_from_copies_tokenizer_keys);
    RUN(k_quant_rows_that_do_not_fit_fall_back);
    RUN(gen_and_quantize_follow_llama_cpp_mixes);
    RUN(info_lists_per_tensor_types);
    RUN(gen_rejects_bad_params);
    RUN(gen_cli_parses_flags);
    RUN(quantize_f16_to_q8_0_is_close);
    RUN(quantize_f16_to_q4_0_is_close);
    RUN(quantize_f16_to_bf16_is_close);
    RUN(quantize_keeps_unblockable_rows);
    RUN(quantize_k_rows_fall_back_as_llama_quantize);
    RUN(quantize_rejects_bad_input);
    RUN(default_model_path_follows_env);
    rm_tree();
    return check_summary();
}
