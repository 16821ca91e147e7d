/* Vulkan MATMUL and LOGITS (op side of vk_internal.h). Stub until the shaders land. */
#include "backends/vulkan/vk_internal.h"

#include "core/status.h"

bool vk_matmul_supports(struct vk_backend *vb, const struct weft_op *op)
{
    (void)vb;
    (void)op;
    return false;
}

weft_status vk_op_matmul(struct vk_backend *vb, const struct weft_op *op)
{
    (void)vb;
    (void)op;
    return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan MATMUL: not implemented yet");
}

weft_status vk_op_logits(struct vk_backend *vb, const struct weft_op *op)
{
    (void)vb;
    (void)op;
    return weft_error(WEFT_ERR_UNSUPPORTED, "vulkan LOGITS: not implemented yet");
}
