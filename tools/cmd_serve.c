/* `weft serve`: the OpenAI-compatible HTTP server, a thin command over
 * server/serve.h (options in, weft_server_create / run / free).
 *
 *   weft serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--device cpu]
 *              [--config FILE] [-t THREADS] [-c N_CTX] [--max-seqs 64]
 *              [--max-waiting 256] [--kv-mib 1024] [--model-name NAME] ...
 *
 * Signals are the server's (serve.h): SIGTERM/SIGINT drain (a second one,
 * or --drain-timeout, ends what is left), SIGHUP reloads --config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/route.h"
#include "server/serve.h"
#include "tools/cli.h"
#include "tools/cli_common.h"
#include "tools/env.h"

#define WEFT_SERVE_MAX_NAMES 32  /* --model-alias, --cors-origin */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--device cpu] [--config FILE]\n"
            "                  [-t THREADS] [-c N_CTX] [--max-seqs 64] [--max-waiting 256] [--kv-mib 1024] [--kv-host-mib 0]\n"
            "                  [--model-name NAME] [--no-prefix-cache] [--swa-full] [--kv-type f16|q8_0]\n"
            "                  [--state-checkpoint 256] [--state-checkpoint-mib 256]\n"
            "                  [--chat-template FILE]\n"
            "                  [--max-stream-buffer-kib 4096] [--drain-timeout 30] [--max-conns-per-client 64]\n"
            "                  [--max-output-kib 1024] [--metrics-port PORT] [--metrics-key KEY]\n"
            "                  [--metrics-compat vllm] [--no-calibrate] [--low-priority-step-ms 40]\n"
            "                  [--itl-target-ms auto|off|MS]\n"
            "                  [--tokenize-threads 2] [--max-tokenizing 64] [--max-kv-push-mib 64]\n"
            "                  [--kv-remote redis://HOST:PORT|unix:///PATH] [--kv-remote-ttl-ms 3600000]\n"
            "                  [--kv-remote-timeout-ms 250] [--role both|prefill|decode] [--pd-idle-ms 10000]\n"
            "                  [--pd-lease-ms 30000] [--device-class NAME]\n"
            "                  [--mock prefill=TOK/S,decode=TOK/S[,vendor=NAME][,device=NAME]]\n"
            "                  [--mock-fail 429=P,503=P,500=P,hang=P,nokv=P] [--mock-seed N]\n"
            "                  [--api-key KEY] [--model-alias NAME ...] [--cors-origin ORIGIN ...]\n"
            "                  [--kv-secret SECRET] [--kv-secret-previous SECRET] [--max-kv-push-total-mib 256]\n"
            "                  [--watchdog-ms 30000] [--test-hooks]\n"
            "  --chat-template FILE: this Jinja chat template instead of the model's (POST /apply-template renders it)\n"
            "  --swa-full: keep every KV block of sliding-window layers (Gemma 3's local ones) instead of\n"
            "                 dropping those out of each sequence's window (more KV memory a sequence; its KV blocks\n"
            "                 always carry the window layers)\n"
            "  --state-checkpoint N, --state-checkpoint-mib M: a hybrid model's prefix cache copies its\n"
            "                 recurrent state to host memory every N computed tokens (default 256, a multiple\n"
            "                 of 16) and at a prompt's last full block, in at most M MiB (default 256); a\n"
            "                 prefix hit resumes from the last one; they travel with their KV blocks\n"
            "  --watchdog-ms MS: an engine with work queued that has not stepped for MS is stalled: /health\n"
            "                 and /load answer 503 (a router moves its streams elsewhere)\n"
            "  --test-hooks: POST /test/engine-pause {\"paused\": true} holds the engine still (tests only)\n"
            "  --kv-secret SECRET: the fleet secret (16+ characters; or $WEFT_KV_SECRET, which keeps it out of\n"
            "                 the process list): turns shared KV on, for trusted callers only (a trusted API\n"
            "                 key, or a fleet member: weft router or another instance with the same secret):\n"
            "                 /v1/kv/*, prefill/decode hand-offs and --kv-remote. Every block this instance\n"
            "                 writes carries an HMAC-SHA256 under it; a block without a valid one is refused.\n"
            "                 Without it those surfaces answer 403 and nothing goes out\n"
            "  --kv-secret-previous SECRET: the secret being replaced ($WEFT_KV_SECRET_PREVIOUS): its blocks and\n"
            "                 members are still taken while a rotation rolls out\n"
            "  --max-kv-push-total-mib N: KV push bodies held at once, all connections (default 4 x\n"
            "                 --max-kv-push-mib); past it a push gets 503\n"
            "  --api-key KEY: requests need Authorization: Bearer KEY (one shared key, no --config needed;\n"
            "                 with --config, one more key); /health, /ready, /load, /metrics and the dashboard\n"
            "                 stay open (--metrics-key guards /metrics)\n"
            "  --model-alias NAME: another name requests may use for the model (repeatable); listed in\n"
            "                 /v1/models, and an answer names the model as the request did\n"
            "  --cors-origin ORIGIN: let browser pages from ORIGIN (e.g. http://localhost:3000; * for any)\n"
            "                 call the API: preflights answered, Access-Control-Allow-Origin on answers (repeatable)\n"
            "  --config FILE: API keys, tenants, rate limits and KV quotas (JSON; see server/tenants.h);\n"
            "                 SIGHUP reloads it\n"
            "  --drain-timeout S: on SIGTERM, requests still running after S seconds end with an error\n"
            "                 event and the server exits 0 (a second SIGTERM does that at once)\n"
            "  --max-output-kib: per connection, unsent response bytes past which the next pipelined\n"
            "                 request waits and reading pauses\n"
            "  --metrics-port PORT: serve /metrics (and /health, /ready) there instead of on --port\n"
            "  --metrics-key KEY: /metrics needs Authorization: Bearer KEY\n"
            "  --kv-host-mib N: a host-RAM prefix tier of N MiB: cached blocks the device evicts go there,\n"
            "                 and a prompt that finds its prefix there copies it back instead of recomputing\n"
            "  --kv-remote URL: share full prefix blocks through Redis: written behind, fetched along a\n"
            "                 prompt's hash chain when the link beats recomputing; Redis gone = recompute\n"
            "  --role R: what a weft router uses this instance for (reported in /load): prefill computes long\n"
            "                 prompts for decode instances and streams their KV blocks there; decode takes\n"
            "                 requests and has long prompts computed elsewhere; both (the default) does either\n"
            "  --pd-idle-ms MS: a request waiting for a prefill instance's blocks computes the rest itself\n"
            "                 once none has come for MS; --pd-lease-ms MS: blocks pushed for a request that\n"
            "                 never came are freed after MS\n"
            "  --max-kv-push-mib N: the largest POST /v1/kv/blocks body (KV blocks from another instance)\n"
            "  --device-class NAME: the class a router counts this instance in for scale-out signals and\n"
            "                 its metrics' device_class label (default: the device's vendor: cpu, nvidia, amd, ...)\n"
            "  --low-priority-step-ms MS: a step carries at most MS of prompts (at the measured prefill\n"
            "                 rate, at least 16 tokens) of priorities below the highest seen (0 = no limit),\n"
            "                 so a higher-priority arrival finds a short step running\n"
            "  --itl-target-ms MS: a step that carries running streams' next tokens carries only the\n"
            "                 prompt tokens that keep it within MS by the measured rates (at least one), so\n"
            "                 arriving prompts do not stall the streams; a long prompt is spread over steps\n"
            "                 (default auto: twice the step's decode rows alone, by the measured\n"
            "                 decode steps; off: no limit)\n"
            "  --no-calibrate: skip the short rate measurement at start (/load's rates stay 0 until traffic)\n"
            "  --metrics-compat vllm: /metrics also under the vllm:* names (v1 engine: latency histograms, token and\n"
            "                 request counters, queue and KV gauges) dashboards, autoscalers and endpoint pickers read\n"
            "  --port 0 picks a free port; the address is printed on stderr once listening\n"
            "  --max-stream-buffer-kib: a streaming client that lets more than this pile up unread is dropped\n"
            "  --mock SPEC: for router tests at scale: the real HTTP surface, scheduler, KV blocks, hashes\n"
            "                 and events, with compute replaced by a speed model (prefill tokens/s; decode\n"
            "                 tokens/s per sequence); the model's weights are not loaded. Never token-exact.\n"
            "  --mock-fail: a generation request fails first with these probabilities (hang: no answer)\n");
}

