/* Fleet routing policy (FLEET.md, "Routing"): which instance should take a
 * request. Pure: no sockets, no clock, no allocation; the caller (weft
 * router, a simulator, a test) passes the instances' states as it knows
 * them and gets a ranking with the reasons.
 *
 * The weft policy ranks by predicted time to first token, in seconds:
 *
 *   ttft_i = (queued prefill tokens_i + this request's uncached tokens_i)
 *            / measured prefill rate_i  +  slot wait_i
 *
 * plus, with cfg.decode_aware, when the request says how many tokens it may
 * generate and the instance's per-sequence decode rate is known, the time
 * to generate them there (min(max_tokens, 512) / decode_row_tps), so a
 * faster decoder takes more of the long answers. Off by default: on the
 * CPU fleet measured, live per-sequence decode rates vary with each step's
 * batch by more than the queue differences the ranking must see, and the
 * term cost prefix hits (bench/fleet.sh real-shared).
 *
 * And when the instance has no free KV blocks for the request's new ones,
 * each block it must take evicts a cached block it will likely have to
 * recompute: (blocks needed - free blocks) x 16 / prefill rate is added
 * too. So a prefix is copied freely while there is room, and under KV
 * pressure only when waiting for its holder costs more than the copy and
 * the damage it does together (a copy that thrashes the cache is no gain).
 *
 * where uncached_i = prompt tokens - the prefix instance i already holds
 * (matched blocks x 16), and slot wait_i is the time for one running
 * request to finish when the instance has no free sequence slot (decode
 * load as a constraint). An H200 and a CPU box are not "two slots": the
 * rates make their shares. A prefix holder wins while it is quick; when
 * waiting for it costs more than recomputing the prefix elsewhere, another
 * instance wins and so takes a copy of the hot prefix. Instances that are
 * unhealthy, stale (no state for longer than stale_s) or full (no slot and
 * no room to wait) are never ranked. Ties break on more matched tokens,
 * then fewer requests, then the lower index: the same input always gives
 * the same answer.
 *
 * least-load ranks by queued prefill tokens, then requests (running +
 * waiting), then index; round-robin takes the eligible instances in turn
 * from cfg.rr_next. Both ignore prefixes and speed (for comparison).
 *
 * Load is counted at dispatch by the caller with the helpers at the end:
 * the prompt's uncached tokens are queued until its first token, the slot
 * is held until the end, so a burst between two state polls spreads out. */
#ifndef WEFT_ROUTE_H
#define WEFT_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define WEFT_ROUTE_BLOCK_TOKENS 16

enum weft_route_policy { WEFT_ROUTE_WEFT = 0, WEFT_ROUTE_LEAST_LOAD, WEFT_ROUTE_ROUND_ROBIN };

/* What an instance is for (weft serve --role): a prefill instance computes
 * long prompts for decode instances (prefill/decode disaggregation, see
 * weft_route_pd); both does everything. */
enum weft_route_role { WEFT_ROUTE_ROLE_BOTH = 0, WEFT_ROUTE_ROLE_PREFILL, WEFT_ROUTE_ROLE_DECODE };

enum weft_route_reason {
    WEFT_ROUTE_R_PREFIX,       /* it holds the most of the prompt and is the quickest */
    WEFT_ROUTE_R_SPEED,        /* quickest: its rate or its queue beat the prefix holders */
    WEFT_ROUTE_R_LOAD,         /* least-load's pick */
    WEFT_ROUTE_R_ROUND_ROBIN,
};

struct weft_route_instance {
    bool healthy;              /* answers health checks, circuit closed */
    double age_s;              /* since its state was last refreshed */
    double prefill_tps;        /* measured prompt tokens/s (> 0; else it is not ranked by weft) */
    double decode_tps;         /* measured generated tokens/s over all its running rows */
    double decode_row_tps;     /* one sequence's measured decode rate (tokens/s); 0: unknown */
    uint32_t running, waiting; /* requests, as reported plus dispatched since */
    uint32_t max_seqs, max_waiting;
    uint64_t queued_prefill_tokens; /* as reported plus dispatched since */
    uint32_t matched_blocks;   /* leading blocks of this request's prompt it holds (from the index) */
    bool kv_known;             /* kv_free_blocks is reported */
    uint32_t kv_free_blocks;   /* blocks neither in use nor caching a prefix */
    double mean_gen_tokens;    /* generated tokens per request there (slot wait), 0: 64 */
    enum weft_route_role role; /* prefill instances are ranked only when nothing else is eligible */
};

