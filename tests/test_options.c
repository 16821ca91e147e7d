/* base/options.h's parser, the process's options in backends/backend.h
 * (weft_backend_set_options, weft_backend_open_opts), tools/env.c's table
 * of WEFT_* knobs and docs/devices.md's "Knobs" section, which must list each. */
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/options.h"
#include "tests/check.h"
#include "tools/env.h"

#include <stdlib.h>
#include <string.h>

static void parser_reads_keys_flags_and_numbers(void)
{
    const char *o = "cpu.isa=avx2,vulkan.validate,vulkan.mv_nr=16,cuda.graphs=0,cpu.isa=scalar,hip.debug=off";
    char v[16];
    CHECK(weft_opt_get(o, "cpu.isa", v, sizeof v) && strcmp(v, "scalar") == 0);   /* the last wins */
    CHECK(weft_opt_get(o, "vulkan.validate", v, sizeof v) && strcmp(v, "1") == 0); /* a bare key is 1 */
    CHECK(!weft_opt_get(o, "vulkan.valid", v, sizeof v));                           /* whole keys only */
    CHECK(!weft_opt_get(o, "cpu", v, sizeof v));
    CHECK(weft_opt_flag(o, "vulkan.validate", false));
    CHECK(!weft_opt_flag(o, "cuda.graphs", true));
    CHECK(!weft_opt_flag(o, "hip.debug", true));
    CHECK(weft_opt_flag(o, "cuda.debug", true) && !weft_opt_flag(o, "cuda.debug", false));  /* absent: default */
    CHECK_EQ_INT(weft_opt_long(o, "vulkan.mv_nr", 1, 64, 0), 16);
    CHECK_EQ_INT(weft_opt_long(o, "vulkan.mv_nr", 1, 8, 0), 0);      /* out of range: the default */
    CHECK_EQ_INT(weft_opt_long(o, "cpu.isa", 0, 9, 7), 7);           /* not a number: the default */
    CHECK_EQ_INT(weft_opt_long("model.chunk_mib=000000000000000000000000000000064junk", "model.chunk_mib", 1, 99, 5),
                 5);                                                   /* too long to be a number: not cut to one */
    CHECK_EQ_INT(weft_opt_long("model.chunk_mib=", "model.chunk_mib", 1, 99, 5), 5);
    CHECK(!weft_opt_get(NULL, "cpu.isa", v, sizeof v) && !weft_opt_get("", "cpu.isa", v, sizeof v));
    char small[4];
    CHECK(weft_opt_get("cpu.isa=avx512", "cpu.isa", small, sizeof small) && strcmp(small, "avx") == 0);

    static const char *const known[] = {"cpu.isa", "cpu.nopack"};
    char bad[32];
    CHECK(!weft_opt_unknown(o, "cpu.", known, 2, bad, sizeof bad));
    CHECK(weft_opt_unknown("cpu.nopack=1,cpu.isaa=x", "cpu.", known, 2, bad, sizeof bad) && !strcmp(bad, "cpu.isaa"));
    CHECK(!weft_opt_unknown("vulkan.anything=1", "cpu.", known, 2, bad, sizeof bad));  /* not its prefix */

    CHECK(weft_opt_syntax_ok(o, bad, sizeof bad));
    CHECK(weft_opt_syntax_ok("", bad, sizeof bad) && weft_opt_syntax_ok(NULL, bad, sizeof bad));
    static const char *const malformed[] = {"cpu.isa=a,", ",cpu.isa=a", "cpu.isa=a,,cpu.nopack", "isa=avx2",
                                            ".isa=1",     "cpu.=1",     "cpu isa=1",             "=1"};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
        CHECK_MSG(!weft_opt_syntax_ok(malformed[i], bad, sizeof bad), "'%s' accepted", malformed[i]);
}

