/* `weft quantize IN OUT TYPE`: requantize every 2-D weight of a GGUF.
 *
 * Each row is dequantized to f32 with the reference kernels and quantized to
 * TYPE (so any readable type converts to any type that has a quantizer).
 * 1-D tensors (norms, biases) are stored as F32. A tensor whose row length is
 * not a multiple of TYPE's block size keeps its type, with a warning. All kvs
 * are copied; general.file_type is set to llama.cpp's number for TYPE. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/gguf.h"
#include "base/quant.h"
#include "tools/cli.h"
#include "tools/gen_model.h"

static bool quant_target_ok(enum weft_type t)
{
    switch (t) {
    case WEFT_TYPE_F32: case WEFT_TYPE_F16: case WEFT_TYPE_BF16: case WEFT_TYPE_Q8_0:
    case WEFT_TYPE_Q4_0: case WEFT_TYPE_Q4_1: case WEFT_TYPE_Q5_0: case WEFT_TYPE_Q5_1:
        return true;
    default:
        return false;
    }
}

static void quant_usage(FILE *f)
{
    fprintf(f, "usage: weft quantize IN OUT TYPE\n"
               "TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 (norms stay F32)\n");
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Convert one tensor into dst (weft_row_size(to, ne0) * rows bytes) via f32 rows. */
static bool convert(const struct weft_gguf_tensor *t, enum weft_type to, void *dst, float *row)
{
    int64_t ne0 = t->ne[0];
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t rs_in = weft_row_size(t->type, ne0), rs_out = weft_row_size(to, ne0);
    for (int64_t r = 0; r < rows; r++) {
        weft_dequantize_row(t->type, (const unsigned char *)t->data + (size_t)r * rs_in, row, ne0);
        if (!weft_quantize_row(to, row, (unsigned char *)dst + (size_t)r * rs_out, ne0)) return false;
    }
    return true;
}

int weft_cmd_quantize(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        quant_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "weft quantize: unknown option '%s'\n", argv[i]);
            quant_usage(stderr);
            return 2;
        }
    if (argc != 4) {
        quant_usage(stderr);
        return 2;
    }
    const char *in = argv[1], *out = argv[2];
    enum weft_type to;
    if (!weft_type_from_name(argv[3], &to)) {
        fprintf(stderr, "weft: quantize: unknown type '%s'\n", argv[3]);
        quant_usage(stderr);
        return 2;
    }
    if (!quant_target_ok(to)) {
        fprintf(stderr, "weft: quantize: cannot quantize to %s (no quantizer%s); "
                        "use F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1\n",
                weft_type_name(to), weft_type_get(to)->weight_ok ? " for this type yet" : ": activation-only type");
        return 1;
    }
    if (same_file(in, out)) {
        fprintf(stderr, "weft: quantize: output %s is the input file; write to another path\n", out);
        return 1;
    }

    struct weft_gguf *g = NULL;
    struct weft_gguf_writer *w = NULL;
    struct weft_scratch scratch = {0};
    float *row = NULL;
    int rc = 1;
    weft_status st = weft_gguf_open(in, &g);
    if (st) {
        fprintf(stderr, "weft: quantize: %s\n", weft_last_error());
        return 1;
    }

    int64_t n = weft_gguf_n_tensors(g);
    size_t need = 0, size_in = 0, size_out = 0;
    int64_t max_row = 1;
    uint32_t bs = weft_type_get(to)->block_size;
    for (int64_t i = 0; i < n; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        enum weft_type tt = t->n_dims <= 1 ? WEFT_TYPE_F32 : (t->ne[0] % bs ? t->type : to);
        if (tt != t->type) need += (weft_row_size(tt, t->ne[0]) * (size_t)rows + 63) & ~(size_t)63;
        if (t->ne[0] > max_row) max_row = t->ne[0];
    }
    char dir[4096]; /* scratch file (if needed) goes next to the output */
    const char *slash = strrchr(out, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == out ? 1 : (int)(slash - out), out);
    if ((st = weft_scratch_init(&scratch, need, dir))) goto fail;
    row = malloc(sizeof *row * (size_t)max_row);
    if (!row) { st = weft_error(WEFT_ERR_NOMEM, "out of memory"); goto fail; }

    if ((st = weft_gguf_writer_init(&w))) goto fail;
    if ((st = weft_gguf_writer_copy_kvs(w, g, NULL))) goto fail;
    if ((st = weft_gguf_writer_set_u32(w, "general.file_type", (uint32_t)weft_gen_ftype(to)))) goto fail;
    if (weft_type_get(to)->is_quantized &&
        (st = weft_gguf_writer_set_u32(w, "general.quantization_version", 2)))
        goto fail;

    for (int64_t i = 0; i < n; i++) {
        const struct weft_gguf_tensor *t = weft_gguf_tensor(g, i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        enum weft_type tt = to;
        const char *note = "";
        if (t->n_dims <= 1) {
            tt = WEFT_TYPE_F32;
        } else if (t->ne[0] % bs) {
            tt = t->type;
            printf("warning: %s: row length %" PRId64 " is not a multiple of %s's block size %" PRIu32
                   "; keeping %s\n", t->name, t->ne[0], weft_type_name(to), bs, weft_type_name(t->type));
            note = " (kept)";
        }
        const void *data = t->data;
        size_t size = t->size;
        if (tt != t->type) {
            size = weft_row_size(tt, t->ne[0]) * (size_t)rows;
            void *dst = weft_scratch_take(&scratch, size);
            if (!dst || !convert(t, tt, dst, row)) {
                st = weft_error(WEFT_ERR_UNSUPPORTED, "%s: cannot convert %s to %s", t->name,
                                weft_type_name(t->type), weft_type_name(tt));
                goto fail;
            }
            data = dst;
        }
        if ((st = weft_gguf_writer_add_tensor(w, t->name, tt, t->n_dims, t->ne, data))) goto fail;
        size_in += t->size;
        size_out += size;
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[%" PRId64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && len < (int)sizeof shape; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, ", %" PRId64, t->ne[d]);
        if (len < (int)sizeof shape) snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("[%4" PRId64 "/%4" PRId64 "] %-32s %-20s %5s -> %-5s %10.3f MiB -> %10.3f MiB%s\n", i + 1, n,
               t->name, shape, weft_type_name(t->type), weft_type_name(tt), mib(t->size), mib(size), note);
    }
    if ((st = weft_gguf_writer_write(w, out))) goto fail;
    printf("quantized %s -> %s (%s): %" PRId64 " tensors, %.2f MiB -> %.2f MiB (%.1f%%)\n", in, out,
           weft_type_name(to), n, mib(size_in), mib(size_out),
           size_in ? 100.0 * (double)size_out / (double)size_in : 100.0);
    rc = 0;
    goto done;

fail:
    fprintf(stderr, "weft: quantize: %s\n", *weft_last_error() ? weft_last_error() : weft_status_str(st));
done:
    free(row);
    if (w) weft_gguf_writer_free(w);
    weft_scratch_free(&scratch);
    weft_gguf_close(g);
    return rc;
}