struct weft_route_request {
    uint32_t n_prompt;         /* tokens */
    uint32_t max_tokens;
};

struct weft_route_config {
    enum weft_route_policy policy;
    double stale_s;            /* 0: 2 s */
    uint64_t rr_next;          /* round-robin: the turn (the caller advances it) */
    bool decode_aware;         /* weft: add the generation time (see above) */
    double pd_slack;           /* weft_route_pd's slack (0: WEFT_ROUTE_PD_SLACK) */
};

struct weft_route_choice {
    uint32_t index;            /* into the instances given */
    double predicted_ttft_s;
    double predicted_e2e_s;    /* ttft + the generation time (= ttft when unknown) */
    uint32_t matched_tokens;
    enum weft_route_reason reason;
};

/* Rank n instances for req: out[0..*n_out) best first, only eligible ones.
 * *n_out 0 means none can take it (all unhealthy, stale or full): the
 * caller queues or refuses. WEFT_ERR_INVALID_ARG for a NULL or empty input. */
weft_status weft_route_rank(const struct weft_route_config *cfg, const struct weft_route_request *req,
                            const struct weft_route_instance *inst, uint32_t n, struct weft_route_choice *out,
                            uint32_t *n_out);

/* Prefill/decode disaggregation, after rank chose d for req: should the
 * prompt be computed on a prefill instance, which streams its KV blocks to
 * d while it computes? Yes, with out set to the prefill instance, when
 * d's uncached part is at least min_uncached tokens (0: never) and an
 * eligible, measured prefill-role instance (inst[i].role) is predicted to
 * finish computing it no later than d would itself (ttft as rank predicts
 * it: its queue plus its uncached tokens at its measured rate) times
 * (slack + its running requests) when d is a decode instance (slack:
 * cfg->pd_slack, WEFT_ROUTE_PD_SLACK when 0; a large one hands every long
 * prompt off while a prefill instance is up):
 * it is there not to prefill, its own prefill stalls every sequence it
 * decodes for that long (so a busy prefill instance is still waited for),
 * and rates measured on live steps of a shared machine differ by the slack
 * between equal instances; sooner, strictly, when d does both. The block transfer is not in the
 * prediction: it overlaps the compute (blocks stream as they are
 * committed). The quickest prefill instance wins; ties go to more matched
 * tokens, then the lower index. */
#define WEFT_ROUTE_PD_SLACK 1.25

struct weft_route_pd_choice {
    uint32_t index;            /* the prefill instance */
    double predicted_s;        /* its predicted time to compute the prompt */
    uint32_t matched_tokens;   /* the prompt's prefix it holds */
};
bool weft_route_pd(const struct weft_route_config *cfg, uint32_t min_uncached, const struct weft_route_request *req,
                   const struct weft_route_instance *inst, uint32_t n, const struct weft_route_choice *d,
                   struct weft_route_pd_choice *out);
const char *weft_route_role_name(enum weft_route_role r);
/* "both", "prefill", "decode" -> the role; false if unknown. */
bool weft_route_role_parse(const char *s, enum weft_route_role *out);

const char *weft_route_policy_name(enum weft_route_policy p);
/* "weft", "least-load", "round-robin" -> the policy; false if unknown. */
bool weft_route_policy_parse(const char *s, enum weft_route_policy *out);
const char *weft_route_reason_name(enum weft_route_reason r);

/* In-flight accounting on the caller's copy of an instance's state. */
void weft_route_dispatched(struct weft_route_instance *in, uint32_t uncached_tokens);
void weft_route_first_token(struct weft_route_instance *in, uint32_t uncached_tokens);
void weft_route_finished(struct weft_route_instance *in);

#endif
