/* `weft info` and `weft devices`. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/module.h"
#include "core/arch/family.h"
#include "tools/cli.h"
#include "tools/cli_common.h"

static void print_kv(const struct weft_gguf *g, int64_t i)
{
    const char *key = weft_gguf_key(g, i);
    enum weft_gguf_type t = weft_gguf_kv_type(g, i);
    printf("  %-44s ", key);
    switch (t) {
    case WEFT_GGUF_STRING: {
        const char *s;
        size_t len;
        weft_gguf_get_str(g, key, &s, &len);
        if (len > 60) printf("\"%.57s...\" (%zu bytes)\n", s, len);
        else printf("\"%s\"\n", s);
        break;
    }
    case WEFT_GGUF_ARRAY:
        printf("[%llu elements]\n", (unsigned long long)weft_gguf_arr_len(g, i));
        break;
    case WEFT_GGUF_FLOAT32: case WEFT_GGUF_FLOAT64: {
        float f = 0;
        weft_gguf_get_f32(g, key, &f);
        printf("%g\n", f);
        break;
    }
    case WEFT_GGUF_BOOL: {
        bool b = false;
        weft_gguf_get_bool(g, key, &b);
        printf("%s\n", b ? "true" : "false");
        break;
    }
    default: {
        uint64_t u = 0;
        int32_t v = 0;
        if (weft_gguf_get_u64(g, key, &u) == WEFT_OK) printf("%llu\n", (unsigned long long)u);
        else if (weft_gguf_get_i32(g, key, &v) == WEFT_OK) printf("%d\n", v);
        else printf("?\n");
    }
    }
}

/* "Q4_K 10, Q6_K 3, F32 7": how many tensors of each type, most common first */
static void print_type_counts(const struct weft_gguf *g)
{
    int64_t count[WEFT_TYPE_COUNT_] = {0};
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) count[weft_gguf_tensor(g, i)->type]++;
    printf("types:      ");
    for (const char *sep = " ";; sep = ", ") {
        int best = -1;
        for (int t = 0; t < WEFT_TYPE_COUNT_; t++)
            if (count[t] && (best < 0 || count[t] > count[best])) best = t;
        if (best < 0) break;
        printf("%s%s %lld", sep, weft_type_name((enum weft_type)best), (long long)count[best]);
        count[best] = 0;
    }
    printf("\n");
}

/* one line per tensor: index, name, type, shape, bytes */
static void print_tensors(const struct weft_gguf *g)
{
    for (int64_t i = 0; i < weft_gguf_n_tensors(g); i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && len > 0 && len < (int)sizeof shape; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, ", %lld", (long long)t->ne[d]);
        if (len > 0 && len < (int)sizeof shape) snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  %4lld %-40s %-6s %-22s %12zu bytes\n", (long long)i, t->name, weft_type_name(t->type), shape,
               t->size);
    }
}

