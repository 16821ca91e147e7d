#include "server/tenants.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hmac.h"

static bool bad(char *msg, size_t n, const char *what, const char *detail)
{
    snprintf(msg, n, "%s: %s", what, detail);
    return false;
}

static bool num(json_t *o, const char *k, double *out, char *msg, size_t n)
{
    json_t *v = json_object_get(o, k);
    if (!v) return true;
    if (!json_is_number(v) || json_number_value(v) < 0) return bad(msg, n, k, "must be a number >= 0");
    *out = json_number_value(v);
    return true;
}

bool weft_tenants_load(struct tenants *ts, const char *path, char *msg, size_t msg_size)
{
    memset(ts, 0, sizeof *ts);
    if (!path) return true;
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        snprintf(msg, msg_size, "%s: line %d: %s", path, err.line, err.text);
        return false;
    }
    bool ok = false;
    json_t *arr = json_object_get(root, "tenants"), *anon = json_object_get(root, "allow_anonymous");
    if (!json_is_object(root) || (arr && !json_is_array(arr))) {
        bad(msg, msg_size, path, "expected {\"tenants\": [...]}");
        goto out;
    }
    if (anon && !json_is_boolean(anon)) { bad(msg, msg_size, "allow_anonymous", "must be a boolean"); goto out; }
    ts->allow_anonymous = json_is_true(anon);
    size_t n = json_array_size(arr);
    ts->t = calloc(n ? n : 1, sizeof *ts->t);
    if (!ts->t) { bad(msg, msg_size, path, "out of memory"); goto out; }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        struct tenant_cfg *t = &ts->t[ts->n++];
        json_t *name = json_object_get(o, "name"), *keys = json_object_get(o, "api_keys");
        if (!json_is_object(o) || !json_is_string(name) || json_string_length(name) == 0 ||
            json_string_length(name) >= WEFT_TENANT_NAME_MAX) {
            bad(msg, msg_size, "tenant", "each needs a non-empty \"name\" (< 64 bytes)");
            goto out;
        }
        snprintf(t->name, sizeof t->name, "%s", json_string_value(name));
        for (size_t k = 0; k + 1 < ts->n; k++)
            if (!strcmp(ts->t[k].name, t->name)) { bad(msg, msg_size, t->name, "tenant named twice"); goto out; }
        if (keys && !json_is_array(keys)) { bad(msg, msg_size, t->name, "api_keys must be an array"); goto out; }
        t->keys = calloc(json_array_size(keys) + 1, sizeof *t->keys);
        if (!t->keys) { bad(msg, msg_size, path, "out of memory"); goto out; }
        for (size_t k = 0; k < json_array_size(keys); k++) {
            json_t *kv = json_array_get(keys, k);
            if (!json_is_string(kv) || json_string_length(kv) < 8) {
                bad(msg, msg_size, t->name, "api keys must be strings of at least 8 characters");
                goto out;
            }
            t->keys[t->n_keys++] = strdup(json_string_value(kv));
            ts->any_keys = true;
        }
        double prio = 0, kvb = 0, run = 0, share = 1;
        if (!num(o, "requests_per_second", &t->rps, msg, msg_size) || !num(o, "burst", &t->burst, msg, msg_size) ||
            !num(o, "tokens_per_minute", &t->tpm, msg, msg_size) || !num(o, "max_kv_blocks", &kvb, msg, msg_size) ||
            !num(o, "max_running", &run, msg, msg_size) || !num(o, "share", &share, msg, msg_size))
            goto out;
        if (share < 1 || share > 1000000 || share != (double)(uint32_t)share) {
            bad(msg, msg_size, "share", "must be an integer from 1 to 1000000");
            goto out;
        }
        t->lim.share = (uint32_t)share;
        json_t *pv = json_object_get(o, "priority");
        if (pv && !json_is_integer(pv)) { bad(msg, msg_size, "priority", "must be an integer"); goto out; }
        prio = pv ? (double)json_integer_value(pv) : 0;
        if (prio < -1000000 || prio > 1000000) { bad(msg, msg_size, "priority", "out of range"); goto out; }
        t->priority = (int32_t)prio;
        json_t *tr = json_object_get(o, "trusted");
        if (tr && !json_is_boolean(tr)) { bad(msg, msg_size, "trusted", "must be a boolean"); goto out; }
        t->trusted = json_is_true(tr);
        t->lim.max_kv_blocks = kvb > 1e9 ? 1000000000u : (uint32_t)kvb;
        t->lim.max_running = run > 1e9 ? 1000000000u : (uint32_t)run;
        if (t->burst == 0) t->burst = t->rps > 1 ? t->rps : 1;
        t->req_tokens = t->burst;
        t->tok_tokens = t->tpm;
        t->last = -1;
    }
    ok = true;
out:
    json_decref(root);
    if (!ok) weft_tenants_free(ts);
    return ok;
}

