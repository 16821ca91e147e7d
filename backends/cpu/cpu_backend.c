/* CPU backend: devices, buffers (host memory), op validation and dispatch. */
#include "backends/cpu/cpu_impl.h"
#include "base/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cpu_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int cpu_devices(struct weft_device_info *infos, int max, const char **why)
{
    if (max < 1) return 1;
    memset(&infos[0], 0, sizeof infos[0]);
    snprintf(infos[0].name, sizeof infos[0].name, "CPU (%d cores, %s kernels)", cpu_default_threads(),
             weft_cpu_isa_name(weft_cpu_isa_select(weft_backend_options())));
    snprintf(infos[0].id, sizeof infos[0].id, "cpu:0");
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) infos[0].mem_total = (uint64_t)pages * (uint64_t)psz;
    if (avail > 0 && psz > 0) infos[0].mem_free = (uint64_t)avail * (uint64_t)psz;
    infos[0].n_threads = (uint32_t)cpu_default_threads();
    return 1;
}


static void profile_print(const struct weft_cpu_backend *be)
{
    double total = 0.0;
    for (int k = 0; k < WEFT_OP_COUNT_; k++) total += be->prof_s[k];
    fprintf(stderr, "cpu profile (%d threads): %.3f s in ops\n", weft_cpu_pool_threads(be->pool), total);
    fprintf(stderr, "  %-10s %10s %6s %12s %10s %12s\n", "op", "s", "%", "calls", "us/call", "rows/call");
    for (int k = 0; k < WEFT_OP_COUNT_; k++) {
        if (!be->prof_calls[k]) continue;
        fprintf(stderr, "  %-10s %10.3f %6.1f %12llu %10.1f %12.1f\n", weft_op_name((enum weft_op_kind)k), be->prof_s[k],
                total > 0 ? 100.0 * be->prof_s[k] / total : 0.0, (unsigned long long)be->prof_calls[k],
                1e6 * be->prof_s[k] / (double)be->prof_calls[k],
                (double)be->prof_rows[k] / (double)be->prof_calls[k]);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* rows an op works on, for the profile */
static int64_t op_rows(const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_MATMUL: return op->u.matmul.x.ne1;
    case WEFT_OP_LOGITS: return op->u.logits.rows.ne0;
    case WEFT_OP_RMSNORM: return op->u.rmsnorm.x.ne1;
    case WEFT_OP_MATMUL_ID: return op->u.matmul_id.ids.ne1;
    case WEFT_OP_SSM_CONV: return op->u.ssm_conv.x.ne1;
    case WEFT_OP_DELTA_NET: return op->u.delta_net.in.ne1;
    default: return 0;
    }
}

static void cpu_close(struct weft_backend *b)
{
    struct weft_cpu_backend *be = (struct weft_cpu_backend *)b;
    if (!be) return;
    if (be->profile) profile_print(be);
    weft_cpu_pool_free(be->pool);
    free(be->scratch);
    free(be->rope_cs);
    free(be->rope_pos);
    free(be);
}

static const struct weft_backend_iface cpu_iface;

static weft_status cpu_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    if (p->device != 0) return weft_error(WEFT_ERR_NO_DEVICE, "cpu: no device %d (only cpu:0)", p->device);
    static const char *const known[] = {"cpu.isa", "cpu.nopack", "cpu.profile", "cpu.prefetch"};
    char bad[64];
    if (weft_opt_unknown(p->options, "cpu.", known, sizeof known / sizeof known[0], bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, "cpu: unknown option '%s' (known: cpu.isa, cpu.nopack, cpu.profile, cpu.prefetch)",
                          bad);
    char pf[32];
    long prefetch = weft_cpu_prefetch_default();
    if (weft_opt_get(p->options, "cpu.prefetch", pf, sizeof pf) && pf[0]) {
        prefetch = strcmp(pf, "off") == 0 ? -1 : weft_opt_long(p->options, "cpu.prefetch", 0, 65536, -2);
        if (prefetch == -2 || (prefetch > 0 && prefetch % 64))
            return weft_error(WEFT_ERR_INVALID_ARG,
                              "cpu: cpu.prefetch=%s is neither off nor a byte distance (a multiple of 64, 0 to 65536)",
                              pf);
    }
    struct weft_cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return weft_error(WEFT_ERR_NOMEM, "cpu: out of memory");
    be->base.iface = &cpu_iface;
    be->kern = weft_cpu_kernels_get(weft_cpu_isa_select(p->options));
    __atomic_store_n(&weft_cpu_prefetch, (int)prefetch, __ATOMIC_RELAXED);
    be->no_pack = weft_opt_flag(p->options, "cpu.nopack", false);
    be->profile = weft_opt_flag(p->options, "cpu.profile", false);
    be->rope_rows = -1;
    int nt = p->n_threads > 0 ? p->n_threads : cpu_default_threads();
    weft_status st = weft_cpu_pool_init(nt, &be->pool);
    if (st != WEFT_OK) { cpu_close(&be->base); return st; }
    *out = &be->base;
    return WEFT_OK;
}

weft_status weft_cpu_scratch(struct weft_cpu_backend *be, size_t size)
{
    if (size <= be->scratch_size) return WEFT_OK;
    size_t cap = size + size / 2 + 4096;
    uint8_t *p = aligned_alloc(64, (cap + 63) & ~(size_t)63);
    if (!p) return weft_error(WEFT_ERR_NOMEM, "cpu: out of memory for %zu bytes of scratch", cap);
    if (be->scratch_size) memcpy(p, be->scratch, be->scratch_size);  /* contents kept, address not */
    free(be->scratch);
    be->scratch = p;
    be->scratch_size = cap;
    return WEFT_OK;
}

static weft_status cpu_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    size_t asz = (size + 63) & ~(size_t)63;
    if (asz == 0) asz = 64;
    uint8_t *data = buf ? aligned_alloc(64, asz) : NULL;
    if (!data) {
        free(buf);
        return weft_error(WEFT_ERR_NOMEM, "cpu: cannot allocate buffer of %zu bytes", size);
    }
    memset(data, 0, asz);
    buf->data = data;
    buf->size = size;
    buf->owned = true;
    *out = buf;
    return WEFT_OK;
}

