/* Backends compiled into this build or loaded as modules, and device specs
 * ("cpu:0"). Modules (backends/module.h) are looked for once, on first use. */
#include "backends/backend.h"
#include "backends/module.h"
#include "base/options.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const struct weft_backend_iface *weft_cpu_backend_iface(void);

static const char *const module_names[] = {"vulkan", "cuda", "hip", "opencl"};
#define N_MODULES (sizeof module_names / sizeof module_names[0])
#define MAX_BACKENDS (1 + N_MODULES)

static const struct weft_backend_iface *loaded[MAX_BACKENDS];
static int n_loaded;
static char why_absent[N_MODULES][512];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded_once;            /* load_all ran: the module path is fixed */

/* the process's settings (weft_backend_set_*); guarded by settings_mu */
static pthread_mutex_t settings_mu = PTHREAD_MUTEX_INITIALIZER;
static char *opt_string, *cache_dir, *module_path;
static bool no_modules;

/* Replaced strings are kept, not freed: weft_backend_options() hands out a
 * pointer its callers read without the lock (sets are a few per process). */
struct retired {
    struct retired *next;
    char *s;
};
static struct retired *retired_strings;

static weft_status set_string(char **slot, const char *v)
{
    char *c = NULL;
    struct retired *r = malloc(sizeof *r);
    if (!r || (v && *v && !(c = strdup(v)))) {
        free(r);
        return weft_error(WEFT_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&settings_mu);
    r->s = *slot;
    r->next = retired_strings;
    retired_strings = r;
    *slot = c;
    pthread_mutex_unlock(&settings_mu);
    return WEFT_OK;
}

weft_status weft_backend_set_options(const char *options)
{
    char bad[64];
    if (!weft_opt_syntax_ok(options, bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, "bad option '%s' (expected backend.name=value, comma-separated)", bad);
    static const char *const prefixes[] = {"cpu.", "vulkan.", "cuda.", "hip.", "opencl.", "model."};
    struct weft_opt_item it;
    for (const char *p = options; weft_opt_next(&p, &it);) {
        bool ok = false;
        for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0] && !ok; i++)
            ok = strncmp(it.key, prefixes[i], strlen(prefixes[i])) == 0;
        if (!ok)
            return weft_error(WEFT_ERR_INVALID_ARG, "unknown option '%.*s' (options start with cpu., vulkan., cuda., "
                              "hip., opencl. or model.)", (int)(it.key_len < 60 ? it.key_len : 60), it.key);
    }
    /* model.* keys are core's (model loading): known here; backends check their own at open */
    static const char *const model_keys[] = {"model.chunk_mib"};
    if (weft_opt_unknown(options, "model.", model_keys, 1, bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, "unknown option '%s' (known: model.chunk_mib)", bad);
    return set_string(&opt_string, options);
}

const char *weft_backend_options(void)
{
    pthread_mutex_lock(&settings_mu);
    const char *o = opt_string ? opt_string : "";
    pthread_mutex_unlock(&settings_mu);
    return o;
}

weft_status weft_backend_set_cache_dir(const char *dir) { return set_string(&cache_dir, dir); }

weft_status weft_backend_set_module_path(const char *dirs, bool none)
{
    char *c = dirs && *dirs ? strdup(dirs) : NULL;
    if (dirs && *dirs && !c) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&settings_mu);
    const bool late = loaded_once;
    if (!late) {
        free(module_path);   /* load_all has not run: no one holds it */
        module_path = c;
        no_modules = none;
    }
    pthread_mutex_unlock(&settings_mu);
    if (late) {
        free(c);
        return weft_error(WEFT_ERR_INVALID_ARG, "the module path is set before backends are first used");
    }
    return WEFT_OK;
}

static const struct weft_module_host host = {
    .abi = WEFT_MODULE_ABI,
    .verror = weft_verror,
    .status_str = weft_status_str,
};

/* dlopen "<dir>/libweft-<name>.so"; 1 loaded, 0 file absent, -1 present but unusable */
static int try_module(size_t mi, const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/libweft-%s.so", dir, module_names[mi]) >= (int)sizeof path) return 0;
    if (access(path, F_OK) != 0) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why_absent[mi], sizeof why_absent[mi], "module not loadable: %.400s", dlerror());
        return -1;
    }
    weft_module_init_fn init = (weft_module_init_fn)dlsym(h, WEFT_MODULE_INIT_SYMBOL);
    if (!init) {
        snprintf(why_absent[mi], sizeof why_absent[mi], "%.300s has no %s", path, WEFT_MODULE_INIT_SYMBOL);
        dlclose(h);
        return -1;
    }
    const char *why = NULL;
    const struct weft_backend_iface *bi = init(&host, &why);
    if (!bi || bi->api_version < 1 || !bi->name || strcmp(bi->name, module_names[mi]) != 0) {
        snprintf(why_absent[mi], sizeof why_absent[mi], "%.300s: %.150s", path,
                 why ? why : "module refused to initialise (ABI mismatch?)");
        dlclose(h);
        return -1;
    }
    /* the op structs grow with the API version: a module built for another
     * one would walk the op list at the wrong stride and could not refuse
     * the fields it does not know */
    if (bi->api_version != WEFT_BACKEND_API_VERSION) {
        snprintf(why_absent[mi], sizeof why_absent[mi], "%.300s: built for backend API %u, this weft is API %u",
                 path, bi->api_version, (unsigned)WEFT_BACKEND_API_VERSION);
        dlclose(h);
        return -1;
    }
    loaded[n_loaded++] = bi;   /* the handle stays open for the process */
    return 1;
}

