/* Vulkan ROPE_KV and ATTENTION over the paged F16 KV cache. */
#include "backends/vulkan/vk_internal.h"

bool vk_attention_supports(struct vk_backend *vb, const struct weft_op *op) { return false; }

weft_status vk_op_rope_kv(struct vk_backend *vb, const struct weft_op *op)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan: ROPE_KV not yet");
}

weft_status vk_op_attention(struct vk_backend *vb, const struct weft_op *op)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan: ATTENTION not yet");
}
