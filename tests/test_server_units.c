/* The server's pure parts: request validation (server/params.c), tenants,
 * API keys and token buckets (server/tenants.c), and the Prometheus text
 * (server/metrics.c). The HTTP transport has test_http; the whole server is
 * driven end to end by tests/e2e. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/http.h"
#include "server/metrics.h"
#include "server/params.h"
#include "server/tenants.h"
#include "tests/check.h"

static json_t *held;  /* the last parse's JSON: p's strings point into it */

static bool parse(const char *body, bool chat, struct gen_params *p, const char **param)
{
    json_t *root;
    char msg[256] = "";
    bool ok = weft_gen_params_parse(body, strlen(body), chat, p, &root, param, msg, sizeof msg);
    if (!ok) CHECK_MSG(msg[0] != '\0', "refusal without a message");
    json_decref(held);
    held = root;
    return ok;
}

static void completions_defaults_and_values(void)
{
    struct gen_params p;
    const char *param;
    CHECK(parse("{\"prompt\": \"hi\"}", false, &p, &param));
    CHECK(p.max_tokens == -1 && p.sp.temperature == 1.0f && p.sp.top_p == 1.0f && p.sp.top_k == 0);
    CHECK(!p.stream && !p.logprobs && p.n_stop == 0);
    weft_gen_params_free(&p);
    CHECK(parse("{\"prompt\": [1, 2, 3], \"max_tokens\": 5, \"temperature\": 0, \"top_k\": 7, \"stop\": [\"a\", \"bc\"],"
                " \"logprobs\": 3, \"seed\": 42, \"stream\": true, \"stream_options\": {\"include_usage\": true},"
                " \"ignore_eos\": true, \"priority\": -3, \"model\": \"m\", \"user\": \"u\"}",
                false, &p, &param));
    CHECK(p.n_prompt_ids == 3 && p.prompt_ids[2] == 3 && p.max_tokens == 5 && p.sp.temperature == 0);
    CHECK(p.sp.top_k == 7 && p.n_stop == 2 && p.logprobs && p.top_logprobs == 3 && p.sp.n_logprobs == 3);
    CHECK(p.seed_given && p.sp.seed == 42 && p.stream && p.include_usage && p.ignore_eos && p.priority == -3);
    weft_gen_params_free(&p);
    CHECK(parse("{\"prompt\": [\"one string\"]}", false, &p, &param) && p.prompt && !strcmp(p.prompt, "one string"));
    weft_gen_params_free(&p);
}

