/* bench_cpu_kernels: the CPU kernel tables timed against each other, printed
 * (the tests check these kernels bit for bit; this only measures them).
 *   build/bench_cpu_kernels [gemm|float|swiglu ...]   (default: all)
 *   gemm    the best table's register-blocked prefill tile (gemm, or gemm_mm
 *           for the float types) against one dot per output, 1536 x 576
 *           weights (x 1536 for the 256-element blocks) times 64 activation
 *           rows, per weight type with a plain tile (the packed K-quants:
 *           `packed`, and tests/cpu/test_cpu_packed_prefill.c's timing)
 *   float   every table's F32/F16/BF16 dot and dot_mm on a 1536 x 576 and a
 *           16 x 576 matrix (memory-bound and cache-resident), and the
 *           activation converters on 64 x 576 floats, against the scalar table
 *   swiglu  every table's SwiGLU over one prefill at SmolLM2-135M's n_ff
 *           (1536 x 512 rows)
 *   packed  the repacked decode kernels against the plain dot, weight GB/s
 *           (one thread; 64 rows in L2 and 16384 rows from memory, K 2048;
 *           WEFT_CPU_PREFETCH sets the prefetch distance as cpu.prefetch does)
 *   attn    every table's attention over one 512-token prefill of a KV head
 *           with 3 query heads (SmolLM2-135M's GQA), head_dim 64 and 128:
 *           the group form (attn_group), the row form per head (attn_row)
 *           and the generic row, ns per (head, position)
 * Best of several repetitions each; single thread. Was three print-only cases
 * in tests/test_cpu_kernels_{gemm,f,swiglu}.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernels.h"
#include "base/quant.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* uniform in [lo, hi) */
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() >> 40) * 0x1p-24f; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_cpu_kernels: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* a row of n values of type t, quantized from uniform floats; false when
 * weft_quantize_row has no quantizer for t */
static bool weight_row(enum weft_type t, uint8_t *dst, int64_t n)
{
    float *f = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = uniform(-1.0f, 1.0f);
    bool ok = weft_quantize_row(t, f, dst, n);
    free(f);
    return ok;
}

