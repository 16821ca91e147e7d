/* Running an op list on the HIP backend: each op becomes one or two
 * kernel launches on the backend's stream (kernels-hip/hip_kernels.h).
 *
 * Graphs (when on, see hip_backend.c): a step's launches are described by
 * a key (every view's buffer id, offset and shape, every scalar; not the
 * data). The first time a key is seen the ops run eagerly; the second time they are captured into
 * a graph and launched; from then on the graph is replayed, so a decode
 * step costs one launch instead of dozens. Data that changes between steps
 * (token ids, positions, block tables) lives in device buffers the kernels
 * read, and launch shapes never depend on it: a graph stays valid while
 * contexts grow. Scratch growth drops every graph (they hold its address). */
#include "backends/hip/hip_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint8_t *vptr(const struct weft_view *v) { return v->buf->dev + v->offset; }
static inline const int32_t *vi32(const struct weft_view *v) { return (const int32_t *)vptr(v); }
static inline float *vf32(const struct weft_view *v) { return (float *)vptr(v); }
static inline size_t ld(const struct weft_view *v) { return v->nb1 / sizeof(float); }

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static int attn_splits(const struct weft_hip_backend *be, const struct weft_op_attention *o)
{
    return weft_hip_attn_splits(o->batch.n_rows, (int)o->n_head, be->n_cu);
}

/* scratch bytes an op needs while it runs */
static size_t op_scratch(const struct weft_hip_backend *be, const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_MATMUL:
        return weft_hip_matmul_scratch((int)op->u.matmul.w.type, op->u.matmul.w.ne0, op->u.matmul.x.ne1);
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        return align256((size_t)o->rows.ne0 * o->x.ne0 * sizeof(float)) +
               weft_hip_matmul_scratch((int)o->w.type, o->w.ne0, o->rows.ne0);
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        return weft_hip_attention_scratch(o->batch.n_rows, (int)o->n_head, (int)o->kv.head_dim, attn_splits(be, o));
    }
    default:
        return 0;
    }
}

static weft_status ensure_scratch(struct weft_hip_backend *be, size_t need)
{
    if (need <= be->scratch_size) return WEFT_OK;
    size_t cap = align256(need + need / 2);
    hipError_t e = hipStreamSynchronize(be->stream);
    if (e != hipSuccess) return weft_hip_err(e, "waiting before growing scratch");
    weft_hip_graphs_clear(be);
    if (be->scratch) hipFree(be->scratch);
    be->scratch = NULL;
    be->scratch_size = 0;
    if ((e = hipMalloc((void **)&be->scratch, cap)) != hipSuccess) {
        be->scratch = NULL;
        return weft_hip_err(e, "allocating scratch");
    }
    be->scratch_size = cap;
    return WEFT_OK;
}

static struct weft_hip_kv kv_desc(const struct weft_kv_view *kv)
{
    struct weft_hip_kv d = {kv->buf->dev, (int)kv->type, (int)kv->n_layer, (int)kv->layer, (int)kv->n_kv_head,
                           (int)kv->head_dim};
    return d;
}

static const char *const op_names[WEFT_OP_COUNT_] = {"EMBED", "RMSNORM", "MATMUL", "ROPE_KV", "ATTENTION",
                                                     "SILU_MUL", "ADD", "COPY", "LOGITS"};

