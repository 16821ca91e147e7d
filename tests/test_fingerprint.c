/* The model fingerprint (core/fingerprint.h): equal for the same weights,
 * tokenizer and settings whatever the file is called or named inside;
 * different when any tensor byte, the tokenizer or a rope setting differs;
 * the streaming hash does not depend on how the bytes are fed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fingerprint.h"
#include "core/model.h"
#include "tests/check.h"
#include "tools/gen_model.h"

static bool fp_eq(struct weft_fingerprint a, struct weft_fingerprint b) { return a.hi == b.hi && a.lo == b.lo; }

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static bool fp_of_memory(const void *data, size_t n, struct weft_fingerprint *out)
{
    struct weft_gguf *g;
    if (weft_gguf_open_memory(data, n, &g) != WEFT_OK) return false;
    struct weft_hparams hp;
    bool ok = weft_hparams_load(g, &hp) == WEFT_OK && weft_fingerprint_model(g, &hp, out) == WEFT_OK;
    weft_gguf_close(g);
    return ok;
}

static bool fp_of_file(const char *path, struct weft_fingerprint *out)
{
    size_t n;
    unsigned char *b = read_all(path, &n);
    bool ok = b && fp_of_memory(b, n, out);
    free(b);
    return ok;
}

static char dir[] = "/tmp/weft-fp-XXXXXX";

static void gen(const char *name, uint64_t seed, float rope_base, const char *gname)
{
    struct weft_gen_params p;
    CHECK(weft_gen_preset(&p, "tiny") == WEFT_OK);
    p.seed = seed;
    if (rope_base > 0) p.rope_freq_base = rope_base;
    p.name = gname;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(weft_gen_model(&p, path) == WEFT_OK);
}

static struct weft_fingerprint fp_named(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct weft_fingerprint f = {0, 0};
    CHECK_MSG(fp_of_file(path, &f), "%s", weft_last_error());
    return f;
}

static void same_model_same_fingerprint_whatever_its_name(void)
{
    gen("a.gguf", 1, 0, "first");
    gen("b.gguf", 1, 0, "second name");
    CHECK(fp_eq(fp_named("a.gguf"), fp_named("b.gguf")));
    CHECK(fp_eq(fp_named("a.gguf"), fp_named("a.gguf")));
}

static void weights_and_rope_change_it(void)
{
    gen("s2.gguf", 2, 0, NULL);
    gen("rope.gguf", 1, 500000.0f, NULL);
    struct weft_fingerprint a = fp_named("a.gguf");
    CHECK(!fp_eq(a, fp_named("s2.gguf")));
    CHECK(!fp_eq(a, fp_named("rope.gguf")));
    /* one byte of the last tensor's data */
    char path[256];
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    size_t n;
    unsigned char *b = read_all(path, &n);
    CHECK(b != NULL);
    if (!b) return;
    struct weft_fingerprint f;
    b[n - 1] ^= 1;
    CHECK(fp_of_memory(b, n, &f) && !fp_eq(a, f));
    b[n - 1] ^= 1;
    CHECK(fp_of_memory(b, n, &f) && fp_eq(a, f));
    free(b);
}

static void the_real_models_differ(void)
{
    static const char *names[] = {"stories260K.gguf", "synth256-Q4_0.gguf", "synth256-Q8_0.gguf",
                                  "synth-smollm2-vocab.gguf"};
    struct weft_fingerprint f[4];
    int have = 0;
    for (int i = 0; i < 4; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", WEFT_SHARED_DIR, names[i]);
        if (access(path, R_OK) != 0) continue;
        CHECK_MSG(fp_of_file(path, &f[have]), "%s: %s", names[i], weft_last_error());
        have++;
    }
    for (int i = 0; i < have; i++)
        for (int j = i + 1; j < have; j++) CHECK(!fp_eq(f[i], f[j]));
}

static void streaming_hash_is_split_independent(void)
{
    unsigned char data[1000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 131 + 7);
    struct weft_fphash h;
    weft_fphash_init(&h, 9);
    weft_fphash_update(&h, data, sizeof data);
    struct weft_fingerprint whole = weft_fphash_final(&h);
    static const size_t steps[] = {1, 3, 31, 32, 33, 999};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        weft_fphash_init(&h, 9);
        for (size_t at = 0; at < sizeof data; at += steps[k])
            weft_fphash_update(&h, data + at, at + steps[k] <= sizeof data ? steps[k] : sizeof data - at);
        CHECK_MSG(fp_eq(whole, weft_fphash_final(&h)), "step %zu", steps[k]);
    }
    /* a trailing zero byte, another seed, one flipped bit: all different */
    weft_fphash_init(&h, 9);
    weft_fphash_update(&h, data, 999);
    CHECK(!fp_eq(whole, weft_fphash_final(&h)));
    weft_fphash_init(&h, 10);
    weft_fphash_update(&h, data, sizeof data);
    CHECK(!fp_eq(whole, weft_fphash_final(&h)));
    data[500] ^= 0x10;
    weft_fphash_init(&h, 9);
    weft_fphash_update(&h, data, sizeof data);
    CHECK(!fp_eq(whole, weft_fphash_final(&h)));
}

static void text_round_trip(void)
{
    struct weft_fingerprint f = {0x0123456789abcdefull, 0xfedcba9876543210ull}, g;
    char s[WEFT_FINGERPRINT_STR];
    weft_fingerprint_str(&f, s);
    CHECK(!strcmp(s, "0123456789abcdeffedcba9876543210"));
    CHECK(weft_fingerprint_parse(s, &g) == WEFT_OK && fp_eq(f, g));
    CHECK(weft_fingerprint_parse("0123", &g) != WEFT_OK);
    CHECK(weft_fingerprint_parse("0123456789abcdeffedcba987654321x", &g) != WEFT_OK);
    CHECK(weft_fingerprint_parse("0123456789abcdeffedcba98765432100", &g) != WEFT_OK);
}

int main(void)
{
    if (!mkdtemp(dir)) SKIP_ALL("no temporary directory");
    RUN(same_model_same_fingerprint_whatever_its_name);
    RUN(weights_and_rope_change_it);
    RUN(the_real_models_differ);
    RUN(streaming_hash_is_split_independent);
    RUN(text_round_trip);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary();
}