/* 1536 x 576 weights (x 1536 for the 256-element blocks) times 64 rows, through 16-row tiles as the matmul does */
static void bench_gemm(void)
{
    /* the types with a plain gemm tile somewhere (the packed K-quants are bench_cpu_kernels packed's) */
    static const enum weft_type types[] = {WEFT_TYPE_Q8_0, WEFT_TYPE_Q4_0, WEFT_TYPE_Q4_1, WEFT_TYPE_Q5_0,
                                           WEFT_TYPE_Q5_1, WEFT_TYPE_IQ4_NL, WEFT_TYPE_MXFP4, WEFT_TYPE_IQ4_XS,
                                           WEFT_TYPE_Q2_K, WEFT_TYPE_Q3_K, WEFT_TYPE_F16, WEFT_TYPE_F32, WEFT_TYPE_BF16};
    char opts[64];   /* WEFT_CPU_ISA, as the weft binary reads it (tools/env.c) */
    snprintf(opts, sizeof opts, "cpu.isa=%s", getenv("WEFT_CPU_ISA") ? getenv("WEFT_CPU_ISA") : "");
    const struct weft_cpu_kernels *k = weft_cpu_kernels_get(weft_cpu_isa_select(opts));
    const int64_t N = 1536, R = 64;
    /* WEFT_BENCH_GEMM_K: another row length (a multiple of 256), e.g. a 1.7B model's 2048 or 8192 */
    const int64_t Kenv = getenv("WEFT_BENCH_GEMM_K") ? atoll(getenv("WEFT_BENCH_GEMM_K")) : 0;
    if (Kenv > 0 && Kenv % 256 == 0)
        printf("gemm against dot, table %s, %lld x %lld weights x %lld rows:\n", k->name, (long long)N,
               (long long)Kenv, (long long)R);
    else
        printf("gemm against dot, table %s, %lld x 576 (256-element blocks: x 1536) weights x %lld rows:\n", k->name,
               (long long)N, (long long)R);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        enum weft_type t = types[ti], vt = weft_vec_dot_type(t);
        const int64_t K = Kenv > 0 && Kenv % 256 == 0 ? Kenv : weft_type_get(t)->block_size == 256 ? 1536 : 576;
        const bool mm = !k->gemm[t] && k->gemm_mm[t] && K % k->mm_k_multiple[t] == 0;
        const weft_cpu_gemm_fn gemm = mm ? k->gemm_mm[t] : k->gemm[t];
        const weft_cpu_dot_fn dot = mm ? k->dot_mm[t] : k->dot[t];
        if (!gemm) {
            printf("  %-5s no gemm tile in table %s\n", weft_type_name(t), k->name);
            continue;
        }
        size_t wrow = weft_row_size(t, K), xrow = weft_row_size(vt, K);
        uint8_t *w = xmalloc((size_t)N * wrow), *x = xmalloc((size_t)R * xrow);
        float *f = xmalloc((size_t)K * sizeof(float)), *out = xmalloc(sizeof(float) * R * 16),
              *out2 = xmalloc(sizeof(float) * R * 16);
        bool made = true;
        for (int64_t i = 0; i < N && made; i++) made = weight_row(t, w + i * wrow, K);
        if (!made) {
            printf("  %-5s no quantizer for its weights\n", weft_type_name(t));
            free(w); free(x); free(f); free(out); free(out2);
            continue;
        }
        for (int64_t j = 0; j < R; j++) {
            for (int64_t i = 0; i < K; i++) f[i] = uniform(-2.0f, 2.0f);
            weft_quantize_row_act(vt, f, x + j * xrow, K);
        }
        double best_g = 1e9, best_d = 1e9;
        volatile float sink = 0;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            for (int64_t n0 = 0; n0 < N; n0 += 16) {
                gemm(w + n0 * wrow, wrow, 16, x, xrow, (int)R, K, out, 16);
                sink += out[0];
            }
            double t1 = now_s();
            for (int64_t n0 = 0; n0 < N; n0 += 16) {
                for (int64_t r = 0; r < R; r++)
                    for (int i = 0; i < 16; i++) out2[r * 16 + i] = dot(w + (n0 + i) * wrow, x + r * xrow, K);
                sink += out2[0];
            }
            double t2 = now_s();
            if (t1 - t0 < best_g) best_g = t1 - t0;
            if (t2 - t1 < best_d) best_d = t2 - t1;
        }
        (void)sink;
        double macs = (double)N * K * R;
        printf("  %-5s gemm%-3s %8.3f ms (%6.1f GMAC/s)   dot %8.3f ms (%6.1f GMAC/s)   %5.2fx\n", weft_type_name(t),
               mm ? "_mm" : "", best_g * 1e3, macs / best_g * 1e-9, best_d * 1e3, macs / best_d * 1e-9,
               best_d / best_g);
        free(w); free(x); free(f); free(out); free(out2);
    }
}

static const enum weft_type ftypes[3] = {WEFT_TYPE_F32, WEFT_TYPE_F16, WEFT_TYPE_BF16};