static void load_all(void)
{
#ifdef WEFT_HAVE_CPU
    loaded[n_loaded++] = weft_cpu_backend_iface();
#endif
    pthread_mutex_lock(&settings_mu);
    loaded_once = true;   /* from here on set_module_path refuses: module_path is fixed */
    bool skip = no_modules;
    const char *mp = module_path;
    pthread_mutex_unlock(&settings_mu);
    /* the folders to search */
    char dirs[8][PATH_MAX];
    int nd = 0;
    while (!skip && mp && *mp && nd < 6) {
        const char *c = strchr(mp, ':');
        size_t n = c ? (size_t)(c - mp) : strlen(mp);
        if (n > 0 && n < PATH_MAX) { memcpy(dirs[nd], mp, n); dirs[nd++][n] = '\0'; }
        mp = c ? c + 1 : NULL;
    }
    char exe[PATH_MAX];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el > 0) {
        exe[el] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dirs[nd++], PATH_MAX, "%s", exe);
            if ((size_t)snprintf(dirs[nd], PATH_MAX, "%s/../lib/weft", exe) < PATH_MAX) nd++;
        }
    }
    for (size_t mi = 0; mi < N_MODULES; mi++) {
        if (skip) {
            snprintf(why_absent[mi], sizeof why_absent[mi], "modules disabled (WEFT_NO_MODULES / weft_backend_set_module_path)");
            continue;
        }
        snprintf(why_absent[mi], sizeof why_absent[mi], "not built into this weft (no libweft-%s.so found)",
                 module_names[mi]);
        for (int d = 0; d < nd; d++)
            if (try_module(mi, dirs[d]) != 0) break;
    }
}

int weft_backend_count(void)
{
    pthread_once(&once, load_all);
    return n_loaded;
}

const struct weft_backend_iface *weft_backend_get(int i)
{
    return i >= 0 && i < weft_backend_count() ? loaded[i] : NULL;
}

const struct weft_backend_iface *weft_backend_find(const char *name)
{
    for (int i = 0; i < weft_backend_count(); i++)
        if (strcmp(weft_backend_get(i)->name, name) == 0) return weft_backend_get(i);
    return NULL;
}

const char *weft_backend_unavailable(const char *name)
{
    if (weft_backend_find(name)) return NULL;
    for (size_t mi = 0; mi < N_MODULES; mi++)
        if (strcmp(module_names[mi], name) == 0) return why_absent[mi];
    return "not built into this weft";
}

static bool known_backend(const char *name)
{
    static const char *const all[] = {"cpu", "vulkan", "cuda", "hip", "opencl"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i], name) == 0) return true;
    return false;
}

static weft_status open_spec(const char *spec, int n_threads, const char *options, struct weft_backend **out)
{
    *out = NULL;
    char name[32];
    const char *colon = strchr(spec, ':');
    size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    if (nlen == 0 || nlen >= sizeof name)
        return weft_error(WEFT_ERR_INVALID_ARG, "bad device '%s' (expected e.g. cpu, cpu:0, vulkan:1)", spec);
    memcpy(name, spec, nlen);
    name[nlen] = '\0';
    int index = 0;
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || v < 0 || v > 1024)
            return weft_error(WEFT_ERR_INVALID_ARG, "bad device index in '%s'", spec);
        index = (int)v;
    }
    const struct weft_backend_iface *be = weft_backend_find(name);
    if (!be) {
        if (known_backend(name))
            return weft_error(WEFT_ERR_NO_DEVICE, "backend '%s' unavailable: %s", name, weft_backend_unavailable(name));
        return weft_error(WEFT_ERR_INVALID_ARG, "unknown backend '%s' (known: cpu, vulkan, cuda, hip, opencl)", name);
    }
    const char *why = NULL;
    struct weft_device_info info[16];
    int n = be->devices(info, 16, &why);
    if (index >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "%s:%d: no such device (%d found%s%s)", name, index, n,
                          why ? ": " : "", why ? why : "");
    pthread_mutex_lock(&settings_mu);
    char *cd = cache_dir ? strdup(cache_dir) : NULL;
    pthread_mutex_unlock(&settings_mu);
    struct weft_backend_params p = {.device = index, .n_threads = n_threads, .options = options, .cache_dir = cd};
    weft_status st = be->open(&p, out);
    free(cd);
    return st;
}

weft_status weft_backend_open_opts(const char *spec, int n_threads, const char *options, struct weft_backend **out)
{
    char bad[64];
    *out = NULL;
    if (!weft_opt_syntax_ok(options, bad, sizeof bad))
        return weft_error(WEFT_ERR_INVALID_ARG, "bad option '%s' (expected backend.name=value, comma-separated)", bad);
    return open_spec(spec, n_threads, options ? options : "", out);
}

weft_status weft_backend_open(const char *spec, int n_threads, struct weft_backend **out)
{
    /* a copy: the process's string may be replaced while the backend opens */
    pthread_mutex_lock(&settings_mu);
    char *o = opt_string ? strdup(opt_string) : NULL;
    bool oom = opt_string && !o;
    pthread_mutex_unlock(&settings_mu);
    if (oom) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    weft_status st = open_spec(spec, n_threads, o ? o : "", out);
    free(o);
    return st;
}
