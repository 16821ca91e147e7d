/* Vulkan memory: buffers carved from a few large VkDeviceMemory chunks
 * (first fit over a sorted free list per chunk, coalesced on free; large
 * buffers get their own allocation), zero-filled, and host transfers —
 * straight through a mapping on unified-memory devices, else through a
 * host-visible staging buffer and a one-shot copy. */
#include "backends/vulkan/vk_priv.h"

#include <stdlib.h>
#include <string.h>

#define STAGING_BYTES ((size_t)16 << 20)

static uint32_t pick_type(const struct vk_backend *vb, uint32_t bits, VkMemoryPropertyFlags need,
                          VkMemoryPropertyFlags want)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < vb->memprops.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = vb->memprops.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & need) != need) continue;
        if ((f & want) == want) return i;
        if (best == UINT32_MAX) best = i;
    }
    return best;
}

static VkDeviceSize heap_size(const struct vk_backend *vb, uint32_t type)
{
    return vb->memprops.memoryHeaps[vb->memprops.memoryTypes[type].heapIndex].size;
}

weft_status vk_mem_init(struct vk_backend *vb)
{
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const VkMemoryPropertyFlags dl = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    bool allow_unified = !vb->opt.no_unified;  /* tests the staging path on unified devices */
    bool integrated = vb->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                      vb->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    uint32_t unified = pick_type(vb, ~0u, dl | host, 0);
    if (allow_unified && integrated && unified != UINT32_MAX) {
        vb->dev_type = unified;
        vb->dev_mapped = true;
        vb->caps.unified_memory = true;
    } else {
        vb->dev_type = pick_type(vb, ~0u, dl, 0);
        if (vb->dev_type == UINT32_MAX) vb->dev_type = pick_type(vb, ~0u, 0, 0);
    }
    vb->stage_type = pick_type(vb, ~0u, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (vb->dev_type == UINT32_MAX || vb->stage_type == UINT32_MAX)
        return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan:%d: no usable memory type", vb->index);
    VkDeviceSize hs = heap_size(vb, vb->dev_type);
    vb->chunk_size = (VkDeviceSize)128 << 20;
    while (vb->chunk_size > ((VkDeviceSize)4 << 20) && vb->chunk_size > hs / 16) vb->chunk_size /= 2;
    return WEFT_OK;
}

static void chunk_destroy(struct vk_backend *vb, struct vk_chunk *c)
{
    if (c->mapped) vkUnmapMemory(vb->dev, c->mem);
    vkFreeMemory(vb->dev, c->mem, NULL);
    free(c->free);
    free(c);
}

void vk_mem_free_all(struct vk_backend *vb)
{
    if (vb->staging) vk_buffer_destroy_now(vb->staging);
    vb->staging = NULL;
    for (uint32_t i = 0; i < vb->n_chunks; i++) chunk_destroy(vb, vb->chunks[i]);
    vb->n_chunks = 0;
}

static bool free_insert(struct vk_chunk *c, uint32_t at, VkDeviceSize off, VkDeviceSize size)
{
    if (c->n_free == c->cap_free) {
        uint32_t cap = c->cap_free ? c->cap_free * 2 : 8;
        struct vk_free_range *f = realloc(c->free, cap * sizeof *f);
        if (!f) return false;
        c->free = f;
        c->cap_free = cap;
    }
    memmove(&c->free[at + 1], &c->free[at], (c->n_free - at) * sizeof *c->free);
    c->free[at] = (struct vk_free_range){off, size};
    c->n_free++;
    return true;
}

static void free_remove(struct vk_chunk *c, uint32_t at)
{
    memmove(&c->free[at], &c->free[at + 1], (c->n_free - at - 1) * sizeof *c->free);
    c->n_free--;
}

/* First fit of `size` bytes at `align`; false if nothing fits. */
static bool chunk_take(struct vk_chunk *c, VkDeviceSize size, VkDeviceSize align, VkDeviceSize *out)
{
    for (uint32_t i = 0; i < c->n_free; i++) {
        struct vk_free_range r = c->free[i];
        VkDeviceSize start = (r.off + align - 1) / align * align;
        if (start + size > r.off + r.size) continue;
        VkDeviceSize tail = r.off + r.size - (start + size);
        if (start > r.off) {
            c->free[i].size = start - r.off;
            if (tail && !free_insert(c, i + 1, start + size, tail)) {
                c->free[i] = r;
                return false;
            }
        } else if (tail) {
            c->free[i] = (struct vk_free_range){start + size, tail};
        } else {
            free_remove(c, i);
        }
        *out = start;
        return true;
    }
    return false;
}

static void chunk_give(struct vk_chunk *c, VkDeviceSize off, VkDeviceSize size)
{
    uint32_t i = 0;
    while (i < c->n_free && c->free[i].off < off) i++;
    bool prev = i > 0 && c->free[i - 1].off + c->free[i - 1].size == off;
    bool next = i < c->n_free && off + size == c->free[i].off;
    if (prev && next) {
        c->free[i - 1].size += size + c->free[i].size;
        free_remove(c, i);
    } else if (prev) {
        c->free[i - 1].size += size;
    } else if (next) {
        c->free[i].off = off;
        c->free[i].size += size;
    } else if (!free_insert(c, i, off, size)) {
        /* no memory for the list entry: the range stays lost until the chunk is freed */
    }
}

static weft_status chunk_new(struct vk_backend *vb, uint32_t type, VkDeviceSize size, bool dedicated,
                             struct vk_chunk **out)
{
    *out = NULL;
    if (vb->n_chunks == VK_MAX_CHUNKS)
        return weft_error(WEFT_ERR_NOMEM, "vulkan:%d: too many memory allocations", vb->index);
    struct vk_chunk *c = calloc(1, sizeof *c);
    if (!c) return weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = size,
                               .memoryTypeIndex = type};
    VkResult r = vkAllocateMemory(vb->dev, &ai, NULL, &c->mem);
    if (r != VK_SUCCESS) {
        free(c);
        return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                   ? weft_error(WEFT_ERR_NOMEM, "vulkan:%d: out of device memory allocating %llu bytes", vb->index,
                                (unsigned long long)size)
                   : vk_result(vb, r, "vkAllocateMemory");
    }
    c->size = size;
    c->type_index = type;
    c->dedicated = dedicated;
    if (vb->memprops.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
        void *p = NULL;
        r = vkMapMemory(vb->dev, c->mem, 0, VK_WHOLE_SIZE, 0, &p);
        if (r != VK_SUCCESS) {
            vkFreeMemory(vb->dev, c->mem, NULL);
            free(c);
            return vk_result(vb, r, "vkMapMemory");
        }
        c->mapped = p;
    }
    if (!dedicated && !free_insert(c, 0, 0, size)) {
        chunk_destroy(vb, c);
        return weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
    }
    vb->chunks[vb->n_chunks++] = c;
    *out = c;
    return WEFT_OK;
}

