/* The tensor table (tensors.h). */
#include "core/arch/tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct weft_tensor_info infos[WEFT_T_COUNT_] = {
#define WEFT_T_INFO_(id, name, scope, kind) {name, WEFT_TS_##scope, WEFT_TK_##kind},
    WEFT_TENSOR_TABLE(WEFT_T_INFO_)
#undef WEFT_T_INFO_
};

const struct weft_tensor_info *weft_tensor_info(enum weft_tensor_id id)
{
    return (unsigned)id < WEFT_T_COUNT_ ? &infos[id] : NULL;
}

enum weft_tensor_id weft_tensor_lookup(const char *s, uint32_t *layer)
{
    *layer = UINT32_MAX;
    enum weft_tensor_scope scope = WEFT_TS_GLOBAL;
    if (!strncmp(s, "blk.", 4)) {
        const char *p = s + 4;
        if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) return WEFT_T_COUNT_;
        char *end;
        unsigned long l = strtoul(p, &end, 10);
        if (*end != '.' || l >= UINT32_MAX) return WEFT_T_COUNT_;
        *layer = (uint32_t)l;
        s = end + 1;
        scope = WEFT_TS_LAYER;
    }
    for (int i = 0; i < WEFT_T_COUNT_; i++)
        if (infos[i].scope == scope && !strcmp(infos[i].name, s)) return (enum weft_tensor_id)i;
    return WEFT_T_COUNT_;
}

void weft_tensor_name(enum weft_tensor_id id, uint32_t l, char *out, size_t cap)
{
    if (infos[id].scope == WEFT_TS_LAYER) snprintf(out, cap, "blk.%u.%s", l, infos[id].name);
    else snprintf(out, cap, "%s", infos[id].name);
}
