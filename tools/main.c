/* weft: command-line entry point. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/env.h"
#include "tools/fleet_sup.h"

#ifndef WEFT_VERSION
#define WEFT_VERSION "0.0.0-dev"
#endif
#ifndef WEFT_BUILT_MODULES
#define WEFT_BUILT_MODULES ""
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "weft — LLM inference on CPU, Vulkan, CUDA and HIP\n"
            "usage: weft COMMAND [options]   (weft COMMAND --help for options)\n"
            "       weft --version\n"
            "  run        generate text from a prompt\n"
            "  chat       talk to a model using its chat template\n"
            "  tokenize   show the token ids of a text\n"
            "  template   print the prompt a model's own chat template makes of a conversation\n"
            "  info       validate a GGUF file and describe the model\n"
            "  devices    list backends and devices\n"
            "  quantize   convert a GGUF's weights to another type\n"
            "  gen        write a random-weight Llama GGUF (tests, benchmarks)\n"
            "  bench      prompt/generation throughput and memory bandwidth\n"
            "  serve      OpenAI-compatible HTTP server\n"
            "  router     one endpoint in front of many weft serve instances\n"
            "  fleet      a local fleet: an instance per device, the router in front (and Redis)\n");
}

/* "weft 0.1.0" and the backends this build has: the CPU's built in, the
 * GPU modules built beside the binary (whether their runtime is there is
 * weft devices' business: loading them here would cost a driver start). */
static void version(void)
{
    printf("weft %s\n", WEFT_VERSION);
    printf("backends: cpu (built in)");
    const char *mods = WEFT_BUILT_MODULES;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", mods);
    for (char *save = NULL, *t = strtok_r(buf, "; ", &save); t; t = strtok_r(NULL, "; ", &save))
        printf(", %s (module)", strncmp(t, "weft-", 5) ? t : t + 5);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        version();
        return 0;
    }
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        {"run", weft_cmd_run},           {"chat", weft_cmd_chat},
        {"tokenize", weft_cmd_tokenize}, {"info", weft_cmd_info},
        {"devices", weft_cmd_devices},  {"quantize", weft_cmd_quantize},
        {"gen", weft_cmd_gen},          {"bench", weft_cmd_bench},
        {"serve", weft_cmd_serve},      {"router", weft_cmd_router},
        {"fleet", weft_cmd_fleet},      {"template", weft_cmd_template},
    };
    /* the WEFT_* knobs (tools/env.c): read here, handed to the library */
    if (weft_env_apply() != 0) return 2;
    /* started by weft fleet: go when it goes, on the CPUs it gave */
    if (weft_fleet_child_setup()) return 1;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        return cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "weft: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
