/* core/split.h: --split SPEC parsed and its devices opened in core, for
 * every tool alike. */
#include "core/split.h"
#include "core/model_impl.h"
#include "tests/check.h"

#include <string.h>

static void parts_in_order_and_a_device_opened_once(void)
{
    struct weft_split s;
    CHECK(weft_split_open("cpu=2,cpu:0=3,cpu", 1, &s) == WEFT_OK);
    CHECK_EQ_INT(s.n_parts, 3);
    CHECK_EQ_INT(s.n_owned, 2);   /* "cpu" and "cpu:0" are two names: two opens; "cpu" again: the first */
    CHECK_EQ_INT(s.parts[0].n_layer, 2);
    CHECK_EQ_INT(s.parts[1].n_layer, 3);
    CHECK_EQ_INT(s.parts[2].n_layer, 0);   /* the last without =N: the rest */
    CHECK(s.parts[0].be && s.parts[2].be == s.parts[0].be && s.parts[1].be != s.parts[0].be);
    weft_split_close(&s);
    CHECK_EQ_INT(s.n_owned, 0);
    CHECK_EQ_INT(s.n_parts, 0);
}

static void bad_specs_are_refused_with_the_part_named(void)
{
    static const struct { const char *spec, *says; } bad[] = {
        {"cpu,cpu=2", "'cpu'"},       /* only the last may omit =N */
        {"cpu=0", "'cpu=0'"},         {"cpu=x", "'cpu=x'"},   {"=3", "'=3'"},
        {"cpu=", "'cpu='"},           {",", "at least"},      {"", "at least"},
        {"cpu=1,cpu=1,cpu=1,cpu=1,cpu=1,cpu=1,cpu=1,cpu=1,cpu=1", "at most 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct weft_split s;
        weft_status st = weft_split_open(bad[i].spec, 1, &s);
        CHECK_MSG(st == WEFT_ERR_INVALID_ARG, "'%s' gave %d", bad[i].spec, (int)st);
        CHECK_MSG(strstr(weft_last_error(), bad[i].says) != NULL, "'%s': %s", bad[i].spec, weft_last_error());
        CHECK(s.n_parts == 0 && s.n_owned == 0);
    }
    char long_name[200];
    memset(long_name, 'a', sizeof long_name - 3);
    memcpy(long_name + sizeof long_name - 3, "=1", 3);
    struct weft_split s;
    CHECK(weft_split_open(long_name, 1, &s) == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(), "too long"));
    /* a device that does not open: its status, nothing left open */
    CHECK(weft_split_open("cpu=1,nosuch:0", 1, &s) == WEFT_ERR_INVALID_ARG && s.n_owned == 0);
    CHECK(strstr(weft_last_error(), "nosuch") != NULL);
    CHECK(weft_split_open("cpu=1,cpu:7", 1, &s) == WEFT_ERR_NO_DEVICE && s.n_owned == 0);
}

/* the split loads a model whose layers follow it */
static void a_split_places_the_layers(void)
{
    struct weft_split s;
    CHECK(weft_split_open("cpu=2,cpu:0", 1, &s) == WEFT_OK);
    struct weft_model *m = NULL;
    weft_status st = weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", s.parts, s.n_parts, &m);
    if (st == WEFT_ERR_IO) {
        weft_split_close(&s);
        printf("  (stories260K absent: the load is not checked)\n");
        return;
    }
    CHECK(st == WEFT_OK && m);
    if (m) {
        CHECK_EQ_INT(weft_model_n_parts(m), 2);
        CHECK_EQ_INT(m->parts[0].n_layer, 2);
        CHECK_EQ_INT(m->parts[0].n_layer + m->parts[1].n_layer, weft_model_hparams(m)->n_layer);
        CHECK(m->parts[0].be == s.parts[0].be && m->parts[1].be == s.parts[1].be);
    }
    weft_model_free(m);
    weft_split_close(&s);
}

int main(void)
{
    RUN(parts_in_order_and_a_device_opened_once);
    RUN(bad_specs_are_refused_with_the_part_named);
    RUN(a_split_places_the_layers);
    return check_summary();
}
