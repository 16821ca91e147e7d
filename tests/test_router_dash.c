/* The dashboard's state without sockets (server/dash.h): each instance of a
 * fleet rendered with its report, the router's own accounting and the
 * counters the page turns into rates; its one-word state through start,
 * health, circuit, drain and staleness; and the embedded pages whole,
 * self-contained (nothing from another origin) and polling what exists. */
#include <string.h>

#include "server/dash.h"
#include "tests/check.h"

static const char *LOAD =
    "{\"role\":\"decode\",\"model\":\"m\",\"draining\":false,\"running\":2,\"waiting\":1,\"queued_prefill_tokens\":300,"
    "\"tokenizing\":0,\"kv\":{\"block_tokens\":16,\"device\":{\"used\":10,\"cached\":5,\"free\":85,\"total\":100},"
    "\"host\":{\"used\":3,\"total\":400}},\"prefill_tokens_per_s\":1000.5,\"decode_tokens_per_s\":50,\"decode_rows\":2,"
    "\"devices\":[{\"id\":\"vulkan:0\",\"name\":\"Radeon\",\"backend\":\"vulkan\",\"vendor\":\"amd\",\"memory_bytes\":0}],"
    "\"fingerprint\":\"0123456789abcdef0123456789abcdef\",\"kv_type\":\"f16\","
    "\"limits\":{\"max_seqs\":8,\"max_waiting\":64,\"n_ctx\":2048}}";

static struct fleet_instance *add(struct fleet *f, const char *url, bool report, double now)
{
    struct fleet_instance *in = NULL;
    CHECK(weft_fleet_add(f, url, &in) == WEFT_OK);
    if (report) {
        struct fleet_load l;
        char err[64];
        CHECK(weft_fleet_parse_load(LOAD, strlen(LOAD), &l, err, sizeof err));
        weft_fleet_apply_load(f, in, &l, now);
    }
    return in;
}

static void instances_carry_report_accounting_and_counters(void)
{
    struct fleet_config cfg = {.policy = WEFT_ROUTE_WEFT};
    struct fleet f;
    weft_fleet_init(&f, &cfg);
    struct fleet_instance *a = add(&f, "http://10.0.0.1:8081", true, 10.0);
    add(&f, "http://10.0.0.2:8081", false, 10.0);
    a->own_running = 3;
    a->own_waiting = 1;
    a->own_queued = 64;
    a->requests = 7;
    a->prompt_tokens = 700;
    a->completion_tokens = 123;
    a->ttft_count = 4;
    a->ttft_sum = 0.5;
    json_t *arr = weft_dash_fleet_instances(&f, 10.25);
    CHECK(json_is_array(arr) && json_array_size(arr) == 2);
    json_t *x = json_array_get(arr, 0);
    CHECK(!strcmp(json_string_value(json_object_get(x, "name")), "10.0.0.1:8081"));
    CHECK(!strcmp(json_string_value(json_object_get(x, "device")), "Radeon"));
    CHECK(!strcmp(json_string_value(json_object_get(x, "vendor")), "amd"));
    CHECK(!strcmp(json_string_value(json_object_get(x, "backend")), "vulkan"));
    /* no device_class reported: the class falls back to the device's name (weft_fleet_instance_class) */
    CHECK(!strcmp(json_string_value(json_object_get(x, "device_class")), "Radeon"));
    CHECK(!strcmp(json_string_value(json_object_get(x, "role")), "decode"));
    CHECK(!strcmp(json_string_value(json_object_get(x, "state")), "up"));
    CHECK(!strcmp(json_string_value(json_object_get(x, "circuit")), "closed"));
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "running")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "waiting")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "queued_prefill_tokens")), 300);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "max_seqs")), 8);
    json_t *own = json_object_get(x, "own"), *kv = json_object_get(x, "kv");
    CHECK_EQ_INT(json_integer_value(json_object_get(own, "running")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(own, "waiting")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(own, "queued_tokens")), 64);
    CHECK_EQ_INT(json_integer_value(json_object_get(kv, "used")), 10);
    CHECK_EQ_INT(json_integer_value(json_object_get(kv, "cached")), 5);
    CHECK_EQ_INT(json_integer_value(json_object_get(kv, "free")), 85);
    CHECK_EQ_INT(json_integer_value(json_object_get(kv, "total")), 100);
    CHECK_EQ_INT(json_integer_value(json_object_get(kv, "host_used")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(kv, "host_total")), 400);
    CHECK_NEAR(json_real_value(json_object_get(x, "prefill_tokens_per_s")), 1000.5, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(x, "decode_tokens_per_s")), 50, 1e-9);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "requests")), 7);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "prompt_tokens")), 700);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "completion_tokens")), 123);
    CHECK_EQ_INT(json_integer_value(json_object_get(x, "ttft_count")), 4);
    CHECK_NEAR(json_real_value(json_object_get(x, "ttft_sum_s")), 0.5, 1e-12);
    CHECK_NEAR(json_real_value(json_object_get(x, "load_age_s")), 0.25, 1e-9);
    /* the second has not reported: no age, nothing measured */
    json_t *y = json_array_get(arr, 1);
    CHECK(json_is_null(json_object_get(y, "load_age_s")));
    CHECK(!strcmp(json_string_value(json_object_get(y, "state")), "starting"));
    CHECK_EQ_INT(json_integer_value(json_object_get(y, "completion_tokens")), 0);
    json_decref(arr);
    weft_fleet_free(&f);
}