static void each_bad_parameter_is_named(void)
{
    static const struct { const char *body, *param; } bad[] = {
        {"{}", "prompt"},
        {"{\"prompt\": \"\"}", "prompt"},
        {"{\"prompt\": [\"a\", [1]]}", "prompt"},  /* a prompt array mixes strings and ids */
        {"{\"prompt\": [-1]}", "prompt"},
        {"{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens"},
        {"{\"prompt\": \"x\", \"max_tokens\": \"5\"}", "max_tokens"},
        {"{\"prompt\": \"x\", \"temperature\": 3}", "temperature"},
        {"{\"prompt\": \"x\", \"top_p\": 0}", "top_p"},
        {"{\"prompt\": \"x\", \"min_p\": 2}", "min_p"},
        {"{\"prompt\": \"x\", \"presence_penalty\": 9}", "presence_penalty"},
        {"{\"prompt\": \"x\", \"n\": 17}", "n"},
        {"{\"prompt\": \"x\", \"n\": 0}", "n"},
        {"{\"prompt\": \"x\", \"n\": 2, \"stream\": true, \"weft\": {\"ids\": true}}", "n"},
        {"{\"prompt\": \"x\", \"stop\": 3}", "stop"},
        {"{\"prompt\": \"x\", \"stop\": [\"\"]}", "stop"},
        {"{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs"},
        {"{\"prompt\": \"x\", \"stream\": 1}", "stream"},
        {"{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", "stream_options"},
        {"{\"prompt\": \"x\", \"echo\": true, \"logprobs\": 1}", "echo"}, {"{\"prompt\": \"x\", \"echo\": 1}", "echo"},
        {"{\"prompt\": \"x\", \"model\": 3}", "model"},
        {"{\"prompt\": \"x\", \"seed\": 1.5}", "seed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gen_params p;
        const char *param = NULL;
        CHECK_MSG(!parse(bad[i].body, false, &p, &param), "accepted %s", bad[i].body);
        CHECK_MSG(param && !strcmp(param, bad[i].param), "%s: param %s", bad[i].body, param ? param : "(none)");
        weft_gen_params_free(&p);
    }
    /* not JSON, not an object, too deep: no parameter to name */
    const char *notobj[] = {"hello", "[1]", "{\"prompt\": \"x\"", "{\"prompt\": \"a\", \"prompt\": \"b\"}"};
    for (size_t i = 0; i < 4; i++) {
        struct gen_params p;
        const char *param = "x";
        CHECK(!parse(notobj[i], false, &p, &param) && param == NULL);
        weft_gen_params_free(&p);
    }
    char deep[4096];
    memset(deep, '[', 2000);
    memset(deep + 2000, ']', 2000);
    deep[4000] = '\0';
    CHECK(weft_json_depth_exceeds(deep, 4000, WEFT_MAX_JSON_DEPTH));
    CHECK(!weft_json_depth_exceeds("{\"a\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}", 74, 8));
}

static void chat_messages(void)
{
    struct gen_params p;
    const char *param;
    CHECK(parse("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
                "[{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}], \"logprobs\": true,"
                " \"top_logprobs\": 2}",
                true, &p, &param));
    CHECK(p.n_msgs == 2 && !strcmp(p.msgs[1].content, "ab") && !strcmp(p.msgs[0].role, "system"));
    CHECK(p.logprobs && p.top_logprobs == 2);
    weft_gen_params_free(&p);
    CHECK(parse("{\"messages\": [{\"role\": \"developer\", \"content\": \"d\"}]}", true, &p, &param));
    CHECK(!strcmp(p.msgs[0].role, "system"));
    weft_gen_params_free(&p);
    const char *bad[] = {
        "{\"messages\": []}",
        "{\"messages\": [{\"role\": \"user\"}]}",
        "{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
        "{\"messages\": \"hi\"}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(!parse(bad[i], true, &p, &param), "accepted %s", bad[i]);
        weft_gen_params_free(&p);
    }
}

static void tenants_keys_and_buckets(void)
{
    char path[] = "/tmp/weft-tenants-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *cfg = "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"sk-aaaa-1111\"], \"priority\": 3,"
                      " \"requests_per_second\": 2, \"burst\": 2, \"tokens_per_minute\": 600, \"max_kv_blocks\": 40,"
                      " \"max_running\": 2, \"share\": 3}, {\"name\": \"b\", \"api_keys\": [\"sk-bbbb-2222\"]}]}";
    CHECK(write(fd, cfg, strlen(cfg)) == (ssize_t)strlen(cfg));
    close(fd);
    struct tenants ts;
    char msg[256];
    CHECK(weft_tenants_load(&ts, path, msg, sizeof msg));
    CHECK(ts.n == 2 && ts.any_keys && !ts.allow_anonymous);
    bool anon;
    struct tenant_cfg *a = weft_tenants_auth(&ts, "Bearer sk-aaaa-1111", &anon);
    CHECK(a && !strcmp(a->name, "a") && a->priority == 3 && a->lim.max_kv_blocks == 40 && a->lim.max_running == 2);
    CHECK(a && a->lim.share == 3 && weft_tenants_find(&ts, "b")->lim.share == 1);
    CHECK(weft_tenants_auth(&ts, "Bearer sk-aaaa-111", &anon) == NULL && !anon);
    CHECK(weft_tenants_auth(&ts, NULL, &anon) == NULL && !anon);
    CHECK(weft_tenants_auth(&ts, "Basic sk-aaaa-1111", &anon) == NULL && !anon);
    /* request bucket: burst 2 at t=0, then one every 0.5 s */
    double ra;
    CHECK(weft_tenant_admit(a, 100.0, 10, &ra));
    CHECK(weft_tenant_admit(a, 100.0, 10, &ra));
    CHECK(!weft_tenant_admit(a, 100.0, 10, &ra) && ra > 0.49 && ra < 0.51);
    CHECK(weft_tenant_admit(a, 100.5, 10, &ra));
    /* token bucket: 600 per minute = 10 per second, holding 600 */
    /* more than the whole budget (600 a minute) can never fit: refused at once, no retry time */
    CHECK(!weft_tenant_admit(a, 101.5, 700, &ra) && isinf(ra));
    CHECK(weft_tenant_admit(a, 102.5, 500, &ra));
    CHECK(!weft_tenant_admit(a, 103.0, 200, &ra) && ra > 0);
    weft_tenant_refund(a, 103.0, 150);
    CHECK(weft_tenant_admit(a, 103.5, 150, &ra));
    weft_tenants_free(&ts);
    /* bad files are refused with a message */
    const char *bads[] = {"{\"tenants\": 3}", "{\"tenants\": [{\"api_keys\": [\"sk-xxxx-0000\"]}]}",
                          "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"short\"]}]}",
                          "{\"tenants\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}", "not json",
                          "{\"tenants\": [{\"name\": \"a\", \"requests_per_second\": -1}]}",
                          "{\"tenants\": [{\"name\": \"a\", \"share\": 0}]}",
                          "{\"tenants\": [{\"name\": \"a\", \"share\": 1.5}]}"};
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(bads[i], f);
        fclose(f);
        msg[0] = '\0';
        CHECK_MSG(!weft_tenants_load(&ts, path, msg, sizeof msg) && msg[0], "accepted %s", bads[i]);
    }
    /* no keys configured: everyone is the default tenant */
    FILE *f = fopen(path, "w");
    fputs("{\"tenants\": [{\"name\": \"free\"}], \"allow_anonymous\": true}", f);
    fclose(f);
    CHECK(weft_tenants_load(&ts, path, msg, sizeof msg));
    CHECK(weft_tenants_auth(&ts, NULL, &anon) == NULL && anon);
    weft_tenants_free(&ts);
    unlink(path);
}

