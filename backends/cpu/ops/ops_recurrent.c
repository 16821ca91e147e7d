/* SSM_CONV and DELTA_NET on the CPU (api 9; backends/backend.h gives the math and the float
 * order, which is llama.cpp's CPU build's: ggml's ssm_conv as its GCC build contracts the tap
 * sum into an FMA chain, and ggml_gated_delta_net's per-token recurrence with ggml's AVX
 * ggml_vec_dot_f32, the l2_norm, sigmoid and softplus of ggml's unary ops).
 *
 * A sequence's rows run in order; sequences and (for SSM_CONV) channels or (for DELTA_NET)
 * v heads are independent, so the threads split over those, never along a reduction, and the
 * result does not depend on the thread count. */
#include "backends/cpu/cpu_impl.h"

#include <math.h>
#include <string.h>

#define DN_MAX_HEAD WEFT_CPU_MAX_DN_HEAD   /* Qwen3.5 / Qwen3-Next: 128 */

static int32_t row_slot(const struct weft_view *slots, int64_t r) { return ((const int32_t *)cpu_ptr(slots))[r]; }

/* every row's slot inside the state buffer */
static weft_status check_slots(const struct weft_view *slots, const struct weft_view *state, int64_t rows,
                               const char *op)
{
    for (int64_t r = 0; r < rows; r++) {
        const int32_t s = row_slot(slots, r);
        if (s < 0 || s >= state->ne1)
            return weft_error(WEFT_ERR_INVALID_ARG, "cpu: %s: row %lld's state slot %d is not one of the %lld",
                              op, (long long)r, s, (long long)state->ne1);
    }
    return WEFT_OK;
}

/* ---- SSM_CONV ---- */

struct conv_job {
    const struct weft_op_ssm_conv *o;
    const struct weft_cpu_kernels *k;
    int64_t rows, C, K;
};

/* Threads split the channels in whole 16-channel chunks (the last one takes the n % 16 tail), so
 * the SiLU, the table's swiglu with up = 1 (x / (1 + e(0 - x)) · 1: the polynomial on whole
 * chunks of the row, libm on its tail, exactly backend.h's), sees the row's own chunks. */
static void conv_part(void *ctx, int ith, int nth)
{
    const struct conv_job *j = ctx;
    const struct weft_op_ssm_conv *o = j->o;
    const int64_t C = j->C, K = j->K, n16 = (C + 15) / 16;
    int64_t b0, b1;
    cpu_split(n16, ith, nth, &b0, &b1);
    const int64_t c0 = b0 * 16, c1 = b1 * 16 < C ? b1 * 16 : C;
    if (c0 >= c1) return;
    enum { CHUNK = 1024 };  /* channels a pass: y and the ones on the stack */
    float y[CHUNK], one[CHUNK];
    for (int i = 0; i < CHUNK; i++) one[i] = 1.0f;
    const float *w = (const float *)cpu_ptr(&o->w);
    for (int64_t r = 0; r < j->rows; r++) {
        float *st = cpu_row_f32(&o->state, row_slot(&o->slots, r));
        const float *x = cpu_row_f32(&o->x, r);
        float *out = cpu_row_f32(&o->out, r);
        for (int64_t a = c0; a < c1; a += CHUNK) {
            const int64_t b = c1 - a < CHUNK ? c1 : a + CHUNK;   /* CHUNK is a multiple of 16 */
            j->k->conv_row(o->silu ? y : out + a, st, x, w, o->w.nb1, C, K, a, b);
            if (o->silu) j->k->swiglu(out + a, y, one, b - a);
        }
    }
}

weft_status weft_cpu_ssm_conv(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_op_ssm_conv *o = &op->u.ssm_conv;
    struct conv_job j = {.o = o, .k = be->kern, .rows = o->x.ne1, .C = o->x.ne0, .K = o->w.ne0};
    weft_status st = check_slots(&o->slots, &o->state, j.rows, "ssm_conv");
    if (st) return st;
    weft_cpu_pool_run(be->pool, conv_part, &j);
    return WEFT_OK;
}

/* ---- DELTA_NET ---- */

/* ggml's l2_norm of one head */
static void l2norm(const float *x, float *y, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

struct dn_job {
    const struct weft_op_delta_net *o;
    int64_t rows;
    const int32_t *uniq;   /* the distinct slots, in order of first use */
    weft_cpu_dn_row_fn dn_row;
    int64_t n_uniq;
};

static void dn_part(void *ctx, int ith, int nth)
{
    const struct dn_job *j = ctx;
    const struct weft_op_delta_net *o = j->o;
    const weft_cpu_dn_row_fn dn_row = j->dn_row;
    const int64_t S = o->head_dim, Hk = o->n_k_head, Hv = o->n_v_head;
    const float qscale = 1.0f / sqrtf((float)S);
    const float *dt_bias = (const float *)cpu_ptr(&o->dt_bias), *A = (const float *)cpu_ptr(&o->a);
    int64_t i0, i1;
    cpu_split(j->n_uniq * Hv, ith, nth, &i0, &i1);
    float q[DN_MAX_HEAD], k[DN_MAX_HEAD];
    for (int64_t it = i0; it < i1; it++) {
        const int32_t slot = j->uniq[it / Hv];
        const int64_t h = it % Hv, kh = o->k_grouped ? h / (Hv / Hk) : h % Hk;
        float *M = cpu_row_f32(&o->state, slot) + h * S * S;
        for (int64_t r = 0; r < j->rows; r++) {
            if (row_slot(&o->slots, r) != slot) continue;
            const float *in = cpu_row_f32(&o->in, r);
            l2norm(in + kh * S, q, S, o->eps);
            l2norm(in + (Hk + kh) * S, k, S, o->eps);
            const float *v = in + (2 * Hk + h) * S;
            const float b = 1.0f / (1.0f + expf(-cpu_row_f32(&o->beta, r)[h]));
            const float x = cpu_row_f32(&o->alpha, r)[h] + dt_bias[h];
            const float g = (x > 20.0f ? x : logf(1.0f + expf(x))) * A[h];
            const float decay = expf(g);
            dn_row(M, q, k, v, b, decay, qscale, cpu_row_f32(&o->out, r) + h * S, S);
        }
    }
}

weft_status weft_cpu_delta_net(struct weft_cpu_backend *be, const struct weft_op *op)
{
    const struct weft_op_delta_net *o = &op->u.delta_net;
    const int64_t rows = o->in.ne1;
    weft_status st = check_slots(&o->slots, &o->state, rows, "delta_net");
    if (st) return st;
    if ((st = weft_cpu_scratch(be, sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1)))) return st;
    int32_t *uniq = (int32_t *)be->scratch;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int32_t s = row_slot(&o->slots, r);
        bool seen = false;
        for (int64_t u = n - 1; u >= 0 && !seen; u--) seen = uniq[u] == s;
        if (!seen) uniq[n++] = s;
    }
    struct dn_job j = {.o = o, .rows = rows, .uniq = uniq, .n_uniq = n, .dn_row = be->kern->dn_row};
    weft_cpu_pool_run(be->pool, dn_part, &j);
    return WEFT_OK;
}