static weft_status cpu_buffer_wrap_host(struct weft_backend *b, const void *ptr, size_t size,
                                        struct weft_buffer **out)
{
    *out = NULL;
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "cpu: out of memory");
    buf->data = (uint8_t *)ptr;  /* read-only by contract: weights are never written */
    buf->size = size;
    buf->owned = false;
    *out = buf;
    return WEFT_OK;
}

static void cpu_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    if (buf->owned) free(buf->data);
    weft_cpu_packed_free(buf);
    free(buf);
}

static weft_status cpu_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    if (off > buf->size || n > buf->size - off)
        return weft_error(WEFT_ERR_INVALID_ARG, "cpu: write [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    memcpy(buf->data + off, src, n);
    return WEFT_OK;
}

static weft_status cpu_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    if (off > buf->size || n > buf->size - off)
        return weft_error(WEFT_ERR_INVALID_ARG, "cpu: read [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    memcpy(dst, buf->data + off, n);
    return WEFT_OK;
}

static weft_status cpu_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src,
                                   size_t soff, size_t n)
{
    if (doff > dst->size || n > dst->size - doff || soff > src->size || n > src->size - soff)
        return weft_error(WEFT_ERR_INVALID_ARG, "cpu: copy of %zu bytes outside a buffer", n);
    memmove(dst->data + doff, src->data + soff, n);
    return WEFT_OK;
}

/* A view is usable if its rows lie inside its buffer. */
static bool view_ok(const struct weft_view *v)
{
    if (!v->buf || v->ne0 <= 0 || v->ne1 <= 0) return false;
    const struct weft_type_info *ti = weft_type_get(v->type);
    if (!ti || v->ne0 % ti->block_size) return false;
    size_t row = weft_row_size(v->type, v->ne0);
    size_t end = v->offset + (size_t)(v->ne1 - 1) * v->nb1 + row;
    return end <= v->buf->size && v->nb1 >= row;
}