/* dot and dot_mm over an N x K weight matrix (one activation row), per table */
static void bench_float_tables(int64_t N, int64_t K)
{
    float *f = xmalloc((size_t)K * sizeof(float));
    for (int ti = 0; ti < 3; ti++) {
        enum weft_type t = ftypes[ti];
        size_t rs = weft_row_size(t, K);
        uint8_t *w = xmalloc(rs * (size_t)N), *x = xmalloc(rs);
        for (int64_t r = 0; r < N; r++) weight_row(t, w + (size_t)r * rs, K);  /* the float types always quantize */
        for (int64_t i = 0; i < K; i++) f[i] = uniform(-1.0f, 1.0f);
        weft_quantize_row(t, f, x, K);
        double base[2] = {0, 0};
        for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
            const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
            if (!k) continue;
            for (int mm = 0; mm < 2; mm++) {
                weft_cpu_dot_fn fn = mm ? k->dot_mm[t] : k->dot[t];
                if (!fn) continue;
                volatile float sink = 0;
                double best = 1e30;
                for (int64_t r = 0; r < N; r++) sink += fn(w + (size_t)r * rs, x, K); /* warm-up */
                for (int trial = 0; trial < 5; trial++) {
                    int reps = (int)((isa == 0 ? 2 : 20) * (1536 * 576 / (N * K)));
                    double t0 = now_s();
                    for (int rep = 0; rep < reps; rep++)
                        for (int64_t r = 0; r < N; r++) sink += fn(w + (size_t)r * rs, x, K);
                    double dt = (now_s() - t0) / reps;
                    if (dt < best) best = dt;
                }
                (void)sink;
                if (isa == 0) base[mm] = best;
                printf("  %-4s %-6s %-7s %9.2f us / %lldx%lld matvec (%5.1fx scalar)\n", weft_type_name(t),
                       mm ? "dot_mm" : "dot", k->name, best * 1e6, (long long)N, (long long)K,
                       base[mm] > 0 ? base[mm] / best : 0.0);
            }
        }
        free(w);
        free(x);
    }
    free(f);
}

/* the activation converters (F16, BF16) on 64 rows of 576 floats */
static void bench_float_quant(void)
{
    const int64_t n = 64 * 576;
    float *x = xmalloc((size_t)n * sizeof(float));
    uint8_t *y = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = uniform(-8.0f, 8.0f);
    for (int ti = 1; ti < 3; ti++) {
        enum weft_type t = ftypes[ti];
        double base = 0;
        for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
            const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
            if (!k || !k->quant[t]) continue;
            double best = 1e30;
            for (int trial = 0; trial < 5; trial++) {
                double t0 = now_s();
                for (int rep = 0; rep < 20; rep++) k->quant[t](x, y, n);
                double dt = (now_s() - t0) / 20;
                if (dt < best) best = dt;
            }
            if (isa == 0) base = best;
            printf("  %-4s quant  %-7s %9.2f us / 64x576 floats (%5.1fx scalar)\n", weft_type_name(t), k->name,
                   best * 1e6, base > 0 ? base / best : 0.0);
        }
    }
    free(x);
    free(y);
}

static void bench_float(void)
{
    printf("float kernels against the scalar table:\n");
    bench_float_tables(1536, 576); /* 1.7-3.5 MB of weights: mostly memory-bound */
    bench_float_tables(16, 576);   /* cache-resident: the kernels themselves */
    bench_float_quant();
}

/* one prefill's SwiGLU at SmolLM2-135M's n_ff, per table */
static void bench_swiglu(void)
{
    const int64_t n = 1536, rows = 512;
    float *g = xmalloc((size_t)(n * rows) * 4), *u = xmalloc((size_t)(n * rows) * 4),
          *y = xmalloc((size_t)(n * rows) * 4);
    for (int64_t i = 0; i < n * rows; i++) { g[i] = uniform(-8, 8); u[i] = uniform(-2, 2); }
    printf("swiglu, %lld x %lld rows:\n", (long long)n, (long long)rows);
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
        const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
        if (!k) continue;
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            for (int64_t r = 0; r < rows; r++) k->swiglu(y + r * n, g + r * n, u + r * n, n);
            double t = now_s() - t0;
            if (t < best) best = t;
        }
        printf("  %-7s %8.3f ms  (%.2f ns/element)\n", k->name, best * 1e3, best * 1e9 / (double)(n * rows));
    }
    free(g);
    free(u);
    free(y);
}

/* the repacked decode kernels (packed[t].dot) against the plain dot, one
 * thread, in weight GB/s: a matrix that stays in L2 (64 rows) and one streamed
 * from memory (16384 rows), K = 2048 */
