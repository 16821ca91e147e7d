/* `weft quantize IN OUT TYPE`: requantize the weights of a GGUF, and the
 * per-tensor type choice it shares with `weft gen --type` (tools/gen_model.h).
 *
 * Each row is dequantized to f32 with the reference kernels and quantized to
 * its chosen type (so any readable type converts to any type that has a
 * quantizer). TYPE is a weight type, applied to every matrix as
 * llama-quantize --pure does, or one of llama.cpp's mixes (Q4_K_M, Q5_K_M,
 * MXFP4_MOE), whose per-tensor types follow llama-quantize's
 * llama_tensor_get_type (src/llama-quant.cpp). Either way llama-quantize's
 * tensor filter applies (routers, conv1d, position embeddings ... keep their
 * type), and so does its fallback for rows that do not fit the chosen type's
 * blocks (Q4_K -> Q5_0, ...; F16 when even that does not fit); types without
 * a fallback (where llama-quantize would stop) keep the tensor's type, with a
 * warning. 1-D tensors (norms, biases) are stored as F32. All kvs are copied;
 * general.file_type is set to llama.cpp's number for TYPE. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/gguf.h"
#include "base/quant.h"
#include "tools/cli.h"
#include "tools/gen_model.h"

/* ---- targets ---- */

/* llama.cpp's LLAMA_FTYPE numbers of the mixes weft writes */
enum { FTYPE_Q4_K_M = 15, FTYPE_Q5_K_M = 17, FTYPE_MXFP4_MOE = 38 };

static const struct {
    const char *name;
    enum weft_type type;
    int ftype;
} mixes[] = {
    {"Q4_K_M", WEFT_TYPE_Q4_K, FTYPE_Q4_K_M},
    {"Q5_K_M", WEFT_TYPE_Q5_K, FTYPE_Q5_K_M},
    {"MXFP4_MOE", WEFT_TYPE_MXFP4, FTYPE_MXFP4_MOE},
};
#define N_MIXES (sizeof mixes / sizeof mixes[0])

static int mix_index(struct weft_qtarget q)
{
    for (size_t i = 0; q.mixed && i < N_MIXES; i++)
        if (mixes[i].type == q.type) return (int)i;
    return -1;
}

bool weft_qtarget_parse(const char *name, struct weft_qtarget *out)
{
    for (size_t i = 0; i < N_MIXES; i++) {
        if (strcasecmp(name, mixes[i].name) == 0) {
            *out = (struct weft_qtarget){mixes[i].type, true};
            return true;
        }
    }
    enum weft_type t;
    if (!weft_type_from_name(name, &t)) return false;
    *out = (struct weft_qtarget){t, false};
    return true;
}

const char *weft_qtarget_name(struct weft_qtarget q)
{
    int m = mix_index(q);
    return m >= 0 ? mixes[m].name : weft_type_name(q.type);
}

bool weft_qtarget_writable(struct weft_qtarget q)
{
    if (q.mixed) return mix_index(q) >= 0;
    switch (q.type) {
    case WEFT_TYPE_F32: case WEFT_TYPE_F16: case WEFT_TYPE_BF16: case WEFT_TYPE_Q8_0:
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q5_1:
    case WEFT_TYPE_Q2_K: case WEFT_TYPE_Q3_K: case WEFT_TYPE_Q4_K: case WEFT_TYPE_Q5_K: case WEFT_TYPE_Q6_K:
    case WEFT_TYPE_IQ4_NL: case WEFT_TYPE_IQ4_XS: case WEFT_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

int weft_qtarget_ftype(struct weft_qtarget q)
{
    int m = mix_index(q);
    return m >= 0 ? mixes[m].ftype : weft_gen_ftype(q.type);
}

/* ---- llama-quantize's per-tensor choice ---- */

/* tensor_allows_quantization, for tensors of 2 or more dims: names ending in
 * "weight", minus the tensors llama.cpp keeps as they are. */
static bool llama_quantizes(const char *name)
{
    static const char *const keep[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
        "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight") != 0) return false;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i])) return false;
    return strcmp(name, "position_embd.weight") != 0 && strcmp(name, "token_types.weight") != 0;
}

/* tensor_get_category: the first match wins */
enum qcat { CAT_TOKEN_EMBD, CAT_OUTPUT, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q,
            CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OTHER };

