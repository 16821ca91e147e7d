#include "base/types.h"

#include <strings.h>

static const struct weft_type_info type_info[WEFT_TYPE_COUNT_] = {
    [WEFT_TYPE_F32]  = {"F32", 1, 4, false, true},
    [WEFT_TYPE_F16]  = {"F16", 1, 2, false, true},
    [WEFT_TYPE_BF16] = {"BF16", 1, 2, false, true},
    [WEFT_TYPE_I32]  = {"I32", 1, 4, false, false},
    [WEFT_TYPE_Q4_0] = {"Q4_0", WEFT_QK4_0, sizeof(struct weft_block_q4_0), true, true},
    [WEFT_TYPE_Q4_1] = {"Q4_1", WEFT_QK4_1, sizeof(struct weft_block_q4_1), true, true},
    [WEFT_TYPE_Q5_0] = {"Q5_0", WEFT_QK5_0, sizeof(struct weft_block_q5_0), true, true},
    [WEFT_TYPE_Q5_1] = {"Q5_1", WEFT_QK5_1, sizeof(struct weft_block_q5_1), true, true},
    [WEFT_TYPE_Q8_0] = {"Q8_0", WEFT_QK8_0, sizeof(struct weft_block_q8_0), true, true},
    [WEFT_TYPE_Q8_1] = {"Q8_1", WEFT_QK8_1, sizeof(struct weft_block_q8_1), true, false},
    [WEFT_TYPE_Q4_K] = {"Q4_K", WEFT_QK_K, sizeof(struct weft_block_q4_k), true, true},
    [WEFT_TYPE_Q5_K] = {"Q5_K", WEFT_QK_K, sizeof(struct weft_block_q5_k), true, true},
    [WEFT_TYPE_Q6_K] = {"Q6_K", WEFT_QK_K, sizeof(struct weft_block_q6_k), true, true},
    [WEFT_TYPE_Q8_K] = {"Q8_K", WEFT_QK_K, sizeof(struct weft_block_q8_k), true, false},
    [WEFT_TYPE_Q2_K] = {"Q2_K", WEFT_QK_K, sizeof(struct weft_block_q2_k), true, true},
    [WEFT_TYPE_Q3_K] = {"Q3_K", WEFT_QK_K, sizeof(struct weft_block_q3_k), true, true},
    [WEFT_TYPE_IQ4_NL] = {"IQ4_NL", WEFT_QK4_NL, sizeof(struct weft_block_iq4_nl), true, true},
    [WEFT_TYPE_IQ4_XS] = {"IQ4_XS", WEFT_QK_K, sizeof(struct weft_block_iq4_xs), true, true},
    [WEFT_TYPE_MXFP4] = {"MXFP4", WEFT_QK_MXFP4, sizeof(struct weft_block_mxfp4), true, true},
};

const struct weft_type_info *weft_type_get(uint32_t type)
{
    if (type >= WEFT_TYPE_COUNT_ || !type_info[type].name) return NULL;
    return &type_info[type];
}

const char *weft_type_name(enum weft_type t)
{
    const struct weft_type_info *ti = weft_type_get((uint32_t)t);
    return ti ? ti->name : "?";
}

bool weft_type_from_name(const char *name, enum weft_type *out)
{
    for (uint32_t i = 0; i < WEFT_TYPE_COUNT_; i++) {
        if (type_info[i].name && strcasecmp(type_info[i].name, name) == 0) {
            *out = (enum weft_type)i;
            return true;
        }
    }
    return false;
}

size_t weft_row_size(enum weft_type t, int64_t n)
{
    const struct weft_type_info *ti = weft_type_get((uint32_t)t);
    return (size_t)(n / ti->block_size) * ti->type_size;
}
