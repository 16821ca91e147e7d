/* Command recording: one command buffer per step (run()), descriptor sets
 * from per-step pools, barriers from hazard tracking over the byte ranges
 * each dispatch declares, one-shot submits for host transfers, scratch
 * memory, and vulkan.profile timestamps per op. */
#include "backends/vulkan/vk_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DPOOL_SETS 512
#define FENCE_TIMEOUT_NS (600ull * 1000 * 1000 * 1000)

weft_status vk_cmd_init(struct vk_backend *vb)
{
    VkResult r;
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = vb->qfam};
    if ((r = vkCreateCommandPool(vb->dev, &pci, NULL, &vb->cmd_pool)) != VK_SUCCESS)
        return vk_result(vb, r, "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = vb->cmd_pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    if ((r = vkAllocateCommandBuffers(vb->dev, &ai, &vb->cb)) != VK_SUCCESS)
        return vk_result(vb, r, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkCreateFence(vb->dev, &fci, NULL, &vb->fence)) != VK_SUCCESS) return vk_result(vb, r, "vkCreateFence");
    if (vb->profile) {
        VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = VK_MAX_QUERIES};
        if ((r = vkCreateQueryPool(vb->dev, &qci, NULL, &vb->qpool)) != VK_SUCCESS)
            return vk_result(vb, r, "vkCreateQueryPool");
    }
    return WEFT_OK;
}

static void free_retired(struct vk_backend *vb)
{
    for (uint32_t i = 0; i < vb->n_retired; i++) vk_buffer_destroy_now(vb->retired[i]);
    vb->n_retired = 0;
}

void vk_cmd_free(struct vk_backend *vb)
{
    free_retired(vb);
    free(vb->retired);
    if (vb->scratch) vk_buffer_destroy_now(vb->scratch);
    vb->scratch = NULL;
    for (uint32_t i = 0; i < vb->n_dpools; i++) vkDestroyDescriptorPool(vb->dev, vb->dpools[i], NULL);
    free(vb->dpools);
    free(vb->acc);
    if (vb->qpool) vkDestroyQueryPool(vb->dev, vb->qpool, NULL);
    if (vb->fence) vkDestroyFence(vb->dev, vb->fence, NULL);
    if (vb->cmd_pool) vkDestroyCommandPool(vb->dev, vb->cmd_pool, NULL);
}

