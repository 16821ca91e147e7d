/* The environment, read here and nowhere below tools/: every WEFT_* knob of
 * the backends and of model loading, turned into the options string of
 * base/options.h (and the cache and module folders) that backends/backend.h
 * takes. docs/devices.md's "Knobs" section documents the same table. */
#ifndef WEFT_TOOLS_ENV_H
#define WEFT_TOOLS_ENV_H

#include <stdbool.h>
#include <stddef.h>

struct weft_knob {
    const char *env;       /* "WEFT_VK_VALIDATE" */
    const char *option;    /* "vulkan.validate" */
    const char *what;      /* one line for a help text */
};
extern const struct weft_knob weft_knobs[];
extern const size_t weft_n_knobs;

/* The cache folder: $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else
 * ~/.cache/weft; malloc'd, NULL when none of them is set (or no memory). */
char *weft_cache_dir(void);

/* The options string the environment asks for: each knob of weft_knobs
 * that is set and non-empty as option=value, then $WEFT_OPTIONS as it is.
 * malloc'd; NULL (with a line on stderr naming the variable) when a value
 * holds a ',' or there is no memory. */
char *weft_env_options(void);

/* Apply the environment to the process: weft_backend_set_options(
 * weft_env_options()), the cache folder, and $WEFT_MODULE_PATH /
 * $WEFT_NO_MODULES (before any backend is used). 0, or -1 after a line on
 * stderr (a malformed option, an unknown key). */
int weft_env_apply(void);
/* Only the options part of weft_env_apply (after a WEFT_* variable changed). */
int weft_env_apply_options(void);

/* The fleet secret from the environment, for a command given no
 * --kv-secret: $WEFT_KV_SECRET (previous: $WEFT_KV_SECRET_PREVIOUS); NULL
 * when unset or empty. In the environment it stays out of the process list,
 * and a Kubernetes Secret lands there (deploy/k8s). */
const char *weft_env_kv_secret(bool previous);

#endif
