/* Repacked weight copies (the backend's weight_prepare slot).
 *
 * When the kernel table has a packed layout for a matrix's type
 * (struct weft_cpu_packed), weight_prepare stores the matrix's leading rows
 * (a multiple of the layout's group) once more in that layout, and the
 * buffer keeps the copy in a list sorted by offset. A MATMUL / LOGITS naming
 * exactly this matrix (or its leading rows) then streams the copy for its
 * few-row (decode) work; prefill tiles and leftover rows read the plain
 * rows, which stay where they were (the EMBED op and the gemm tiles use
 * them). Memory cost: one more copy of the packed matrices. */
#include "backends/cpu/cpu_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/quant.h"

struct pack_job {
    const struct weft_cpu_packed *pk;
    uint8_t *dst;
    const uint8_t *src;
    size_t stride, group_bytes;
    int64_t n_groups, n;
};

static void pack_part(void *ctx, int ith, int nth)
{
    const struct pack_job *j = ctx;
    int64_t g0, g1;
    cpu_split(j->n_groups, ith, nth, &g0, &g1);
    if (g1 > g0)
        j->pk->pack(j->dst + (size_t)g0 * j->group_bytes, j->src + (size_t)(g0 * j->pk->rows) * j->stride, j->stride,
                    (g1 - g0) * j->pk->rows, j->n);
}

/* index of the first entry with offset >= off */
static size_t lower_bound(const struct weft_buffer *buf, size_t off)
{
    size_t lo = 0, hi = buf->n_packed;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (buf->packed[mid].offset < off) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool same_matrix(const struct weft_cpu_packed_w *p, const struct weft_view *w)
{
    return p->offset == w->offset && p->type == w->type && p->ne0 == w->ne0 && p->nb1 == w->nb1;
}

const struct weft_cpu_packed_w *weft_cpu_packed_find(const struct weft_view *w)
{
    const struct weft_buffer *buf = w->buf;
    if (!buf->n_packed) return NULL;
    for (size_t i = lower_bound(buf, w->offset); i < buf->n_packed && buf->packed[i].offset == w->offset; i++)
        if (same_matrix(&buf->packed[i], w) && w->ne1 <= buf->packed[i].ne1) return &buf->packed[i];
    return NULL;
}

weft_status weft_cpu_weight_prepare(struct weft_backend *b, const struct weft_view *w)
{
    struct weft_cpu_backend *be = (struct weft_cpu_backend *)b;
    const struct weft_type_info *ti = w->buf ? weft_type_get(w->type) : NULL;
    if (!ti || !ti->weight_ok || w->ne0 <= 0 || w->ne1 <= 0 || w->ne0 % ti->block_size)
        return weft_error(WEFT_ERR_INVALID_ARG, "cpu: weight_prepare of an invalid view");
    const size_t row = weft_row_size(w->type, w->ne0);
    if (w->nb1 < row || w->offset > w->buf->size || (size_t)(w->ne1 - 1) * w->nb1 + row > w->buf->size - w->offset)
        return weft_error(WEFT_ERR_INVALID_ARG, "cpu: weight_prepare view outside its buffer");
    const struct weft_cpu_packed *pk = &be->kern->packed[w->type];
    if (be->no_pack || pk->rows <= 0 || w->ne1 < pk->rows) return WEFT_OK;
    struct weft_buffer *buf = w->buf;
    size_t at = lower_bound(buf, w->offset);
    for (size_t i = at; i < buf->n_packed && buf->packed[i].offset == w->offset; i++)
        if (same_matrix(&buf->packed[i], w) && buf->packed[i].ne1 >= w->ne1) return WEFT_OK;  /* done before */

    /* out of memory below only means staying on the plain layout */
    if (buf->n_packed == buf->cap_packed) {
        size_t cap = buf->cap_packed ? 2 * buf->cap_packed : 64;
        struct weft_cpu_packed_w *p = realloc(buf->packed, cap * sizeof *p);
        if (!p) return WEFT_OK;
        buf->packed = p;
        buf->cap_packed = cap;
    }
    const int64_t rows = w->ne1 - w->ne1 % pk->rows;
    const size_t bytes = (size_t)rows * row;
    uint8_t *data = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!data) return WEFT_OK;
    struct pack_job j = {.pk = pk, .dst = data, .src = buf->data + w->offset, .stride = w->nb1,
                         .group_bytes = (size_t)pk->rows * row, .n_groups = rows / pk->rows, .n = w->ne0};
    weft_cpu_pool_run(be->pool, pack_part, &j);
    memmove(&buf->packed[at + 1], &buf->packed[at], (buf->n_packed - at) * sizeof buf->packed[0]);
    buf->packed[at] = (struct weft_cpu_packed_w){.offset = w->offset, .nb1 = w->nb1, .type = w->type, .ne0 = w->ne0,
                                                  .ne1 = w->ne1, .rows = rows, .pk = pk, .data = data};
    buf->n_packed++;
    return WEFT_OK;
}

void weft_cpu_packed_free(struct weft_buffer *buf)
{
    for (size_t i = 0; i < buf->n_packed; i++) free(buf->packed[i].data);
    free(buf->packed);
    buf->packed = NULL;
    buf->n_packed = buf->cap_packed = 0;
}