static void collect_profile(struct vk_backend *vb)
{
    uint32_t n = vb->step_queries;
    vb->step_queries = 0;
    if (!vb->profile || n < 2) return;
    uint64_t *ts = malloc(n * sizeof *ts);
    if (!ts) return;
    if (vkGetQueryPoolResults(vb->dev, vb->qpool, 0, n, n * sizeof *ts, ts, sizeof *ts,
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS) {
        for (uint32_t i = 0; i + 1 < n; i += 2) {
            int k = vb->query_kind[i / 2];
            if (k < 0 || k >= WEFT_OP_COUNT_) continue;
            vb->prof[k].calls++;
            vb->prof[k].total_ms += (double)(ts[i + 1] - ts[i]) * vb->props.limits.timestampPeriod * 1e-6;
        }
    }
    free(ts);
}

weft_status vk_wait_idle(struct vk_backend *vb)
{
    if (!vb->in_flight) return WEFT_OK;
    VkResult r = vkWaitForFences(vb->dev, 1, &vb->fence, VK_TRUE, FENCE_TIMEOUT_NS);
    if (r != VK_SUCCESS) return vk_result(vb, r, "waiting for the step to finish");
    vkResetFences(vb->dev, 1, &vb->fence);
    vb->in_flight = false;
    collect_profile(vb);
    free_retired(vb);
    return WEFT_OK;
}

static weft_status begin_cb(struct vk_backend *vb)
{
    weft_status st = vk_wait_idle(vb);
    if (st != WEFT_OK) return st;
    VkResult r = vkResetCommandBuffer(vb->cb, 0);
    if (r != VK_SUCCESS) return vk_result(vb, r, "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if ((r = vkBeginCommandBuffer(vb->cb, &bi)) != VK_SUCCESS) return vk_result(vb, r, "vkBeginCommandBuffer");
    vb->recording = true;
    vb->n_acc = 0;
    return WEFT_OK;
}

static weft_status submit_cb(struct vk_backend *vb)
{
    if (!vb->recording) return WEFT_OK;
    vb->recording = false;
    /* device writes made visible to the host reads that follow the fence */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(vb->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    VkResult r = vkEndCommandBuffer(vb->cb);
    if (r != VK_SUCCESS) return vk_result(vb, r, "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &vb->cb};
    if ((r = vkQueueSubmit(vb->queue, 1, &si, vb->fence)) != VK_SUCCESS) return vk_result(vb, r, "vkQueueSubmit");
    vb->in_flight = true;
    return WEFT_OK;
}

weft_status vk_oneshot_begin(struct vk_backend *vb) { return begin_cb(vb); }

weft_status vk_oneshot_submit(struct vk_backend *vb)
{
    weft_status st = submit_cb(vb);
    return st != WEFT_OK ? st : vk_wait_idle(vb);
}

weft_status vk_step_begin(struct vk_backend *vb)
{
    weft_status st = begin_cb(vb);
    if (st != WEFT_OK) return st;
    for (uint32_t i = 0; i < vb->n_dpools; i++) vkResetDescriptorPool(vb->dev, vb->dpools[i], 0);
    vb->cur_dpool = 0;
    vb->n_queries = 0;
    if (vb->profile) vkCmdResetQueryPool(vb->cb, vb->qpool, 0, VK_MAX_QUERIES);
    return WEFT_OK;
}

weft_status vk_step_submit(struct vk_backend *vb)
{
    weft_status st = submit_cb(vb);
    if (st == WEFT_OK) vb->step_queries = vb->n_queries;
    return st;
}

void vk_step_abort(struct vk_backend *vb)
{
    if (!vb->recording) return;
    vb->recording = false;
    vkEndCommandBuffer(vb->cb);
    vb->step_queries = 0;
}

void vk_op_begin(struct vk_backend *vb, int kind)
{
    if (!vb->profile || vb->n_queries + 2 > VK_MAX_QUERIES) {
        vb->cur_kind = -1;
        return;
    }
    vb->cur_kind = kind;
    vb->query_kind[vb->n_queries / 2] = kind;
    vkCmdWriteTimestamp(vb->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, vb->qpool, vb->n_queries++);
}

void vk_op_end(struct vk_backend *vb)
{
    if (vb->cur_kind < 0) return;
    vkCmdWriteTimestamp(vb->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, vb->qpool, vb->n_queries++);
    vb->cur_kind = -1;
}

void vk_profile_print(struct vk_backend *vb)
{
    double all = 0;
    for (int k = 0; k < WEFT_OP_COUNT_; k++) all += vb->prof[k].total_ms;
    fprintf(stderr, "vulkan:%d profile (%s): %.3f ms in ops\n", vb->index, vb->props.deviceName, all);
    fprintf(stderr, "  %-10s %10s %12s %12s\n", "op", "calls", "total ms", "mean us");
    for (int k = 0; k < WEFT_OP_COUNT_; k++) {
        const struct vk_prof *p = &vb->prof[k];
        if (!p->calls) continue;
        fprintf(stderr, "  %-10s %10llu %12.3f %12.1f\n", weft_op_name((enum weft_op_kind)k), (unsigned long long)p->calls, p->total_ms,
                p->total_ms * 1e3 / (double)p->calls);
    }
}

/* ---- hazard tracking ---- */

static void barrier(struct vk_backend *vb)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(vb->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
    vb->n_acc = 0;
}

static bool conflicts(const struct vk_backend *vb, VkBuffer buf, size_t lo, size_t hi, bool write)
{
    for (uint32_t i = 0; i < vb->n_acc; i++) {
        const struct vk_access *a = &vb->acc[i];
        if (a->buf == buf && lo < a->hi && a->lo < hi && (write || a->write)) return true;
    }
    return false;
}

static weft_status track(struct vk_backend *vb, VkBuffer buf, size_t lo, size_t hi, bool write)
{
    /* an identical or covering entry needs no new one */
    for (uint32_t i = 0; i < vb->n_acc; i++) {
        struct vk_access *a = &vb->acc[i];
        if (a->buf == buf && a->lo <= lo && hi <= a->hi && (a->write || !write)) return WEFT_OK;
    }
    if (vb->n_acc == vb->cap_acc) {
        uint32_t cap = vb->cap_acc ? vb->cap_acc * 2 : 64;
        struct vk_access *a = realloc(vb->acc, cap * sizeof *a);
        if (!a) return weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
        vb->acc = a;
        vb->cap_acc = cap;
    }
    vb->acc[vb->n_acc++] = (struct vk_access){buf, lo, hi, write};
    return WEFT_OK;
}

/* Barrier first if any of these ranges meets a pending access with a write
 * on either side; then record them as pending. */
static weft_status order(struct vk_backend *vb, const struct vk_bind *binds, uint32_t n)
{
    bool need = false;
    for (uint32_t i = 0; i < n && !need; i++)
        need = binds[i].size && conflicts(vb, binds[i].buf->buf, binds[i].offset,
                                          binds[i].offset + binds[i].size, binds[i].write);
    if (need) barrier(vb);
    for (uint32_t i = 0; i < n; i++) {
        if (!binds[i].size) continue;
        weft_status st = track(vb, binds[i].buf->buf, binds[i].offset, binds[i].offset + binds[i].size, binds[i].write);
        if (st != WEFT_OK) return st;
    }
    return WEFT_OK;
}

static VkDescriptorSet alloc_set(struct vk_backend *vb, VkDescriptorSetLayout layout)
{
    for (;;) {
        if (vb->cur_dpool == vb->n_dpools) {
            VkDescriptorPool *dp = realloc(vb->dpools, (vb->n_dpools + 1) * sizeof *dp);
            if (!dp) {
                weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
                return VK_NULL_HANDLE;
            }
            vb->dpools = dp;
            VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, DPOOL_SETS * 8};
            VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = DPOOL_SETS, .poolSizeCount = 1, .pPoolSizes = &ps};
            VkResult r = vkCreateDescriptorPool(vb->dev, &ci, NULL, &vb->dpools[vb->n_dpools]);
            if (r != VK_SUCCESS) {
                vk_result(vb, r, "vkCreateDescriptorPool");
                return VK_NULL_HANDLE;
            }
            vb->n_dpools++;
        }
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = vb->dpools[vb->cur_dpool], .descriptorSetCount = 1,
                                          .pSetLayouts = &layout};
        VkDescriptorSet set;
        VkResult r = vkAllocateDescriptorSets(vb->dev, &ai, &set);
        if (r == VK_SUCCESS) return set;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) {
            vk_result(vb, r, "vkAllocateDescriptorSets");
            return VK_NULL_HANDLE;
        }
        vb->cur_dpool++;
    }
}