static void state_follows_health_circuit_drain_and_age(void)
{
    struct fleet_config cfg = {.policy = WEFT_ROUTE_WEFT, .stale_s = 2.0};
    struct fleet f;
    weft_fleet_init(&f, &cfg);
    struct fleet_instance *in = add(&f, "http://10.0.0.1:8081", true, 0.0);
    CHECK(!strcmp(weft_dash_instance_state(&f, in, 1.0), "up"));
    CHECK(!strcmp(weft_dash_instance_state(&f, in, 5.0), "stale"));
    in->load.draining = true;
    CHECK(!strcmp(weft_dash_instance_state(&f, in, 1.0), "draining"));
    in->load.draining = false;
    for (int i = 0; i < FLEET_CIRCUIT_FAILURES; i++) weft_fleet_request_result(in, false);
    CHECK(!strcmp(weft_dash_instance_state(&f, in, 1.0), "open"));
    weft_fleet_poll_failed(in);
    CHECK(!strcmp(weft_dash_instance_state(&f, in, 1.0), "down"));
    struct fleet_load l;
    char err[64];
    CHECK(weft_fleet_parse_load(LOAD, strlen(LOAD), &l, err, sizeof err));
    weft_fleet_apply_load(&f, in, &l, 1.0);  /* the check passes: one trial request may try it */
    CHECK(!strcmp(weft_dash_instance_state(&f, in, 1.0), "half_open"));
    weft_fleet_free(&f);
}

static void pages_are_whole_and_self_contained(void)
{
    const struct { const char *html; size_t len; const char *polls; } pages[] = {
        {weft_dash_router_html, weft_dash_router_html_len, "fetch('fleet'"},
        {weft_dash_serve_html, weft_dash_serve_html_len, "fetch('load'"},
    };
    for (size_t i = 0; i < 2; i++) {
        const char *h = pages[i].html;
        CHECK(pages[i].len > 1000 && strlen(h) == pages[i].len);
        CHECK(!strncmp(h, "<!doctype html>", 15));
        CHECK(strstr(h, "</html>") != NULL);
        CHECK_MSG(!strstr(h, "@include"), "page %zu: an include was left unexpanded", i);
        CHECK(strstr(h, "function drawChart") != NULL && strstr(h, "--panel") != NULL);  /* chart.js, dash.css in */
        CHECK(strstr(h, pages[i].polls) != NULL);
        /* nothing from another origin: no absolute URL, no external script or style */
        CHECK_MSG(!strstr(h, "http://") && !strstr(h, "https://") && !strstr(h, "//cdn"), "page %zu", i);
        CHECK(!strstr(h, "<script src") && !strstr(h, "<link"));
    }
}

int main(void)
{
    RUN(instances_carry_report_accounting_and_counters);
    RUN(state_follows_health_circuit_drain_and_age);
    RUN(pages_are_whole_and_self_contained);
    return check_summary();
}