static enum qcat category(const char *name)
{
    if (strcmp(name, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    static const struct { const char *part; enum qcat c; } parts[] = {
        {"attn_qkv.weight", CAT_ATTN_QKV}, {"attn_kv_b.weight", CAT_ATTN_KV_B}, {"attn_v.weight", CAT_ATTN_V},
        {"attn_k.weight", CAT_ATTN_K}, {"attn_q.weight", CAT_ATTN_Q}, {"attn_output.weight", CAT_ATTN_OUTPUT},
        {"ffn_up", CAT_FFN_UP}, {"ffn_gate", CAT_FFN_GATE}, {"ffn_down", CAT_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strstr(name, parts[i].part)) return parts[i].c;
    return CAT_OTHER;
}

/* the attention tensors llama.cpp treats as attn_v (more sensitive to quantization) */
static bool is_attn_v_like(enum qcat c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* "blk.N." -> N, else -1 (sscanf, as llama.cpp's tensor order and layer_info read it) */
static int layer_of(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) return -1;
    return l;
}

/* the layers the _M mixes give more bits: the first and last eighth and every third between */
static bool use_more_bits(int i_layer, int n_layer)
{
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

struct mix_state {
    const struct weft_qmodel *m;
    int ftype;
    bool tied;          /* no output.weight: token_embd is the output head too */
    int n_attn_v, i_attn_v, n_layer, i_ffn_down, i_ffn_gate, i_ffn_up;
};

static bool arch_is(const struct weft_qmodel *m, const char *a) { return m->arch && strcmp(m->arch, a) == 0; }

/* llama.cpp's LLM_TYPE_70B (the mix gives its attn_v more bits): llama (dense, GQA) and qwen2 at 80 layers */
static bool is_70b(const struct weft_qmodel *m)
{
    if (m->n_layer != 80) return false;
    if (arch_is(m, "qwen2")) return true;
    return arch_is(m, "llama") && m->n_expert <= 1 && m->n_head_kv && m->n_head != m->n_head_kv;
}

/* layer_info: in an expert model the layer comes from the name, else from the running counter */
static weft_status ffn_layer(const struct mix_state *s, int counter, const char *name, int *i_layer)
{
    if (s->m->n_expert <= 1) {
        *i_layer = counter;
        return WEFT_OK;
    }
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1)
        return weft_error(WEFT_ERR_FORMAT, "cannot determine the layer of tensor %s", name);
    if (l < 0 || l >= s->n_layer)
        return weft_error(WEFT_ERR_FORMAT, "tensor %s: layer %d out of [0, %d)", name, l, s->n_layer);
    *i_layer = l;
    return WEFT_OK;
}

/* llama_tensor_get_type_impl, for the mixes weft writes (Q4_K_M, Q5_K_M, MXFP4_MOE); the branches
 * of other file types are left out. Called in llama.cpp's tensor order, for quantizable tensors. */
static weft_status mix_choose(struct mix_state *s, const struct weft_qtensor *t, enum weft_type *type)
{
    const struct weft_qmodel *m = s->m;
    enum qcat c = category(t->name);
    enum weft_type nt = *type;
    bool falcon = arch_is(m, "falcon"), q4km = s->ftype == FTYPE_Q4_K_M, q5km = s->ftype == FTYPE_Q5_K_M;
    weft_status st = WEFT_OK;
    int il = 0;
    if (c == CAT_OUTPUT || (s->tied && c == CAT_TOKEN_EMBD)) {
        if (s->ftype == FTYPE_MXFP4_MOE || falcon || t->ne[0] % weft_type_get(nt)->block_size)
            nt = WEFT_TYPE_Q8_0;
        else if (nt != WEFT_TYPE_Q8_0)
            nt = WEFT_TYPE_Q6_K;
    } else if (s->ftype == FTYPE_MXFP4_MOE) {
        /* experts (3-D) in MXFP4, the rest Q8_0; bailingmoe3's 3-D MLA projections are no experts */
        bool expert_role = c == CAT_FFN_UP || c == CAT_FFN_GATE || c == CAT_FFN_DOWN;
        nt = t->ne[2] > 1 && (!arch_is(m, "bailingmoe3") || expert_role) ? WEFT_TYPE_MXFP4 : WEFT_TYPE_Q8_0;
    } else if (c == CAT_TOKEN_EMBD) {
        /* stays the default for these mixes */
    } else if (is_attn_v_like(c)) { /* attn_qkv lands here too, before its own branch upstream */
        if ((q4km || q5km) && use_more_bits(s->i_attn_v, s->n_attn_v)) nt = WEFT_TYPE_Q6_K;
        if (is_70b(m) && (nt == WEFT_TYPE_Q3_K || nt == WEFT_TYPE_Q4_K)) nt = WEFT_TYPE_Q5_K;
        if (m->n_expert == 8) nt = WEFT_TYPE_Q8_0;
        s->i_attn_v++;
    } else if (c == CAT_ATTN_K) {
        if (m->n_expert == 8) nt = WEFT_TYPE_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        if ((st = ffn_layer(s, s->i_ffn_down, t->name, &il))) return st;
        if (q4km) {
            if (falcon)
                nt = il < s->n_layer / 16 ? WEFT_TYPE_Q6_K
                   : use_more_bits(il, s->n_layer) ? WEFT_TYPE_Q5_K : WEFT_TYPE_Q4_K;
            else if (use_more_bits(il, s->n_layer))
                nt = WEFT_TYPE_Q6_K;
        } else if (q5km && use_more_bits(il, s->n_layer)) {
            nt = WEFT_TYPE_Q6_K;
        }
        s->i_ffn_down++;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (!falcon && m->n_expert == 8 && q4km) nt = WEFT_TYPE_Q5_K;
    } else if (c == CAT_FFN_GATE) {
        if ((st = ffn_layer(s, s->i_ffn_gate, t->name, &il))) return st;
        s->i_ffn_gate++;
    } else if (c == CAT_FFN_UP) {
        if ((st = ffn_layer(s, s->i_ffn_up, t->name, &il))) return st;
        s->i_ffn_up++;
    }
    *type = nt;
    return WEFT_OK;
}

/* llama.cpp's tensor order (llama_model_loader's weights_map): layer number, then name */
struct order_key {
    int layer;
    const char *name;
    size_t index;
};

static int order_cmp(const void *a, const void *b)
{
    const struct order_key *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

weft_status weft_qtarget_choose(struct weft_qtarget q, const struct weft_qmodel *m, struct weft_qtensor *t, size_t n)
{
    struct order_key *ord = malloc(sizeof *ord * (n ? n : 1));
    if (!ord) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    struct mix_state s = {.m = m, .ftype = weft_qtarget_ftype(q), .tied = true, .n_layer = (int)m->n_layer};
    for (size_t i = 0; i < n; i++) {
        ord[i] = (struct order_key){layer_of(t[i].name), t[i].name, i};
        enum qcat c = category(t[i].name);
        if (is_attn_v_like(c)) s.n_attn_v++;
        if (c == CAT_OUTPUT) s.tied = false;
    }
    qsort(ord, n, sizeof *ord, order_cmp);
    weft_status st = WEFT_OK;
    for (size_t k = 0; k < n && !st; k++) {
        struct weft_qtensor *x = &t[ord[k].index];
        x->why = WEFT_QWHY_TARGET;
        if (x->n_dims < 2) {
            x->out = x->wanted = WEFT_TYPE_F32;
            x->why = WEFT_QWHY_VECTOR;
            continue;
        }
        if (!llama_quantizes(x->name)) {
            x->out = x->wanted = x->type;
            x->why = WEFT_QWHY_NOT_QUANTIZED;
            continue;
        }
        enum weft_type ty = q.type;
        if (weft_type_get(ty)->is_quantized) {
            if (q.mixed) {
                st = mix_choose(&s, x, &ty);
                if (ty != q.type) x->why = WEFT_QWHY_MIX;
            }
            x->wanted = ty;
            if (x->ne[0] % weft_type_get(ty)->block_size) {
                enum weft_type fb = weft_gen_row_type(ty, (uint32_t)x->ne[0]);
                if (fb == ty) {
                    ty = x->type;
                    x->why = WEFT_QWHY_KEPT;
                } else {
                    ty = x->ne[0] % weft_type_get(fb)->block_size ? WEFT_TYPE_F16 : fb;
                    x->why = WEFT_QWHY_FALLBACK;
                }
            }
        }
        x->out = ty;
        if (x->why != WEFT_QWHY_FALLBACK && x->why != WEFT_QWHY_KEPT) x->wanted = ty;
    }
    free(ord);
    return st;
}

/* ---- the command ---- */

static void quant_usage(FILE *f)
{
    fprintf(f, "usage: weft quantize IN OUT TYPE\n"
               "TYPE: every matrix in F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K\n"
               "      IQ4_NL IQ4_XS MXFP4 (as llama-quantize --pure), or llama.cpp's mixes Q4_K_M, Q5_K_M,\n"
               "      MXFP4_MOE; norms stay F32\n");
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* One tensor's rows, split over threads: row r goes to thread r % n_threads. */
struct convert_job {
    const struct weft_gguf_tensor *t;
    enum weft_type to;
    void *dst;
    int n_threads, index;
    bool ok;
};

static void *convert_rows(void *arg)
{
    struct convert_job *j = arg;
    const struct weft_gguf_tensor *t = j->t;
    int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t rs_in = weft_row_size(t->type, ne0), rs_out = weft_row_size(j->to, ne0);
    float *row = malloc(sizeof *row * (size_t)ne0);
    j->ok = row != NULL;
    for (int64_t r = j->index; j->ok && r < rows; r += j->n_threads) {
        weft_dequantize_row(t->type, (const unsigned char *)t->data + (size_t)r * rs_in, row, ne0);
        j->ok = weft_quantize_row(j->to, row, (unsigned char *)j->dst + (size_t)r * rs_out, ne0);
    }
    free(row);
    return NULL;
}

/* Convert one tensor into dst (weft_row_size(to, ne0) * rows bytes) via f32 rows. */
static bool convert(const struct weft_gguf_tensor *t, enum weft_type to, void *dst)
{
    enum { MAX_THREADS = 32 };
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nc < 1 ? 1 : nc > MAX_THREADS ? MAX_THREADS : (int)nc;
    if (rows < 4 * nt) nt = 1; /* small tensors: not worth a thread */
    struct convert_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int i = 0; i < nt; i++) {
        jobs[i] = (struct convert_job){t, to, dst, nt, i, false};
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, convert_rows, &jobs[i]) == 0;
    }
    convert_rows(&jobs[0]);
    bool ok = jobs[0].ok;
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else convert_rows(&jobs[i]); /* no thread: do its rows here */
        ok = ok && jobs[i].ok;
    }
    return ok;
}

static uint32_t model_u32(const struct weft_gguf *g, const char *arch, const char *key)
{
    char k[128];
    uint32_t v = 0;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (weft_gguf_get_u32(g, k, &v) != WEFT_OK) v = 0; /* absent, or an array (per-layer counts) */
    return v;
}

static const char *why_note(enum weft_qwhy w)
{
    switch (w) {
    case WEFT_QWHY_MIX: return " (mix)";
    case WEFT_QWHY_FALLBACK: return " (fallback)";
    case WEFT_QWHY_KEPT: return " (kept)";
    case WEFT_QWHY_NOT_QUANTIZED: return " (not quantized)";
    default: return "";
    }
}

int weft_cmd_quantize(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        quant_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "weft quantize: unknown option '%s'\n", argv[i]);
            quant_usage(stderr);
            return 2;
        }
    if (argc != 4) {
        quant_usage(stderr);
        return 2;
    }
    const char *in = argv[1], *out = argv[2];
    struct weft_qtarget q;
    if (!weft_qtarget_parse(argv[3], &q)) {
        fprintf(stderr, "weft: quantize: unknown type '%s'\n", argv[3]);
        quant_usage(stderr);
        return 2;
    }
    if (!weft_qtarget_writable(q)) {
        const struct weft_type_info *ti = weft_type_get(q.type);
        fprintf(stderr, "weft: quantize: cannot quantize to %s (%s); see weft quantize --help\n",
                weft_type_name(q.type), ti && ti->weight_ok ? "no quantizer for this type" : "not a weight type");
        return 1;
    }
    if (same_file(in, out)) {
        fprintf(stderr, "weft: quantize: output %s is the input file; write to another path\n", out);
        return 1;
    }

    struct weft_gguf *g = NULL;
    struct weft_gguf_writer *w = NULL;
    struct weft_scratch scratch = {0};
    struct weft_qtensor *qt = NULL;
    int rc = 1;
    weft_status st = weft_gguf_open(in, &g);
    if (st) {
        fprintf(stderr, "weft: quantize: %s\n", weft_last_error());
        return 1;
    }

    int64_t n = weft_gguf_n_tensors(g);
    const char *arch = "";
    weft_gguf_get_str(g, "general.architecture", &arch, NULL);
    struct weft_qmodel m = {.arch = arch, .n_layer = model_u32(g, arch, "block_count"),
                            .n_expert = model_u32(g, arch, "expert_count"),
                            .n_head = model_u32(g, arch, "attention.head_count"),
                            .n_head_kv = model_u32(g, arch, "attention.head_count_kv")};
    qt = calloc((size_t)(n ? n : 1), sizeof *qt);
    if (!qt) { st = weft_error(WEFT_ERR_NOMEM, "out of memory"); goto fail; }
    for (int64_t i = 0; i < n; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        qt[i] = (struct weft_qtensor){.name = t->name, .type = t->type, .n_dims = t->n_dims};
        memcpy(qt[i].ne, t->ne, sizeof qt[i].ne);
    }
    if ((st = weft_qtarget_choose(q, &m, qt, (size_t)n))) goto fail;

    size_t need = 0, size_in = 0, size_out = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        if (qt[i].out != t->type) need += (weft_row_size(qt[i].out, t->ne[0]) * (size_t)rows + 63) & ~(size_t)63;
    }
    char dir[4096]; /* scratch file (if needed) goes next to the output */
    const char *slash = strrchr(out, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == out ? 1 : (int)(slash - out), out);
    if ((st = weft_scratch_init(&scratch, need, dir))) goto fail;

