/* `weft bench`: prompt-processing and generation throughput, like
 * llama-bench, plus the memory bandwidth those numbers imply.
 *
 *   weft bench [-m MODEL] [-p 128,512] [-n 64] [-r 5] [-t THREADS] [--json]
 *   weft bench --membw [-t THREADS]
 *   weft bench --concurrency 1,8,32 [-p 128] [-n 64] [-r 5]   (see bench_conc.c)
 *   weft bench --devices all [--levels 1,8,32] [--out PREFIX]  (see bench_devices.c)
 *
 * pp N: evaluate N prompt tokens from an empty context (in batches of -b).
 * tg N: evaluate N tokens one at a time from an empty context.
 * Each test runs once to warm up, then -r times; mean ± stdev and median of
 * tokens/s are reported. Bandwidth: bytes of weights one decode step reads
 * (every matmul weight and the output head) × tg tokens/s, and its ratio to
 * the device's memory bandwidth: for the CPU (and lavapipe) the read
 * bandwidth --membw measures (a multi-threaded streaming read of a buffer
 * much larger than the caches); for a GPU WEFT_<BACKEND>_BW_GBS or the
 * datasheet table (bench_devices.c); n/a when neither knows it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session.h"
#include "tools/bench_common.h"
#include "tools/bench_conc.h"
#include "tools/bench_devices.h"
#include "tools/cli.h"
#include "tools/cli_common.h"

int weft_cmd_bench(int argc, char **argv)
{
    struct cli_opts o;
    weft_cli_opts_default(&o);
    int pp[16] = {128, 512}, n_pp = 2, tg[16] = {64}, n_tg = 1, reps = 5;
    int conc[16], n_conc = 0, depth[16] = {0}, n_depth = 1;
    bool depth_set = false;
    int levels[16] = {1, 8, 32}, n_levels = 3;
    bool membw_only = false, pp_set = false, tg_set = false, reps_set = false, levels_set = false;
    const char *devices = NULL, *out_prefix = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--membw")) { membw_only = true; continue; }
        if (!strcmp(a, "--devices") && i + 1 < argc) { devices = argv[++i]; continue; }
        if (!strcmp(a, "--out") && i + 1 < argc) {
            out_prefix = argv[++i];
            if (!*out_prefix) { fprintf(stderr, "weft bench: --out expects a file name prefix\n"); return 2; }
            continue;
        }
        if (!strcmp(a, "--levels") && i + 1 < argc) {
            levels_set = true;
            if ((n_levels = weft_bench_parse_list(argv[++i], levels, 16)) <= 0) {
                fprintf(stderr, "weft bench: bad value for --levels: '%s'\n", argv[i]);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--concurrency") && i + 1 < argc) {
            if ((n_conc = weft_bench_parse_list(argv[++i], conc, 16)) <= 0) {
                fprintf(stderr, "weft bench: bad value for --concurrency: '%s'\n", argv[i]);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "-d") && i + 1 < argc) {
            const char *v = argv[++i];
            n_depth = weft_bench_parse_list(v, depth, 16);
            if (n_depth < 1) { fprintf(stderr, "weft bench: bad value for -d: '%s'\n", v); return 2; }
            depth_set = true;
            continue;
        }
        if ((!strcmp(a, "-p") || !strcmp(a, "-n") || !strcmp(a, "-r")) && i + 1 < argc) {
            const char *v = argv[++i];
            int r = !strcmp(a, "-p")   ? (n_pp = weft_bench_parse_list(v, pp, 16))
                    : !strcmp(a, "-n") ? (n_tg = weft_bench_parse_list(v, tg, 16))
                                       : (reps = atoi(v));
            pp_set |= a[1] == 'p';
            tg_set |= a[1] == 'n';
            reps_set |= a[1] == 'r';
            if (r < 0 || reps < 1 || reps > 100) { fprintf(stderr, "weft bench: bad value for %s: '%s'\n", a, v); return 2; }
            continue;
        }
        int r = weft_cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            bool help = !strcmp(a, "-h") || !strcmp(a, "--help");
            if (!help) {
                weft_cli_unknown_option("bench", a, i + 1 == argc);
                return 2;
            }
            printf("usage: weft bench [-m MODEL] [-p 128,512] [-n 64] [-d 0,2048] [-r 5] [-t THREADS] [-b BATCH] [--json]\n"
                   "       weft bench --membw [-t THREADS]\n"
                   "       weft bench --concurrency 1,8,32 [-m MODEL] [-p 128] [-n 64] [-r 5] [-t THREADS] [--json]\n"
                   "       weft bench --devices all|DEV,... [-m MODEL] [-p 128] [-n 32] [-r 3] [--levels 1,8,32]\n"
                   "                  [--split SPEC] [--out weft-devices] [-t THREADS] [--json]\n"
                   "  -d: each test after a context of that many tokens (computed once, untimed; the runs then\n"
                   "  continue it, as llama-bench's -d), with the cache a sequence holds then (K/V, and a\n"
                   "  hybrid model's recurrent state)\n"
                   "  result lines are printed (and flushed) as each test ends; on a terminal a status line\n"
                   "  on stderr shows the test and run in progress\n"
                   "  --devices: the same model and workload on each device (all: every device of every\n"
                   "  backend; or a list of devices, e.g. cpu,vulkan:0,cuda:0, or backends, e.g. cuda):\n"
                   "  pp and tg tokens/s at batch 1, weight GB/s and its share of the device's memory\n"
                   "  bandwidth (measured on the CPU; a GPU's from WEFT_<BACKEND>_BW_GBS, e.g.\n"
                   "  WEFT_CUDA_BW_GBS, or a table of known devices), and generated tokens/s, ITL p50/p99\n"
                   "  and TTFT p50 at each --levels concurrency; --split SPEC adds a row with that layer\n"
                   "  split; a backend without its runtime is listed as skipped. One markdown row per\n"
                   "  device (--json: one JSON object); writes PREFIX.json, PREFIX.svg and PREFIX.png\n"
                   "  (grouped bars, a colour per device)\n");
            return 0;
        }
    }
    int threads = o.n_threads;
    if (threads <= 0) {
        struct weft_device_info info;
        const struct weft_backend_iface *cpu = weft_backend_find("cpu");
        threads = cpu && cpu->devices(&info, 1, NULL) == 1 ? (int)info.n_threads : 1;
    }
    if ((levels_set || out_prefix) && !devices) {
        fprintf(stderr, "weft bench: --levels and --out go with --devices\n");
        return 2;
    }
    if (depth_set && (devices || n_conc || membw_only)) {
        fprintf(stderr, "weft bench: -d goes with the plain pp/tg tests\n");
        return 2;
    }
    if (devices) {
        if (n_conc || membw_only) {
            fprintf(stderr, "weft bench: --devices does not go with %s\n", n_conc ? "--concurrency" : "--membw");
            return 2;
        }
        struct bench_devices_args d = {.devices = devices, .split = o.split, .levels = levels, .n_levels = n_levels,
                                       .pp = pp_set ? pp[0] : 128, .tg = tg_set ? tg[0] : 32,
                                       .reps = reps_set ? reps : 3,
                                       .threads = threads, .out_prefix = out_prefix ? out_prefix : "weft-devices"};
        return weft_bench_devices(&o, &d);
    }
    if (n_conc) {
        struct weft_backend *be;
        struct weft_model *m;
        if (weft_cli_open(&o, &be, &m)) return 1;
        int rc = weft_bench_concurrency(&o, m, conc, n_conc, pp[0], tg[0], reps, threads);
        weft_cli_close(be, m);
        return rc;
    }
    weft_cli_progress("measuring the memory read bandwidth (%d threads)...", threads);
    double bw_best = 0, bw = weft_bench_membw(threads, membw_only ? 7 : 3, &bw_best);
    weft_cli_progress_clear();
    if (membw_only) {
        if (o.json) printf("{\"membw_gbs\": %.2f, \"membw_best_gbs\": %.2f, \"threads\": %d}\n", bw, bw_best, threads);
        else printf("memory read bandwidth: %.1f GB/s median, %.1f GB/s best (%d threads, 1 GiB buffer)\n", bw, bw_best, threads);
        return 0;
    }
    struct weft_backend *be;
    struct weft_model *m;
    weft_cli_progress("loading the model...");
    if (weft_cli_open(&o, &be, &m)) return 1;
    weft_cli_progress_clear();
    int max_n = 0;
    for (int i = 0; i < n_pp; i++) if (pp[i] > max_n) max_n = pp[i];
    for (int i = 0; i < n_tg; i++) if (tg[i] > max_n) max_n = tg[i];
    int max_d = 0;
    for (int i = 0; i < n_depth; i++) if (depth[i] > max_d) max_d = depth[i];
    if (max_d) max_n = max_n * (reps > 100 ? 100 : reps) + max_d;  /* the runs continue the context */
    int rc = 1;
    json_t *results = NULL;
    struct weft_session *s = NULL;
    int32_t *toks = NULL;
    if (weft_bench_session_open(m, max_n, o.batch, &s, &toks)) {
        weft_cli_fail("cannot create session");
        goto out;
    }
    const char *name = "";
    weft_gguf_get_str(weft_model_gguf(m), "general.name", &name, NULL);
    double wbytes = weft_bench_weight_bytes_per_token(m);
    /* what the weight reads compare to: the device's memory (the host's,
     * measured, for the CPU and lavapipe); none for a split */
    double dev_bw = 0;
    const char *bw_src = NULL;
    char dev_name[128] = "";
    if (!o.split) {
        char bname[32];
        snprintf(bname, sizeof bname, "%s", o.device);
        char *colon = strchr(bname, ':');
        int idx = colon ? atoi(colon + 1) : 0;
        if (colon) *colon = '\0';
        const struct weft_backend_iface *bi = weft_backend_find(bname);
        struct weft_device_info infos[16];
        int nd = bi ? bi->devices(infos, 16, NULL) : 0;
        if (idx >= 0 && idx < nd) snprintf(dev_name, sizeof dev_name, "%s", infos[idx].name);
        dev_bw = weft_bench_device_bandwidth(bname, dev_name, bw, &bw_src);
    }
    results = json_array();
    if (!o.json) {
        /* the device as its backend names it (the CPU: its kernel table, e.g. avx2) */
        printf("model: %s (%s, %.1f MiB of weights read per token), device %s%s%s%s, %d threads\n", name,
               weft_type_name(weft_model_ftype(m)), wbytes / 1048576.0, o.device, dev_name[0] ? " (" : "", dev_name,
               dev_name[0] ? ")" : "", threads);
        if (dev_bw > 0 && bw_src && !strcmp(bw_src, "measured"))
            printf("memory read bandwidth: %.1f GB/s (median of 3)\n\n", bw);
        else if (dev_bw > 0)
            printf("memory bandwidth of %s: %.1f GB/s (%s)\n\n", dev_name, dev_bw,
                   !strcmp(bw_src, "env") ? "WEFT_<BACKEND>_BW_GBS" : "datasheet table");
        else if (o.split)
            printf("memory bandwidth: n/a for a split over several devices\n\n");
        else
            printf("memory bandwidth of %s: unknown (set WEFT_<BACKEND>_BW_GBS)\n\n", dev_name);
        printf("| %-*s | %12s | %15s | %9s | %14s |\n", depth_set ? 14 : 6, "test", "t/s median", "t/s mean ± sd",
               "GB/s", "of membw");
        printf("|%s|--------------|-----------------|-----------|----------------|\n",
               depth_set ? "----------------" : "--------");
        fflush(stdout);
    }
    const int tw = depth_set ? 14 : 6;  /* the test column */
    for (int di = 0; di < n_depth; di++)
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass ? n_tg : n_pp;
        for (int i = 0; i < cnt; i++) {
            int n = pass ? tg[i] : pp[i];
            if (n == 0) continue;
            struct bench_stats st;
            if (weft_bench_run_test_at(s, toks, n, pass, depth[di], reps, NULL, &st)) {
                weft_cli_fail("benchmark run failed");
                goto out;
            }
            char test[48];
            if (depth_set) snprintf(test, sizeof test, "%s%d @ d%d", pass ? "tg" : "pp", n, depth[di]);
            else snprintf(test, sizeof test, "%s%d", pass ? "tg" : "pp", n);
            double gbs = pass ? wbytes * st.median / 1e9 : 0;
            if (o.json) {
                json_t *e = json_pack("{s:s,s:i,s:i,s:f,s:f,s:f}", "test", test, "n", n, "depth", depth[di],
                                      "tps_median", st.median, "tps_mean", st.mean, "tps_sd", st.sd);
                if (pass) {
                    json_object_set_new(e, "weight_gbs", json_real(gbs));
                    json_object_set_new(e, "membw_ratio", json_real(dev_bw > 0 ? gbs / dev_bw : 0));
                }
                json_array_append_new(results, e);
            } else if (pass) {
                if (dev_bw > 0)
                    printf("| %-*s | %12.1f | %7.1f ± %5.1f | %9.1f | %13.0f%% |\n", tw, test, st.median, st.mean, st.sd,
                           gbs, 100 * gbs / dev_bw);
                else
                    printf("| %-*s | %12.1f | %7.1f ± %5.1f | %9.1f | %14s |\n", tw, test, st.median, st.mean, st.sd,
                           gbs, "n/a");
            } else {
                printf("| %-*s | %12.1f | %7.1f ± %5.1f | %9s | %14s |\n", tw, test, st.median, st.mean, st.sd, "", "");
            }
            fflush(stdout);
        }
    }
    /* the cache a sequence holds: K/V per token, a hybrid's recurrent state per sequence */
    uint64_t kv_tok = 0, state = 0;
    weft_session_memory(s, &kv_tok, &state);
    if (!o.json && depth_set) {
        printf("\ncache per sequence: K/V %.1f KiB a token (F16), recurrent state %.2f MiB\n", kv_tok / 1024.0,
               state / 1048576.0);
        for (int di = 0; di < n_depth; di++)
            printf("  at %d tokens: %.1f MiB\n", depth[di], ((double)kv_tok * depth[di] + state) / 1048576.0);
    }
    if (o.json) {
        json_t *root = json_pack("{s:s,s:s,s:f,s:i,s:f,s:f,s:I,s:I,s:o}", "model", name, "type",
                                 weft_type_name(weft_model_ftype(m)), "weight_bytes_per_token", wbytes, "threads",
                                 threads, "membw_gbs", bw, "device_bw_gbs", dev_bw, "kv_bytes_per_token",
                                 (json_int_t)kv_tok, "state_bytes_per_seq", (json_int_t)state, "results", results);
        results = NULL;
        if (root) json_object_set_new(root, "device", json_string(dev_name[0] ? dev_name : o.device));
        char *str = json_dumps(root, JSON_REAL_PRECISION(6));
        if (str) puts(str);
        free(str);
        json_decref(root);
    }
    rc = 0;
out:
    json_decref(results);
    free(toks);
    weft_session_free(s);
    weft_cli_close(be, m);
    return rc;
}