/* A request may lower its priority below its tenant's, never raise it; an
 * anonymous one is capped at 0. */
/* Retry-After is a reservation: a refused burst is told to come back at
 * spread-out times, and every refused request that comes back when told
 * (rounded up to whole seconds, as the header carries it) fits. */
static void a_refused_burst_is_told_spread_out_times_that_fit(void)
{
    for (int kind = 0; kind < 2; kind++) {
        struct tenant_cfg t = {.name = "b", .last = -1};
        if (kind == 0) t.rps = 2, t.burst = 5, t.req_tokens = 5;
        else t.tpm = 600, t.tok_tokens = 600;  /* 10 tokens/s, 50 a request: 12 fit at once */
        double need = 50, ra, back[20];
        int admitted = 0, refused = 0;
        for (int i = 0; i < 20; i++) {
            if (weft_tenant_admit(&t, 100.0, need, &ra)) admitted++;
            else back[refused++] = 100.0 + ceil(ra);
        }
        CHECK_EQ_INT(admitted, kind == 0 ? 5 : 12);
        /* spread: no more come back in any second than the refill admits then */
        for (int i = 1; i < refused; i++) CHECK(back[i] >= back[i - 1]);
        CHECK(back[refused - 1] - back[0] >= (kind == 0 ? 6 : 30));
        int ok = 0;
        for (int i = 0; i < refused; i++) ok += weft_tenant_admit(&t, back[i], need, &ra);
        CHECK_MSG(ok == refused, "kind %d: %d of %d fit when they came back", kind, ok, refused);
    }
}