static bool is_f32(const struct weft_view *v) { return v->type == WEFT_TYPE_F32 && view_ok(v); }
static bool is_i32(const struct weft_view *v) { return v->type == WEFT_TYPE_I32 && view_ok(v); }

/* values laid end to end (read as one array) */
static bool is_vector(const struct weft_view *v)
{
    return v->ne1 == 1 || v->nb1 == (size_t)v->ne0 * sizeof(float);
}

static bool cpu_supports(struct weft_backend *b, const struct weft_op *op)
{
    switch (op->kind) {
    case WEFT_OP_EMBED: {
        const struct weft_type_info *ti = weft_type_get(op->u.embed.table.type);
        return ti && ti->weight_ok && view_ok(&op->u.embed.table) && is_i32(&op->u.embed.ids) &&
               is_f32(&op->u.embed.out) && op->u.embed.out.ne0 == op->u.embed.table.ne0;
    }
    case WEFT_OP_RMSNORM:
        return is_f32(&op->u.rmsnorm.x) && is_f32(&op->u.rmsnorm.w) && is_f32(&op->u.rmsnorm.out) &&
               (!op->u.rmsnorm.has_add || (is_f32(&op->u.rmsnorm.add) && is_f32(&op->u.rmsnorm.sum)));
    case WEFT_OP_MATMUL: {
        const struct weft_type_info *ti = weft_type_get(op->u.matmul.w.type);
        return ti && ti->weight_ok && view_ok(&op->u.matmul.w) && is_f32(&op->u.matmul.x) &&
               is_f32(&op->u.matmul.out) && op->u.matmul.x.ne0 == op->u.matmul.w.ne0 &&
               op->u.matmul.out.ne0 == op->u.matmul.w.ne1 &&
               (!op->u.matmul.has_add || is_f32(&op->u.matmul.add)) &&
               (!op->u.matmul.has_bias || (is_f32(&op->u.matmul.bias) && is_vector(&op->u.matmul.bias) &&
                                           op->u.matmul.bias.ne0 * op->u.matmul.bias.ne1 == op->u.matmul.w.ne1));
    }
    case WEFT_OP_ROPE_KV:
        if (op->u.rope_kv.has_freq_factors &&
            (!is_f32(&op->u.rope_kv.freq_factors) || !is_vector(&op->u.rope_kv.freq_factors) ||
             op->u.rope_kv.n_rot > 512 ||
             op->u.rope_kv.freq_factors.ne0 * op->u.rope_kv.freq_factors.ne1 != op->u.rope_kv.n_rot / 2))
            return false;
        /* fall through */
    case WEFT_OP_ATTENTION: {
        const struct weft_kv_view *kv = op->kind == WEFT_OP_ROPE_KV ? &op->u.rope_kv.kv : &op->u.attention.kv;
        if (op->kind == WEFT_OP_ATTENTION && op->u.attention.has_sinks &&
            (!is_f32(&op->u.attention.sinks) || !is_vector(&op->u.attention.sinks) ||
             op->u.attention.sinks.ne0 * op->u.attention.sinks.ne1 != op->u.attention.n_head))
            return false;
        if (kv->v_in_k && (kv->n_kv_head != 1 || weft_kv_head_dim_v(kv) >= kv->head_dim ||
                           (kv->type == WEFT_TYPE_Q8_0 && (kv->head_dim - weft_kv_head_dim_v(kv)) % 32)))
            return false;
        return kv->buf && kv->layer < kv->n_layer &&
               (kv->type == WEFT_TYPE_F16 ||
                (kv->type == WEFT_TYPE_Q8_0 && kv->head_dim % 32 == 0 && weft_kv_head_dim_v(kv) % 32 == 0));
    }
    case WEFT_OP_SILU_MUL:
        return (op->u.silu_mul.act == WEFT_GLU_SILU || op->u.silu_mul.act == WEFT_GLU_GELU_TANH ||
                op->u.silu_mul.act == WEFT_GLU_SWIGLU_OAI || op->u.silu_mul.act == WEFT_GLU_SIGMOID) &&
               is_f32(&op->u.silu_mul.gate) && is_f32(&op->u.silu_mul.up) && is_f32(&op->u.silu_mul.out);
    case WEFT_OP_ADD:
        return is_f32(&op->u.add.a) && is_f32(&op->u.add.b) && is_f32(&op->u.add.out);
    case WEFT_OP_COPY:
        return op->u.copy.src && op->u.copy.dst;
    case WEFT_OP_LOGITS: {
        const struct weft_type_info *ti = weft_type_get(op->u.logits.w.type);
        return ti && ti->weight_ok && is_f32(&op->u.logits.x) && is_f32(&op->u.logits.norm_w) &&
               view_ok(&op->u.logits.w) && is_f32(&op->u.logits.out);
    }
    case WEFT_OP_MOE_ROUTE: {
        const struct weft_op_moe_route *m = &op->u.moe_route;
        return is_f32(&m->logits) && is_i32(&m->ids) && is_f32(&m->weights) && m->k >= 1 &&
               m->logits.ne0 >= m->k && m->logits.ne0 <= WEFT_CPU_MAX_EXPERTS && m->ids.ne0 >= m->k &&
               m->weights.ne0 >= m->k && m->ids.ne1 == m->logits.ne1 && m->weights.ne1 == m->logits.ne1 &&
               m->gating <= WEFT_MOE_SOFTMAX_TOPK && weft_moe_groups_ok(m) &&
               (!m->has_bias || (is_f32(&m->bias) && is_vector(&m->bias) && m->bias.ne0 * m->bias.ne1 == m->logits.ne0)) &&
               (!m->has_expert_scale || (is_f32(&m->expert_scale) && is_vector(&m->expert_scale) &&
                                         m->expert_scale.ne0 * m->expert_scale.ne1 == m->logits.ne0));
    }
    case WEFT_OP_SSM_CONV: {
        const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
        const int64_t rows = o->x.ne1, C = o->x.ne0, K = o->w.ne0;
        return is_f32(&o->x) && is_f32(&o->w) && is_f32(&o->out) && is_f32(&o->state) && is_i32(&o->slots) &&
               K >= 2 && o->w.ne1 == C && o->out.ne0 == C && o->out.ne1 == rows && o->state.ne0 == (K - 1) * C &&
               o->state.ne1 >= 1 && is_vector(&o->slots) && o->slots.ne0 * o->slots.ne1 >= rows;
    }
    case WEFT_OP_DELTA_NET: {
        const struct weft_op_delta_net *o = &op->u.delta_net;
        const int64_t rows = o->in.ne1, S = o->head_dim, Hk = o->n_k_head, Hv = o->n_v_head;
        return is_f32(&o->in) && is_f32(&o->beta) && is_f32(&o->alpha) && is_f32(&o->dt_bias) && is_f32(&o->a) &&
               is_f32(&o->out) && is_f32(&o->state) && is_i32(&o->slots) && S >= 1 && S <= WEFT_CPU_MAX_DN_HEAD &&
               Hk >= 1 && Hv >= Hk && Hv % Hk == 0 && o->eps > 0.0f && o->in.ne0 == (2 * Hk + Hv) * S &&
               o->beta.ne0 >= Hv && o->alpha.ne0 >= Hv && o->beta.ne1 == rows && o->alpha.ne1 == rows &&
               is_vector(&o->dt_bias) && o->dt_bias.ne0 * o->dt_bias.ne1 >= Hv && is_vector(&o->a) &&
               o->a.ne0 * o->a.ne1 >= Hv && o->out.ne0 == Hv * S && o->out.ne1 == rows &&
               o->state.ne0 == Hv * S * S && o->state.ne1 >= 1 && is_vector(&o->slots) &&
               o->slots.ne0 * o->slots.ne1 >= rows;
    }
    case WEFT_OP_MATMUL_ID: {
        const struct weft_op_matmul_id *m = &op->u.matmul_id;
        const struct weft_type_info *ti = weft_type_get(m->w.type);
        if (!ti || !ti->weight_ok || !view_ok(&m->w) || !is_i32(&m->ids) || !is_f32(&m->x) || !is_f32(&m->out) ||
            m->n_expert < 1 || m->n_expert > WEFT_CPU_MAX_EXPERTS || m->w.ne1 % m->n_expert || m->x.ne0 != m->w.ne0)
            return false;
        const int64_t N = m->w.ne1 / m->n_expert, slots = m->ids.ne0 * m->ids.ne1;
        if (m->out.ne0 != N || m->x.ne1 != (m->x_per_slot ? slots : m->ids.ne1)) return false;
        if (m->has_weights ? (!is_f32(&m->weights) || m->weights.ne0 < m->ids.ne0 || m->weights.ne1 != m->ids.ne1 ||
                              m->out.ne1 != m->ids.ne1 || (m->has_add && !is_f32(&m->add)))
                           : (m->has_add || m->out.ne1 != slots))
            return false;
        return !m->has_bias || (is_f32(&m->bias) && is_vector(&m->bias) && m->bias.ne0 * m->bias.ne1 == m->w.ne1);
    }
    default:
        return false;
    }
}

