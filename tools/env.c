/* tools/env.h: the WEFT_* knobs, read in one place. */
#include "tools/env.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

const struct weft_knob weft_knobs[] = {
    {"WEFT_CPU_ISA", "cpu.isa", "the CPU kernel table: scalar, avx2, avx512 or avx512vnni (default: the best this CPU runs)"},
    {"WEFT_CPU_NOPACK", "cpu.nopack", "1: no repacked weight layouts (the plain GGUF rows)"},
    {"WEFT_CPU_PREFETCH", "cpu.prefetch", "bytes ahead the packed kernels prefetch, or off (default 0 on AMD: the column being read; 2560 elsewhere)"},
    {"WEFT_CPU_PROFILE", "cpu.profile", "1: per-op CPU time on stderr when the backend closes"},
    {"WEFT_PROFILE", "vulkan.profile", "1: per-op GPU time (timestamp queries) on stderr when Vulkan closes"},
    {"WEFT_VK_VALIDATE", "vulkan.validate", "1: the Khronos validation layer; a validation error fails the step"},
    {"WEFT_VK_EXACT", "vulkan.exact", "0|1: the bit-exact shaders (default: on CPU-type devices such as lavapipe)"},
    {"WEFT_OCL_EXACT", "opencl.exact", "0|1: the OpenCL kernels' bit-exact forms (default: on CPU-type devices such as PoCL)"},
    {"WEFT_VK_NO_UNIFIED", "vulkan.no_unified", "1: staging copies even where memory is unified (tests)"},
    {"WEFT_VK_NO_SUBGROUP", "vulkan.no_subgroup", "1: the shared-memory fallbacks of subgroup operations (tests)"},
    {"WEFT_VK_MATVEC_TREE", "vulkan.matvec_tree", "1: matrix-vector sums by a shared-memory tree (tests)"},
    {"WEFT_VK_MV_NR", "vulkan.mv_nr", "1..64: weight rows per matrix-vector workgroup (default 2; 16 on a CPU)"},
    {"WEFT_CUDA_GRAPHS", "cuda.graphs", "0: no CUDA graphs for repeated step shapes (default on)"},
    {"WEFT_CUDA_DEBUG", "cuda.debug", "1: say on stderr why graph capture was given up"},
    {"WEFT_HIP_GRAPHS", "hip.graphs", "0|1: HIP graphs (default on through nvcc, off on ROCm)"},
    {"WEFT_HIP_DEBUG", "hip.debug", "1: say on stderr why graph capture was given up"},
    {"WEFT_WEIGHT_CHUNK_MIB", "model.chunk_mib", "weights in buffers of at most this many MiB (default 1024)"},
};
const size_t weft_n_knobs = sizeof weft_knobs / sizeof weft_knobs[0];

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

char *weft_cache_dir(void)
{
    const char *v;
    if ((v = getenv("WEFT_CACHE_DIR")) && *v) return strdup(v);
    if ((v = getenv("XDG_CACHE_HOME")) && *v) return join(v, "weft");
    if ((v = getenv("HOME")) && *v) return join(v, ".cache/weft");
    return NULL;
}

/* appends "key=value" (with a ',' before it unless first) to *s */
static bool append(char **s, size_t *len, const char *key, const char *value)
{
    size_t add = (*len ? 1 : 0) + strlen(key) + (value ? 1 + strlen(value) : 0);
    char *p = realloc(*s, *len + add + 1);
    if (!p) return false;
    *s = p;
    *len += (size_t)snprintf(p + *len, add + 1, "%s%s%s%s", *len ? "," : "", key, value ? "=" : "",
                             value ? value : "");
    return true;
}

char *weft_env_options(void)
{
    char *s = calloc(1, 1);
    size_t len = 0;
    if (!s) goto oom;
    for (size_t i = 0; i < weft_n_knobs; i++) {
        const char *v = getenv(weft_knobs[i].env);
        if (!v || !*v) continue;
        if (strchr(v, ',')) {
            fprintf(stderr, "weft: %s=%s: a value cannot hold ','\n", weft_knobs[i].env, v);
            free(s);
            return NULL;
        }
        if (!append(&s, &len, weft_knobs[i].option, v)) goto oom;
    }
    const char *extra = getenv("WEFT_OPTIONS");
    if (extra && *extra && !append(&s, &len, extra, NULL)) goto oom;
    return s;
oom:
    free(s);
    fprintf(stderr, "weft: out of memory\n");
    return NULL;
}

int weft_env_apply_options(void)
{
    char *o = weft_env_options();
    if (!o) return -1;
    weft_status st = weft_backend_set_options(o);
    if (st != WEFT_OK) fprintf(stderr, "weft: options from the environment (%s): %s\n", o, weft_last_error());
    free(o);
    return st == WEFT_OK ? 0 : -1;
}

int weft_env_apply(void)
{
    if (weft_env_apply_options() != 0) return -1;
    char *cache = weft_cache_dir();
    weft_status st = weft_backend_set_cache_dir(cache);
    free(cache);
    if (st != WEFT_OK) return -1;
    const char *mp = getenv("WEFT_MODULE_PATH"), *no = getenv("WEFT_NO_MODULES");
    bool none = no && *no && strcmp(no, "0") != 0;
    if ((mp && *mp) || none) {
        if (weft_backend_set_module_path(mp, none) != WEFT_OK) {
            fprintf(stderr, "weft: WEFT_MODULE_PATH/WEFT_NO_MODULES: %s\n", weft_last_error());
            return -1;
        }
    }
    return 0;
}

const char *weft_env_kv_secret(bool previous)
{
    const char *v = getenv(previous ? "WEFT_KV_SECRET_PREVIOUS" : "WEFT_KV_SECRET");
    return v && *v ? v : NULL;
}