static void priority_is_capped_by_the_tenant(void)
{
    struct tenant_cfg t = {.priority = 10};
    CHECK(weft_tenant_priority(&t, false, 0) == 10);
    CHECK(weft_tenant_priority(&t, true, 1000000) == 10);
    CHECK(weft_tenant_priority(&t, true, 3) == 3);
    CHECK(weft_tenant_priority(&t, true, -50) == -50);
    CHECK(weft_tenant_priority(NULL, true, 1000000) == 0);
    CHECK(weft_tenant_priority(NULL, true, -2) == -2);
    CHECK(weft_tenant_priority(NULL, false, 0) == 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* SIGHUP's reload: new keys and limits take effect, a tenant that keeps its
 * name keeps what it spent, a bad file changes nothing; "trusted" parses. */
static void tenants_reload_keeps_buckets(void)
{
    char path[] = "/tmp/weft-tenants-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    write_file(path, "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"sk-aaaa-1111\"], \"tokens_per_minute\": 600},"
                     " {\"name\": \"router\", \"api_keys\": [\"sk-rrrr-0000\"], \"trusted\": true}]}");
    struct tenants ts;
    char msg[256];
    bool anon;
    CHECK(weft_tenants_load(&ts, path, msg, sizeof msg));
    CHECK(weft_tenants_find(&ts, "router")->trusted && !weft_tenants_find(&ts, "a")->trusted);
    double ra;
    CHECK(weft_tenant_admit(weft_tenants_find(&ts, "a"), 10.0, 500, &ra));  /* 100 left */
    write_file(path, "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"sk-aaaa-2222\"], \"tokens_per_minute\": 600,"
                     " \"priority\": 4}]}");
    CHECK(weft_tenants_reload(&ts, path, msg, sizeof msg));
    struct tenant_cfg *a = weft_tenants_auth(&ts, "Bearer sk-aaaa-2222", &anon);
    CHECK(a && a->priority == 4 && !weft_tenants_find(&ts, "router"));
    CHECK(weft_tenants_auth(&ts, "Bearer sk-aaaa-1111", &anon) == NULL && !anon);
    CHECK(!weft_tenant_admit(a, 10.0, 200, &ra) && ra > 0 && !isinf(ra));  /* still only 100 left */
    /* a bucket that had no limit before starts full when one is set */
    write_file(path, "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"sk-aaaa-2222\"], \"tokens_per_minute\": 600,"
                     " \"priority\": 4}, {\"name\": \"b\", \"tokens_per_minute\": 0}]}");
    CHECK(weft_tenants_reload(&ts, path, msg, sizeof msg));
    write_file(path, "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"sk-aaaa-2222\"], \"tokens_per_minute\": 600,"
                     " \"priority\": 4}, {\"name\": \"b\", \"tokens_per_minute\": 300}]}");
    CHECK(weft_tenants_reload(&ts, path, msg, sizeof msg));
    CHECK(weft_tenant_admit(weft_tenants_find(&ts, "b"), 10.0, 300, &ra));
    a = weft_tenants_find(&ts, "a");
    write_file(path, "{\"tenants\": [{\"name\": \"a\", \"trusted\": \"yes\"}]}");
    msg[0] = '\0';
    CHECK(!weft_tenants_reload(&ts, path, msg, sizeof msg) && msg[0]);
    CHECK(weft_tenants_auth(&ts, "Bearer sk-aaaa-2222", &anon) != NULL);  /* the old config stays */
    weft_tenants_free(&ts);
    unlink(path);
}

/* n: 1 by default, up to WEFT_MAX_CHOICES. */
static void n_choices(void)
{
    struct gen_params p;
    const char *param;
    CHECK(parse("{\"prompt\": \"hi\"}", false, &p, &param) && p.n == 1);
    weft_gen_params_free(&p);
    CHECK(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 16, \"seed\": 3}", true, &p,
                &param) && p.n == 16 && p.sp.seed == 3);
    weft_gen_params_free(&p);
}

/* --api-key: one trusted key without a file, kept across a reload; beside
 * a file's tenants it is one key more. */
