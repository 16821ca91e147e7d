/* Repacked layouts shared by more than one kernel level (plain C, x86
 * builds): the AVX-512 VNNI kernels (packed/packed_q32.c,
 * packed/packed_prefill.c) and the AVX2 ones (packed/packed_avx2.c) stream the
 * same Q4_0 x16 weight groups and the same one-row activation units.
 *
 *  - weights: weft_cpu_pack_q4_0x16 (struct weft_cpu_packed's pack). Per
 *    block column of 16 rows, 288 bytes: d[16] (f16), then four 64-byte
 *    chunks; chunk k holds bytes 4k..4k+3 of row r's qs at 4r (rows 0..7 in
 *    its first 32 bytes, rows 8..15 in its second).
 *  - decode aux (weft_cpu_aux_q4_0, weft_cpu_aux8_size(n) bytes): per block
 *    {int32 -8 * sum(x qs), float dx}.
 *  - prefill units (weft_cpu_xpack_q4_0, weft_cpu_xp_size_q4_0(n) bytes, one
 *    activation row each): per block its 32 qs, the int32 -8 * their sum and
 *    dx (float), 40 bytes.
 *  - Q4_1 x8 (weft_cpu_pack_q4_1x8): per block column of 8 rows, 160 bytes:
 *    (d, m)[8] (f16 pairs), then row r's 16 qs at 32 + 16r; decode aux
 *    (weft_cpu_aux_q4_1, weft_cpu_aux8_size(n) bytes): per block {float dx,
 *    float sx} of the Q8_1 activations.
 *  - Q4_K activations of the AVX-512 VNNI x16 layout (weft_cpu_aux_q4_k:
 *    decode aux, and one-row prefill units through weft_cpu_xpack_q4_k;
 *    weft_cpu_aux_q4_k_size(n) bytes; the AVX2 x8 layout arranges its own,
 *    packed/packed_kq_avx2.c), 288
 *    bytes per Q8_K block: the 256 qs rearranged (sub-block j, lane l: bytes
 *    32j + 4l + t hold x[32j + l + 8t]), the int16 sums B[j] = bsums[2j] +
 *    bsums[2j+1] at 256, float dx at 272, zeros. */
#ifndef WEFT_CPU_PACKED_LAYOUTS_H
#define WEFT_CPU_PACKED_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#define WEFT_Q4P_GROUP 288 /* bytes per block column of a Q4_0 x16 group */
#define WEFT_Q4P_UNIT 40   /* bytes per block of a Q4_0 prefill unit */

void weft_cpu_pack_q4_0x16(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n);
size_t weft_cpu_aux8_size(int64_t n);
void weft_cpu_aux_q4_0(const void *vx, int64_t n, void *vaux);
void weft_cpu_pack_q4_1x8(void *dst, const void *w, size_t stride, int64_t n_rows, int64_t n);
void weft_cpu_aux_q4_1(const void *vx, int64_t n, void *vaux);
size_t weft_cpu_aux_q4_k_size(int64_t n);
void weft_cpu_aux_q4_k(const void *vx, int64_t n, void *vaux);
void weft_cpu_xpack_q4_k(const void *x, size_t xstride, int nx, int64_t n, void *dst);
size_t weft_cpu_xp_size_q4_0(int64_t n);
void weft_cpu_xpack_q4_0(const void *x, size_t xstride, int nx, int64_t n, void *dst);

#endif