/* "prefill=4000,decode=50,vendor=nvidia,device=H200" */
static int parse_mock(const char *spec, double *prefill, double *decode, char *vendor, size_t vn, char *device,
                      size_t dn)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) goto bad;
        *eq = 0;
        const char *val = eq + 1;
        char *end;
        if (!strcmp(kv, "prefill") || !strcmp(kv, "decode")) {
            double x = strtod(val, &end);
            if (end == val || *end || !(x > 0) || x > 1e9) goto bad;
            *(kv[0] == 'p' ? prefill : decode) = x;
        } else if (!strcmp(kv, "vendor")) {
            snprintf(vendor, vn, "%s", val);
        } else if (!strcmp(kv, "device")) {
            snprintf(device, dn, "%s", val);
        } else {
            goto bad;
        }
    }
    if (*prefill > 0 && *decode > 0) return 0;
bad:
    fprintf(stderr, "weft serve: --mock expects prefill=TOK/S,decode=TOK/S[,vendor=NAME][,device=NAME], not '%s'\n",
            spec);
    return -1;
}

/* "429=0.01,hang=0.001" */
static int parse_mock_fail(const char *spec, double p[5])
{
    static const char *names[5] = {"429", "503", "500", "hang", "nokv"};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    double sum = 0;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int k = -1;
        if (eq) {
            *eq = 0;
            for (int j = 0; j < 5; j++)
                if (!strcmp(kv, names[j])) k = j;
        }
        char *end;
        double x = eq ? strtod(eq + 1, &end) : -1;
        if (k < 0 || end == eq + 1 || *end || x < 0 || x > 1) {
            fprintf(stderr, "weft serve: --mock-fail expects KIND=P,... with KIND 429, 503, 500, hang or nokv and "
                    "P in 0..1, not '%s'\n", spec);
            return -1;
        }
        p[k] = x;
        sum += x;
    }
    if (sum > 1) {
        fprintf(stderr, "weft serve: --mock-fail's probabilities add up to more than 1\n");
        return -1;
    }
    return 0;
}

