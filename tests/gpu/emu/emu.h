/* Host emulation of kernels-common's primitives (prims.cuh) for tests/gpu/emu/check.cc: each
 * block's threads run as std::threads, shuffles exchange through a per-32-lane-group buffer
 * between barriers, __syncthreads is a block barrier, atomicAdd an atomic_ref; the device's
 * math functions are the host's. Blocks run one after another (so __shared__ = static). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <barrier>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
extern "C" {
#include "base/types.h"
}

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct emu_group {
    std::barrier<> bar{32};
    float f[32];
    int i[32];
};
inline thread_local emu_group *emu_my_group;
inline thread_local std::barrier<> *emu_block_bar;
inline thread_local int emu_lane;
inline std::vector<uint8_t> emu_dyn_smem;

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __shared__ static
#define WEFT_DEV inline
#define WEFT_WARP_SIZE 32

static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float2int_rn(float f) { return (int)lrintf(f); }
WEFT_DEV float weft_h2f(uint16_t h) { return weft_half_to_f32(h); }
WEFT_DEV uint16_t weft_f2h(float f) { return weft_f32_to_half(f); }
WEFT_DEV int weft_dp4a(int a, int b, int c)
{
    const int8_t *x = (const int8_t *)&a, *y = (const int8_t *)&b;
    return c + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
}
WEFT_DEV float weft_shfl_xor(float v, int m, int w)
{
    (void)w;
    emu_my_group->f[emu_lane] = v;
    emu_my_group->bar.arrive_and_wait();
    float r = emu_my_group->f[emu_lane ^ m];
    emu_my_group->bar.arrive_and_wait();
    return r;
}
WEFT_DEV int weft_shfl_xor_i(int v, int m, int w)
{
    (void)w;
    emu_my_group->i[emu_lane] = v;
    emu_my_group->bar.arrive_and_wait();
    int r = emu_my_group->i[emu_lane ^ m];
    emu_my_group->bar.arrive_and_wait();
    return r;
}
WEFT_DEV uint32_t weft_byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (uint32_t)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFFu) << (8 * n);
    return r;
}
static inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
static inline int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }

/* the runtime */
typedef void *weft_stream_t;
static inline int weft_launch_error(void) { return 0; }
#define WEFT_LAUNCH_EINVAL 1

/* run fn on every thread of every block, one block at a time (so __shared__ can be static).
 * A shuffle waits for the group's 32 lanes and __syncthreads for the block's threads: a kernel
 * whose lanes leave a group early while the others still shuffle would hang here (as it would
 * be wrong on a GPU); kernels-common's leave by whole groups. */
inline long emu_launches;
static void emu_launch(dim3 grid, dim3 block, size_t smem, std::function<void()> fn)
{
    emu_launches++;
    gridDim = grid;
    blockDim = block;
    emu_dyn_smem.assign(smem + 16, 0xA5);
    const unsigned nt = block.x * block.y;
    for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::barrier<> bbar((ptrdiff_t)nt);
            std::vector<std::unique_ptr<emu_group>> groups((nt + 31) / 32);
            for (auto &g : groups) g = std::make_unique<emu_group>();
            std::vector<std::thread> th;
            for (unsigned t = 0; t < nt; t++)
                th.emplace_back([&, t, bx, by, bz] {
                    threadIdx = dim3(t % block.x, t / block.x);
                    blockIdx = dim3(bx, by, bz);
                    emu_my_group = groups[t / 32].get();
                    emu_block_bar = &bbar;
                    emu_lane = (int)(t % 32);
                    fn();
                });
            for (auto &x : th) x.join();
        }
}

#define WEFT_PRIMS_MAPPED 1
#include "kernels-common/prims.cuh"

struct emu_cfg_t {
    dim3 g, b;
    size_t s;
};
static inline emu_cfg_t emu_cfg(dim3 g, dim3 b, size_t s = 0, weft_stream_t st = 0)
{
    (void)st;
    return {g, b, s};
}
static inline void emu_launch_cfg(emu_cfg_t c, std::function<void()> fn) { emu_launch(c.g, c.b, c.s, fn); }