static void bench_packed(void)
{
    char opts[64];
    snprintf(opts, sizeof opts, "cpu.isa=%s", getenv("WEFT_CPU_ISA") ? getenv("WEFT_CPU_ISA") : "");
    const struct weft_cpu_kernels *k = weft_cpu_kernels_get(weft_cpu_isa_select(opts));
    const int64_t K = 2048;
    if (getenv("WEFT_CPU_PREFETCH") && *getenv("WEFT_CPU_PREFETCH"))  /* as cpu.prefetch, unchecked */
        weft_cpu_prefetch = atoi(getenv("WEFT_CPU_PREFETCH"));
    printf("packed decode against dot, table %s, K = %lld, prefetch %d bytes ahead, weight GB/s:\n", k->name,
           (long long)K, weft_cpu_prefetch);
    for (int ti = 0; ti < WEFT_TYPE_COUNT_; ti++) {
        const enum weft_type t = (enum weft_type)ti, vt = weft_vec_dot_type(t);
        const struct weft_cpu_packed *pk = &k->packed[t];
        if (!pk->rows || !k->dot[t]) continue;
        const size_t wrow = weft_row_size(t, K), xrow = weft_row_size(vt, K);
        float *f = xmalloc((size_t)K * sizeof(float)), out[64];
        uint8_t *x = xmalloc(xrow), *aux = xmalloc(pk->aux_size ? pk->aux_size(K) : 1);
        for (int64_t i = 0; i < K; i++) f[i] = uniform(-2.0f, 2.0f);
        weft_quantize_row_act(vt, f, x, K);
        if (pk->aux_size) pk->aux(x, K, aux);
        for (int big = 0; big < 2; big++) {
            const int64_t N = big ? 16384 : 64;
            uint8_t *w = xmalloc((size_t)N * wrow), *wp = xmalloc((size_t)N * wrow);
            bool made = true;
            for (int64_t i = 0; i < N && made; i++) made = weight_row(t, w + i * wrow, K);
            if (!made) {
                free(w); free(wp);
                break;
            }
            pk->pack(wp, w, wrow, N, K);
            const int reps = big ? 3 : 2000;
            double best_p = 1e30, best_d = 1e30;
            volatile float sink = 0;
            for (int trial = 0; trial < 5; trial++) {
                double t0 = now_s();
                for (int rep = 0; rep < reps; rep++)
                    for (int64_t g = 0; g < N; g += pk->rows) {
                        pk->dot(wp + (size_t)g * wrow, x, aux, K, out);
                        sink += out[0];
                    }
                double t1 = now_s();
                for (int rep = 0; rep < reps; rep++)
                    for (int64_t r = 0; r < N; r++) sink += k->dot[t](w + (size_t)r * wrow, x, K);
                double t2 = now_s();
                if ((t1 - t0) / reps < best_p) best_p = (t1 - t0) / reps;
                if ((t2 - t1) / reps < best_d) best_d = (t2 - t1) / reps;
            }
            (void)sink;
            const double bytes = (double)N * (double)wrow;
            printf("  %-6s %5lld rows (%s): packed %6.1f GB/s   dot %6.1f GB/s\n", weft_type_name(t), (long long)N,
                   big ? "memory" : "L2", bytes / best_p * 1e-9, bytes / best_d * 1e-9);
            free(w);
            free(wp);
        }
        free(f);
        free(x);
        free(aux);
    }
}

/* rows 0..511 of a prefill, each attending positions 0..its own, for the 3
 * query heads of one KV head: the work of one layer's KV head in pp512 */
