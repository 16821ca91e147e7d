/* Backends compiled into this build, and device specs ("cpu:0"). */
#include "backends/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct weft_backend_iface *weft_cpu_backend_iface(void);

static const struct weft_backend_iface *(*const backends[])(void) = {
#ifdef WEFT_HAVE_CPU
    weft_cpu_backend_iface,
#endif
};

int weft_backend_count(void) { return (int)(sizeof backends / sizeof backends[0]); }

const struct weft_backend_iface *weft_backend_get(int i)
{
    return i >= 0 && i < weft_backend_count() ? backends[i]() : NULL;
}

const struct weft_backend_iface *weft_backend_find(const char *name)
{
    for (int i = 0; i < weft_backend_count(); i++)
        if (strcmp(weft_backend_get(i)->name, name) == 0) return weft_backend_get(i);
    return NULL;
}

static bool known_backend(const char *name)
{
    static const char *const all[] = {"cpu", "vulkan", "cuda", "hip"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i], name) == 0) return true;
    return false;
}

weft_status weft_backend_open(const char *spec, int n_threads, struct weft_backend **out)
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
            return weft_error(WEFT_ERR_NO_DEVICE, "backend '%s' is not built into this weft", name);
        return weft_error(WEFT_ERR_INVALID_ARG, "unknown backend '%s' (known: cpu, vulkan, cuda, hip)", name);
    }
    const char *why = NULL;
    struct weft_device_info info[16];
    int n = be->devices(info, 16, &why);
    if (index >= n)
        return weft_error(WEFT_ERR_NO_DEVICE, "%s:%d: no such device (%d found%s%s)", name, index, n,
                          why ? ": " : "", why ? why : "");
    struct weft_backend_params p = {.device = index, .n_threads = n_threads};
    return be->open(&p, out);
}
