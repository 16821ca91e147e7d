/* The recurrent layers' ops on OpenCL (api 9): SSM_CONV and DELTA_NET, queued like every op
 * (kernels/recurrent.cl says how each is computed). Nothing is read back: rec_index finds the
 * sequences of the slots vector on the device (once for all the ops that share it), and the op's
 * launch covers as many sequences as there can be (the distinct slots when the host still has
 * the vector, else min(rows, slots)); work past the found ones returns at once. */
#include "backends/opencl/ocl_internal.h"

#include <math.h>
#include <stdlib.h>

/* *n: the sequences the launch covers. With the slots on the host, each row's slot is checked
 * (a refusal before anything is queued, as the CPU's) and the distinct ones counted; else
 * min(rows, n_slots), an upper bound. */
static weft_status seq_bound(const struct weft_view *slots, int64_t rows, int64_t n_slots, const char *op, int64_t *n)
{
    *n = rows < n_slots ? rows : n_slots;
    const int32_t *sl = ocl_host_i32(slots);
    if (!sl) return WEFT_OK;
    uint8_t *seen = calloc((size_t)n_slots, 1);
    int64_t distinct = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (sl[r] < 0 || sl[r] >= n_slots) {
            free(seen);
            return weft_error(WEFT_ERR_INVALID_ARG, "opencl: %s: row %lld's state slot %d is not one of the %lld", op,
                              (long long)r, sl[r], (long long)n_slots);
        }
        if (seen && !seen[sl[r]]) {
            seen[sl[r]] = 1;
            distinct++;
        }
    }
    if (seen) *n = distinct;
    free(seen);
    return WEFT_OK;
}

/* ob->rec_idx listing the sequences of slots' first `rows` values (recurrent.cl's layout),
 * unless it already lists those: the same vector, not written since, the same rows and slots */
static weft_status rec_index(struct ocl_backend *ob, const struct weft_view *slots, int64_t rows, int64_t n_slots,
                             const char *what)
{
    const struct weft_buffer *sb = slots->buf;
    if (ob->rec_key_ok && ob->rec_key_id == sb->id && ob->rec_key_gen == sb->gen && ob->rec_key_off == slots->offset &&
        ob->rec_key_rows == rows && ob->rec_key_slots == n_slots)
        return WEFT_OK;
    ob->rec_key_ok = false;
    weft_status st = ocl_grow(ob, &ob->rec_idx, &ob->rec_idx_size, (size_t)(1 + 3 * rows) * sizeof(cl_int),
                              "allocating the recurrent ops' sequence list");
    if (st != WEFT_OK) return st;
    struct args a = {ob->k[OK_REC_INDEX], 0, CL_SUCCESS};
    a_buf(&a, slots);
    a_i32(&a, rows);
    a_i32(&a, n_slots < INT32_MAX ? n_slots : INT32_MAX);
    a_mem(&a, ob->rec_idx);
    a_mem(&a, ob->err);
    const size_t g[1] = {256}, l[1] = {256};
    if ((st = ocl_launch(ob, &a, what, 1, g, l)) != WEFT_OK) return st;
    ob->rec_key_ok = true;
    ob->rec_key_id = sb->id;
    ob->rec_key_gen = sb->gen;
    ob->rec_key_off = slots->offset;
    ob->rec_key_rows = rows;
    ob->rec_key_slots = n_slots;
    return WEFT_OK;
}

weft_status ocl_ssm_conv(struct ocl_backend *ob, const struct weft_op_ssm_conv *o)
{
    const int64_t rows = o->x.ne1, C = o->x.ne0;
    int64_t n_seq;
    weft_status st = seq_bound(&o->slots, rows, o->state.ne1, "SSM_CONV", &n_seq);
    if (st == WEFT_OK) st = rec_index(ob, &o->slots, rows, o->state.ne1, "SSM_CONV");
    if (st != WEFT_OK) return st;
    struct args a = {ob->k[OK_SSM_CONV], 0, CL_SUCCESS};
    a_f32v(&a, &o->x);
    a_f32v(&a, &o->w);
    a_f32v(&a, &o->out);
    a_f32v(&a, &o->state);
    a_buf(&a, &o->slots);
    a_mem(&a, ob->rec_idx);
    a_i32(&a, rows);
    a_i32(&a, C);
    a_i32(&a, o->w.ne0);
    a_i32(&a, o->silu);
    ocl_dirty(o->out.buf);
    ocl_dirty(o->state.buf);
    const size_t g[2] = {ocl_up((size_t)C, 64), (size_t)n_seq}, l[2] = {64, 1};
    return ocl_launch(ob, &a, "SSM_CONV", 2, g, l);
}

weft_status ocl_delta_net(struct ocl_backend *ob, const struct weft_op_delta_net *o)
{
    const int64_t rows = o->in.ne1, S = o->head_dim;
    int64_t n_seq;
    weft_status st = seq_bound(&o->slots, rows, o->state.ne1, "DELTA_NET", &n_seq);
    if (st == WEFT_OK) st = rec_index(ob, &o->slots, rows, o->state.ne1, "DELTA_NET");
    if (st != WEFT_OK) return st;
    struct args a = {ob->k[OK_DELTA_NET], 0, CL_SUCCESS};
    a_f32v(&a, &o->in);
    a_f32v(&a, &o->beta);
    a_f32v(&a, &o->alpha);
    a_buf(&a, &o->dt_bias);
    a_buf(&a, &o->a);
    a_f32v(&a, &o->out);
    a_f32v(&a, &o->state);
    a_buf(&a, &o->slots);
    a_mem(&a, ob->rec_idx);
    a_i32(&a, rows);
    a_i32(&a, S);
    a_i32(&a, o->n_k_head);
    a_i32(&a, o->n_v_head);
    a_i32(&a, o->k_grouped);
    a_f32(&a, o->eps);
    a_f32(&a, 1.0f / sqrtf((float)S));  /* the CPU's, from the host's libm */
    ocl_dirty(o->out.buf);
    ocl_dirty(o->state.buf);
    const size_t g[3] = {(size_t)S, o->n_v_head, (size_t)n_seq}, l[3] = {(size_t)S, 1, 1};
    return ocl_launch(ob, &a, "DELTA_NET", 3, g, l);
}