static void chunk_drop(struct vk_backend *vb, struct vk_chunk *c)
{
    for (uint32_t i = 0; i < vb->n_chunks; i++)
        if (vb->chunks[i] == c) {
            vb->chunks[i] = vb->chunks[--vb->n_chunks];
            break;
        }
    chunk_destroy(vb, c);
}

/* A buffer of `size` bytes (zero-filled) in device memory, or host-visible
 * staging memory when `host`. */
weft_status vk_buffer_new(struct vk_backend *vb, size_t size, bool host, bool zero, struct weft_buffer **out)
{
    *out = NULL;
    VkDeviceSize vsize = ((VkDeviceSize)(size ? size : 1) + 15) & ~(VkDeviceSize)15;
    uint32_t want_type = host ? vb->stage_type : vb->dev_type;
    if (vsize > heap_size(vb, want_type) || size > SIZE_MAX / 2)
        return weft_error(WEFT_ERR_NOMEM, "vulkan:%d: %zu bytes is more than the device's memory heap (%llu)",
                          vb->index, size, (unsigned long long)heap_size(vb, want_type));
    struct weft_buffer *b = calloc(1, sizeof *b);
    if (!b) return weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
    b->vb = vb;
    b->size = size;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = vsize,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(vb->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return vk_result(vb, r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vb->dev, b->buf, &req);
    uint32_t type = want_type;
    if (!(req.memoryTypeBits & (1u << type)))
        type = pick_type(vb, req.memoryTypeBits, vb->memprops.memoryTypes[want_type].propertyFlags, 0);
    weft_status st = WEFT_OK;
    if (type == UINT32_MAX) {
        st = weft_error(WEFT_ERR_UNSUPPORTED, "vulkan:%d: no memory type for a buffer", vb->index);
        goto err;
    }
    struct vk_chunk *c = NULL;
    VkDeviceSize off = 0;
    if (req.size > vb->chunk_size / 2) {
        if ((st = chunk_new(vb, type, req.size, true, &c)) != WEFT_OK) goto err;
    } else {
        for (uint32_t i = 0; i < vb->n_chunks && !c; i++)
            if (!vb->chunks[i]->dedicated && vb->chunks[i]->type_index == type &&
                chunk_take(vb->chunks[i], req.size, req.alignment, &off))
                c = vb->chunks[i];
        if (!c) {
            if ((st = chunk_new(vb, type, vb->chunk_size, false, &c)) != WEFT_OK) goto err;
            if (!chunk_take(c, req.size, req.alignment, &off)) {
                chunk_drop(vb, c);
                st = weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
                goto err;
            }
        }
    }
    b->chunk = c;
    b->mem_off = off;
    b->mem_size = req.size;
    c->n_live++;
    r = vkBindBufferMemory(vb->dev, b->buf, c->mem, off);
    if (r != VK_SUCCESS) {
        st = vk_result(vb, r, "vkBindBufferMemory");
        vk_buffer_destroy_now(b);
        return st;
    }
    if (!zero) {
        /* left as it is */
    } else if (c->mapped) {
        memset(c->mapped + off, 0, vsize);
    } else {
        /* zero on the device: one-shot fill */
        if ((st = vk_oneshot_begin(vb)) == WEFT_OK) {
            vkCmdFillBuffer(vb->cb, b->buf, 0, VK_WHOLE_SIZE, 0);
            st = vk_oneshot_submit(vb);
        }
        if (st != WEFT_OK) {
            vk_buffer_destroy_now(b);
            return st;
        }
    }
    *out = b;
    return WEFT_OK;
err:
    vkDestroyBuffer(vb->dev, b->buf, NULL);
    free(b);
    return st;
}

weft_status vk_buffer_alloc(struct weft_backend *be, size_t size, struct weft_buffer **out)
{
    struct vk_backend *vb = (struct vk_backend *)be;
    weft_status st = vk_wait_idle(vb);  /* the one-shot fill shares the command buffer */
    if (st != WEFT_OK) {
        *out = NULL;
        return st;
    }
    return vk_buffer_new(vb, size, false, true, out);
}

void vk_buffer_destroy_now(struct weft_buffer *b)
{
    struct vk_backend *vb = b->vb;
    vkDestroyBuffer(vb->dev, b->buf, NULL);
    struct vk_chunk *c = b->chunk;
    if (c) {
        c->n_live--;
        if (c->dedicated || c->n_live == 0) chunk_drop(vb, c);
        else chunk_give(c, b->mem_off, b->mem_size);
    }
    free(b);
}

void vk_buffer_free(struct weft_buffer *b)
{
    if (!b) return;
    vk_wait_idle(b->vb);  /* a step in flight may still use it */
    vk_buffer_destroy_now(b);
}

static weft_status range_check(const struct weft_buffer *b, size_t off, size_t n, const char *what)
{
    if (off > b->size || n > b->size - off)
        return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: %s [%zu, +%zu) outside buffer of %zu", what, off, n,
                          b->size);
    return WEFT_OK;
}

