/* The OpenCL backend: devices (every device of every platform the ICD
 * loader lists, numbered opencl:0, 1, ... in that order), open and close,
 * sync, and the module's entry point. */
#include "backends/module.h"
#include "backends/opencl/ocl_internal.h"
#include "base/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

weft_status ocl_err(cl_int e, const char *what)
{
    switch (e) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_HOST_MEMORY:
        return weft_error(WEFT_ERR_NOMEM, "opencl: %s: out of memory (error %d)", what, (int)e);
    case CL_OUT_OF_RESOURCES:  /* also how drivers report a kernel that faulted */
        return weft_error(WEFT_ERR_DEVICE, "opencl: %s: the device is out of resources or a kernel failed (error %d)",
                          what, (int)e);
    case CL_DEVICE_NOT_FOUND:
    case CL_DEVICE_NOT_AVAILABLE:
    case CL_PLATFORM_NOT_FOUND_KHR:
        return weft_error(WEFT_ERR_NO_DEVICE, "opencl: %s: no device (error %d)", what, (int)e);
    default:
        return weft_error(WEFT_ERR_DEVICE, "opencl: %s: error %d", what, (int)e);
    }
}

#define MAX_PLATFORMS 16
#define MAX_DEVICES 64

/* every device of every platform, in order; 0 with *why when there is none */
static int list_devices(cl_device_id *devs, cl_platform_id *plats, int max, const char **why)
{
    cl_platform_id p[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(MAX_PLATFORMS, p, &np);
    if (e == CL_PLATFORM_NOT_FOUND_KHR || (e == CL_SUCCESS && np == 0)) {
        if (why) *why = "no OpenCL platform (the ICD loader found no driver: install one, e.g. pocl-opencl-icd)";
        return 0;
    }
    if (e != CL_SUCCESS) {
        if (why) *why = "the OpenCL ICD loader failed to list platforms";
        return 0;
    }
    int n = 0;
    for (cl_uint i = 0; i < np && i < MAX_PLATFORMS && n < max; i++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(p[i], CL_DEVICE_TYPE_ALL, (cl_uint)(max - n), devs + n, &nd) != CL_SUCCESS) continue;
        for (cl_uint j = 0; j < nd && n < max; j++) plats[n++] = p[i];
    }
    if (n == 0 && why) *why = "the OpenCL platforms have no device";
    return n;
}

static bool has_ext(cl_device_id d, const char *ext)
{
    size_t n = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) return false;
    char *s = malloc(n + 1);
    if (!s) return false;
    bool found = false;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS) {
        s[n] = '\0';
        size_t el = strlen(ext);
        for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == s || p[-1] == ' ') && (p[el] == ' ' || p[el] == '\0');
    }
    free(s);
    return found;
}

/* "NAME (PLATFORM, OpenCL X.Y, TYPE; fp16, fp64, subgroups, int dot)" */
static void describe(cl_device_id d, cl_platform_id p, char *out, size_t cap)
{
    char dn[256] = "", pn[256] = "", ver[256] = "";
    cl_device_type type = 0;
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dn - 1, dn, NULL);
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof pn - 1, pn, NULL);
    clGetDeviceInfo(d, CL_DEVICE_VERSION, sizeof ver - 1, ver, NULL);  /* "OpenCL 3.0 PoCL ..." */
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    char v[16] = "?";
    sscanf(ver, "OpenCL %15s", v);
    char caps[96] = "";
    const struct { const char *ext, *label; } c[] = {
        {"cl_khr_fp16", "fp16"}, {"cl_khr_fp64", "fp64"}, {"cl_khr_subgroups", "subgroups"},
        {"cl_intel_subgroups", "subgroups"}, {"cl_khr_integer_dot_product", "int dot"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        if (!has_ext(d, c[i].ext) || strstr(caps, c[i].label)) continue;
        size_t l = strlen(caps);
        snprintf(caps + l, sizeof caps - l, "%s%s", l ? ", " : "", c[i].label);
    }
    const char *tn = type & CL_DEVICE_TYPE_GPU ? "GPU" : type & CL_DEVICE_TYPE_CPU ? "CPU"
                   : type & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator" : "other";
    snprintf(out, cap, "%.48s (%.28s, OpenCL %s, %s%s%s)", dn, pn, v, tn, caps[0] ? "; " : "", caps);
}

