/* Mixtures of experts on OpenCL (api 7): MOE_ROUTE and MATMUL_ID, queued
 * like every op (kernels/moe.cl says how each is computed). MATMUL_ID reads
 * no ids back: moe_sort groups the slots by expert on the device, and the
 * dot kernels' work-groups past the chosen experts return at once. */
#include "backends/opencl/ocl_internal.h"

weft_status ocl_moe_route(struct ocl_backend *ob, const struct weft_op_moe_route *o)
{
    struct args a = {ob->k[OK_MOE_ROUTE], 0, CL_SUCCESS};
    a_f32v(&a, &o->logits);
    a_buf(&a, &o->ids);
    a_u64(&a, o->ids.nb1 / 4);
    a_f32v(&a, &o->weights);
    a_buf(&a, o->has_bias ? &o->bias : &o->logits);  /* logits: an unread stand-in */
    a_i32(&a, o->has_bias);
    a_i32(&a, o->logits.ne0);
    a_i32(&a, o->k);
    a_i32(&a, o->gating);
    a_i32(&a, o->norm);
    a_f32(&a, o->scale);
    a_i32(&a, o->logits.ne1);
    a_i32(&a, o->n_group > 1 ? (int)o->n_group : 0);
    a_i32(&a, (int)o->group_used);
    a_buf(&a, o->has_expert_scale ? &o->expert_scale : &o->logits);  /* api 10; logits: an unread stand-in */
    a_i32(&a, o->has_expert_scale);
    ocl_dirty(o->ids.buf);
    ocl_dirty(o->weights.buf);
    const size_t g[1] = {ocl_up((size_t)o->logits.ne1, 64)}, l[1] = {64};
    return ocl_launch(ob, &a, "MOE_ROUTE", 1, g, l);
}

/* ob->moe_idx from o's ids (moe.cl's layout), unless it already holds
 * those: the same ids view, not written since (the gate, up and down
 * projections after one MOE_ROUTE sort once) */
static weft_status sort_slots(struct ocl_backend *ob, const struct weft_op_matmul_id *o)
{
    const int64_t E = o->n_expert, rows = o->ids.ne1, k = o->ids.ne0;
    const struct weft_buffer *ib = o->ids.buf;
    if (ob->moe_key_ok && ob->moe_key_id == ib->id && ob->moe_key_gen == ib->gen && ob->moe_key_off == o->ids.offset &&
        ob->moe_key_nb1 == o->ids.nb1 && ob->moe_key_rows == rows && ob->moe_key_k == k && ob->moe_key_e == E)
        return WEFT_OK;
    ob->moe_key_ok = false;
    weft_status st = ocl_grow(ob, &ob->moe_idx, &ob->moe_idx_size, (size_t)(2 * E + 2 + rows * k) * sizeof(cl_int),
                              "allocating MATMUL_ID's index");
    if (st != WEFT_OK) return st;
    struct args a = {ob->k[OK_MOE_SORT], 0, CL_SUCCESS};
    a_buf(&a, &o->ids);
    a_u64(&a, o->ids.nb1 / 4);
    a_i32(&a, rows);
    a_i32(&a, k);
    a_i32(&a, E);
    a_mem(&a, ob->moe_idx);
    a_mem(&a, ob->err);
    const size_t g[1] = {256}, l[1] = {256};
    if ((st = ocl_launch(ob, &a, "MATMUL_ID", 1, g, l)) != WEFT_OK) return st;
    ob->moe_key_ok = true;
    ob->moe_key_id = ib->id;
    ob->moe_key_gen = ib->gen;
    ob->moe_key_off = o->ids.offset;
    ob->moe_key_nb1 = o->ids.nb1;
    ob->moe_key_rows = rows;
    ob->moe_key_k = k;
    ob->moe_key_e = E;
    return WEFT_OK;
}