int weft_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool all = false, tensors = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: weft info [MODEL | -m MODEL] [--kv] [--tensors]\n"
                   "  validates a GGUF file and describes the model (default: SmolLM2-135M-Instruct Q4_1);\n"
                   "  --kv lists every metadata key, --tensors every tensor with its type and shape (also\n"
                   "  for a file weft cannot run)\n");
            return 0;
        }
        if (!strcmp(argv[i], "--kv")) all = true;
        else if (!strcmp(argv[i], "--tensors")) tensors = true;
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) path = argv[++i];
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            weft_cli_unknown_option("info", argv[i], i + 1 == argc);
            return 2;
        }
    }
    char *def = NULL;
    if (!path && !(path = def = weft_default_model_path())) return 1;
    /* Full validation = loading the model on the CPU backend (zero-copy). */
    struct weft_backend *be = NULL;
    struct weft_model *m = NULL;
    if (weft_backend_open("cpu", 1, &be) != WEFT_OK) { weft_cli_fail("cpu backend"); free(def); return 1; }
    if (weft_model_load(path, be, &m) != WEFT_OK) {
        fprintf(stderr, "weft: %s\n", weft_last_error());
        /* the tensors of a file the model loader refuses (an architecture weft does not run)
         * are still worth listing when asked for */
        struct weft_gguf *g = NULL;
        if (tensors && weft_gguf_open(path, &g) == WEFT_OK) {
            print_type_counts(g);
            print_tensors(g);
            weft_gguf_close(g);
        }
        weft_backend_close(be);
        free(def);
        return 1;
    }
    const struct weft_hparams *hp = weft_model_hparams(m);
    const char *name = "";
    weft_gguf_get_str(weft_model_gguf(m), "general.name", &name, NULL);
    printf("file:        %s (GGUF v%u, %zu bytes)\n", path, weft_gguf_version(weft_model_gguf(m)), weft_gguf_file_size(weft_model_gguf(m)));
    printf("name:        %s\n", name);
    printf("arch:        %s, %.1fM params, weights mostly %s (%.1f MiB)\n", hp->arch, weft_model_n_params(m) / 1e6,
           weft_type_name(weft_model_ftype(m)), weft_model_weight_bytes(m) / 1048576.0);
    char uses[640];
    weft_family_describe(hp, uses, sizeof uses);
    printf("family:      %s: %s\n", hp->arch, uses);
    printf("layers %u, embd %u, heads %u (kv %u, head_dim %u), ff %u, vocab %u, ctx %u\n", hp->n_layer, hp->n_embd,
           hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_vocab, hp->n_ctx_train);
    printf("rope: base %g, scale %g, dims %u; rms eps %g; output head %s\n", hp->rope_freq_base, hp->rope_freq_scale,
           hp->n_rot, hp->rms_eps, hp->tied_output ? "tied to token_embd" : "separate");
    const char *tm = "?";
    weft_gguf_get_str(weft_model_gguf(m), "tokenizer.ggml.model", &tm, NULL);
    printf("tokenizer:   %s, bos %d, eos %d, add_bos %s\n", tm, weft_tokenizer_bos(weft_model_tokenizer(m)), weft_tokenizer_eos(weft_model_tokenizer(m)),
           weft_tokenizer_add_bos(weft_model_tokenizer(m)) ? "yes" : "no");
    printf("tensors:     %lld, metadata keys: %lld\n", (long long)weft_gguf_n_tensors(weft_model_gguf(m)), (long long)weft_gguf_n_kv(weft_model_gguf(m)));
    print_type_counts(weft_model_gguf(m));
    char fp[WEFT_FINGERPRINT_STR];
    weft_fingerprint_str(weft_model_fingerprint(m), fp);
    printf("fingerprint: %s\n", fp);
    if (all)
        for (int64_t i = 0; i < weft_gguf_n_kv(weft_model_gguf(m)); i++) print_kv(weft_model_gguf(m), i);
    if (tensors) print_tensors(weft_model_gguf(m));
    weft_model_free(m);
    weft_backend_close(be);
    free(def);
    return 0;
}

int weft_cmd_devices(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: weft devices [--json]\n  lists the backends (cpu, vulkan, cuda, hip) and their devices\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) {
            json = true;
            continue;
        }
        weft_cli_unknown_option("devices", argv[i], false);
        return 2;
    }
    static const char *const all[] = {"cpu", "vulkan", "cuda", "hip", "opencl"};
    json_t *arr = json_array();
    for (size_t b = 0; b < sizeof all / sizeof all[0]; b++) {
        const struct weft_backend_iface *bi = weft_backend_find(all[b]);
        if (!bi) {
            const char *why = weft_backend_unavailable(all[b]);
            if (json) json_array_append_new(arr, json_pack("{s:s,s:b,s:s}", "backend", all[b], "available", 0,
                                                           "reason", why));
            else printf("%-8s unavailable: %s\n", all[b], why);
            continue;
        }
        struct weft_device_info info[16];
        const char *why = NULL;
        int n = bi->devices(info, 16, &why);
        if (n == 0) {
            if (json) json_array_append_new(arr, json_pack("{s:s,s:b,s:s}", "backend", all[b], "available", 0,
                                                           "reason", why ? why : "no devices"));
            else printf("%-8s no devices: %s\n", all[b], why ? why : "none found");
        }
        for (int i = 0; i < n && i < 16; i++) {
            if (json)
                json_array_append_new(arr, json_pack("{s:s,s:b,s:s,s:s,s:I,s:I}", "backend", all[b], "available", 1,
                                                     "id", info[i].id, "name", info[i].name,
                                                     "mem_total", (json_int_t)info[i].mem_total,
                                                     "mem_free", (json_int_t)info[i].mem_free));
            else if (info[i].mem_free)
                printf("%-8s %-8s %s, %.1f GiB (%.1f GiB free)\n", all[b], info[i].id, info[i].name,
                       info[i].mem_total / 1073741824.0, info[i].mem_free / 1073741824.0);
            else
                printf("%-8s %-8s %s, %.1f GiB (free unknown)\n", all[b], info[i].id, info[i].name,
                       info[i].mem_total / 1073741824.0);
        }
    }
    if (json) {
        char *s = json_dumps(arr, 0);
        if (s) puts(s);
        free(s);
    }
    json_decref(arr);
    return 0;
}