    if ((st = weft_gguf_writer_init(&w))) goto fail;
    if ((st = weft_gguf_writer_copy_kvs(w, g, NULL))) goto fail;
    if ((st = weft_gguf_writer_set_u32(w, "general.file_type", (uint32_t)weft_qtarget_ftype(q)))) goto fail;
    if (weft_type_get(q.type)->is_quantized &&
        (st = weft_gguf_writer_set_u32(w, "general.quantization_version", 2)))
        goto fail;

    for (int64_t i = 0; i < n; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        enum weft_type tt = qt[i].out;
        if (qt[i].why == WEFT_QWHY_FALLBACK || qt[i].why == WEFT_QWHY_KEPT)
            printf("warning: %s: row length %" PRId64 " is not a multiple of %s's block size %" PRIu32 "; %s %s\n",
                   t->name, t->ne[0], weft_type_name(qt[i].wanted), weft_type_get(qt[i].wanted)->block_size,
                   qt[i].why == WEFT_QWHY_KEPT ? "keeping" : "falling back to", weft_type_name(tt));
        const void *data = t->data;
        size_t size = t->size;
        if (tt != t->type) {
            size = weft_row_size(tt, t->ne[0]) * (size_t)rows;
            void *dst = weft_scratch_take(&scratch, size);
            if (!dst || !convert(t, tt, dst)) {
                st = weft_error(WEFT_ERR_UNSUPPORTED, "%s: cannot convert %s to %s", t->name,
                                weft_type_name(t->type), weft_type_name(tt));
                goto fail;
            }
            data = dst;
        }
        if ((st = weft_gguf_writer_add_tensor(w, t->name, tt, t->n_dims, t->ne, data))) goto fail;
        size_in += t->size;
        size_out += size;
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[%" PRId64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && len < (int)sizeof shape; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, ", %" PRId64, t->ne[d]);
        if (len < (int)sizeof shape) snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("[%4" PRId64 "/%4" PRId64 "] %-32s %-20s %6s -> %-6s %10.3f MiB -> %10.3f MiB%s\n", i + 1, n,
               t->name, shape, weft_type_name(t->type), weft_type_name(tt), mib(t->size), mib(size),
               why_note(qt[i].why));
    }
    if ((st = weft_gguf_writer_write(w, out))) goto fail;
    printf("quantized %s -> %s (%s): %" PRId64 " tensors, %.2f MiB -> %.2f MiB (%.1f%%)\n", in, out,
           weft_qtarget_name(q), n, mib(size_in), mib(size_out),
           size_in ? 100.0 * (double)size_out / (double)size_in : 100.0);
    rc = 0;
    goto done;

fail:
    fprintf(stderr, "weft: quantize: %s\n", *weft_last_error() ? weft_last_error() : weft_status_str(st));
done:
    free(qt);
    if (w) weft_gguf_writer_free(w);
    weft_scratch_free(&scratch);
    weft_gguf_close(g);
    return rc;
}
