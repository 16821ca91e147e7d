/* `weft bench --devices all`: the same model and workload on each device. */
#ifndef WEFT_BENCH_DEVICES_H
#define WEFT_BENCH_DEVICES_H

#include "tools/cli_common.h"

struct bench_devices_args {
    const char *devices;         /* "all", or a list: cpu,vulkan:0,cuda (a backend: each of its devices) */
    const char *split;           /* a --split spec for one more row, or NULL */
    const int *levels;           /* concurrency levels (0: left out) */
    int n_levels;
    int pp, tg, reps, threads;   /* prompt and generated tokens, runs a test, CPU threads */
    const char *out_prefix;      /* PREFIX.json, PREFIX.svg, PREFIX.png */
};

/* The whole mode; o gives the model, -b, -t and --json. Returns the exit
 * code: 0 when every device asked for that is present ran, 1 when one
 * failed, none ran or a file could not be written, 2 on a usage error
 * (a message on stderr). */
int weft_bench_devices(const struct cli_opts *o, const struct bench_devices_args *a);

/* A GPU's peak memory bandwidth in GB/s from a table of known devices,
 * matched by a substring of its name ("NVIDIA H200 ...": 4800); 0 when not
 * known. */
double weft_bench_known_bandwidth(const char *device_name);

/* The memory bandwidth a device's weight reads are measured against, GB/s:
 * WEFT_<BACKEND>_BW_GBS when set, else cpu_bw for a device that reads system
 * memory (the CPU, a Vulkan or OpenCL device on the CPU such as lavapipe
 * or PoCL), else the
 * table; 0 when none applies. *source (may be NULL): "env", "measured",
 * "table" or NULL. */
double weft_bench_device_bandwidth(const char *backend, const char *device_name, double cpu_bw, const char **source);

#endif