static weft_status staging_get(struct vk_backend *vb)
{
    if (vb->staging) return WEFT_OK;
    return vk_buffer_new(vb, STAGING_BYTES, true, false, &vb->staging);
}

weft_status vk_buffer_write(struct weft_buffer *b, size_t off, const void *src, size_t n)
{
    struct vk_backend *vb = b->vb;
    weft_status st = range_check(b, off, n, "write");
    if (st != WEFT_OK || n == 0) return st;
    if ((st = vk_wait_idle(vb)) != WEFT_OK) return st;
    if (b->chunk->mapped) {
        memcpy(b->chunk->mapped + b->mem_off + off, src, n);
        return WEFT_OK;
    }
    if ((st = staging_get(vb)) != WEFT_OK) return st;
    struct weft_buffer *s = vb->staging;
    for (size_t done = 0; done < n;) {
        size_t part = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
        memcpy(s->chunk->mapped + s->mem_off, (const uint8_t *)src + done, part);
        if ((st = vk_oneshot_begin(vb)) != WEFT_OK) return st;
        VkBufferCopy reg = {0, off + done, part};
        vkCmdCopyBuffer(vb->cb, s->buf, b->buf, 1, &reg);
        if ((st = vk_oneshot_submit(vb)) != WEFT_OK) return st;
        done += part;
    }
    return WEFT_OK;
}