static void process_options_are_checked_and_reach_the_backends(void)
{
    char *saved = strdup(weft_backend_options());
    CHECK(weft_backend_set_options("cpu.isa=scalar,vulkan.validate=1,model.chunk_mib=8") == WEFT_OK);
    CHECK(strcmp(weft_backend_options(), "cpu.isa=scalar,vulkan.validate=1,model.chunk_mib=8") == 0);
    /* malformed, a prefix no one owns, a model key core does not know: refused, the old string kept */
    CHECK(weft_backend_set_options("cpu.isa=scalar,,") == WEFT_ERR_INVALID_ARG);
    CHECK(weft_backend_set_options("gpu.graphs=0") == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "gpu.graphs") != NULL);
    CHECK(weft_backend_set_options("model.chunk=8") == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "model.chunk") != NULL);
    CHECK(strcmp(weft_backend_options(), "cpu.isa=scalar,vulkan.validate=1,model.chunk_mib=8") == 0);

    /* the CPU backend reads cpu.*, ignores the others, refuses a cpu.* it does not know */
    struct weft_backend *be = NULL;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK && be);
    weft_backend_close(be);
    CHECK(weft_backend_open_opts("cpu", 1, "cpu.nopack=1,cuda.graphs=0", &be) == WEFT_OK && be);
    weft_backend_close(be);
    CHECK(weft_backend_open_opts("cpu", 1, "cpu.bogus=1", &be) == WEFT_ERR_INVALID_ARG && !be);
    CHECK(strstr(weft_last_error(), "cpu.bogus") != NULL);
    CHECK(weft_backend_open_opts("cpu", 1, "cpu.nopack=1,", &be) == WEFT_ERR_INVALID_ARG && !be);
    /* cpu.prefetch: a byte distance (a multiple of 64) or off; anything else refused by name */
    CHECK(weft_backend_open_opts("cpu", 1, "cpu.prefetch=1024", &be) == WEFT_OK && be);
    CHECK_EQ_INT(weft_cpu_prefetch, 1024);
    weft_backend_close(be);
    CHECK(weft_backend_open_opts("cpu", 1, "cpu.prefetch=off", &be) == WEFT_OK && be);
    CHECK_EQ_INT(weft_cpu_prefetch, -1);
    weft_backend_close(be);
    static const char *const bad_pf[] = {"cpu.prefetch=100", "cpu.prefetch=-64", "cpu.prefetch=131072",
                                         "cpu.prefetch=far"};
    for (size_t i = 0; i < sizeof bad_pf / sizeof *bad_pf; i++) {
        CHECK(weft_backend_open_opts("cpu", 1, bad_pf[i], &be) == WEFT_ERR_INVALID_ARG && !be);
        CHECK(strstr(weft_last_error(), "cpu.prefetch") != NULL);
    }
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_OK && be);   /* without the option: this CPU's default */
    CHECK_EQ_INT(weft_cpu_prefetch, weft_cpu_prefetch_default());
    weft_backend_close(be);
    CHECK(weft_cpu_isa_select("cpu.isa=scalar") == WEFT_CPU_ISA_SCALAR);
    for (int i = 0; i < WEFT_CPU_ISA_COUNT_; i++) {   /* each table this CPU runs, asked for by name */
        char o[64];
        snprintf(o, sizeof o, "cpu.isa=%s", weft_cpu_isa_name((enum weft_cpu_isa)i));
        if (weft_cpu_isa_supported((enum weft_cpu_isa)i)) CHECK_EQ_INT(weft_cpu_isa_select(o), i);
    }
    CHECK(weft_cpu_isa_select("") == weft_cpu_isa_select("cpu.isa="));  /* empty: the best */
    CHECK(weft_cpu_isa_select(weft_backend_options()) == WEFT_CPU_ISA_SCALAR);
    CHECK(weft_backend_set_options(NULL) == WEFT_OK && strcmp(weft_backend_options(), "") == 0);
    CHECK(weft_backend_set_options(saved) == WEFT_OK);
    free(saved);
    /* too late for the module path: the registry has loaded */
    CHECK(weft_backend_set_module_path("/nonexistent", false) == WEFT_ERR_INVALID_ARG);
}

