/* API keys, tenants and admission for `weft serve --config FILE`.
 *
 * FILE is JSON:
 *   {"tenants": [{"name": "team-a", "api_keys": ["sk-..."], "priority": 10,
 *                 "requests_per_second": 5, "burst": 10, "tokens_per_minute": 20000,
 *                 "max_kv_blocks": 512, "max_running": 8, "share": 1, "trusted": false}, ...],
 *    "allow_anonymous": false}
 * With any key configured, a request needs "Authorization: Bearer KEY" of
 * a known key (else 401), unless allow_anonymous (then keyless requests
 * are the default tenant ""). Each tenant has two token buckets: requests
 * (refilled at requests_per_second, holding `burst`) and tokens (refilled at
 * tokens_per_minute / 60 per second, holding one minute's worth); a request
 * takes 1 request and prompt + max_tokens tokens, and what it did not use
 * is returned when it ends. 0 = unlimited. A request bigger than the whole
 * token budget (prompt + max_tokens > tokens_per_minute) can never fit and
 * is refused at once.
 *
 * Share: the weight of the tenant's time slice of each step's prompt
 * tokens among the tenants with prompts waiting at the same priority
 * (core/sched.h; default 1: equal).
 *
 * Priority: a tenant's "priority" is the highest its requests get; a
 * request's own "priority" can only lower it (anonymous requests: at most
 * 0). A "trusted" tenant (meant for weft router in front of the instance)
 * may name the end tenant and the priority in the x-weft-tenant and
 * x-weft-priority headers, and its connections are exempt from the
 * per-client connection limit.
 *
 * SIGHUP reloads FILE (weft_tenants_reload): buckets of tenants that keep their
 * name keep their level; a bad file leaves the old configuration in place. */
#ifndef WEFT_SERVER_TENANTS_H
#define WEFT_SERVER_TENANTS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sched.h"

struct tenant_cfg {
    char name[WEFT_TENANT_NAME_MAX];
    char **keys;
    uint32_t n_keys;
    int32_t priority;
    bool trusted;
    double rps, burst, tpm;
    struct weft_tenant_limits lim;
    /* buckets */
    double req_tokens, tok_tokens, last;
    double promised_req, promised_tok;  /* promised to refused requests (their Retry-After), not yet taken */
    double promise_until;               /* when the last promise lapses */
};

struct tenants {
    struct tenant_cfg *t;
    uint32_t n;
    bool any_keys, allow_anonymous;
    const char *shared_key;         /* weft_tenants_add_shared_key's (kept across reloads), or NULL */
    /* weft_tenants_set_fleet: the credentials fleet members present (from
     * the fleet secret and the one it replaces), kept across reloads; each
     * authenticates as `fleet`, a trusted tenant without limits */
    char fleet_cred[2][65];
    uint32_t n_fleet;
    struct tenant_cfg fleet;
};

/* What a fleet member (weft router, another instance pushing KV blocks)
 * presents as "Authorization: Bearer CRED": 64 hex digits of
 * HMAC-SHA256(secret, "weft fleet member v2") into out[65] (not the
 * secret, nor the key its blocks' MACs are made under). false when libcrypto
 * fails. */
bool weft_fleet_credential(const char *secret, char out[65]);

/* Accept the credentials of secret and previous (NULL: none) as the trusted
 * tenant "fleet". Unlike an API key this does not make keys required: an
 * instance without keys still serves anonymous clients, and only fleet
 * members are trusted. false with msg (a secret under 16 characters). */
bool weft_tenants_set_fleet(struct tenants *ts, const char *secret, const char *previous, char *msg, size_t msg_size);

/* Load FILE (NULL: no tenants, everything anonymous). false with msg on error. */
bool weft_tenants_load(struct tenants *ts, const char *path, char *msg, size_t msg_size);
void weft_tenants_free(struct tenants *ts);
/* --api-key KEY: one shared key without a tenants file. Adds the tenant
 * "api-key" (trusted, no limits) holding KEY to ts, so a request needs it
 * (or another configured key) from then on; weft_tenants_reload adds it again.
 * key must outlive ts. false with msg (KEY shorter than 8 characters, a
 * tenant of that name configured already, out of memory): ts unchanged. */
bool weft_tenants_add_shared_key(struct tenants *ts, const char *key, char *msg, size_t msg_size);
/* Load path again into ts; on failure ts is unchanged (false, msg). Tenant
 * pointers from before are invalid afterwards: hold names, not pointers,
 * across a reload (weft_tenants_find). */
bool weft_tenants_reload(struct tenants *ts, const char *path, char *msg, size_t msg_size);
struct tenant_cfg *weft_tenants_find(struct tenants *ts, const char *name);
/* The priority a request gets: requested (when given) but never above the
 * tenant's (t NULL: anonymous, cap 0). */
int32_t weft_tenant_priority(const struct tenant_cfg *t, bool given, int32_t requested);

/* The tenant for an Authorization header value (may be NULL). Returns NULL
 * when the request must be refused with 401; *anon set for the default. */
struct tenant_cfg *weft_tenants_auth(struct tenants *ts, const char *authorization, bool *anon);

/* Take one request and n_tokens from t's buckets at time now (seconds).
 * false: refuse with 429; *retry_after = seconds until it would fit, or
 * INFINITY when n_tokens is more than the whole budget (it never will).
 * Retry-After is a reservation: the time at which this request's share is
 * there after what earlier refused requests were promised (a refused burst
 * of k is told to come back spread over k shares' refill time, and each
 * that honours it fits); an admitted request takes one promise back. */
bool weft_tenant_admit(struct tenant_cfg *t, double now, double n_tokens, double *retry_after);
/* OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} header
 * lines for t's buckets now (only those it has); bytes written. */
size_t weft_tenant_ratelimit_headers(struct tenant_cfg *t, double now, char *buf, size_t cap);
/* A tenant name from a header: 1 to 63 printable ASCII characters, no space. */
bool weft_tenant_name_valid(const char *v);
/* Give back tokens a request reserved but did not use. */
void weft_tenant_refund(struct tenant_cfg *t, double now, double n_tokens);

#endif
