/* GET /load: the instance's state in one compact JSON object, cheap enough
 * for a router to poll every 100-250 ms (FLEET.md, "What an instance
 * publishes"). Everything comes from the engine's stats (one lock) and
 * figures fixed at start. */
#define _GNU_SOURCE  /* strcasestr */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/fingerprint.h"
#include "core/route.h"
#include "server/server.h"

/* Who made the device, from the backend and its name. */
static const char *vendor_of(const char *backend, const char *name)
{
    if (!strcmp(backend, "cuda")) return "nvidia";
    if (!strcmp(backend, "hip")) return "amd";
    if (!strcmp(backend, "cpu")) return "cpu";
    static const struct { const char *needle, *vendor; } known[] = {
        {"portable computing", "pocl"}, {"pthread-", "pocl"},
        {"nvidia", "nvidia"}, {"geforce", "nvidia"}, {"amd", "amd"},     {"radeon", "amd"},
        {"intel", "intel"},   {"apple", "apple"},    {"llvmpipe", "mesa"}, {"lavapipe", "mesa"},
        {"adreno", "qualcomm"}, {"mali", "arm"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasestr(name, known[i].needle)) return known[i].vendor;
    return "unknown";
}

/* "cpu", "vulkan:1", or a split spec "cpu=10,vulkan:0": one entry per device. */
void weft_server_describe_devices(struct weft_server *s, const char *spec)
{
    s->n_devices = 0;
    if (s->cfg.engine.mock_prefill_tps > 0) {
        struct server_device *d = &s->devices[s->n_devices++];
        memset(d, 0, sizeof *d);
        snprintf(d->backend, sizeof d->backend, "mock");
        snprintf(d->id, sizeof d->id, "mock:0");
        snprintf(d->name, sizeof d->name, "%s", s->cfg.mock_device ? s->cfg.mock_device : "mock");
        snprintf(d->vendor, sizeof d->vendor, "%s", s->cfg.mock_vendor ? s->cfg.mock_vendor : "mock");
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec && *spec ? spec : "cpu");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && s->n_devices < SERVER_MAX_DEVICES;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq) *eq = '\0';
        struct server_device *d = &s->devices[s->n_devices++];
        char *colon = strchr(tok, ':');
        int index = colon ? atoi(colon + 1) : 0;
        if (colon) *colon = '\0';
        snprintf(d->backend, sizeof d->backend, "%s", tok);
        snprintf(d->id, sizeof d->id, "%s:%d", tok, index);
        memcpy(d->name, d->id, sizeof d->id);  /* until the backend names it */
        const struct weft_backend_iface *be = weft_backend_find(tok);
        struct weft_device_info infos[16];
        int n = be && be->devices ? be->devices(infos, 16, NULL) : 0;
        if (index >= 0 && index < n) {
            snprintf(d->name, sizeof d->name, "%s", infos[index].name);
            d->mem_total = infos[index].mem_total;
        }
        snprintf(d->vendor, sizeof d->vendor, "%s", vendor_of(d->backend, d->name));
    }
}

void weft_server_do_load(struct weft_server *s, struct http_conn *c)
{
    struct weft_engine_stats es;
    weft_engine_stats(s->eng, &es);
    json_t *devs = json_array();
    for (uint32_t i = 0; i < s->n_devices; i++) {
        const struct server_device *d = &s->devices[i];
        json_array_append_new(devs, json_pack("{s:s,s:s,s:s,s:s,s:I}", "id", d->id, "name", d->name, "backend",
                                              d->backend, "vendor", d->vendor, "memory_bytes",
                                              (json_int_t)d->mem_total));
    }
    char fp[WEFT_FINGERPRINT_STR];
    weft_fingerprint_str(weft_model_fingerprint(s->m), fp);
    const struct weft_kv_stats *kv = &es.kv;
    json_t *j = json_pack(
        "{s:s,s:s,s:b,s:i,s:i,s:I,s:i,"
        "s:{s:i,s:{s:i,s:i,s:i,s:i,s:i},s:{s:i,s:i}},"
        "s:f,s:f,s:f,s:i,s:o,s:s,s:s,"
        "s:{s:i,s:i,s:i}}",
        "role", weft_route_role_name((enum weft_route_role)s->cfg.role), "model", s->model_id, "draining", s->draining, "running", (int)es.running, "waiting",
        (int)es.waiting, "queued_prefill_tokens", (json_int_t)es.queued_prefill_tokens, "tokenizing",
        (int)weft_workers_pending(s->workers),
        "kv", "block_tokens", WEFT_KV_BLOCK_TOKENS, "device", "used", (int)kv->used, "cached", (int)kv->cached, "free",
        (int)kv->free, "total", (int)kv->n_blocks, "pinned", (int)kv->pinned, "host", "used", (int)kv->host_used, "total", (int)kv->n_host_blocks,
        "prefill_tokens_per_s", es.prefill_tps, "decode_tokens_per_s", es.decode_tps,
        "decode_row_tokens_per_s", es.decode_row_tps, "decode_rows",
        (int)es.decode_rows, "devices", devs, "fingerprint", fp, "kv_type", weft_type_name(s->cfg.engine.kv_type ?
        s->cfg.engine.kv_type : WEFT_TYPE_F16),
        "limits", "max_seqs", (int)(s->cfg.engine.max_seqs ? s->cfg.engine.max_seqs : 64), "max_waiting",
        (int)s->max_waiting, "n_ctx", (int)s->n_ctx);
    /* the watchdog: an engine that has not stepped for the bound with work
     * queued is not serving: /load (what a router polls) and /health say so
     * with 503, and a router moves what it had there elsewhere */
    bool stalled = weft_server_stalled(s, &es);
    if (j) {
        const char *cls = s->cfg.device_class ? s->cfg.device_class : s->n_devices ? s->devices[0].vendor : "unknown";
        json_object_set_new(j, "device_class", json_string(cls));
        json_object_set_new(j, "generated_tokens", json_integer((json_int_t)es.generated_tokens));  /* cumulative */
        json_object_set_new(j, "stalled_seconds", json_real(es.stalled_s));
        /* a hybrid's prefix hits end at its state checkpoints (core/kv.h): the router's index
         * counts a checkpoint as the block it can resume from */
        if (kv->n_ckpts) json_object_set_new(json_object_get(j, "kv"), "state_checkpoint_tokens", json_integer(kv->ckpt_every));
        if (stalled) json_object_set_new(j, "status", json_string("stalled"));
    }
    char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int status = stalled ? 503 : 200;
    weft_metrics_request(&s->metrics, "/load", b ? status : 500);
    if (!b) {
        weft_http_respond_error(c, 500, "server_error", NULL, "out of memory");
        return;
    }
    weft_http_respond(c, status, "application/json", "Cache-Control: no-store\r\n", b, strlen(b));
    free(b);
}

bool weft_server_stalled(const struct weft_server *s, const struct weft_engine_stats *es)
{
    uint32_t ms = s->cfg.watchdog_ms ? s->cfg.watchdog_ms : 30000;
    return es->stalled_s * 1000.0 > ms;
}
