/* Test helper for comparing the CPU and Vulkan backends on the same inputs:
 * one buffer with the same bytes on both. The including test defines
 * `static struct weft_backend *cpu, *vk;` before including this header. */
#ifndef WEFT_TESTS_VK_PAIR_H
#define WEFT_TESTS_VK_PAIR_H

#include "backends/backend.h"
#include "tests/check.h"

struct pair { struct weft_buffer *c, *v; size_t size; };

static struct pair pair_new(const void *data, size_t n)
{
    struct pair p = {NULL, NULL, n};
    CHECK(cpu->iface->buffer_alloc(cpu, n, &p.c) == WEFT_OK);
    CHECK(vk->iface->buffer_alloc(vk, n, &p.v) == WEFT_OK);
    if (data && p.c && p.v) {
        CHECK(cpu->iface->buffer_write(p.c, 0, data, n) == WEFT_OK);
        CHECK(vk->iface->buffer_write(p.v, 0, data, n) == WEFT_OK);
    }
    return p;
}

static void pair_free(struct pair *p)
{
    if (p->c) cpu->iface->buffer_free(p->c);
    if (p->v) vk->iface->buffer_free(p->v);
}

#endif