void weft_tenants_free(struct tenants *ts)
{
    for (uint32_t i = 0; i < ts->n; i++) {
        for (uint32_t k = 0; k < ts->t[i].n_keys; k++) free(ts->t[i].keys[k]);
        free(ts->t[i].keys);
    }
    free(ts->t);
    memset(ts, 0, sizeof *ts);
}

#define SHARED_KEY_TENANT "api-key"

bool weft_tenants_add_shared_key(struct tenants *ts, const char *key, char *msg, size_t msg_size)
{
    if (!key || strlen(key) < 8) return bad(msg, msg_size, "--api-key", "the key must have at least 8 characters");
    if (weft_tenants_find(ts, SHARED_KEY_TENANT))
        return bad(msg, msg_size, "--api-key", "a tenant named \"" SHARED_KEY_TENANT "\" is configured already");
    struct tenant_cfg *t = realloc(ts->t, sizeof *t * (ts->n + 1));
    if (!t) return bad(msg, msg_size, "--api-key", "out of memory");
    ts->t = t;
    t = &ts->t[ts->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", SHARED_KEY_TENANT);
    t->keys = calloc(2, sizeof *t->keys);
    if (!t->keys || !(t->keys[0] = strdup(key))) {
        free(t->keys);
        return bad(msg, msg_size, "--api-key", "out of memory");
    }
    t->n_keys = 1;
    /* the one key of a single-key server is its operator's: what a trusted
     * tenant may do (a router in front naming end tenants, PD hand-offs) is
     * what a server without keys lets anyone do */
    t->trusted = true;
    t->burst = 1;
    t->req_tokens = 1;
    t->last = -1;
    ts->n++;
    ts->any_keys = true;
    ts->shared_key = key;
    return true;
}

struct tenant_cfg *weft_tenants_find(struct tenants *ts, const char *name)
{
    for (uint32_t i = 0; name && i < ts->n; i++)
        if (!strcmp(ts->t[i].name, name)) return &ts->t[i];
    return NULL;
}

bool weft_fleet_credential(const char *secret, char out[65])
{
    static const char label[] = "weft fleet member v2";
    unsigned char d[32];
    if (weft_hmac_sha256(secret, strlen(secret), label, sizeof label - 1, NULL, 0, d) != WEFT_OK) return false;
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
    return true;
}

bool weft_tenants_set_fleet(struct tenants *ts, const char *secret, const char *previous, char *msg, size_t msg_size)
{
    const char *s[2] = {secret, previous};
    char cred[2][65];
    uint32_t n = 0;
    for (int i = 0; i < 2; i++) {
        if (!s[i]) continue;
        if (strlen(s[i]) < 16) return bad(msg, msg_size, i ? "--kv-secret-previous" : "--kv-secret",
                                          "the secret must have at least 16 characters");
        if (!weft_fleet_credential(s[i], cred[n])) return bad(msg, msg_size, "--kv-secret", "libcrypto failed");
        n++;
    }
    memcpy(ts->fleet_cred, cred, sizeof cred);
    ts->n_fleet = n;
    memset(&ts->fleet, 0, sizeof ts->fleet);
    snprintf(ts->fleet.name, sizeof ts->fleet.name, "fleet");
    ts->fleet.trusted = true;
    ts->fleet.burst = 1;
    ts->fleet.req_tokens = 1;
    ts->fleet.last = -1;
    return true;
}

bool weft_tenants_reload(struct tenants *ts, const char *path, char *msg, size_t msg_size)
{
    struct tenants fresh;
    if (!weft_tenants_load(&fresh, path, msg, msg_size)) return false;
    memcpy(fresh.fleet_cred, ts->fleet_cred, sizeof ts->fleet_cred);
    fresh.n_fleet = ts->n_fleet;
    fresh.fleet = ts->fleet;
    if (ts->shared_key && !weft_tenants_add_shared_key(&fresh, ts->shared_key, msg, msg_size)) {
        weft_tenants_free(&fresh);
        return false;
    }
    for (uint32_t i = 0; i < fresh.n; i++) {
        struct tenant_cfg *n = &fresh.t[i], *o = weft_tenants_find(ts, n->name);
        if (!o) continue;
        /* the same tenant keeps what it has spent, within its new capacities */
        n->last = o->last;
        n->promised_req = o->promised_req;
        n->promised_tok = o->promised_tok;
        n->promise_until = o->promise_until;
        /* a bucket that had no limit before starts full */
        if (o->rps > 0) n->req_tokens = o->req_tokens < n->burst ? o->req_tokens : n->burst;
        if (o->tpm > 0) n->tok_tokens = o->tok_tokens < n->tpm ? o->tok_tokens : n->tpm;
    }
    weft_tenants_free(ts);
    *ts = fresh;
    return true;
}

int32_t weft_tenant_priority(const struct tenant_cfg *t, bool given, int32_t requested)
{
    int32_t cap = t ? t->priority : 0;
    return given && requested < cap ? requested : cap;
}

/* Constant-time comparison of equal-length keys (no early exit on a match prefix). */
static bool key_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la && i < lb; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

struct tenant_cfg *weft_tenants_auth(struct tenants *ts, const char *auth, bool *anon)
{
    *anon = false;
    const char *key = NULL;
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        key = auth + 7;
        while (*key == ' ') key++;
    }
    if (key && *key)
        for (uint32_t i = 0; i < ts->n_fleet; i++)
            if (key_eq(key, ts->fleet_cred[i])) return &ts->fleet;
    if (key && *key)
        for (uint32_t i = 0; i < ts->n; i++)
            for (uint32_t k = 0; k < ts->t[i].n_keys; k++)
                if (key_eq(key, ts->t[i].keys[k])) return &ts->t[i];
    if (ts->any_keys && !ts->allow_anonymous) return NULL;
    if (key && *key && ts->any_keys) return NULL;  /* a wrong key is refused even when anonymous is allowed */
    *anon = true;
    return NULL;
}