static hipError_t encode_op(struct weft_hip_backend *be, const struct weft_op *op)
{
    hipStream_t st = be->stream;
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_op_embed *o = &op->u.embed;
        return weft_hip_embed((int)o->table.type, vptr(&o->table), o->table.nb1, o->table.ne1, o->table.ne0,
                             vi32(&o->ids), o->ids.ne0, vf32(&o->out), ld(&o->out), be->err_dev, st);
    }
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        return weft_hip_rmsnorm(vf32(&o->x), ld(&o->x), NULL, o->x.ne1, o->has_add ? vf32(&o->add) : NULL,
                               o->has_add ? ld(&o->add) : 0, o->has_add ? vf32(&o->sum) : NULL,
                               o->has_add ? ld(&o->sum) : 0, vf32(&o->w), vf32(&o->out), ld(&o->out), o->x.ne1,
                               o->x.ne0, o->eps, be->err_dev, st);
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        struct weft_hip_mm m = {(int)o->w.type, vptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, o->x.ne1,
                               vf32(&o->x), ld(&o->x), vf32(&o->out), ld(&o->out),
                               o->has_add ? vf32(&o->add) : NULL, o->has_add ? ld(&o->add) : 0};
        return weft_hip_matmul(&m, be->scratch, st);
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        struct weft_hip_kv kv = kv_desc(&o->kv);
        /* as the CPU: theta_scale from the host's powf */
        float theta_scale = powf(o->freq_base, -2.0f / (float)o->n_rot);
        return weft_hip_rope_kv(vf32(&o->q), ld(&o->q), vf32(&o->k), ld(&o->k), vf32(&o->v), ld(&o->v),
                               vi32(&o->batch.pos), vi32(&o->batch.slot), o->batch.n_rows, (int)o->n_head,
                               (int)o->n_rot, theta_scale, o->freq_scale, o->mode == WEFT_ROPE_NEOX, &kv, st);
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        struct weft_hip_attn_args a = {vf32(&o->q), ld(&o->q), vf32(&o->out), ld(&o->out), kv_desc(&o->kv),
                                      vi32(&o->batch.pos), vi32(&o->batch.seq), vi32(&o->batch.bt_off),
                                      vi32(&o->batch.bt), o->batch.n_rows, (int)o->n_head, o->scale};
        return weft_hip_attention(&a, attn_splits(be, o), be->scratch, st);
    }
    case WEFT_OP_SILU_MUL: {
        const struct weft_op_silu_mul *o = &op->u.silu_mul;
        return weft_hip_silu_mul(vf32(&o->gate), ld(&o->gate), vf32(&o->up), ld(&o->up), vf32(&o->out), ld(&o->out),
                                o->out.ne1, o->out.ne0, st);
    }
    case WEFT_OP_ADD: {
        const struct weft_op_add *o = &op->u.add;
        return weft_hip_add(vf32(&o->a), ld(&o->a), vf32(&o->b), ld(&o->b), vf32(&o->out), ld(&o->out), o->out.ne1,
                           o->out.ne0, st);
    }
    case WEFT_OP_COPY: {
        const struct weft_op_copy *o = &op->u.copy;
        if (!o->bytes) return hipSuccess;
        return hipMemcpyAsync(o->dst->dev + o->dst_off, o->src->dev + o->src_off, o->bytes, hipMemcpyDeviceToDevice,
                               st);
    }
    case WEFT_OP_LOGITS: {
        /* rmsnorm of the listed rows into scratch, then the output matmul */
        const struct weft_op_logits *o = &op->u.logits;
        const int64_t n_out = o->rows.ne0, K = o->x.ne0;
        float *normed = (float *)be->scratch;
        hipError_t e = weft_hip_rmsnorm(vf32(&o->x), ld(&o->x), vi32(&o->rows), o->x.ne1, NULL, 0, NULL, 0,
                                        vf32(&o->norm_w), normed, (size_t)K, n_out, K, o->eps, be->err_dev, st);
        if (e != hipSuccess) return e;
        struct weft_hip_mm m = {(int)o->w.type, vptr(&o->w), o->w.nb1, o->w.ne0, o->w.ne1, n_out, normed, (size_t)K,
                               vf32(&o->out), ld(&o->out), NULL, 0};
        return weft_hip_matmul(&m, be->scratch + align256((size_t)n_out * K * sizeof(float)), st);
    }
    default:
        return hipErrorInvalidValue;
    }
}

static weft_status encode_all(struct weft_hip_backend *be, const struct weft_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hipError_t e = encode_op(be, &ops[i]);
        if (e != hipSuccess) {
            char what[64];
            snprintf(what, sizeof what, "op %zu (%s)", i, (unsigned)ops[i].kind < WEFT_OP_COUNT_ ? op_names[ops[i].kind] : "?");
            return weft_hip_err(e, what);
        }
    }
    return WEFT_OK;
}