static void shared_api_key(void)
{
    struct tenants ts;
    char msg[256];
    bool anon;
    CHECK(weft_tenants_load(&ts, NULL, msg, sizeof msg));
    CHECK(!weft_tenants_add_shared_key(&ts, "short", msg, sizeof msg) && strstr(msg, "8 characters"));
    CHECK(weft_tenants_add_shared_key(&ts, "sk-shared-0001", msg, sizeof msg));
    CHECK(ts.any_keys);
    struct tenant_cfg *t = weft_tenants_auth(&ts, "Bearer sk-shared-0001", &anon);
    CHECK(t && t->trusted && !strcmp(t->name, "api-key"));
    CHECK(weft_tenants_auth(&ts, NULL, &anon) == NULL && !anon);
    CHECK(weft_tenants_auth(&ts, "Bearer sk-shared-0002", &anon) == NULL && !anon);
    double ra;
    CHECK(weft_tenant_admit(t, 1.0, 1e9, &ra));  /* no limits */
    weft_tenants_free(&ts);

    char path[] = "/tmp/weft-tenants-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    write_file(path, "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"sk-aaaa-1111\"]}]}");
    CHECK(weft_tenants_load(&ts, path, msg, sizeof msg));
    CHECK(weft_tenants_add_shared_key(&ts, "sk-shared-0001", msg, sizeof msg));
    CHECK(weft_tenants_auth(&ts, "Bearer sk-aaaa-1111", &anon) && weft_tenants_auth(&ts, "Bearer sk-shared-0001", &anon));
    write_file(path, "{\"tenants\": [{\"name\": \"b\", \"api_keys\": [\"sk-bbbb-1111\"]}]}");
    CHECK(weft_tenants_reload(&ts, path, msg, sizeof msg));
    CHECK(weft_tenants_auth(&ts, "Bearer sk-bbbb-1111", &anon) && weft_tenants_auth(&ts, "Bearer sk-shared-0001", &anon));
    CHECK(!weft_tenants_auth(&ts, "Bearer sk-aaaa-1111", &anon));
    write_file(path, "{\"tenants\": [{\"name\": \"api-key\", \"api_keys\": [\"sk-cccc-1111\"]}]}");
    CHECK(!weft_tenants_reload(&ts, path, msg, sizeof msg));  /* the name is taken: the old config stays */
    CHECK(weft_tenants_auth(&ts, "Bearer sk-bbbb-1111", &anon));
    weft_tenants_free(&ts);
    unlink(path);
}

/* CORS (http.h): allowed origins get their own name back and Vary; a
 * preflight echoes the requested headers it allows; without a policy, or
 * for another origin, nothing. */
static void cors_policy(void)
{
    static const char *const one[] = {"http://app.example"}, *const any[] = {"*"};
    struct http_limits none = {0}, lim1 = {.cors_origins = one, .n_cors_origins = 1},
                       star = {.cors_origins = any, .n_cors_origins = 1};
    char b[1024];
    CHECK(weft_http_cors_headers(&none, "http://app.example", b, sizeof b) == 0 && b[0] == 0);
    CHECK(weft_http_cors_headers(&lim1, "http://evil.example", b, sizeof b) == 0 && b[0] == 0);
    CHECK(weft_http_cors_headers(&lim1, NULL, b, sizeof b) == 0);
    CHECK(weft_http_cors_headers(&lim1, "http://app.example", b, sizeof b) > 0);
    CHECK(!strcmp(b, "Access-Control-Allow-Origin: http://app.example\r\nVary: Origin\r\n"));
    CHECK(weft_http_cors_headers(&star, "http://any.example", b, sizeof b) > 0 && strstr(b, "Origin: http://any.example\r\n"));
    CHECK(weft_http_cors_headers(&star, "http://x\r\nSet-Cookie: a", b, sizeof b) == 0);  /* never echoes a line break */
    CHECK(weft_http_cors_preflight(&lim1, "http://evil.example", "authorization", b, sizeof b) == 403);
    CHECK(weft_http_cors_preflight(&lim1, "http://app.example",
                              "Authorization, content-type,x-stainless-os, X-Stainless-Retry-Count, x-evil", b,
                              sizeof b) == 204);
    CHECK(strstr(b, "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"));
    CHECK(strstr(b, "Access-Control-Max-Age: 600\r\n"));
    CHECK(strstr(b, "Access-Control-Allow-Headers: Authorization, content-type, x-stainless-os, "
                    "X-Stainless-Retry-Count\r\n"));
    CHECK(!strstr(b, "x-evil"));
    CHECK(weft_http_cors_preflight(&star, "http://a", NULL, b, sizeof b) == 204 && !strstr(b, "Allow-Headers"));
}