static weft_status cpu_run(struct weft_backend *b, const struct weft_op *ops, size_t n)
{
    struct weft_cpu_backend *be = (struct weft_cpu_backend *)b;
    for (size_t i = 0; i < n; i++) {
        const struct weft_op *op = &ops[i];
        weft_status st;
        const double t0 = be->profile ? now_s() : 0.0;
        switch (op->kind) {
        case WEFT_OP_EMBED: st = weft_cpu_embed(be, op); break;
        case WEFT_OP_RMSNORM: st = weft_cpu_rmsnorm(be, op); break;
        case WEFT_OP_MATMUL: {
            int g = weft_cpu_matmul_groupable(op, n - i);
            st = weft_cpu_matmul(be, op, g);
            i += (size_t)g - 1;
            break;
        }
        case WEFT_OP_ROPE_KV: st = weft_cpu_rope_kv(be, op); break;
        case WEFT_OP_ATTENTION: st = weft_cpu_attention(be, op); break;
        case WEFT_OP_SILU_MUL: st = weft_cpu_silu_mul(be, op); break;
        case WEFT_OP_ADD: st = weft_cpu_add(be, op); break;
        case WEFT_OP_COPY:
            st = cpu_buffer_copy(op->u.copy.dst, op->u.copy.dst_off, op->u.copy.src,
                                 op->u.copy.src_off, op->u.copy.bytes);
            break;
        case WEFT_OP_LOGITS: st = weft_cpu_logits(be, op); break;
        case WEFT_OP_MOE_ROUTE: st = weft_cpu_moe_route(be, op); break;
        case WEFT_OP_MATMUL_ID: st = weft_cpu_matmul_id(be, op); break;
        case WEFT_OP_SSM_CONV: st = weft_cpu_ssm_conv(be, op); break;
        case WEFT_OP_DELTA_NET: st = weft_cpu_delta_net(be, op); break;
        default: st = weft_error(WEFT_ERR_UNSUPPORTED, "cpu: unknown op kind %d", (int)op->kind);
        }
        if (be->profile && op->kind < WEFT_OP_COUNT_) {
            be->prof_s[op->kind] += now_s() - t0;
            be->prof_calls[op->kind]++;
            be->prof_rows[op->kind] += (uint64_t)op_rows(op);
        }
        if (st != WEFT_OK) return st;
    }
    return WEFT_OK;
}

static weft_status cpu_sync(struct weft_backend *b) { return WEFT_OK; }

static const struct weft_backend_iface cpu_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "cpu",
    .devices = cpu_devices,
    .open = cpu_open,
    .close = cpu_close,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_wrap_host = cpu_buffer_wrap_host,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .buffer_copy = cpu_buffer_copy,
    .supports = cpu_supports,
    .run = cpu_run,
    .sync = cpu_sync,
    .weight_prepare = weft_cpu_weight_prepare,
};

const struct weft_backend_iface *weft_cpu_backend_iface(void) { return &cpu_iface; }