/* ---- graph keys ---- */

struct keyb {
    uint64_t *p;
    size_t n, cap;
    bool oom;
};

static void put(struct keyb *k, uint64_t v)
{
    if (k->oom) return;
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        uint64_t *p = realloc(k->p, cap * sizeof *p);
        if (!p) { k->oom = true; return; }
        k->p = p;
        k->cap = cap;
    }
    k->p[k->n++] = v;
}

static void put_f(struct keyb *k, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put(k, u);
}

static void put_view(struct keyb *k, const struct weft_view *v)
{
    put(k, v->buf ? v->buf->id : 0);
    put(k, v->offset);
    put(k, (uint64_t)v->type);
    put(k, (uint64_t)v->ne0);
    put(k, (uint64_t)v->ne1);
    put(k, v->nb1);
}

static void put_kv(struct keyb *k, const struct weft_kv_view *kv)
{
    put(k, kv->buf ? kv->buf->id : 0);
    put(k, (uint64_t)kv->type);
    put(k, kv->n_layer);
    put(k, kv->layer);
    put(k, kv->n_kv_head);
    put(k, kv->head_dim);
}

static void put_batch(struct keyb *k, const struct weft_batch_view *b)
{
    put(k, b->n_rows);
    put(k, b->n_seq);
    put_view(k, &b->pos);
    put_view(k, &b->seq);
    put_view(k, &b->slot);
    put_view(k, &b->bt_off);
    /* the block table's length is not a launch parameter: only where it is */
    put(k, b->bt.buf ? b->bt.buf->id : 0);
    put(k, b->bt.offset);
}

static void put_op(struct keyb *k, const struct weft_op *op)
{
    put(k, (uint64_t)op->kind);
    switch (op->kind) {
    case WEFT_OP_EMBED:
        put_view(k, &op->u.embed.table); put_view(k, &op->u.embed.ids); put_view(k, &op->u.embed.out);
        break;
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        put_view(k, &o->x); put_view(k, &o->w); put_view(k, &o->out); put_f(k, o->eps); put(k, o->has_add);
        if (o->has_add) { put_view(k, &o->add); put_view(k, &o->sum); }
        break;
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        put_view(k, &o->x); put_view(k, &o->w); put_view(k, &o->out); put(k, o->has_add);
        if (o->has_add) put_view(k, &o->add);
        break;
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        put_view(k, &o->q); put_view(k, &o->k); put_view(k, &o->v); put_kv(k, &o->kv); put_batch(k, &o->batch);
        put(k, o->n_head); put(k, o->n_rot); put_f(k, o->freq_base); put_f(k, o->freq_scale); put(k, (uint64_t)o->mode);
        break;
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        put_view(k, &o->q); put_view(k, &o->out); put_kv(k, &o->kv); put_batch(k, &o->batch);
        put(k, o->n_head); put_f(k, o->scale);
        break;
    }
    case WEFT_OP_SILU_MUL:
        put_view(k, &op->u.silu_mul.gate); put_view(k, &op->u.silu_mul.up); put_view(k, &op->u.silu_mul.out);
        break;
    case WEFT_OP_ADD:
        put_view(k, &op->u.add.a); put_view(k, &op->u.add.b); put_view(k, &op->u.add.out);
        break;
    case WEFT_OP_COPY:
        put(k, op->u.copy.src->id); put(k, op->u.copy.dst->id);
        put(k, op->u.copy.src_off); put(k, op->u.copy.dst_off); put(k, op->u.copy.bytes);
        break;
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        put_view(k, &o->x); put_view(k, &o->rows); put_view(k, &o->norm_w); put_view(k, &o->w); put_view(k, &o->out);
        put_f(k, o->eps);
        break;
    }
    default:
        break;
    }
}