static void metrics_render_format(void)
{
    struct metrics m;
    weft_metrics_init(&m);
    weft_metrics_request(&m, "/v1/completions", 200);
    weft_metrics_request(&m, "/v1/completions", 200);
    weft_metrics_request(&m, "/v1/completions", 400);
    weft_metrics_observe(&m.ttft, 0.03);
    weft_metrics_observe(&m.ttft, 100);
    struct weft_engine_stats es = {.running = 2, .waiting = 1};
    es.kv.used = 5;
    es.kv.free = 10;
    es.kv.cached = 3;
    es.kv.n_blocks = 20;
    es.queued_prefill_tokens = 77;
    m.finish[METRIC_FINISH_LENGTH] = 4;
    size_t len;
    struct metrics_extra x = {.model_name = "m\"1", .vllm_compat = true};
    char *t = weft_metrics_render(&m, &es, 1000, 2000, &x, &len);
    CHECK(t && strlen(t) == len);
#define L "model_name=\"m\\\"1\""
    CHECK(strstr(t, "weft_requests_total{" L ",endpoint=\"/v1/completions\",status=\"200\"} 2\n"));
    CHECK(strstr(t, "weft_requests_total{" L ",endpoint=\"/v1/completions\",status=\"400\"} 1\n"));
    CHECK(strstr(t, "weft_time_to_first_token_seconds_bucket{" L ",le=\"0.025\"} 0\n"));
    CHECK(strstr(t, "weft_time_to_first_token_seconds_bucket{" L ",le=\"0.05\"} 1\n"));
    CHECK(strstr(t, "weft_time_to_first_token_seconds_bucket{" L ",le=\"+Inf\"} 2\n"));
    CHECK(strstr(t, "weft_time_to_first_token_seconds_count{" L "} 2\n"));
    CHECK(strstr(t, "weft_kv_blocks_used{" L "} 5\n") && strstr(t, "weft_kv_blocks_cached{" L "} 3\n"));
    CHECK(strstr(t, "weft_kv_blocks{" L "} 20\n") && strstr(t, "weft_kv_cache_usage_ratio{" L "} 0.25\n"));
    CHECK(strstr(t, "weft_requests_running{" L "} 2\n") && strstr(t, "weft_requests_waiting{" L "} 1\n"));
    CHECK(strstr(t, "weft_queued_prefill_tokens{" L "} 77\n"));
    CHECK(strstr(t, "weft_request_finish_total{" L ",reason=\"length\"} 4\n"));
    CHECK(strstr(t, "weft_device_memory_bytes{" L ",use=\"kv_cache\"} 1000\n"));
    CHECK(strstr(t, "vllm:num_requests_waiting{" L "} 1\n") && strstr(t, "vllm:kv_cache_usage_perc{" L "} 0.25\n"));
    CHECK(strstr(t, "vllm:cache_config_info{" L ",block_size=\"16\",num_gpu_blocks=\"20\"} 1\n"));
    CHECK(!strstr(t, "weft_kv_blocks_total"));
#undef L
    /* every sample line is "name{labels} value"; gauges are not named _total */
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "# TYPE ", 7)) {
            const char *sp = strrchr(line, ' ');
            bool total = sp - line > 13 && !strncmp(sp - 6, "_total", 6);
            CHECK_MSG(!strcmp(sp + 1, "counter") == total, "bad type line: %s", line);
        }
        if (line[0] == '#') continue;
        CHECK_MSG(strchr(line, ' ') && strchr(line, '{') && (line[0] == 'w' || line[0] == 'v'), "bad line: %s", line);
    }
    free(t);
}

int main(void)
{
    RUN(completions_defaults_and_values);
    RUN(each_bad_parameter_is_named);
    RUN(chat_messages);
    RUN(tenants_keys_and_buckets);
    RUN(a_refused_burst_is_told_spread_out_times_that_fit);
    RUN(priority_is_capped_by_the_tenant);
    RUN(tenants_reload_keeps_buckets);
    RUN(metrics_render_format);
    RUN(n_choices);
    RUN(shared_api_key);
    RUN(cors_policy);
    json_decref(held);
    return check_summary();
}
