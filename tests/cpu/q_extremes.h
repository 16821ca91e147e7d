/* Extreme weight rows for the CPU kernel tests: every nibble of a Q4_0 / Q4_1
 * row 15 (and every high bit of a Q5_0 / Q5_1 row set), every value of a
 * Q4_K / Q5_K / Q6_K row its largest (15, 31, 63), its scales kept, so the
 * integer paths that sum unsigned products in int16 meet their largest
 * values (a quantizer seldom writes them). Other types are left as they are. */
#ifndef WEFT_TEST_Q_EXTREMES_H
#define WEFT_TEST_Q_EXTREMES_H

#include <stdint.h>
#include <string.h>

#include "base/quant.h"
#include "base/types.h"

static inline void max_nibble_row(enum weft_type t, uint8_t *row, int64_t n)
{
    for (int64_t i = 0; i < n / WEFT_QK_K && (t == WEFT_TYPE_Q4_K || t == WEFT_TYPE_Q5_K || t == WEFT_TYPE_Q6_K); i++) {
        if (t == WEFT_TYPE_Q4_K) {
            memset(((struct weft_block_q4_k *)(void *)row)[i].qs, 0xFF, WEFT_QK_K / 2);
        } else if (t == WEFT_TYPE_Q5_K) {
            struct weft_block_q5_k *b = &((struct weft_block_q5_k *)(void *)row)[i];
            memset(b->qs, 0xFF, WEFT_QK_K / 2), memset(b->qh, 0xFF, WEFT_QK_K / 8);
        } else {
            struct weft_block_q6_k *b = &((struct weft_block_q6_k *)(void *)row)[i];
            memset(b->ql, 0xFF, WEFT_QK_K / 2), memset(b->qh, 0xFF, WEFT_QK_K / 4);
        }
    }
    for (int64_t i = 0; i < n / 32; i++) {
        switch (t) {
        case WEFT_TYPE_Q4_0: memset(((struct weft_block_q4_0 *)(void *)row)[i].qs, 0xFF, 16); break;
        case WEFT_TYPE_Q4_1: memset(((struct weft_block_q4_1 *)(void *)row)[i].qs, 0xFF, 16); break;
        case WEFT_TYPE_Q5_0: {
            struct weft_block_q5_0 *b = &((struct weft_block_q5_0 *)(void *)row)[i];
            memset(b->qs, 0xFF, 16), memset(b->qh, 0xFF, 4);
            break;
        }
        case WEFT_TYPE_Q5_1: {
            struct weft_block_q5_1 *b = &((struct weft_block_q5_1 *)(void *)row)[i];
            memset(b->qs, 0xFF, 16), memset(b->qh, 0xFF, 4);
            break;
        }
        default: return;
        }
    }
}

#endif