weft_status vk_dispatch(struct vk_backend *vb, struct vk_pipeline *p, const struct vk_bind *binds, uint32_t n_bind,
                        const void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!vb->recording) return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: dispatch outside run()");
    if (!p) return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: dispatch without a pipeline");
    if (gx == 0 || gy == 0 || gz == 0) return WEFT_OK;
    const uint32_t *mx = vb->caps.max_workgroup_count;
    if (gx > mx[0] || gy > mx[1] || gz > mx[2])
        return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan:%d: %u x %u x %u workgroups is over the device's %u x %u x %u",
                          vb->index, gx, gy, gz, mx[0], mx[1], mx[2]);
    if (n_bind > 16) return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: more than 16 bindings");
    for (uint32_t i = 0; i < n_bind; i++) {
        const struct vk_bind *b = &binds[i];
        if (!b->buf || b->offset > b->buf->size || b->size > b->buf->size - b->offset)
            return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: binding %u: range [%zu, +%zu) outside its buffer", i,
                              b->offset, b->size);
    }
    VkDescriptorSet set = alloc_set(vb, vk_pipeline_set_layout(p));
    if (!set) return WEFT_ERR_DEVICE;
    VkDescriptorBufferInfo info[16];
    VkWriteDescriptorSet w[16];
    for (uint32_t i = 0; i < n_bind; i++) {
        VkDeviceSize range = VK_WHOLE_SIZE;
        VkDeviceSize whole = ((VkDeviceSize)(binds[i].buf->size ? binds[i].buf->size : 1) + 15) & ~(VkDeviceSize)15;
        if (whole > vb->caps.max_storage_range) range = vb->caps.max_storage_range & ~(VkDeviceSize)15;
        info[i] = (VkDescriptorBufferInfo){binds[i].buf->buf, 0, range};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set, .dstBinding = i,
                                      .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &info[i]};
    }
    vkUpdateDescriptorSets(vb->dev, n_bind, w, 0, NULL);
    weft_status st = order(vb, binds, n_bind);
    if (st != WEFT_OK) return st;
    vkCmdBindPipeline(vb->cb, VK_PIPELINE_BIND_POINT_COMPUTE, vk_pipeline_handle(p));
    vkCmdBindDescriptorSets(vb->cb, VK_PIPELINE_BIND_POINT_COMPUTE, vk_pipeline_layout(p), 0, 1, &set, 0, NULL);
    if (push_bytes) vkCmdPushConstants(vb->cb, vk_pipeline_layout(p), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
    vkCmdDispatch(vb->cb, gx, gy, gz);
    return WEFT_OK;
}

