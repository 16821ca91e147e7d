/* The default model's path (SmolLM2-135M-Instruct Q4_1), as scripts/fetch-model.sh
 * places it. See tools/cli.h. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/cli.h"
#include "tools/env.h"

#define DEFAULT_MODEL_FILE "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

char *weft_default_model_path(void)
{
    const char *env = getenv("WEFT_MODEL");
    if (env && *env) {
        if (is_file(env)) return strdup(env);
        fprintf(stderr, "weft: WEFT_MODEL=%s: no such file; unset it to use the default model, "
                        "or fetch that with scripts/fetch-model.sh\n", env);
        return NULL;
    }
    /* cache dir: $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else ~/.cache/weft */
    char *cache = weft_cache_dir();
    if (!cache) {
        fprintf(stderr, "weft: no model given (-m) and neither WEFT_MODEL, WEFT_CACHE_DIR, XDG_CACHE_HOME "
                        "nor HOME is set; pass -m MODEL or set WEFT_MODEL\n");
        return NULL;
    }
    char *path = cache ? join(cache, DEFAULT_MODEL_FILE) : NULL;
    free(cache);
    if (!path) {
        fprintf(stderr, "weft: out of memory\n");
        return NULL;
    }
    if (is_file(path)) return path;
    fprintf(stderr, "weft: default model not found at %s; run scripts/fetch-model.sh to download it, "
                    "or pass -m MODEL / set WEFT_MODEL to a GGUF file\n", path);
    free(path);
    return NULL;
}
