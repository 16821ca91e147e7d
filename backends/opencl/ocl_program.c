/* The kernels' program: built from the embedded OpenCL C at first use on a
 * device and kept in the cache folder as the driver's binary
 * (<cache>/opencl-<key>.bin, the key hashing the source, the build options
 * and the device's and driver's names and versions), so a later open loads
 * it instead of compiling. A cache file that does not load or build is
 * ignored and replaced. */
#include "backends/opencl/ocl_internal.h"
#include "base/types.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const kernel_names[OK_COUNT_] = {
    [OK_EMBED] = "embed",     [OK_RMSNORM] = "rmsnorm",   [OK_LOGITS_NORM] = "logits_norm",
    [OK_SILU_MUL] = "silu_mul", [OK_ADD] = "add",         [OK_MM_VEC] = "mm_vec",
    [OK_MM_TILE] = "mm_tile", [OK_ROPE_KV] = "rope_kv",   [OK_ATTENTION] = "attention",
    [OK_MM_EXACT_F] = "mm_exact_f", [OK_QUANT_ACT] = "quant_act", [OK_MM_EXACT_Q] = "mm_exact_q",
    [OK_MM_EXACT_Q4] = "mm_exact_q4", [OK_SOFTCAP] = "softcap", [OK_MOE_ROUTE] = "moe_route",
    [OK_MOE_SORT] = "moe_sort", [OK_MM_ID_VEC] = "mm_id_vec", [OK_MM_ID_TILE] = "mm_id_tile",
    [OK_MM_ID_EXACT_F] = "mm_id_exact_f", [OK_MM_ID_EXACT_Q] = "mm_id_exact_q", [OK_MOE_SUM] = "moe_sum",
    [OK_REC_INDEX] = "rec_index", [OK_SSM_CONV] = "ssm_conv", [OK_DELTA_NET] = "delta_net",
};

/* The block layouts of base/types.h as -D options: the kernels hold no
 * layout numbers of their own. */
