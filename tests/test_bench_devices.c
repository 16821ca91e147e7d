/* `weft bench --devices`: the PNG writer (tools/png: CRC-32, Adler-32,
 * stored deflate blocks, palette or RGB) read back by an independent
 * decoder here, the bandwidth table, and the CLI end to end on stories260K
 * (the table row, PREFIX.json, PREFIX.svg, PREFIX.png) and its usage errors. */
#include <dirent.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/weft_exec.h"
#include "tools/bench_devices.h"
#include "tools/plot.h"
#include "tools/png.h"

/* ---- an independent PNG reader: bitwise CRC, plain Adler, stored blocks only ---- */

static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t adler_plain(const uint8_t *p, size_t n)
{
    uint64_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) { a = (a + p[i]) % 65521; b = (b + a) % 65521; }
    return (uint32_t)(b << 16 | a);
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Check the file's structure and decode it to RGB (*rgb malloc'd). 0 when
 * every check passed. */
static int png_read(const uint8_t *d, size_t len, int *w, int *h, uint8_t **rgb)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    *rgb = NULL;
    CHECK(len > 8 && !memcmp(d, sig, 8));
    if (len <= 8 || memcmp(d, sig, 8)) return -1;
    uint8_t pal[768], *z = malloc(len);
    size_t zn = 0, pos = 8;
    int n_pal = 0, ct = -1, seen_end = 0, bad = 0;
    while (pos + 12 <= len && !seen_end) {
        uint32_t n = be32(d + pos);
        if (pos + 12 + n > len) { bad = 1; break; }
        const uint8_t *type = d + pos + 4, *body = d + pos + 8;
        CHECK_MSG(crc_bitwise(type, n + 4) == be32(body + n), "chunk %.4s CRC", (const char *)type);
        bad |= crc_bitwise(type, n + 4) != be32(body + n);
        if (!memcmp(type, "IHDR", 4)) {
            CHECK_EQ_INT(n, 13);
            *w = (int)be32(body);
            *h = (int)be32(body + 4);
            ct = body[9];
            CHECK_EQ_INT(body[8], 8);
            CHECK(ct == 2 || ct == 3);
            CHECK(body[10] == 0 && body[11] == 0 && body[12] == 0);
        } else if (!memcmp(type, "PLTE", 4)) {
            CHECK(n % 3 == 0 && n <= 768);
            n_pal = (int)(n / 3);
            memcpy(pal, body, n <= 768 ? n : 768);
        } else if (!memcmp(type, "IDAT", 4)) {
            memcpy(z + zn, body, n);
            zn += n;
        } else if (!memcmp(type, "IEND", 4)) {
            seen_end = 1;
        }
        pos += 12 + n;
    }
    CHECK(seen_end && pos == len && !bad && ct >= 0);
    if (!seen_end || bad || ct < 0) { free(z); return -1; }
    /* zlib: CMF/FLG, stored blocks, Adler-32 */
    CHECK(zn >= 6 && (z[0] & 0x0f) == 8 && ((z[0] << 8) | z[1]) % 31 == 0);
    int bpp = ct == 3 ? 1 : 3;
    size_t raw_len = (size_t)*h * (1 + (size_t)*w * bpp), rn = 0, q = 2;
    uint8_t *raw = malloc(raw_len + 65536);
    int final = 0;
    while (!final && q + 5 <= zn) {
        final = z[q] & 1;
        CHECK_EQ_INT(z[q] >> 1 & 3, 0);  /* stored */
        size_t n = (size_t)z[q + 1] | (size_t)z[q + 2] << 8, nn = (size_t)z[q + 3] | (size_t)z[q + 4] << 8;
        CHECK_EQ_INT(n ^ nn, 0xffff);
        if (q + 5 + n > zn || rn + n > raw_len) { bad = 1; break; }
        memcpy(raw + rn, z + q + 5, n);
        rn += n;
        q += 5 + n;
    }
    CHECK(final && !bad && rn == raw_len && q + 4 == zn);
    CHECK_MSG(q + 4 <= zn && adler_plain(raw, rn) == be32(z + q), "Adler-32 of the inflated data");
    int ok = final && !bad && rn == raw_len && q + 4 == zn && adler_plain(raw, rn) == be32(z + q);
    if (ok) {
        *rgb = malloc((size_t)*w * *h * 3);
        for (int y = 0; y < *h; y++) {
            const uint8_t *row = raw + (size_t)y * (1 + (size_t)*w * bpp);
            CHECK_EQ_INT(row[0], 0);  /* filter: none */
            for (int x = 0; x < *w; x++) {
                uint8_t *o = *rgb + ((size_t)y * *w + x) * 3;
                if (ct == 3) {
                    int k = row[1 + x];
                    if (k >= n_pal) { ok = 0; k = 0; }
                    memcpy(o, pal + 3 * k, 3);
                } else {
                    memcpy(o, row + 1 + 3 * (size_t)x, 3);
                }
            }
        }
        CHECK(ok);
    }
    free(z);
    free(raw);
    return ok ? 0 : -1;
}