weft_status vk_buffer_read(struct weft_buffer *b, size_t off, void *dst, size_t n)
{
    struct vk_backend *vb = b->vb;
    weft_status st = range_check(b, off, n, "read");
    if (st != WEFT_OK || n == 0) return st;
    if ((st = vk_wait_idle(vb)) != WEFT_OK) return st;
    if (b->chunk->mapped) {
        memcpy(dst, b->chunk->mapped + b->mem_off + off, n);
        return WEFT_OK;
    }
    if ((st = staging_get(vb)) != WEFT_OK) return st;
    struct weft_buffer *s = vb->staging;
    for (size_t done = 0; done < n;) {
        size_t part = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
        if ((st = vk_oneshot_begin(vb)) != WEFT_OK) return st;
        VkBufferCopy reg = {off + done, 0, part};
        vkCmdCopyBuffer(vb->cb, b->buf, s->buf, 1, &reg);
        if ((st = vk_oneshot_submit(vb)) != WEFT_OK) return st;
        memcpy((uint8_t *)dst + done, s->chunk->mapped + s->mem_off, part);
        done += part;
    }
    return WEFT_OK;
}

weft_status vk_buffer_copy(struct weft_buffer *dst, size_t doff, struct weft_buffer *src, size_t soff, size_t n)
{
    struct vk_backend *vb = dst->vb;
    if (src->vb != vb)
        return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: copy between buffers of different devices");
    weft_status st = range_check(dst, doff, n, "copy destination");
    if (st == WEFT_OK) st = range_check(src, soff, n, "copy source");
    if (st != WEFT_OK || n == 0) return st;
    if ((st = vk_wait_idle(vb)) != WEFT_OK) return st;
    if (dst->chunk->mapped && src->chunk->mapped) {
        memmove(dst->chunk->mapped + dst->mem_off + doff, src->chunk->mapped + src->mem_off + soff, n);
        return WEFT_OK;
    }
    if ((st = vk_oneshot_begin(vb)) != WEFT_OK) return st;
    st = vk_record_copy(vb, dst, doff, src, soff, n);
    weft_status st2 = vk_oneshot_submit(vb);
    return st != WEFT_OK ? st : st2;
}