static void build_options(const struct ocl_backend *ob, char *out, size_t cap)
{
    size_t l = 0;
#define ADD(...) l += (size_t)snprintf(out + l, l < cap ? cap - l : 0, __VA_ARGS__)
    ADD("-cl-std=CL1.2 -DWEFT_KV_BLOCK_TOKENS=%d -DWEFT_QK_K=%d -DMOE_MAX_E=%d", WEFT_KV_BLOCK_TOKENS, WEFT_QK_K,
        OCL_MAX_EXPERTS);
#define T(name, id) ADD(" -DWEFT_T_%s=%d", name, (int)id)
    T("F32", WEFT_TYPE_F32); T("F16", WEFT_TYPE_F16); T("BF16", WEFT_TYPE_BF16); T("Q4_0", WEFT_TYPE_Q4_0);
    T("Q4_1", WEFT_TYPE_Q4_1); T("Q5_0", WEFT_TYPE_Q5_0); T("Q5_1", WEFT_TYPE_Q5_1); T("Q8_0", WEFT_TYPE_Q8_0);
    T("Q4_K", WEFT_TYPE_Q4_K); T("Q5_K", WEFT_TYPE_Q5_K); T("Q6_K", WEFT_TYPE_Q6_K); T("Q2_K", WEFT_TYPE_Q2_K);
    T("Q3_K", WEFT_TYPE_Q3_K); T("IQ4_NL", WEFT_TYPE_IQ4_NL); T("IQ4_XS", WEFT_TYPE_IQ4_XS);
    T("MXFP4", WEFT_TYPE_MXFP4);
#undef T
#define B(name, st, qk) ADD(" -DWEFT_B_%s=%zu -DWEFT_QK_%s=%d", name, sizeof(struct st), name, (int)(qk))
    B("Q4_0", weft_block_q4_0, WEFT_QK4_0); B("Q4_1", weft_block_q4_1, WEFT_QK4_1);
    B("Q5_0", weft_block_q5_0, WEFT_QK5_0); B("Q5_1", weft_block_q5_1, WEFT_QK5_1);
    B("Q8_0", weft_block_q8_0, WEFT_QK8_0); B("IQ4_NL", weft_block_iq4_nl, WEFT_QK4_NL);
    B("MXFP4", weft_block_mxfp4, WEFT_QK_MXFP4);
#undef B
    ADD(" -DWEFT_B_Q4_K=%zu -DWEFT_B_Q5_K=%zu -DWEFT_B_Q6_K=%zu", sizeof(struct weft_block_q4_k),
        sizeof(struct weft_block_q5_k), sizeof(struct weft_block_q6_k));
    ADD(" -DWEFT_B_Q2_K=%zu -DWEFT_B_Q3_K=%zu -DWEFT_B_IQ4_XS=%zu", sizeof(struct weft_block_q2_k),
        sizeof(struct weft_block_q3_k), sizeof(struct weft_block_iq4_xs));
    /* the fields of the later types' blocks (WEFT_O_<TYPE>_<FIELD>: byte offsets) */
#define O(name, st, f, F) ADD(" -DWEFT_O_%s_%s=%zu", name, F, offsetof(struct st, f))
    O("Q2_K", weft_block_q2_k, scales, "SCALES"); O("Q2_K", weft_block_q2_k, qs, "QS");
    O("Q2_K", weft_block_q2_k, d, "D"); O("Q2_K", weft_block_q2_k, dmin, "DMIN");
    O("Q3_K", weft_block_q3_k, hmask, "HMASK"); O("Q3_K", weft_block_q3_k, qs, "QS");
    O("Q3_K", weft_block_q3_k, scales, "SCALES"); O("Q3_K", weft_block_q3_k, d, "D");
    O("IQ4_NL", weft_block_iq4_nl, d, "D"); O("IQ4_NL", weft_block_iq4_nl, qs, "QS");
    O("IQ4_XS", weft_block_iq4_xs, d, "D"); O("IQ4_XS", weft_block_iq4_xs, scales_h, "SCALES_H");
    O("IQ4_XS", weft_block_iq4_xs, scales_l, "SCALES_L"); O("IQ4_XS", weft_block_iq4_xs, qs, "QS");
    O("MXFP4", weft_block_mxfp4, e, "E"); O("MXFP4", weft_block_mxfp4, qs, "QS");
#undef O
    /* the code books (WEFT_KV_<BOOK>: the 16 values, comma-separated) */
    static const int8_t kv_iq4nl[16] = WEFT_KVALUES_IQ4NL, kv_mxfp4[16] = WEFT_KVALUES_MXFP4;
    const struct { const char *name; const int8_t *v; } books[] = {{"IQ4NL", kv_iq4nl}, {"MXFP4", kv_mxfp4}};
    for (size_t b = 0; b < sizeof books / sizeof books[0]; b++) {
        ADD(" -DWEFT_KV_%s=%d", books[b].name, books[b].v[0]);
        for (int i = 1; i < 16; i++) ADD(",%d", books[b].v[i]);
    }
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(ob->dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    if (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ADD(" -cl-fp32-correctly-rounded-divide-sqrt");
    /* the host's libm expf without FMA (it rounds x·N/ln2 first: 0x1.f93e36p+46 here, the fused
     * form 0x1.f93e38p+46): common.cl's expf_libm in that form too */
    volatile float probe = 0x1.04845ep+5f;
    if (expf(probe) == 0x1.f93e36p+46f) ADD(" -DWEFT_EXPF_PLAIN");
#undef ADD
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static void cache_path(const struct ocl_backend *ob, const char *opts, char *path, size_t cap)
{
    path[0] = '\0';
    if (!ob->cache_dir[0]) return;
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, weft_ocl_source, weft_ocl_source_len);
    h = fnv(h, opts, strlen(opts));
    static const cl_device_info di[] = {CL_DEVICE_NAME, CL_DEVICE_VERSION, CL_DRIVER_VERSION, CL_DEVICE_VENDOR};
    for (size_t i = 0; i < sizeof di / sizeof di[0]; i++) {
        char s[256] = "";
        clGetDeviceInfo(ob->dev, di[i], sizeof s - 1, s, NULL);
        h = fnv(h, s, strlen(s));
    }
    char pv[256] = "";
    clGetPlatformInfo(ob->platform, CL_PLATFORM_VERSION, sizeof pv - 1, pv, NULL);
    h = fnv(h, pv, strlen(pv));
    snprintf(path, cap, "%s/opencl-%016llx.bin", ob->cache_dir, (unsigned long long)h);
}

static unsigned char *read_file(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = path[0] ? fopen(path, "rb") : NULL;
    if (!f) return NULL;
    unsigned char *data = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len > 0 && len < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)len)) &&
        fread(data, 1, (size_t)len, f) == (size_t)len) {
        *n = (size_t)len;
    } else {
        free(data);
        data = NULL;
    }
    fclose(f);
    return data;
}