/* ---- units ---- */

static void checksums_match_the_references(void)
{
    const uint8_t *s = (const uint8_t *)"123456789";
    CHECK_EQ_INT(weft_png_crc32(0, s, 9), 0xCBF43926u);                       /* the CRC-32 check value */
    CHECK_EQ_INT(weft_png_crc32(weft_png_crc32(0, s, 4), s + 4, 5), 0xCBF43926u);  /* continued */
    CHECK_EQ_INT(weft_png_adler32(1, (const uint8_t *)"Wikipedia", 9), 0x11E60398u);
    static uint8_t big[200000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 7 + (i >> 9));
    CHECK_EQ_INT(weft_png_adler32(1, big, sizeof big), adler_plain(big, sizeof big));
    CHECK_EQ_INT(weft_png_crc32(0, big, sizeof big), crc_bitwise(big, sizeof big));
}

/* encode, decode, compare every pixel */
static void round_trip(const uint8_t *px, int w, int h, int want_ct)
{
    uint8_t *png = NULL, *back = NULL;
    size_t n = 0;
    CHECK_EQ_INT(weft_png_encode_rgb(px, w, h, &png, &n), 0);
    if (!png) return;
    int rw = 0, rh = 0;
    CHECK_EQ_INT(png_read(png, n, &rw, &rh, &back), 0);
    CHECK_EQ_INT(png[25], want_ct);  /* IHDR's colour type */
    CHECK(rw == w && rh == h);
    CHECK(back && !memcmp(back, px, (size_t)w * h * 3));
    free(png);
    free(back);
}

static void png_writer_round_trips(void)
{
    /* 3 x 2, three colours: a palette */
    static const uint8_t tiny[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 255, 255, 0, 0, 255, 0, 0};
    round_trip(tiny, 3, 2, 3);
    /* 1 x 1 */
    round_trip(tiny, 1, 1, 3);
    /* 17 x 17, 289 colours: RGB */
    uint8_t grad[17 * 17 * 3];
    for (int i = 0; i < 17 * 17; i++) {
        grad[3 * i] = (uint8_t)(i % 17 * 15);
        grad[3 * i + 1] = (uint8_t)(i / 17 * 15);
        grad[3 * i + 2] = 7;
    }
    round_trip(grad, 17, 17, 2);
    /* 300 x 300 RGB: over 65535 bytes, several stored blocks */
    uint8_t *big = malloc(300 * 300 * 3);
    for (int i = 0; i < 300 * 300; i++) {
        big[3 * i] = (uint8_t)(i % 300); big[3 * i + 1] = (uint8_t)(i / 300); big[3 * i + 2] = (uint8_t)(i * 7);
    }
    round_trip(big, 300, 300, 2);
    free(big);
    uint8_t *o = NULL;
    size_t n = 0;
    CHECK_EQ_INT(weft_png_encode_rgb(tiny, 0, 2, &o, &n), -1);
    CHECK(o == NULL);
}

