/* The router's half of prefill/decode disaggregation (server/pd.h has the
 * instances' half). When core/route hands a prompt to a prefill instance
 * (fleet decision pd_in), the router sends the request there as well, cut
 * to one token and unstreamed, with x-weft-pd-push naming the decode
 * instance and a fresh PD id; the decode instance gets the client's request
 * with x-weft-pd (the id and how long to wait for the first block). The
 * prefill instance's answer only says how it went: when it fails (the
 * instance died mid-transfer, refused, timed out), the router tells the
 * decode instance to stop waiting (x-weft-pd-end: abort), which then
 * computes the rest itself. The client's answer always comes from the
 * decode instance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/router_internal.h"

struct pd_req {
    struct weft_router *r;
    struct fleet_decision d;       /* the hand-off part (pd_in, pd, pd_uncached) */
    struct fleet_instance *dec;    /* the decode instance (a reference) */
    char id[40];
    int status;
};

static void abort_done(void *u, int err)
{
    (void)u;
    (void)err;
}

static const struct hcl_callbacks abort_cbs = {NULL, NULL, abort_done};

static void prefill_head(void *u, int status, const struct http_header *h, uint32_t n)
{
    (void)h;
    (void)n;
    ((struct pd_req *)u)->status = status;
}

static void prefill_done(void *u, int err)
{
    struct pd_req *pr = u;
    struct weft_router *r = pr->r;
    bool ok = err == 0 && pr->status == 200;
    weft_fleet_pd_finished(&r->fleet, &pr->d, !ok);
    if (ok) {
        r->pd_prefill_ok++;
    } else {
        r->pd_prefill_failed++;
        struct inst_io *io = weft_router_io(pr->dec);
        char hdrs[700];
        snprintf(hdrs, sizeof hdrs,
                 "Content-Type: application/x-weft-kv-blocks\r\nx-weft-pd-id: %s\r\nx-weft-pd-end: abort\r\n%s", pr->id,
                 r->upstream_auth ? r->upstream_auth : "");
        struct hcl_opts o = {.method = "POST", .path = "/v1/kv/blocks", .headers = hdrs, .timeout_ms = 5000};
        if (io && !pr->dec->removed && weft_hcl_request(io->pool, &o, &abort_cbs, NULL, NULL) == 0) r->pd_aborts_sent++;
    }
    weft_fleet_instance_unref(pr->dec);
    free(pr);
}

static const struct hcl_callbacks prefill_cbs = {prefill_head, NULL, prefill_done};

void weft_router_pd_start(struct pxy *x, char *hdr, size_t cap)
{
    struct weft_router *r = x->r;
    hdr[0] = 0;
    struct fleet_instance *p = x->d.pd_in;
    if (!p) return;
    struct pd_req *pr = calloc(1, sizeof *pr);
    struct inst_io *io = weft_router_io(p);
    /* the prefill instance's request: the client's, one token, unstreamed */
    json_t *root = json_copy(x->root);
    char *body = NULL;
    if (root) {
        json_object_set_new(root, "max_tokens", json_integer(1));
        json_object_del(root, "max_completion_tokens");
        json_object_set_new(root, "stream", json_false());
        json_object_del(root, "stream_options");
        json_object_del(root, "weft");
        json_object_del(root, "logprobs");
        json_object_del(root, "top_logprobs");
        json_object_del(root, "n");  /* the prompt's blocks are the same for every choice */
        body = json_dumps(root, JSON_COMPACT);
        json_decref(root);
    }
    if (!pr || !io || !body) {
        free(pr);
        free(body);
        weft_fleet_pd_finished(&r->fleet, &x->d, false);  /* the decoder computes it all */
        return;
    }
    pr->r = r;
    pr->d = x->d;  /* the hand-off moves to pr */
    x->d.pd_in = NULL;
    pr->dec = x->d.in;
    pr->dec->refs++;
    snprintf(pr->id, sizeof pr->id, "r%llx-%llx", (unsigned long long)r->pd_epoch, (unsigned long long)++r->pd_next);
    char hdrs[1400];
    size_t len = (size_t)snprintf(hdrs, sizeof hdrs, "Content-Type: application/json\r\nx-weft-pd-push: %s;id=%s\r\n",
                                  pr->dec->url, pr->id);
    /* the rest as the decode instance gets it (auth, tenant) */
    const char *tenant_hdr = strstr(x->upstream_hdrs, "x-weft-tenant: ");
    if (r->upstream_auth) len += (size_t)snprintf(hdrs + len, sizeof hdrs - len, "%s", r->upstream_auth);
    else {
        char ab[320];
        const char *a = weft_router_client_auth(x->req, ab, sizeof ab);
        if (a && strlen(a) < 600) len += (size_t)snprintf(hdrs + len, sizeof hdrs - len, "Authorization: %s\r\n", a);
    }
    if (tenant_hdr && len < sizeof hdrs) {
        size_t tl = strcspn(tenant_hdr, "\r");
        if (tl < 100) len += (size_t)snprintf(hdrs + len, sizeof hdrs - len, "%.*s\r\n", (int)tl, tenant_hdr);
    }
    const char *path = x->chat ? "/v1/chat/completions" : "/v1/completions";
    struct hcl_opts o = {.method = "POST", .path = path, .headers = hdrs, .body = body, .body_len = strlen(body),
                         .timeout_ms = r->cfg.timeout_ms};
    int rc = weft_hcl_request(io->pool, &o, &prefill_cbs, pr, NULL);
    free(body);
    if (rc != 0) {
        weft_fleet_pd_finished(&r->fleet, &pr->d, true);
        r->pd_prefill_failed++;
        weft_fleet_instance_unref(pr->dec);
        free(pr);
        return;
    }
    /* how long the decoder waits for the first block: the predicted prefill,
     * with room (a prediction from unmeasured or stale rates can be far off;
     * a prefill instance that fails is reported at once, with the abort) */
    double wait_s = pr->d.pd_measured ? 4 * pr->d.pd.predicted_s + 10 : 120;
    uint32_t wait_ms = wait_s < 120 ? (uint32_t)(wait_s * 1000) : 120000;
    snprintf(hdr, cap, "x-weft-pd: id=%s;wait_ms=%u\r\n", pr->id, wait_ms);
    r->pd_started++;
}