int weft_cmd_serve(int argc, char **argv)
{
    struct cli_opts o;
    weft_cli_opts_default(&o);
    const char *config = NULL, *name = NULL;
    uint32_t port = 8080, max_seqs = 64, max_waiting = 256, kv_mib = 0, max_stream_kib = 4096;
    uint32_t drain_s = 30, per_client = 64, max_output_kib = 1024, metrics_port = 0, tok_threads = 2,
             max_tokenizing = 64, low_prefill_ms = 40, host_mib = 0, kv_push_mib = 64, kv_push_total_mib = 0,
             ckpt_tokens = 0, ckpt_mib = 0;
    double itl_target_ms = 0;  /* auto */
    bool no_prefix = false, swa_full = false;
    const char *chat_template = NULL;
    const char *mock = NULL, *mock_fail = NULL;
    char mock_vendor[32] = "", mock_device[96] = "";
    uint32_t mock_seed = 1;
    enum weft_type kv_type = WEFT_TYPE_F16;
    struct weft_server_config sc = {.host = "127.0.0.1", .handle_signals = true};
    /* repeatable flags: pointers into argv (it outlives the server) */
    static const char *aliases[WEFT_SERVE_MAX_NAMES], *origins[WEFT_SERVE_MAX_NAMES];
    uint32_t n_aliases = 0, n_origins = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--api-key") && v) {
            sc.api_key = argv[++i];
            if (strlen(sc.api_key) < 8) {
                fprintf(stderr, "weft serve: --api-key needs a key of at least 8 characters\n");
                return 2;
            }
            continue;
        }
        if ((!strcmp(a, "--model-alias") || !strcmp(a, "--cors-origin")) && v) {
            bool alias = a[2] == 'm';
            const char *val = argv[++i];
            uint32_t *n = alias ? &n_aliases : &n_origins;
            if (!*val || strlen(val) > 127 || *n == WEFT_SERVE_MAX_NAMES) {
                fprintf(stderr, "weft serve: %s expects a non-empty value of at most 127 bytes, at most %d times\n",
                        a, WEFT_SERVE_MAX_NAMES);
                return 2;
            }
            (alias ? aliases : origins)[(*n)++] = val;
            continue;
        }
        if (!strcmp(a, "--itl-target-ms") && v) {
            const char *s = argv[++i];
            char *end = NULL;
            if (!strcmp(s, "auto")) itl_target_ms = 0;
            else if (!strcmp(s, "off")) itl_target_ms = -1;
            else if (((itl_target_ms = strtod(s, &end)), end == s || *end || !(itl_target_ms >= 0.1 && itl_target_ms <= 600000))) {
                fprintf(stderr, "weft serve: --itl-target-ms expects auto, off or milliseconds (0.1 to 600000), not '%s'\n", s);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--host") && v) { sc.host = argv[++i]; continue; }
        if (!strcmp(a, "--config") && v) { config = argv[++i]; continue; }
        if (!strcmp(a, "--model-name") && v) { name = argv[++i]; continue; }
        if (!strcmp(a, "--kv-remote") && v) { sc.kv_remote = argv[++i]; continue; }
        if (!strcmp(a, "--kv-secret") && v) { sc.kv_secret = argv[++i]; continue; }
        if (!strcmp(a, "--kv-secret-previous") && v) { sc.kv_secret_previous = argv[++i]; continue; }
        if (!strcmp(a, "--device-class") && v) {
            sc.device_class = argv[++i];
            size_t n = strlen(sc.device_class);
            bool ok = n > 0 && n < 32;
            for (size_t k = 0; k < n && ok; k++) {
                char ch = sc.device_class[k];
                ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                     ch == '_' || ch == '.';
            }
            if (!ok) {
                fprintf(stderr, "weft serve: --device-class expects 1-31 letters, digits, '-', '_' or '.', not '%s'\n",
                        sc.device_class);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--role") && v) {
            enum weft_route_role role;
            if (!weft_route_role_parse(argv[++i], &role)) {
                fprintf(stderr, "weft serve: --role expects both, prefill or decode\n");
                return 2;
            }
            sc.role = (int)role;
            continue;
        }
        if (!strcmp(a, "--metrics-key") && v) { sc.metrics_key = argv[++i]; continue; }
        if (!strcmp(a, "--metrics-compat") && v) {
            if (strcmp(argv[++i], "vllm") != 0) {
                fprintf(stderr, "weft serve: --metrics-compat expects vllm\n");
                return 2;
            }
            sc.metrics_vllm = true;
            continue;
        }
        if (!strcmp(a, "--no-prefix-cache")) { no_prefix = true; continue; }
        if (!strcmp(a, "--swa-full")) { swa_full = true; continue; }
        if (!strcmp(a, "--chat-template") && v) { chat_template = argv[++i]; continue; }
        if (!strcmp(a, "--mock") && v) { mock = argv[++i]; continue; }
        if (!strcmp(a, "--mock-fail") && v) { mock_fail = argv[++i]; continue; }
        if (!strcmp(a, "--no-calibrate")) { sc.no_calibrate = true; continue; }
        if (!strcmp(a, "--test-hooks")) { sc.test_hooks = true; continue; }
        if (!strcmp(a, "--template-system")) {
            fprintf(stderr, "weft serve: --template-system is gone: chats render with the model's own template, "
                            "which adds its default system prompt itself\n");
            return 2;
        }
        if (!strcmp(a, "--kv-type") && v) {
            i++;
            if (!weft_type_from_name(argv[i], &kv_type) || (kv_type != WEFT_TYPE_F16 && kv_type != WEFT_TYPE_Q8_0)) {
                fprintf(stderr, "weft serve: --kv-type expects f16 or q8_0\n");
                return 2;
            }
            continue;
        }
        struct { const char *flag; uint32_t lo, hi, *out; } nums[] = {
            {"--port", 0, 65535, &port},
            {"--max-seqs", 1, 4096, &max_seqs},
            {"--max-waiting", 1, 1 << 20, &max_waiting},
            {"--max-stream-buffer-kib", 1, 1 << 20, &max_stream_kib},
            {"--kv-mib", 1, 1 << 24, &kv_mib},
            {"--drain-timeout", 1, 86400, &drain_s},
            {"--max-conns-per-client", 1, 1 << 20, &per_client},
            {"--max-output-kib", 1, 1 << 20, &max_output_kib},
            {"--metrics-port", 1, 65535, &metrics_port},
            {"--tokenize-threads", 1, 64, &tok_threads},
            {"--max-tokenizing", 1, 1 << 16, &max_tokenizing},
            {"--mock-seed", 1, 0xffffffffu, &mock_seed},
            {"--low-priority-step-ms", 0, 60000, &low_prefill_ms},
            {"--kv-host-mib", 0, 1 << 24, &host_mib},
            {"--state-checkpoint", 16, 1 << 24, &ckpt_tokens},
            {"--state-checkpoint-mib", 1, 1 << 24, &ckpt_mib},
            {"--max-kv-push-mib", 1, 1 << 16, &kv_push_mib},
            {"--max-kv-push-total-mib", 1, 1 << 20, &kv_push_total_mib},
            {"--watchdog-ms", 100, 86400000, &sc.watchdog_ms},
            {"--kv-remote-ttl-ms", 1, 0x7fffffffu, &sc.kv_remote_ttl_ms},
            {"--kv-remote-timeout-ms", 1, 600000, &sc.kv_remote_timeout_ms},
            {"--pd-idle-ms", 1, 600000, &sc.pd_idle_ms},
            {"--pd-lease-ms", 1, 3600000, &sc.pd_lease_ms},
        };
        bool matched = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !matched; k++)
            if (!strcmp(a, nums[k].flag) && v) {
                if (weft_cli_parse_u32("serve", a, argv[++i], nums[k].lo, nums[k].hi, nums[k].out)) return 2;
                matched = true;
            }
        if (matched) continue;
        int r = weft_cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            weft_cli_unknown_option("serve", a, i + 1 == argc);
            return 2;
        }
    }
    double mock_p = 0, mock_d = 0;
    if (mock && parse_mock(mock, &mock_p, &mock_d, mock_vendor, sizeof mock_vendor, mock_device, sizeof mock_device))
        return 2;
    if (mock_fail && (!mock || parse_mock_fail(mock_fail, sc.mock_fail))) {
        if (!mock) fprintf(stderr, "weft serve: --mock-fail needs --mock\n");
        return 2;
    }
    struct weft_backend *be;
    struct weft_model *m;
    if (mock) {
        /* no weights: the tokenizer, shape and fingerprint; the KV pool on the CPU */
        char *def = o.model ? NULL : weft_default_model_path();
        if (!o.model && !def) return 1;
        if (weft_backend_open("cpu", 1, &be) != WEFT_OK) {
            fprintf(stderr, "weft serve: cannot open the CPU backend: %s\n", weft_last_error());
            free(def);
            return 1;
        }
        if (weft_model_load_meta(o.model ? o.model : def, be, &m) != WEFT_OK) {
            fprintf(stderr, "weft: cannot load model: %s\n", weft_last_error());
            weft_backend_close(be);
            free(def);
            return 1;
        }
        free(def);
        sc.mock_vendor = mock_vendor[0] ? mock_vendor : NULL;
        sc.mock_device = mock_device[0] ? mock_device : NULL;
        sc.mock_seed = mock_seed;
    } else if (weft_cli_open(&o, &be, &m)) {
        return 1;
    }
    char model_id[128];
    if (name) {
        snprintf(model_id, sizeof model_id, "%s", name);
    } else {
        const char *path = o.model ? o.model : "SmolLM2-135M-Instruct.Q4_1.gguf";
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(model_id, sizeof model_id, "%s", base);
        size_t n = strlen(model_id);
        if (n > 5 && !strcmp(model_id + n - 5, ".gguf")) model_id[n - 5] = '\0';
    }
    sc.devices = o.split ? o.split : o.device;
    sc.port = (int)port;
    sc.tenants_path = config;
    sc.model_id = model_id;
    sc.model_aliases = aliases;
    sc.n_model_aliases = n_aliases;
    sc.http.cors_origins = origins;
    sc.http.n_cors_origins = n_origins;
    sc.chat_template = chat_template;
    sc.max_stream_buffer = (size_t)max_stream_kib << 10;
    sc.drain_timeout_ms = drain_s * 1000u;
    sc.http.max_conns_per_client = per_client;
    sc.http.max_output = (size_t)max_output_kib << 10;
    sc.metrics_port = (int)metrics_port;
    sc.n_workers = tok_threads;
    sc.max_queued_work = max_tokenizing;
    sc.max_kv_push = (size_t)kv_push_mib << 20;
    sc.max_kv_push_total = (size_t)kv_push_total_mib << 20;
    if (!sc.kv_secret) sc.kv_secret = weft_env_kv_secret(false);
    if (!sc.kv_secret_previous) sc.kv_secret_previous = weft_env_kv_secret(true);
    sc.engine = (struct weft_engine_config){.n_ctx = o.n_ctx > 0 ? (uint32_t)o.n_ctx : 0, .max_seqs = max_seqs,
                                            .max_waiting = max_waiting, .kv_mib = kv_mib,
                                            .max_step_tokens = o.batch > 0 ? (uint32_t)o.batch : 0,
                                            .low_prefill_ms = low_prefill_ms, .itl_target_ms = itl_target_ms, .host_cache_mib = host_mib,
                                            .state_ckpt_tokens = ckpt_tokens, .state_ckpt_mib = ckpt_mib,
                                            .no_prefix_cache = no_prefix, .swa_full = swa_full, .kv_type = kv_type,
                                            .mock_prefill_tps = mock_p, .mock_decode_tps = mock_d};
    struct weft_server *s;
    if (weft_server_create(m, &sc, &s) != WEFT_OK) {
        fprintf(stderr, "weft serve: %s\n", weft_last_error());
        weft_cli_close(be, m);
        return 1;
    }
    char extra[64] = "";
    if (weft_server_metrics_port(s) > 0) snprintf(extra, sizeof extra, ", metrics on port %d", weft_server_metrics_port(s));
    fprintf(stderr, "weft serve: listening on http://%s:%d (model %s, context %u, %s%s%s)\n", sc.host,
            weft_server_port(s), model_id, weft_server_n_ctx(s),
            weft_server_has_keys(s) ? "API keys required" : "no API keys", config ? ", tenants configured" : "", extra);
    fflush(stderr);
    weft_server_run(s);
    fprintf(stderr, "weft serve: stopped\n");
    weft_server_free(s);
    weft_cli_close(be, m);
    return 0;
}