static void bandwidth_table_matches_whole_names(void)
{
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA H200"), 4800);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"), 3350);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA H100 PCIe"), 2000);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA GH200 480GB"), 4000);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA A100-SXM4-80GB"), 2039);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA A100-PCIE-40GB"), 1555);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA A10"), 600);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA RTX A1000"), 0);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA L4"), 300);
    CHECK_EQ_INT(weft_bench_known_bandwidth("NVIDIA GeForce RTX 4090 (discrete GPU, Vulkan 1.3)"), 1008);
    CHECK_EQ_INT(weft_bench_known_bandwidth("AMD Instinct MI300X"), 5300);
    CHECK_EQ_INT(weft_bench_known_bandwidth("AMD Radeon RX 7900 XTX"), 960);
    CHECK_EQ_INT(weft_bench_known_bandwidth("llvmpipe (LLVM 15.0.7, 256 bits) (CPU, Vulkan 1.3)"), 0);
    /* OpenCL on the CPU (PoCL) reads system memory: the CPU's measured figure; an OpenCL GPU does not */
    const char *src = NULL;
    CHECK(weft_bench_device_bandwidth("opencl", "pthread-skylake-avx512-AMD EPYC (Portable Computing Language, "
                                      "OpenCL 3.0, CPU; fp64)", 40.0, &src) == 40.0 && src && !strcmp(src, "measured"));
    src = NULL;
    CHECK(weft_bench_device_bandwidth("opencl", "Mali-G710 (ARM Platform, OpenCL 3.0, GPU; fp16)", 40.0, &src) != 40.0);
    CHECK(!src || strcmp(src, "measured") != 0);
}

/* ---- the CLI ---- */

static char stories[1024], tmp[] = "/tmp/weft-bench-devices-XXXXXX";

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    *n = b ? fread(b, 1, (size_t)sz, f) : 0;
    if (b) b[*n] = 0;
    fclose(f);
    return b;
}

static void devices_cpu_writes_table_json_svg_png(void)
{
    char args[2048], path[1100];
    snprintf(args, sizeof args, "bench --devices cpu -m '%s' -p 16 -n 4 --levels 1,2 -r 1 -t 2 --out '%s/x'", stories,
             tmp);
    char *out = NULL;
    CHECK_EQ_INT(weft_exec(args, &out), 0);
    CHECK_MSG(out && strstr(out, "\n| cpu:0 "), "no cpu row in: %.600s", out ? out : "");
    CHECK(out && strstr(out, "| device ") && strstr(out, "c=2 gen t/s") && strstr(out, "c=1 ITL p50/p99 ms"));
    free(out);
    /* x.json */
    snprintf(path, sizeof path, "%s/x.json", tmp);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    CHECK_MSG(j != NULL, "%s: %s", path, err.text);
    json_t *d = json_array_get(json_object_get(j, "devices"), 0);
    const char *name = json_string_value(json_object_get(d, "name"));
    CHECK(json_is_string(json_object_get(j, "model")));
    CHECK(json_number_value(json_object_get(j, "weight_bytes_per_token")) > 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "prompt_tokens")), 16);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "new_tokens")), 4);
    CHECK_EQ_INT(json_array_size(json_object_get(j, "devices")), 1);
    CHECK(json_is_array(json_object_get(j, "skipped")));
    CHECK(name && *name);
    const char *id = json_string_value(json_object_get(d, "id"));
    CHECK(id && !strcmp(id, "cpu:0"));
    CHECK(json_number_value(json_object_get(json_object_get(d, "pp_tps"), "median")) > 0);
    CHECK(json_number_value(json_object_get(json_object_get(d, "tg_tps"), "median")) > 0);
    CHECK(json_number_value(json_object_get(d, "weight_gbs")) > 0);
    CHECK(json_number_value(json_object_get(d, "bandwidth_gbs")) > 0);  /* measured on the CPU */
    CHECK(json_number_value(json_object_get(d, "bandwidth_share")) > 0);
    json_t *lv = json_object_get(d, "concurrency");
    CHECK_EQ_INT(json_array_size(lv), 2);
    for (size_t i = 0; i < json_array_size(lv); i++) {
        json_t *l = json_array_get(lv, i);
        CHECK_EQ_INT(json_integer_value(json_object_get(l, "concurrency")), (int)i + 1);
        CHECK(json_number_value(json_object_get(l, "gen_tps")) > 0);
        json_t *itl = json_object_get(l, "itl_ms");
        CHECK(json_is_number(json_object_get(itl, "p50")) && json_is_number(json_object_get(itl, "p99")));
        CHECK(json_number_value(json_object_get(itl, "p99")) >= json_number_value(json_object_get(itl, "p50")));
        CHECK(json_number_value(json_object_get(json_object_get(l, "ttft_ms"), "p50")) > 0);
    }
    /* x.svg */
    size_t n = 0;
    snprintf(path, sizeof path, "%s/x.svg", tmp);
    char *svg = (char *)slurp(path, &n);
    CHECK(svg && !strncmp(svg, "<svg", 4) && strstr(svg, "</svg>"));
    CHECK_MSG(svg && name && strstr(svg, name), "the SVG does not name the device '%s'", name ? name : "");
    free(svg);
    /* x.png: a 1000-wide chart with one legend row */
    snprintf(path, sizeof path, "%s/x.png", tmp);
    uint8_t *png = slurp(path, &n), *rgb = NULL;
    const char *g[] = {"a"}, *s[] = {"b"};
    double v[] = {1};
    struct plot_bars one = {.title = "t", .n_groups = 1, .groups = g, .n_series = 1, .series = s, .values = v};
    int ew, eh, w = 0, h = 0;
    weft_plot_bars_size(&one, &ew, &eh);
    CHECK(png != NULL);
    if (png) CHECK_EQ_INT(png_read(png, n, &w, &h, &rgb), 0);
    CHECK(w == ew && h == eh);
    /* the device's colour is in the picture (its bars and legend swatch) */
    unsigned c = weft_plot_series_colour(0);
    size_t hits = 0;
    for (size_t i = 0; rgb && i < (size_t)w * h; i++)
        hits += rgb[3 * i] == (c >> 16 & 255) && rgb[3 * i + 1] == (c >> 8 & 255) && rgb[3 * i + 2] == (c & 255);
    CHECK(hits > 1000);
    free(rgb);
    free(png);
    json_decref(j);
    /* --json: the same object on stdout */
    snprintf(args, sizeof args, "bench --devices cpu:0 -m '%s' -p 8 -n 2 --levels 1 -r 1 -t 2 --out '%s/y' --json",
             stories, tmp);
    j = weft_exec_json(args);
    CHECK(j && json_array_size(json_object_get(j, "devices")) == 1);
    json_decref(j);
}

