/* OpenCL buffers: small ones carved from arenas, large ones on their own;
 * all zero-filled; reads, writes and copies queued in order with the ops. */
#include "backends/opencl/ocl_internal.h"

#include <stdlib.h>
#include <string.h>

/* room for size bytes (256-aligned) in an arena with space, or a new one */
static struct ocl_arena *arena_for(struct ocl_backend *ob, size_t size, cl_int *e)
{
    for (struct ocl_arena *a = ob->arenas; a; a = a->next)
        if (a->used + size <= OCL_ARENA_BYTES) return a;
    struct ocl_arena *a = calloc(1, sizeof *a);
    if (!a) {
        *e = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    a->mem = clCreateBuffer(ob->ctx, CL_MEM_READ_WRITE, OCL_ARENA_BYTES, NULL, e);
    if (*e != CL_SUCCESS) {
        free(a);
        return NULL;
    }
    a->next = ob->arenas;
    ob->arenas = a;
    return a;
}

weft_status ocl_buffer_alloc(struct weft_backend *b, size_t size, struct weft_buffer **out)
{
    struct ocl_backend *ob = (struct ocl_backend *)b;
    *out = NULL;
    /* whole words (the fill writes 4 bytes at a time); arena pieces 256-aligned */
    const size_t asz = size == 0 ? 256 : size <= OCL_SUB_MAX ? (size + 255) & ~(size_t)255 : (size + 3) & ~(size_t)3;
    if (size > ob->max_alloc || asz > ob->max_alloc || asz < size)
        return weft_error(WEFT_ERR_NOMEM, "opencl:%d: a buffer of %zu bytes is over the device's largest (%llu)",
                          ob->index, size, (unsigned long long)ob->max_alloc);
    struct weft_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return weft_error(WEFT_ERR_NOMEM, "opencl: out of host memory");
    cl_int e = CL_SUCCESS;
    if (asz <= OCL_SUB_MAX) {
        struct ocl_arena *a = arena_for(ob, asz, &e);
        if (a) {
            buf->arena = a;
            buf->mem = a->mem;
            buf->off = a->used;
            a->used += asz;
            a->live++;
        }
    } else {
        buf->mem = clCreateBuffer(ob->ctx, CL_MEM_READ_WRITE, asz, NULL, &e);
    }
    if (e != CL_SUCCESS) {
        free(buf);
        if (e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES || e == CL_OUT_OF_HOST_MEMORY)
            return weft_error(WEFT_ERR_NOMEM, "opencl:%d: out of device memory for a buffer of %zu bytes", ob->index,
                              size);
        return ocl_err(e, "allocating a buffer");
    }
    buf->ob = ob;
    buf->size = size;
    buf->id = ++ob->next_buffer_id;
    static const cl_uint zero = 0;
    e = clEnqueueFillBuffer(ob->q, buf->mem, &zero, sizeof zero, buf->off, asz, 0, NULL, NULL);
    if (e == CL_SUCCESS && size <= OCL_SHADOW_MAX) {
        buf->shadow = calloc(1, size ? size : 1);
        buf->shadow_ok = buf->shadow != NULL;
    }
    if (e != CL_SUCCESS) {
        ocl_buffer_free(buf);
        return ocl_err(e, "clearing a new buffer");
    }
    *out = buf;
    return WEFT_OK;
}

void ocl_buffer_free(struct weft_buffer *buf)
{
    if (!buf) return;
    struct ocl_backend *ob = buf->ob;
    if (buf->arena) {
        struct ocl_arena *a = buf->arena;
        /* an empty arena starts over; ops still queued that read the old
         * contents run before anything later written there (in-order queue) */
        if (--a->live == 0) a->used = 0;
    } else if (buf->mem) {
        clReleaseMemObject(buf->mem);
    }
    (void)ob;
    free(buf->shadow);
    free(buf);
}

void ocl_arenas_free(struct ocl_backend *ob)
{
    while (ob->arenas) {
        struct ocl_arena *a = ob->arenas;
        ob->arenas = a->next;
        clReleaseMemObject(a->mem);
        free(a);
    }
}

static bool in_range(const struct weft_buffer *b, size_t off, size_t n) { return off <= b->size && n <= b->size - off; }

weft_status ocl_buffer_write(struct weft_buffer *buf, size_t off, const void *src, size_t n)
{
    if (!in_range(buf, off, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "opencl: write [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    if (n == 0) return WEFT_OK;
    cl_int e = clEnqueueWriteBuffer(buf->ob->q, buf->mem, CL_TRUE, buf->off + off, n, src, 0, NULL, NULL);
    if (e != CL_SUCCESS) return ocl_err(e, "writing a buffer");
    buf->gen++;
    if (buf->shadow) {
        memcpy(buf->shadow + off, src, n);
        if (off == 0 && n == buf->size) buf->shadow_ok = true;  /* all of it known again */
    }
    return WEFT_OK;
}

weft_status ocl_buffer_read(struct weft_buffer *buf, size_t off, void *dst, size_t n)
{
    if (!in_range(buf, off, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "opencl: read [%zu, +%zu) outside buffer of %zu", off, n, buf->size);
    if (n == 0) return WEFT_OK;
    cl_int e = clEnqueueReadBuffer(buf->ob->q, buf->mem, CL_TRUE, buf->off + off, n, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? WEFT_OK : ocl_err(e, "reading a buffer");
}

weft_status ocl_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff, size_t n)
{
    if (!in_range(dst, doff, n) || !in_range(src, soff, n))
        return weft_error(WEFT_ERR_INVALID_ARG, "opencl: copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    if (dst->ob != src->ob) return weft_error(WEFT_ERR_INVALID_ARG, "opencl: copy between two devices");
    ocl_dirty(dst);
    /* overlapping ranges of one cl_mem are an error in OpenCL: go through the host */
    if (dst->mem == src->mem && dst->off + doff < src->off + soff + n && src->off + soff < dst->off + doff + n) {
        void *tmp = malloc(n);
        if (!tmp) return weft_error(WEFT_ERR_NOMEM, "opencl: out of host memory");
        weft_status st = ocl_buffer_read(src, soff, tmp, n);
        if (st == WEFT_OK) st = ocl_buffer_write(dst, doff, tmp, n);
        free(tmp);
        return st;
    }
    cl_int e = clEnqueueCopyBuffer(dst->ob->q, src->mem, dst->mem, src->off + soff, dst->off + doff, n, 0, NULL, NULL);
    return e == CL_SUCCESS ? WEFT_OK : ocl_err(e, "copying between buffers");
}
