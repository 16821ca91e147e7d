/* weft: command-line entry point. */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/fleet_sup.h"

static void usage(void)
{
    fprintf(stderr,
            "weft — LLM inference on CPU, Vulkan, CUDA and HIP\n"
            "usage: weft COMMAND [options]   (weft COMMAND --help for options)\n"
            "  run        generate text from a prompt\n"
            "  chat       talk to a model using its chat template\n"
            "  tokenize   show the token ids of a text\n"
            "  info       validate a GGUF file and describe the model\n"
            "  devices    list backends and devices\n"
            "  quantize   convert a GGUF's weights to another type\n"
            "  gen        write a random-weight Llama GGUF (tests, benchmarks)\n"
            "  bench      prompt/generation throughput and memory bandwidth\n"
            "  serve      OpenAI-compatible HTTP server\n"
            "  router     one endpoint in front of many weft serve instances\n"
            "  fleet      a local fleet: an instance per device, the router in front (and Redis)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        {"run", weft_cmd_run},           {"chat", weft_cmd_chat},   {"tokenize", weft_cmd_tokenize},
        {"info", weft_cmd_info},         {"devices", weft_cmd_devices},
        {"quantize", weft_cmd_quantize}, {"gen", weft_cmd_gen},           {"bench", weft_cmd_bench}, {"serve", weft_cmd_serve},
        {"router", weft_cmd_router},     {"fleet", weft_cmd_fleet},
    };
    /* started by weft fleet: go when it goes, on the CPUs it gave */
    if (fleet_child_setup()) return 1;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "weft: unknown command '%s'\n", argv[1]);
    usage();
    return 2;
}