/* the program's binary into path (through a temporary file, renamed) */
static void save_binary(const struct ocl_backend *ob, const char *path)
{
    size_t n = 0;
    if (!path[0] || clGetProgramInfo(ob->prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n) return;
    unsigned char *bin = malloc(n);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(ob->prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        mkdir(ob->cache_dir, 0755);
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = fwrite(bin, 1, n, f) == n;
            ok = fclose(f) == 0 && ok;
            if (!ok || rename(tmp, path) != 0) unlink(tmp);
        }
    }
    free(bin);
}

static weft_status build_log(struct ocl_backend *ob, cl_int e)
{
    size_t n = 0;
    clGetProgramBuildInfo(ob->prog, ob->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = n ? calloc(1, n + 1) : NULL;
    if (log) clGetProgramBuildInfo(ob->prog, ob->dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    weft_status st = weft_error(WEFT_ERR_DEVICE, "opencl:%d: the kernels do not build (error %d): %.3000s", ob->index,
                                (int)e, log ? log : "");
    free(log);
    return st;
}

weft_status ocl_program_build(struct ocl_backend *ob)
{
    char opts[4096], path[600];
    build_options(ob, opts, sizeof opts);
    cache_path(ob, opts, path, sizeof path);
    cl_int e = CL_SUCCESS;
    size_t n = 0;
    unsigned char *bin = read_file(path, &n);
    if (bin) {
        const unsigned char *bins[1] = {bin};
        cl_int bs = CL_SUCCESS;
        ob->prog = clCreateProgramWithBinary(ob->ctx, 1, &ob->dev, &n, bins, &bs, &e);
        free(bin);
        if (e == CL_SUCCESS && bs == CL_SUCCESS && clBuildProgram(ob->prog, 1, &ob->dev, opts, NULL, NULL) == CL_SUCCESS)
            ob->program_from_cache = true;
        else if (ob->prog) {
            clReleaseProgram(ob->prog);
            ob->prog = NULL;
        }
    }
    if (!ob->prog) {
        const char *src = weft_ocl_source;
        const size_t len = weft_ocl_source_len;
        ob->prog = clCreateProgramWithSource(ob->ctx, 1, &src, &len, &e);
        if (e != CL_SUCCESS) return ocl_err(e, "creating the program");
        if ((e = clBuildProgram(ob->prog, 1, &ob->dev, opts, NULL, NULL)) != CL_SUCCESS) return build_log(ob, e);
        save_binary(ob, path);
    }
    for (int i = 0; i < OK_COUNT_; i++) {
        ob->k[i] = clCreateKernel(ob->prog, kernel_names[i], &e);
        if (e != CL_SUCCESS)
            return weft_error(WEFT_ERR_DEVICE, "opencl:%d: kernel '%s' missing from the program (error %d)", ob->index,
                              kernel_names[i], (int)e);
        /* a kernel heavy in registers or private memory can have a smaller
         * limit than the device's: one under the work-group ocl_ops.c
         * launches it with cannot run here */
        size_t wg = 0;
        const bool known = clGetKernelWorkGroupInfo(ob->k[i], ob->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg,
                                                    NULL) == CL_SUCCESS;
        if (i == OK_DELTA_NET) {
            /* DELTA_NET's group is its head_dim along dimension 0 */
            size_t dims[16] = {0};
            ob->dn_wg = known ? wg : 64;
            if (clGetDeviceInfo(ob->dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof dims, dims, NULL) == CL_SUCCESS &&
                dims[0] < ob->dn_wg)
                ob->dn_wg = dims[0];
        }
        if (known && wg < (size_t)ocl_kernel_wg[i])
            return weft_error(WEFT_ERR_UNSUPPORTED, "opencl:%d: kernel '%s' runs at most %zu work-items per group here "
                              "(it needs %d)", ob->index, kernel_names[i], wg, ocl_kernel_wg[i]);
    }
    return WEFT_OK;
}
