/* What server/api_gen.c (requests, the engine's events, admission) and
 * server/api_gen_out.c (the answer's JSON: chunks, logprobs, reasoning and
 * tool-call deltas, the final choices) share: a request's context and its
 * choices. Internal to those two files. */
#ifndef WEFT_SERVER_API_GEN_INTERNAL_H
#define WEFT_SERVER_API_GEN_INTERNAL_H

#include <stdatomic.h>

#include "core/grammar.h"
#include "core/stop.h"
#include "core/tokenizer.h"
#include "server/chat_format.h"
#include "server/params.h"
#include "server/pd.h"
#include "server/server.h"
#include "server/shape.h"
#include "server/structured.h"

struct gen_ctx;

/* One choice of a request (n > 1 gives several, each its own engine
 * sequence, stop state and stream position; the engine's user pointer). */
struct gen_choice {
    struct gen_ctx *g;
    uint32_t index;
    uint64_t id;                     /* the engine's */
    bool submitted, engine_done, done, aborted_by_us;
    struct weft_stop st;             /* the output text and where it stops (core/stop.h) */
    bool st_ready, role_sent, seed_sent, end_sent;
    size_t sent;                     /* bytes of the content already streamed (a chat's: of its content range) */
    size_t sent_r;                   /* bytes of the reasoning already streamed */
    int32_t *chunk_ids;              /* weft.ids: tokens not yet named in a chunk */
    uint32_t n_chunk_ids, cap_chunk_ids;
    json_t *lp;                      /* logprobs: chat "content" array or completions object */
    const char *finish_reason;
    uint32_t n_gen;                  /* the whole completion's, a continuation's too */
    uint32_t n_new;                  /* tokens generated here (a continuation's after its k) */
    double t_last;
    /* a finished chat reply read back (server/chat_format.h): reasoning,
     * content, the calls it makes when tools are offered */
    struct chat_reply reply;
    bool parsed;
};

struct gen_ctx {
    struct weft_server *srv;
    struct gen_ctx *prev, *next;     /* srv->gens: every live context (drain timeout) */
    struct http_conn *conn;          /* NULL once the response ended or the client left */
    int refs;
    bool finished, streaming, chat, submitted;  /* finished: answered (or the client left) */
    bool in_think;                   /* the chat prompt leaves the model inside a reasoning block */
    enum api_shape shape;            /* /v1/responses or /v1/messages: a translated chat (server/shape.h) */
    struct shape_ctx *sh;            /* its translation state, or NULL */
    struct gen_choice *ch;           /* p.n of them */
    uint32_t n_ch, n_done;           /* choices; those whose answer is complete */
    uint32_t n_submitted;            /* choices given to the engine (the rest wait: submit_rest) */
    const char *model;               /* the name answers report: as the client asked (an alias) */
    struct gen_params p;
    json_t *root;
    char *echo;                      /* echo: the prompt's text (detokenized when given as ids), NUL-ended */
    size_t n_echo;
    char tenant[WEFT_TENANT_NAME_MAX];  /* whose buckets were charged ("" none) */
    char end_tenant[WEFT_TENANT_NAME_MAX]; /* engine quotas: the tenant, or a trusted upstream's end tenant */
    int32_t priority;
    bool charged;
    double reserved;                 /* tokens taken from the tenant's bucket */
    /* the tokenizing job: in (p) and out */
    int32_t *ids;
    size_t n_ids;
    int32_t *ban;                    /* min_tokens: the tokens banned until then (end of generation, stop ids) */
    int32_t **xids;                  /* a prompt array's other prompts (p.n_prompts - 1 of them), tokenized */
    size_t *xn;
    weft_status tok_status;
    char tok_msg[256];
    const char *tok_param;           /* the parameter a tok_status failure names (NULL: the prompt's) */
    struct weft_grammar *grammar;    /* response_format / tool_choice's constraint, or NULL */
    bool grammar_bug;                /* a generated grammar did not compile: 500, not the client's fault */
    atomic_bool cancelled;           /* the client left: a queued job skips its work */
    char rid[48];
    uint32_t n_prompt, n_cached;
    uint32_t max_tokens;             /* per choice */
    uint32_t n_submit_prompt, submit_k; /* what each choice's engine request starts from */
    uint64_t created;                /* when the request came (unix seconds), or a continuation's */
    double t0, t_first;
    /* prefill/decode hand-off (server/pd.h): as the decode side, the PD id
     * whose pushed blocks it waits for; as the prefill side, where to push */
    char pd_id[PD_ID_MAX];
    uint32_t pd_wait_ms;
    bool pd_go;                      /* the wait is over (or was never needed) */
    struct pd_ticket *pd;
    char pd_push_url[256], pd_push_id[PD_ID_MAX];
    char *pd_auth;                   /* "Authorization: ...\r\n" for the push, or NULL */
    struct pd_push *push;
    bool push_wait;                  /* the answer waits for the push to end (a reference) */
    bool final_deferred;             /* the last finish_choice ran meanwhile: answer when it ends */
    bool push_failed;
};

/* ---- the answer's JSON (server/api_gen_out.c) ---- */

/* weft.ids: remember a token for the next chunk */
void weft_gen_chunk_id_add(struct gen_choice *c, int32_t id);
/* One chunk out as an event (takes j; in another API's events when g->sh);
 * false when the client is gone. */
bool weft_gen_send_sse(struct gen_ctx *g, json_t *j);
/* An error event in the stream (before it is cut). */
void weft_gen_send_sse_error(struct gen_ctx *g, const char *type, const char *msg);
/* A token's logprobs entry (and its top alternatives) into `into`. */
void weft_gen_add_logprobs(struct gen_choice *c, const struct weft_sample *sm, json_t *into, size_t text_offset,
                         size_t text_len, bool first);
json_t *weft_gen_new_logprobs(bool chat);
/* Stream what of c's text (reasoning, content) may go out now; final: the
 * choice is complete. lp: this token's logprobs (taken), or NULL. */
void weft_gen_stream_progress(struct gen_choice *c, json_t *lp, bool final);
/* A continuation: mark sent what the interrupted stream had sent. */
void weft_gen_stream_mark_sent(struct gen_choice *c);
/* A streamed choice is complete: the rest of its text, its calls, its finish chunk. */
void weft_gen_stream_choice_end(struct gen_choice *c);
/* A choice of the whole (non-streamed) answer. */
json_t *weft_gen_choice_json(const struct gen_choice *c);

/* The endpoint the request came to (metrics). */
const char *weft_gen_ep_path(const struct gen_ctx *g);

#endif