static void refill(struct tenant_cfg *t, double now)
{
    if (t->last < 0) t->last = now;
    double dt = now - t->last;
    if (dt < 0) dt = 0;
    t->last = now;
    if (t->rps > 0) {
        t->req_tokens += dt * t->rps;
        if (t->req_tokens > t->burst) t->req_tokens = t->burst;
    }
    if (t->tpm > 0) {
        t->tok_tokens += dt * t->tpm / 60.0;
        if (t->tok_tokens > t->tpm) t->tok_tokens = t->tpm;
    }
}

bool weft_tenant_admit(struct tenant_cfg *t, double now, double n_tokens, double *retry_after)
{
    refill(t, now);
    if (now >= t->promise_until) t->promised_req = t->promised_tok = 0;  /* nobody came back for them */
    if (t->tpm > 0 && n_tokens > t->tpm) {
        *retry_after = INFINITY;
        return false;
    }
    bool short_req = t->rps > 0 && t->req_tokens < 1;
    bool short_tok = t->tpm > 0 && t->tok_tokens < n_tokens;
    if (short_req || short_tok) {
        /* a reservation: when this request's share will be there after
         * what earlier refusals were promised, so a refused burst comes back
         * spread out rather than all at once */
        double wait = 0;
        if (t->rps > 0) {
            double w = (1 + t->promised_req - t->req_tokens) / t->rps;
            if (w > wait) wait = w;
        }
        if (t->tpm > 0) {
            double w = (n_tokens + t->promised_tok - t->tok_tokens) / (t->tpm / 60.0);
            if (w > wait) wait = w;
        }
        if (wait < 0.001) wait = 0.001;
        if (t->rps > 0) t->promised_req += 1;
        if (t->tpm > 0) t->promised_tok += n_tokens;
        /* promises lapse a little after the last one falls due (Retry-After rounds up to seconds) */
        if (now + wait + 2 > t->promise_until) t->promise_until = now + wait + 2;
        *retry_after = wait;
        return false;
    }
    if (t->rps > 0) {
        t->req_tokens -= 1;
        t->promised_req = t->promised_req > 1 ? t->promised_req - 1 : 0;
    }
    if (t->tpm > 0) {
        t->tok_tokens -= n_tokens;
        t->promised_tok = t->promised_tok > n_tokens ? t->promised_tok - n_tokens : 0;
    }
    return true;
}

void weft_tenant_refund(struct tenant_cfg *t, double now, double n_tokens)
{
    refill(t, now);
    if (t->tpm > 0 && n_tokens > 0) {
        t->tok_tokens += n_tokens;
        if (t->tok_tokens > t->tpm) t->tok_tokens = t->tpm;
    }
}

size_t weft_tenant_ratelimit_headers(struct tenant_cfg *t, double now, char *buf, size_t cap)
{
    refill(t, now);
    size_t n = 0;
    if (cap) buf[0] = 0;
    if (t->rps > 0) {
        double left = t->req_tokens > 0 ? t->req_tokens : 0, reset = (t->burst - left) / t->rps;
        n += (size_t)snprintf(buf + n, cap > n ? cap - n : 0,
                              "x-ratelimit-limit-requests: %.0f\r\nx-ratelimit-remaining-requests: %.0f\r\n"
                              "x-ratelimit-reset-requests: %.3fs\r\n",
                              t->burst, floor(left), reset > 0 ? reset : 0);
    }
    if (t->tpm > 0) {
        double left = t->tok_tokens > 0 ? t->tok_tokens : 0, reset = (t->tpm - left) / (t->tpm / 60.0);
        n += (size_t)snprintf(buf + n, cap > n ? cap - n : 0,
                              "x-ratelimit-limit-tokens: %.0f\r\nx-ratelimit-remaining-tokens: %.0f\r\n"
                              "x-ratelimit-reset-tokens: %.3fs\r\n",
                              t->tpm, floor(left), reset > 0 ? reset : 0);
    }
    if (n >= cap && cap) buf[0] = 0;
    return n < cap ? n : 0;
}

bool weft_tenant_name_valid(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n >= WEFT_TENANT_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] <= 0x20 || (unsigned char)v[i] >= 0x7f) return false;
    return true;
}
