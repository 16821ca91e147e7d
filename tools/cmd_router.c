/* `weft router`: one OpenAI endpoint in front of many `weft serve`
 * instances (server/router.h). It loads the model's tokenizer and chat
 * template from the GGUF's metadata (not its weights: the file is mapped,
 * the tensors never read) so it hashes prompts exactly as the instances do.
 *
 *   weft router [-m MODEL] --instance URL [--instance URL ...]
 *               [--instances-dns NAME:PORT] [--policy weft|least-load|round-robin]
 *               [--host 127.0.0.1] [--port 8000] ... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "core/tokenizer.h"
#include "server/chat_template.h"
#include "server/router.h"
#include "tools/cli.h"
#include "tools/cli_common.h"
#include "tools/env.h"

#define ROUTER_MAX_ORIGINS 32

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft router [-m MODEL] --instance URL [--instance URL ...] [--instances-dns NAME:PORT]\n"
            "                   [--policy weft|least-load|round-robin] [--host 127.0.0.1] [--port 8000]\n"
            "                   [--config FILE] [--upstream-key KEY] [--chat-template FILE] [--poll-ms 200]\n"
            "                   [--dns-interval-ms 5000] [--no-kv-events] [--index-blocks N] [--timeout S]\n"
            "                   [--max-retries N] [--max-migrations N] [--saturate-waiting N]\n"
            "                   [--queue-max N] [--queue-per-tenant N]\n"
            "                   [--tokenize-threads 2] [--pd-threshold 512] [--pd-slack 1.25] [--no-pd]\n"
            "                   [--hold-empty-s 0] [--hold-startup-s 0] [--api-key KEY] [--cors-origin ORIGIN ...] [--kv-secret SECRET]\n"
            "  --kv-secret SECRET: the fleet secret the instances were given (or $WEFT_KV_SECRET): the router\n"
            "                 authenticates to them as a fleet member (their /v1/kv/* and hand-offs need one)\n"
            "                 unless --upstream-key names another trusted key\n"
            "  -m MODEL: the GGUF the instances serve (its tokenizer and chat template; default SmolLM2)\n"
            "  --instance URL: http://host:port of a weft serve (repeatable)\n"
            "  --instances-dns NAME:PORT: every address NAME resolves to is an instance, re-resolved every\n"
            "                 --dns-interval-ms (a Kubernetes headless Service)\n"
            "  --policy: weft (predicted time to first token: prefix, queue and measured speed; default),\n"
            "            least-load or round-robin (for comparison)\n"
            "  --config FILE: weft serve's tenants file: client keys are checked here, and its trusted key\n"
            "                 is what the router sends the instances (with x-weft-tenant)\n"
            "  --api-key KEY: clients need Authorization: Bearer KEY (one shared key, no --config needed);\n"
            "                 the router sends it to the instances too (give them the same --api-key)\n"
            "  --cors-origin ORIGIN: as weft serve's: browser pages from ORIGIN (* for any) may call the\n"
            "                 router; it answers preflights itself (repeatable)\n"
            "  --chat-template FILE: as weft serve's flag (the instances' template: the router counts and hashes\n"
            "      the prompts they compute)\n"
            "  --pd-threshold N: a prompt with more than N tokens its decode instance does not hold is\n"
            "                 computed on a prefill instance (weft serve --role prefill) when that is\n"
            "                 predicted no slower, its KV blocks streamed to the decode instance as they are\n"
            "                 made (default 512); --no-pd: never\n"
            "  --pd-slack F: a decode instance's own prefill counts F times (plus once per request it\n"
            "                 is decoding) against the prefill instance's predicted time (default 1.25;\n"
            "                 a large F hands every such prompt off while a prefill instance is up)\n"
            "  --no-kv-events: route on routing history alone (no /v1/kv/events subscriptions)\n"
            "  --index-blocks N: at most N blocks in each instance's prefix index (default 1048576)\n"
            "  --timeout S: an upstream answer idle this long fails (default 600)\n"
            "  --stall-ms MS: a stream silent this long after its first token (or 50 of its instance's\n"
            "                 measured steps, if longer) has stalled and moves to another instance (default 10000)\n"
            "  --max-retries N: other instances a request tries before its first byte (default 2)\n"
            "  --max-migrations N: times a stream moves to another instance after it (default 2)\n"
            "  --saturate-waiting N: an instance with every slot busy and N waiting is saturated (default 2);\n"
            "      when all are, requests wait in the router's queue (strict priority, fair between tenants)\n"
            "  --queue-max N, --queue-per-tenant N: its bounds (default 1024, 256); past them the lowest\n"
            "      priority is shed with 503 and Retry-After\n"
            "  --hold-empty-s S: with no instance up, requests wait in the queue up to S seconds for one\n"
            "      (an autoscaler scaling from zero; /ready stays 200), then 503 (default 0: 503 at once)\n"
            "  --hold-startup-s S: the same before any instance has come up (they are loading), /ready 503\n"
            "      \"starting\" meanwhile (default 0; weft fleet gives its router 600)\n");
}

int weft_cmd_router(int argc, char **argv)
{
    struct weft_router_config rc = {.host = "127.0.0.1", .handle_signals = true};
    const char *model = NULL;
    uint32_t port = 8000, timeout_s = 600, threads = 2;
    const char *chat_template = NULL;
    static const char *origins[ROUTER_MAX_ORIGINS];
    uint32_t n_origins = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--api-key") && v) {
            rc.api_key = argv[++i];
            if (strlen(rc.api_key) < 8) {
                fprintf(stderr, "weft router: --api-key needs a key of at least 8 characters\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--cors-origin") && v) {
            if (n_origins == ROUTER_MAX_ORIGINS || !argv[i + 1][0]) {
                fprintf(stderr, "weft router: --cors-origin expects an origin, at most %d times\n", ROUTER_MAX_ORIGINS);
                return 2;
            }
            origins[n_origins++] = argv[++i];
            continue;
        }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) { model = argv[++i]; continue; }
        if (!strcmp(a, "--host") && v) { rc.host = argv[++i]; continue; }
        if (!strcmp(a, "--config") && v) { rc.tenants_path = argv[++i]; continue; }
        if (!strcmp(a, "--upstream-key") && v) { rc.upstream_key = argv[++i]; continue; }
        if (!strcmp(a, "--kv-secret") && v) { rc.kv_secret = argv[++i]; continue; }
        if (!strcmp(a, "--instances-dns") && v) { rc.dns = argv[++i]; continue; }
        if (!strcmp(a, "--chat-template") && v) { chat_template = argv[++i]; continue; }
        if (!strcmp(a, "--template-system")) {
            fprintf(stderr, "weft router: --template-system is gone: chats render with the model's own template, "
                            "which adds its default system prompt itself\n");
            return 2;
        }
        if (!strcmp(a, "--no-kv-events")) { rc.no_kv_events = true; continue; }
        if (!strcmp(a, "--no-pd")) { rc.no_pd = true; continue; }
        if (!strcmp(a, "--pd-slack") && v) {
            char *end = NULL;
            const char *s = argv[++i];
            rc.pd_slack = strtod(s, &end);
            if (end == s || *end || !(rc.pd_slack >= 1 && rc.pd_slack <= 1e6)) {
                fprintf(stderr, "weft router: --pd-slack expects a number from 1 to 1000000, not '%s'\n", s);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--instance") && v) {
            if (rc.n_instances == WEFT_ROUTER_MAX_URLS) {
                fprintf(stderr, "weft router: at most %d --instance (use --instances-dns for more)\n", WEFT_ROUTER_MAX_URLS);
                return 2;
            }
            rc.instances[rc.n_instances++] = argv[++i];
            continue;
        }
        if (!strcmp(a, "--policy") && v) {
            if (!weft_route_policy_parse(argv[++i], &rc.policy)) {
                fprintf(stderr, "weft router: --policy expects weft, least-load or round-robin\n");
                return 2;
            }
            continue;
        }
        struct { const char *flag; uint32_t lo, hi, *out; } nums[] = {
            {"--port", 0, 65535, &port},
            {"--poll-ms", 10, 60000, &rc.poll_ms},
            {"--pd-threshold", 1, 1u << 24, &rc.pd_threshold},
            {"--dns-interval-ms", 100, 3600000, &rc.dns_interval_ms},
            {"--index-blocks", 64, 1u << 30, &rc.index_max_blocks},
            {"--timeout", 1, 86400, &timeout_s},
            {"--stall-ms", 100, 3600000, &rc.stall_ms},
            {"--tokenize-threads", 1, 64, &threads},
            {"--max-retries", 1, 15, &rc.max_retries},
            {"--max-migrations", 1, 15, &rc.max_migrations},
            {"--saturate-waiting", 1, 1 << 20, &rc.saturate_waiting},
            {"--queue-max", 1, 1 << 20, &rc.queue_max},
            {"--queue-per-tenant", 1, 1 << 20, &rc.queue_per_tenant},
            {"--hold-empty-s", 0, 86400, &rc.hold_empty_s},
            {"--hold-startup-s", 0, 86400, &rc.hold_startup_s},
        };
        bool matched = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !matched; k++)
            if (!strcmp(a, nums[k].flag) && v) {
                if (weft_cli_parse_u32("router", a, argv[++i], nums[k].lo, nums[k].hi, nums[k].out)) return 2;
                matched = true;
            }
        if (matched) continue;
        weft_cli_unknown_option("router", a, i + 1 == argc);
        return 2;
    }
    if (!rc.n_instances && !rc.dns) {
        fprintf(stderr, "weft router: give --instance URL or --instances-dns NAME:PORT (weft router --help)\n");
        return 2;
    }
    rc.http.cors_origins = origins;
    rc.http.n_cors_origins = n_origins;
    char *def = NULL;
    if (!model) {
        def = weft_default_model_path();
        if (!def) return 1;
        model = def;
    }
    struct weft_gguf *g = NULL;
    struct weft_tokenizer *tok = NULL;
    weft_status st = weft_gguf_open(model, &g);
    if (st == WEFT_OK) st = weft_tokenizer_load(g, &tok);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft: %s: %s\n", model, weft_last_error());
        if (g) weft_gguf_close(g);
        free(def);
        return 1;
    }
    /* the instances' template, so that the router counts and hashes the prompts they compute */
    static struct chat_template tmpl;
    if ((st = weft_chat_template_load(&tmpl, g, tok, chat_template)) != WEFT_OK) {
        fprintf(stderr, "weft router: %s\n", weft_last_error());
        weft_tokenizer_free(tok);
        weft_gguf_close(g);
        free(def);
        return 1;
    }
    rc.rules.tok = tok;
    rc.rules.tmpl = &tmpl;
    weft_prompt_rules_fim(&rc.rules, g);
    rc.port = (int)port;
    rc.timeout_ms = timeout_s * 1000u;
    rc.n_workers = threads;
    if (!rc.kv_secret) rc.kv_secret = weft_env_kv_secret(false);
    struct weft_router *r;
    st = weft_router_create(&rc, &r);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft: %s\n", weft_last_error());
        weft_chat_template_free(&tmpl);
        weft_tokenizer_free(tok);
        weft_gguf_close(g);
        free(def);
        return 1;
    }
    fprintf(stderr, "weft router: listening on http://%s:%d (%s policy, %u instance%s%s%s)\n", rc.host,
            weft_router_port(r), weft_route_policy_name(rc.policy), rc.n_instances, rc.n_instances == 1 ? "" : "s",
            rc.dns ? " + DNS " : "", rc.dns ? rc.dns : "");
    weft_router_run(r);
    weft_router_free(r);
    weft_chat_template_free(&tmpl);
    weft_tokenizer_free(tok);
    weft_gguf_close(g);
    free(def);
    fprintf(stderr, "weft router: stopped\n");
    return 0;
}