weft_status vk_scratch(struct vk_backend *vb, size_t bytes, struct weft_buffer **out)
{
    *out = NULL;
    if (vb->scratch && vb->scratch->size >= bytes) {
        *out = vb->scratch;
        return WEFT_OK;
    }
    size_t want = bytes;
    if (vb->scratch && want < vb->scratch->size * 2) want = vb->scratch->size * 2;
    struct weft_buffer *nb = NULL;
    weft_status st = vk_buffer_new(vb, want, false, false, &nb);
    if (st != WEFT_OK && want > bytes) st = vk_buffer_new(vb, bytes, false, false, &nb);
    if (st != WEFT_OK) return st;
    if (vb->scratch && (st = vk_retire(vb, vb->scratch)) != WEFT_OK) {  /* the step being recorded may use it */
        vk_buffer_destroy_now(nb);
        return st;
    }
    vb->scratch = nb;
    *out = nb;
    return WEFT_OK;
}

weft_status vk_retire(struct vk_backend *vb, struct weft_buffer *b)
{
    if (vb->n_retired == vb->cap_retired) {
        uint32_t cap = vb->cap_retired ? vb->cap_retired * 2 : 8;
        struct weft_buffer **r = realloc(vb->retired, cap * sizeof *r);
        if (!r) return weft_error(WEFT_ERR_NOMEM, "vulkan: out of host memory");
        vb->retired = r;
        vb->cap_retired = cap;
    }
    vb->retired[vb->n_retired++] = b;
    return WEFT_OK;
}

weft_status vk_record_copy(struct vk_backend *vb, struct weft_buffer *dst, size_t doff, struct weft_buffer *src,
                           size_t soff, size_t n)
{
    if (!vb->recording) return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: copy outside run()");
    if (doff > dst->size || n > dst->size - doff || soff > src->size || n > src->size - soff)
        return weft_error(WEFT_ERR_INVALID_ARG, "vulkan: copy of %zu bytes outside a buffer", n);
    if (n == 0) return WEFT_OK;
    weft_status st;
    if (src == dst && soff < doff + n && doff < soff + n) {
        /* overlapping ranges of one buffer: through scratch */
        struct weft_buffer *tmp;
        if ((st = vk_scratch(vb, n, &tmp)) != WEFT_OK) return st;
        if ((st = vk_record_copy(vb, tmp, 0, src, soff, n)) != WEFT_OK) return st;
        return vk_record_copy(vb, dst, doff, tmp, 0, n);
    }
    const struct vk_bind b[2] = {{src, soff, n, false}, {dst, doff, n, true}};
    if ((st = order(vb, b, 2)) != WEFT_OK) return st;
    VkBufferCopy reg = {soff, doff, n};
    vkCmdCopyBuffer(vb->cb, src->buf, dst->buf, 1, &reg);
    return WEFT_OK;
}