weft_status ocl_matmul_id(struct ocl_backend *ob, const struct weft_op_matmul_id *o)
{
    const int64_t E = o->n_expert, N = o->w.ne1 / E, K = o->w.ne0, rows = o->ids.ne1, k = o->ids.ne0;
    const int64_t slots = rows * k, nx = o->x_per_slot ? slots : rows;
    if (slots == 0 || N == 0) return WEFT_OK;
    /* ids known on the host are checked before anything runs, as the CPU does */
    const int32_t *id = ocl_host_i32(&o->ids);
    for (int64_t r = 0; id && r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t v = id[(size_t)r * (o->ids.nb1 / 4) + (size_t)j];
            if (v < 0 || v >= E)
                return weft_error(WEFT_ERR_INVALID_ARG, "opencl: matmul_id: row %lld chose expert %d of %lld",
                                  (long long)r, v, (long long)E);
        }
    weft_status st = sort_slots(ob, o);
    if (st != WEFT_OK) return st;
    const enum weft_type t = o->w.type;
    const bool exact_f = ob->exact && (t == WEFT_TYPE_F32 || t == WEFT_TYPE_F16);
    const bool exact_q = ob->exact && ocl_exact_q(t);
    if (exact_q && (st = ocl_quant_act(ob, t, &o->x, nx)) != WEFT_OK) return st;
    if (o->has_weights &&
        (st = ocl_grow(ob, &ob->moe_y, &ob->moe_y_size, (size_t)slots * (size_t)N * sizeof(float),
                       "allocating MATMUL_ID's slot outputs")) != WEFT_OK)
        return st;
    /* decode-sized steps (an expert has at most `rows` slots when a row
     * chooses it once) take the vector form, others the tiles */
    const bool vec = rows <= 8;
    const enum ocl_kernel kid = exact_f ? OK_MM_ID_EXACT_F : exact_q ? OK_MM_ID_EXACT_Q
                              : vec ? OK_MM_ID_VEC : OK_MM_ID_TILE;
    struct args a = {ob->k[kid], 0, CL_SUCCESS};
    a_buf(&a, &o->w);
    a_u64(&a, o->w.nb1);
    a_i32(&a, t);
    if (exact_q) {
        a_mem(&a, ob->act);
        a_u64(&a, 0);
        a_u64(&a, 0);
    } else {
        a_f32v(&a, &o->x);
    }
    if (o->has_weights) {
        a_mem(&a, ob->moe_y);
        a_u64(&a, 0);
        a_u64(&a, (uint64_t)N);
    } else {
        a_f32v(&a, &o->out);
        ocl_dirty(o->out.buf);
    }
    a_bias(&a, o->has_bias ? &o->bias : NULL, &o->w);
    a_mem(&a, ob->moe_idx);
    a_i32(&a, E);
    a_i32(&a, k);
    a_i32(&a, o->x_per_slot);
    a_i32(&a, K);
    a_i32(&a, N);
    /* a column of work-groups per expert that can have been chosen */
    const size_t n_cols = (size_t)(slots < E ? slots : E);
    if (kid == OK_MM_ID_VEC) {
        const size_t g[2] = {64 * (size_t)N, n_cols}, l[2] = {64, 1};
        st = ocl_launch(ob, &a, "MATMUL_ID", 2, g, l);
    } else if (kid == OK_MM_ID_TILE) {
        const size_t g[2] = {ocl_up((size_t)N, 16), 16 * n_cols}, l[2] = {16, 16};
        st = ocl_launch(ob, &a, "MATMUL_ID", 2, g, l);
    } else {
        const size_t g[2] = {ocl_up((size_t)N, 64), n_cols}, l[2] = {64, 1};
        st = ocl_launch(ob, &a, "MATMUL_ID", 2, g, l);
    }
    if (st != WEFT_OK || !o->has_weights) return st;
    struct args s = {ob->k[OK_MOE_SUM], 0, CL_SUCCESS};
    a_mem(&s, ob->moe_y);
    a_f32v(&s, &o->weights);
    a_f32v(&s, o->has_add ? &o->add : &o->out);
    a_i32(&s, o->has_add);
    a_f32v(&s, &o->out);
    a_i32(&s, k);
    a_i32(&s, N);
    ocl_dirty(o->out.buf);
    const size_t g[2] = {ocl_up((size_t)N, 64), (size_t)rows}, l[2] = {64, 1};
    return ocl_launch(ob, &s, "MATMUL_ID", 2, g, l);
}