static int ocl_devices(struct weft_device_info *infos, int max, const char **why)
{
    cl_device_id d[MAX_DEVICES];
    cl_platform_id p[MAX_DEVICES];
    int n = list_devices(d, p, MAX_DEVICES, why);
    for (int i = 0; i < n && i < max; i++) {
        memset(&infos[i], 0, sizeof infos[i]);
        describe(d[i], p[i], infos[i].name, sizeof infos[i].name);
        snprintf(infos[i].id, sizeof infos[i].id, "opencl:%d", i);
        cl_ulong mem = 0;
        clGetDeviceInfo(d[i], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
        infos[i].mem_total = mem;
    }
    return n;
}

static void ocl_close(struct weft_backend *b)
{
    struct ocl_backend *ob = (struct ocl_backend *)b;
    if (!ob) return;
    if (ob->q) clFinish(ob->q);
    for (int i = 0; i < OK_COUNT_; i++)
        if (ob->k[i]) clReleaseKernel(ob->k[i]);
    if (ob->prog) clReleaseProgram(ob->prog);
    if (ob->err) clReleaseMemObject(ob->err);
    if (ob->scratch) clReleaseMemObject(ob->scratch);
    if (ob->act) clReleaseMemObject(ob->act);
    if (ob->moe_idx) clReleaseMemObject(ob->moe_idx);
    if (ob->moe_y) clReleaseMemObject(ob->moe_y);
    if (ob->rec_idx) clReleaseMemObject(ob->rec_idx);
    if (ob->rope_tab) clReleaseMemObject(ob->rope_tab);
    free(ob->rope_ff);
    for (uint32_t i = 0; i < ob->ff_len; i++) free(ob->ff[i].vals);
    free(ob->ff);
    if (ob->gelu_tab) clReleaseMemObject(ob->gelu_tab);
    ocl_arenas_free(ob);
    if (ob->q) clReleaseCommandQueue(ob->q);
    if (ob->ctx) clReleaseContext(ob->ctx);
    free(ob);
}

static const struct weft_backend_iface ocl_iface;

static weft_status ocl_open(const struct weft_backend_params *p, struct weft_backend **out)
{
    *out = NULL;
    char bad[64], v[8];
    static const char *const known[] = {"opencl.exact"};
    if (weft_opt_unknown(p->options, "opencl.", known, 1, bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, "opencl: unknown option '%s' (known: opencl.exact)", bad);
    cl_device_id d[MAX_DEVICES];
    cl_platform_id pl[MAX_DEVICES];
    const char *why = NULL;
    int n = list_devices(d, pl, MAX_DEVICES, &why);
    if (p->device < 0 || p->device >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "opencl: no device %d (%d found%s%s)", p->device, n, why ? ": " : "",
                          why ? why : "");
    struct ocl_backend *ob = calloc(1, sizeof *ob);
    if (!ob) return weft_error(WEFT_ERR_NOMEM, "opencl: out of host memory");
    ob->base.iface = &ocl_iface;
    ob->index = p->device;
    ob->dev = d[p->device];
    ob->platform = pl[p->device];
    describe(ob->dev, ob->platform, ob->name, sizeof ob->name);
    if (p->cache_dir && *p->cache_dir) snprintf(ob->cache_dir, sizeof ob->cache_dir, "%s", p->cache_dir);
    clGetDeviceInfo(ob->dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ob->max_alloc, &ob->max_alloc, NULL);
    clGetDeviceInfo(ob->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ob->max_wg, &ob->max_wg, NULL);
    ob->fp64 = has_ext(ob->dev, "cl_khr_fp64");
    cl_device_type type = 0;
    clGetDeviceInfo(ob->dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    /* exact forms by default where the device is a CPU (PoCL): plain IEEE
     * float, so the CPU backend's order gives its bits */
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(ob->dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    /* the exact forms sum in double and divide and take roots correctly rounded, as the CPU */
    const bool can_exact = ob->fp64 && (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT);
    const bool forced = weft_opt_get(p->options, "opencl.exact", v, sizeof v) && v[0];
    ob->exact = forced ? weft_opt_flag(p->options, "opencl.exact", false) : (type & CL_DEVICE_TYPE_CPU) && can_exact;
    if (ob->exact && !can_exact) {
        free(ob);
        return weft_error(WEFT_ERR_UNSUPPORTED, "opencl:%d: opencl.exact=1 needs doubles (cl_khr_fp64) and correctly "
                          "rounded divide and sqrt, which this device lacks", p->device);
    }
    weft_status st;
    cl_int e;
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ob->platform, 0};
    ob->ctx = clCreateContext(props, 1, &ob->dev, NULL, NULL, &e);
    if (e != CL_SUCCESS) {
        st = ocl_err(e, "creating a context");
        goto fail;
    }
    ob->q = clCreateCommandQueue(ob->ctx, ob->dev, 0, &e);
    if (e != CL_SUCCESS) {
        st = ocl_err(e, "creating a queue");
        goto fail;
    }
    if (ob->max_wg < 256) {
        st = weft_error(WEFT_ERR_UNSUPPORTED, "opencl:%d: work-groups of %zu items (the kernels need 256)",
                        p->device, ob->max_wg);
        goto fail;
    }
    ob->err = clCreateBuffer(ob->ctx, CL_MEM_READ_WRITE, sizeof(cl_int), NULL, &e);
    if (e == CL_SUCCESS) {
        static const cl_int zero = 0;
        e = clEnqueueWriteBuffer(ob->q, ob->err, CL_TRUE, 0, sizeof zero, &zero, 0, NULL, NULL);
    }
    if (e != CL_SUCCESS) {
        st = ocl_err(e, "allocating the error word");
        goto fail;
    }
    if ((st = ocl_program_build(ob)) != WEFT_OK) goto fail;
    *out = &ob->base;
    return WEFT_OK;
fail:
    ocl_close(&ob->base);
    return st;
}

/* Waits for everything queued, then reports bad input the kernels met. */
static weft_status ocl_sync(struct weft_backend *b)
{
    struct ocl_backend *ob = (struct ocl_backend *)b;
    cl_int e = clFinish(ob->q);
    if (e != CL_SUCCESS) return ocl_err(e, "running the op list");
    cl_int code = 0;
    e = clEnqueueReadBuffer(ob->q, ob->err, CL_TRUE, 0, sizeof code, &code, 0, NULL, NULL);
    if (e != CL_SUCCESS) return ocl_err(e, "reading the error word");
    if (code == 0) return WEFT_OK;
    static const cl_int zero = 0;
    clEnqueueWriteBuffer(ob->q, ob->err, CL_TRUE, 0, sizeof zero, &zero, 0, NULL, NULL);
    static const char *const what[] = {"", "a token id outside the embedding table", "a logits row outside the batch",
                                       "a KV slot outside the cache", "a sequence or KV block outside its table",
                                       "an expert id outside MATMUL_ID's experts",
                                       "a recurrent state slot outside the state buffer"};
    return weft_error(WEFT_ERR_INVALID_ARG, "opencl: the step met %s", code > 0 && code < 7 ? what[code] : "bad input");
}

static uint64_t ocl_max_buffer(struct weft_backend *b) { return ((struct ocl_backend *)b)->max_alloc & ~(cl_ulong)3; }

static const struct weft_backend_iface ocl_iface = {
    .api_version = WEFT_BACKEND_API_VERSION,
    .name = "opencl",
    .devices = ocl_devices,
    .open = ocl_open,
    .close = ocl_close,
    .buffer_alloc = ocl_buffer_alloc,
    .buffer_wrap_host = NULL,   /* weights are uploaded into device buffers */
    .buffer_free = ocl_buffer_free,
    .buffer_write = ocl_buffer_write,
    .buffer_read = ocl_buffer_read,
    .buffer_copy = ocl_buffer_copy,
    .supports = ocl_supports,
    .run = ocl_run,
    .sync = ocl_sync,
    .weight_prepare = NULL,
    .max_buffer = ocl_max_buffer,
};

WEFT_MODULE_EXPORT const struct weft_backend_iface *weft_backend_module_init(const struct weft_module_host *host,
                                                                            const char **why)
{
    if (!host || host->abi != WEFT_MODULE_ABI) {
        if (why) *why = "module ABI mismatch (rebuild libweft-opencl.so with this weft)";
        return NULL;
    }
    weft_module_host_ = host;
    return &ocl_iface;
}
