/* Backends built as loadable modules (libweft-vulkan.so, libweft-cuda.so,
 * libweft-hip.so).
 *
 * A GPU backend links its vendor runtime (the Vulkan loader, cudart, the HIP
 * runtime). Building it as a module keeps that dependency out of the weft
 * binary: when the runtime or the driver is missing, dlopen or the module's
 * own device query fails, `weft devices` prints why, and weft carries on with
 * the backends it has.
 *
 * A module exports one symbol, WEFT_MODULE_INIT_SYMBOL, of type
 * weft_module_init_fn. It is called once, with the host's services; it
 * returns the module's iface (api_version/name as in backends/backend.h), or
 * NULL with *why set to a static reason. The module must not call exit/abort.
 *
 * Search order for modules: each folder given to weft_backend_set_module_path
 * (backends/backend.h; the weft binary passes $WEFT_MODULE_PATH), then the
 * folder of the running executable, then <that folder>/../lib/weft. Its
 * none = true (WEFT_NO_MODULES=1) loads none (CPU only). */
#ifndef WEFT_MODULE_H
#define WEFT_MODULE_H

#include <stdarg.h>

#include "backends/backend.h"

#define WEFT_MODULE_ABI 1
#define WEFT_MODULE_INIT_SYMBOL "weft_backend_module_init"

/* What the host gives a module: errors recorded by the module land in the
 * host's per-thread message (weft_last_error), as if core had set them. */
struct weft_module_host {
    uint32_t abi;                 /* WEFT_MODULE_ABI */
    weft_status (*verror)(weft_status s, const char *fmt, va_list ap);
    const char *(*status_str)(weft_status s);
};

typedef const struct weft_backend_iface *(*weft_module_init_fn)(const struct weft_module_host *host,
                                                                 const char **why);

#ifdef WEFT_MODULE_BUILD
/* Inside a module: the module's copy of the host table (module_glue.c). */
extern const struct weft_module_host *weft_module_host_;
#define WEFT_MODULE_EXPORT __attribute__((visibility("default")))
#endif

/* Host side (backends/registry.c): the reason a known backend is absent
 * ("not built into this weft", "libweft-cuda.so: libcuda.so.1: cannot open
 * ..."), or NULL if it is loaded. */
const char *weft_backend_unavailable(const char *name);

#endif