static void environment_becomes_options_in_tools(void)
{
    /* every knob and WEFT_OPTIONS saved and unset: the result is exactly what is set here */
    const size_t nv = weft_n_knobs + 1;
    char **saved = calloc(nv, sizeof *saved);
    for (size_t i = 0; i < nv; i++) {
        const char *name = i < weft_n_knobs ? weft_knobs[i].env : "WEFT_OPTIONS";
        const char *v = getenv(name);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(name);
    }
    setenv("WEFT_CPU_NOPACK", "1", 1);
    setenv("WEFT_VK_VALIDATE", "1", 1);
    setenv("WEFT_CUDA_GRAPHS", "", 1);   /* empty: not set */
    setenv("WEFT_OPTIONS", "cpu.profile,hip.graphs=1", 1);
    char *o = weft_env_options();
    CHECK(o && strcmp(o, "cpu.nopack=1,vulkan.validate=1,cpu.profile,hip.graphs=1") == 0);
    free(o);
    setenv("WEFT_CPU_ISA", "avx2,cpu.bogus", 1);   /* a value cannot smuggle in an option */
    o = weft_env_options();
    CHECK(o == NULL);
    free(o);
    unsetenv("WEFT_CPU_ISA");
    setenv("WEFT_OPTIONS", "cpu.bogus=1", 1);   /* unknown under cpu.: the CPU backend refuses to open */
    CHECK(weft_env_apply_options() == 0);
    struct weft_backend *be = NULL;
    CHECK(weft_backend_open("cpu", 1, &be) == WEFT_ERR_INVALID_ARG && !be);
    setenv("WEFT_OPTIONS", "bogus", 1);          /* malformed: refused when applied */
    CHECK(weft_env_apply_options() == -1);
    for (size_t i = 0; i < nv; i++) {
        const char *name = i < weft_n_knobs ? weft_knobs[i].env : "WEFT_OPTIONS";
        if (saved[i]) setenv(name, saved[i], 1);
        else unsetenv(name);
        free(saved[i]);
    }
    free(saved);
    CHECK(weft_env_apply_options() == 0);
}

/* docs/devices.md's Knobs table names every knob of tools/env.c with its option */
static void readme_documents_every_knob(void)
{
    FILE *f = fopen(WEFT_SOURCE_DIR "/docs/devices.md", "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *sec = strstr(text, "\n## Knobs\n");
    CHECK(sec != NULL);
    if (!sec) return;
    const char *end = strstr(sec + 1, "\n## ");
    size_t len = end ? (size_t)(end - sec) : strlen(sec);
    char *s = strndup(sec, len);
    CHECK(weft_n_knobs >= 15);
    for (size_t i = 0; i < weft_n_knobs; i++) {
        char row[160];
        snprintf(row, sizeof row, "| `%s` | `%s` |", weft_knobs[i].env, weft_knobs[i].option);
        CHECK_MSG(strstr(s, row) != NULL, "docs/devices.md's Knobs section lacks the row %s", row);
    }
    CHECK(strstr(s, "`WEFT_OPTIONS`") && strstr(s, "`WEFT_MODULE_PATH`") && strstr(s, "`WEFT_NO_MODULES`") &&
          strstr(s, "`WEFT_CACHE_DIR`"));
    /* and every row of the table that maps a variable to an option is in tools/env.c's table */
    int rows = 0;
    for (const char *p = strstr(s, "\n| `WEFT_"); p; p = strstr(p + 1, "\n| `WEFT_")) {
        char var[64], opt[64];
        if (sscanf(p, "\n| `%63[A-Z0-9_]` | `%63[a-z0-9_.]` |", var, opt) != 2) continue;
        rows++;
        bool found = false;
        for (size_t i = 0; i < weft_n_knobs && !found; i++)
            found = !strcmp(weft_knobs[i].env, var) && !strcmp(weft_knobs[i].option, opt);
        CHECK_MSG(found, "docs/devices.md maps %s to %s; tools/env.c does not", var, opt);
    }
    CHECK_EQ_INT(rows, (long long)weft_n_knobs);
    free(s);
}

int main(void)
{
    RUN(parser_reads_keys_flags_and_numbers);
    RUN(process_options_are_checked_and_reach_the_backends);
    RUN(environment_becomes_options_in_tools);
    RUN(readme_documents_every_knob);
    return check_summary();
}
