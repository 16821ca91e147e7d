/* The launch geometry of the recurrent-state kernels (api 9: SSM_CONV and DELTA_NET,
 * kernels-common/recurrent.cuh), in plain C: the launchers (kernels-common/launch_recurrent.cuh),
 * the shared host code's supports (backends/gpu/gpu_common.c) and the unit tests
 * (tests/test_gpu_recurrent.c) compute it with the same functions. Shapes only, never data:
 * a step graph holding these launches stays valid while the slots and states change.
 *
 * Sequences are found on the device. The host has the op, not the slots (they live in device
 * memory and are written by the core each step), so a launch covers every row as a possible
 * start of a sequence: a row goes on only when no row before it names its slot (the first row
 * of its sequence, "the leader"), then runs every row of that slot in row order (rows of one
 * slot need not be adjacent, as the CPU: backends/cpu/ops/ops_recurrent.c). Any other row is
 * done after reading one slot when its sequence's rows are adjacent (a prefill chunk), after a
 * scan of the rows before it otherwise (32 slots per step of the scan). No host read, one
 * launch per op. */
#ifndef WEFT_KC_RECURRENT_GEOM_H
#define WEFT_KC_RECURRENT_GEOM_H

#include <stdint.h>

/* DELTA_NET's widest head (head_dim; the CPU's WEFT_CPU_MAX_DN_HEAD) */
#define WEFT_GK_DN_MAX_HEAD 256
/* 32-lane groups per DELTA_NET block (128 threads: four NVIDIA warps, two CDNA wavefronts) */
#define WEFT_GK_DN_GROUPS 4
/* DELTA_NET blocks per multiprocessor below which the state rows are split finer */
#define WEFT_GK_DN_BLOCKS_PER_MP 4
/* SSM_CONV's widest kernel (taps; the CPU and the model loader take 2..64) and its block */
#define WEFT_GK_CONV_MAX_K 64
#define WEFT_GK_CONV_THREADS 128
/* rows of one op (grid.x: one block column per row) */
#define WEFT_GK_REC_MAX_ROWS INT32_MAX

/* DELTA_NET: block (x, v head h, tile z) of `threads` threads takes the candidate first rows
 * [x * per_block, (x + 1) * per_block) of the R, one after another, and holds state rows (value
 * indices) j = z * GROUPS * jw + g * jw + t (group g, t < jw, j < S) of v head h, each row's S
 * columns spread over the group's 32 lanes, nc 32-column chunks per lane (ceil(S / 32) rounded
 * up to 1, 2, 4 or 8: the kernel's instantiations). At most min(R, n_slots) sequences can be
 * in an op, so that many block columns (per_block = ceil(R / min(R, n_slots)) candidates each)
 * run them all at once when their first rows are spread as in a batch of decode rows or of
 * equal chunks, while a long prefill chunk launches no block per row that would only return.
 * jw is the largest of 8, 4, 2, 1 with GROUPS * jw <= S (no group of a block wholly past S)
 * that still gives every multiprocessor WEFT_GK_DN_BLOCKS_PER_MP blocks; more rows per group
 * means fewer blocks recomputing a row's norms and gates. */
struct weft_gk_dn_geom {
    int nc, jw, tiles;
    int64_t per_block;                 /* candidate rows per block column */
    unsigned grid_x, grid_y, grid_z;   /* ceil(R / per_block), Hv, tiles */
    int threads;
};

/* 0 and *g filled, or -1 when the kernels do not take the shape (nothing written) */
static inline int weft_gk_dn_geom(int64_t R, int64_t n_slots, int Hv, int S, int n_mp, struct weft_gk_dn_geom *g)
{
    if (R < 1 || R > WEFT_GK_REC_MAX_ROWS || n_slots < 1 || Hv < 1 || Hv > 65535 || S < 1 || S > WEFT_GK_DN_MAX_HEAD)
        return -1;
    const int chunks = (S + 31) / 32;
    const int64_t seqs = R < n_slots ? R : n_slots, target = (int64_t)(n_mp > 0 ? n_mp : 1) * WEFT_GK_DN_BLOCKS_PER_MP;
    int jw = 8;
    while (jw > 1 && WEFT_GK_DN_GROUPS * jw > S) jw /= 2;
    while (jw > 1 && seqs * Hv * ((S + WEFT_GK_DN_GROUPS * jw - 1) / (WEFT_GK_DN_GROUPS * jw)) < target) jw /= 2;
    g->nc = chunks <= 1 ? 1 : chunks <= 2 ? 2 : chunks <= 4 ? 4 : 8;
    g->jw = jw;
    g->tiles = (S + WEFT_GK_DN_GROUPS * jw - 1) / (WEFT_GK_DN_GROUPS * jw);
    g->per_block = (R + seqs - 1) / seqs;
    g->grid_x = (unsigned)((R + g->per_block - 1) / g->per_block);
    g->grid_y = (unsigned)Hv;
    g->grid_z = (unsigned)g->tiles;
    g->threads = 32 * WEFT_GK_DN_GROUPS;
    return 0;
}

/* SSM_CONV: block (row r, channel block y) of WEFT_GK_CONV_THREADS threads, one channel each */
struct weft_gk_conv_geom {
    unsigned grid_x, grid_y;   /* R, ceil(C / threads) */
    int threads;
};

/* 0 and *g filled, or -1 when the kernel does not take the shape (nothing written) */
static inline int weft_gk_conv_geom(int64_t R, int64_t C, int K, struct weft_gk_conv_geom *g)
{
    const int64_t cb = (C + WEFT_GK_CONV_THREADS - 1) / WEFT_GK_CONV_THREADS;
    if (R < 1 || R > WEFT_GK_REC_MAX_ROWS || C < 1 || cb > 65535 || K < 2 || K > WEFT_GK_CONV_MAX_K) return -1;
    g->grid_x = (unsigned)R;
    g->grid_y = (unsigned)cb;
    g->threads = WEFT_GK_CONV_THREADS;
    return 0;
}

#endif