static void graph_drop(struct weft_hip_graph *g)
{
    if (g->exec) hipGraphExecDestroy(g->exec);
    free(g->key);
    memset(g, 0, sizeof *g);
}

void weft_hip_graphs_clear(struct weft_hip_backend *be)
{
    for (int i = 0; i < WEFT_HIP_N_GRAPHS; i++) graph_drop(&be->graph[i]);
}

/* Capture ops into a graph for g and launch it. On a capture failure
 * graphs are turned off for this backend and the ops run eagerly. */
static weft_status capture_and_launch(struct weft_hip_backend *be, struct weft_hip_graph *g,
                                      const struct weft_op *ops, size_t n)
{
    hipError_t e = hipStreamBeginCapture(be->stream, hipStreamCaptureModeThreadLocal);
    if (e == hipSuccess) {
        bool launched_ok = true;
        for (size_t i = 0; i < n && launched_ok; i++) launched_ok = encode_op(be, &ops[i]) == hipSuccess;
        hipGraph_t graph = NULL;
        e = hipStreamEndCapture(be->stream, &graph);
        if (e == hipSuccess && !launched_ok) e = hipErrorStreamCaptureInvalidated;
        hipGraphExec_t exec = NULL;
        if (e == hipSuccess) e = hipGraphInstantiateWithFlags(&exec, graph, 0);
        if (graph) hipGraphDestroy(graph);
        if (e == hipSuccess) {
            g->exec = exec;
            be->n_captures++;
            be->n_graph_launches++;
            e = hipGraphLaunch(exec, be->stream);
            return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "launching a step graph");
        }
    }
    if (e == hipErrorOutOfMemory) return weft_hip_err(e, "capturing a step graph");
    hipGetLastError();
    if (getenv("WEFT_HIP_DEBUG"))
        fprintf(stderr, "weft hip: graph capture failed (%s); running without graphs\n", hipGetErrorString(e));
    be->graphs = false;
    weft_hip_graphs_clear(be);
    return encode_all(be, ops, n);
}

weft_status weft_hip_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct weft_hip_backend *be = (struct weft_hip_backend *)b;
    hipSetDevice(be->device);
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = op_scratch(be, &ops[i]);
        if (s > need) need = s;
    }
    weft_status st = ensure_scratch(be, need);
    if (st != WEFT_OK) return st;
    if (!be->graphs || n < 2) return encode_all(be, ops, n);

    struct keyb k = {be->key_tmp, 0, be->key_cap, false};
    for (size_t i = 0; i < n; i++) put_op(&k, &ops[i]);
    be->key_tmp = k.p;
    be->key_cap = k.cap;
    if (k.oom) return encode_all(be, ops, n);

    be->use_clock++;
    struct weft_hip_graph *hit = NULL, *lru = &be->graph[0];
    for (int i = 0; i < WEFT_HIP_N_GRAPHS; i++) {
        struct weft_hip_graph *g = &be->graph[i];
        if (g->key && g->key_len == k.n && !memcmp(g->key, k.p, k.n * sizeof *k.p)) { hit = g; break; }
        if (g->last_use < lru->last_use) lru = g;
    }
    if (hit) {
        hit->last_use = be->use_clock;
        hit->seen++;
        if (hit->exec) {
            be->n_graph_launches++;
            hipError_t e = hipGraphLaunch(hit->exec, be->stream);
            return e == hipSuccess ? WEFT_OK : weft_hip_err(e, "launching a step graph");
        }
        return capture_and_launch(be, hit, ops, n);
    }
    /* first sighting: run eagerly, remember the key */
    st = encode_all(be, ops, n);
    if (st != WEFT_OK) return st;
    uint64_t *key = malloc(k.n * sizeof *key);
    if (!key) return WEFT_OK;   /* just no graph for it */
    memcpy(key, k.p, k.n * sizeof *key);
    graph_drop(lru);
    lru->key = key;
    lru->key_len = k.n;
    lru->seen = 1;
    lru->last_use = be->use_clock;
    return WEFT_OK;
}