static void bench_attn(void)
{
    const int64_t n = 512, G = 3;
    for (uint32_t hd = 64; hd <= 128; hd *= 2) {
        const int64_t nblk = n / 16;
        const size_t tok = (size_t)hd * 2, layer = 16 * tok, block = 2 * layer;
        uint8_t *kv = xmalloc(block * (size_t)nblk);
        for (size_t i = 0; i < block * (size_t)nblk / 2; i++) {
            const weft_half h = weft_f32_to_half(uniform(-1.0f, 1.0f));
            memcpy(kv + 2 * i, &h, 2);
        }
        int32_t *bt = xmalloc((size_t)nblk * sizeof(int32_t));
        for (int64_t b = 0; b < nblk; b++) bt[b] = (int32_t)((b * 7 + 3) % nblk);
        float *q = xmalloc((size_t)(n * G * hd) * 4), *o = xmalloc((size_t)(n * G * hd) * 4);
        for (int64_t i = 0; i < n * G * (int64_t)hd; i++) q[i] = uniform(-0.5f, 0.5f);
        const double work = (double)G * (double)n * (double)(n + 1) / 2;
        printf("attention, %lld rows x %lld heads of one KV head, head_dim %u, ns per (head, position):\n",
               (long long)n, (long long)G, hd);
        for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++) {
            const struct weft_cpu_kernels *k = weft_cpu_kernels_get((enum weft_cpu_isa)isa);
            if (!k || isa == WEFT_CPU_ISA_SCALAR) continue; /* ~900 ns: not worth the wait */
            double best[3] = {1e30, 1e30, 1e30};
            for (int form = 0; form < 3; form++) {
                if ((form == 0 && !k->attn_group) || (form == 1 && !k->attn_row)) continue;
                for (int rep = 0; rep < 5; rep++) {
                    const double t0 = now_s();
                    for (int64_t r = 0; r < n; r++) {
                        struct weft_cpu_attn_args a[3];
                        for (int64_t h = 0; h < G; h++)
                            a[h] = (struct weft_cpu_attn_args){.q = q + (r * G + h) * hd, .out = o + (r * G + h) * hd,
                                                               .k0 = kv, .v_off = layer, .block_bytes = block,
                                                               .tok_bytes = tok, .bt = bt, .n_pos = r + 1, .hd = hd,
                                                               .scale = 0.125f};
                        if (form == 0) k->attn_group(a, (int)G);
                        else
                            for (int64_t h = 0; h < G; h++) {
                                if (form == 1) k->attn_row(&a[h]);
                                else weft_cpu_attn_row_generic(k, &a[h]);
                            }
                    }
                    const double t = now_s() - t0;
                    if (t < best[form]) best[form] = t;
                }
            }
            printf("  %-12s", k->name);
            const char *names[3] = {"group", "row", "generic"};
            for (int form = 0; form < 3; form++)
                if (best[form] < 1e30) printf("   %s %6.2f", names[form], best[form] * 1e9 / work);
            printf("\n");
        }
        free(kv);
        free(bt);
        free(q);
        free(o);
    }
}

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } parts[] = {
        {"gemm", bench_gemm}, {"float", bench_float}, {"swiglu", bench_swiglu}, {"packed", bench_packed}, {"attn", bench_attn}};
    const int n_parts = (int)(sizeof parts / sizeof *parts);
    for (int i = 1; i < argc; i++) {
        bool known = false;
        for (int p = 0; p < n_parts; p++) known |= strcmp(argv[i], parts[p].name) == 0;
        if (!known) {
            fprintf(stderr, "bench_cpu_kernels: unknown part '%s' (gemm, float, swiglu, packed, attn)\n", argv[i]);
            return 2;
        }
    }
    for (int isa = 0; isa < WEFT_CPU_ISA_COUNT_; isa++)
        printf("table %s: %s\n", weft_cpu_isa_name((enum weft_cpu_isa)isa),
               weft_cpu_isa_supported((enum weft_cpu_isa)isa) ? "supported" : "not supported here");
    for (int p = 0; p < n_parts; p++) {
        bool run = argc == 1;
        for (int i = 1; i < argc; i++) run |= strcmp(argv[i], parts[p].name) == 0;
        if (run) {
            parts[p].fn();
            fflush(stdout);
        }
    }
    return 0;
}