static void devices_usage_errors(void)
{
    char *out = NULL;
    CHECK_EQ_INT(weft_exec("bench --devices nosuch:0 2>&1", &out), 2);
    CHECK_MSG(out && strstr(out, "weft bench: --devices: unknown device 'nosuch:0'"), "got: %s", out ? out : "");
    free(out);
    CHECK_EQ_INT(weft_exec("bench --devices cpu:x 2>&1", &out), 2);
    CHECK(out && strstr(out, "bad device 'cpu:x'"));
    free(out);
    CHECK_EQ_INT(weft_exec("bench --levels 1,2 2>&1", &out), 2);
    CHECK(out && strstr(out, "--levels"));
    free(out);
    CHECK_EQ_INT(weft_exec("bench --devices all --levels x 2>&1", &out), 2);
    CHECK(out && strstr(out, "--levels"));
    free(out);
    CHECK_EQ_INT(weft_exec("bench --devices 2>&1", &out), 2);  /* no value */
    CHECK(out && strstr(out, "'--devices'"));
    free(out);
    CHECK_EQ_INT(weft_exec("bench --help", &out), 0);
    CHECK(out && strstr(out, "--devices all|DEV,...") && strstr(out, "--out"));
    free(out);
}

static void remove_tmp(void)
{
    DIR *dir = opendir(tmp);
    struct dirent *e;
    char p[1200];
    while (dir && (e = readdir(dir)))
        if (e->d_name[0] != '.') { snprintf(p, sizeof p, "%s/%s", tmp, e->d_name); unlink(p); }
    if (dir) closedir(dir);
    rmdir(tmp);
}

int main(void)
{
    RUN(checksums_match_the_references);
    RUN(png_writer_round_trips);
    RUN(bandwidth_table_matches_whole_names);
    RUN(devices_usage_errors);
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    if (!file_exists(stories)) {
        printf("SKIP: %s absent: the bench run not done\n", stories);
        return check_summary();
    }
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    RUN(devices_cpu_writes_table_json_svg_png);
    remove_tmp();
    return check_summary();
}
