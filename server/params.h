/* Request bodies of POST /v1/completions and /v1/chat/completions, parsed
 * and validated into one structure. Pure (no engine, no sockets), so the
 * fuzzer drives it directly. Every rejection names the parameter. */
#ifndef WEFT_SERVER_PARAMS_H
#define WEFT_SERVER_PARAMS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/chat.h"
#include "core/sampler.h"
#include "server/structured.h"

#define WEFT_MAX_STOP 16            /* stop strings per request */
#define WEFT_MAX_STOP_LEN 256       /* bytes per stop string */
#define WEFT_MAX_JSON_DEPTH 64
#define WEFT_MAX_MESSAGES 1024
#define WEFT_MAX_CHOICES 16          /* n: choices per request */
#define WEFT_MAX_PROMPTS 64          /* completions: prompts in one request (prompts x n at most this) */

struct gen_params {
    bool chat;
    /* completions: text or token ids; chat: messages */
    const char *prompt;             /* points into the JSON (valid while it lives) */
    int32_t *prompt_ids;            /* malloc'd when the prompt is given as ids */
    uint32_t n_prompt_ids;
    /* completions: a prompt array; prompt / prompt_ids hold the first,
     * prompt_list (borrowed: the request's array) all n_prompts of them */
    uint32_t n_prompts;             /* 1 unless an array of several prompts */
    json_t *prompt_list;
    struct weft_chat_msg *msgs;     /* malloc'd; strings owned by msg_text */
    uint32_t n_msgs;
    char **msg_text;                /* malloc'd joined text-part contents */
    const char *model;              /* NULL when absent */
    int64_t max_tokens;             /* -1: not given (per choice) */
    uint32_t n;                     /* choices, 1..WEFT_MAX_CHOICES; choice i samples with seed + i */
    struct weft_sampling_params sp;
    int32_t *bias_id;               /* malloc'd: logit_bias's tokens and values (sp points at them) */
    float *bias_val;
    bool seed_given;
    const char *stop[WEFT_MAX_STOP];
    uint32_t n_stop;
    int32_t stop_ids[WEFT_MAX_STOP];  /* stop_token_ids (vLLM's): tokens that end the output, not part of it */
    uint32_t n_stop_ids;
    uint32_t min_tokens;            /* vLLM's: nothing ends the output before this many tokens */
    bool stream, include_usage;
    bool logprobs;                  /* chat: logprobs=true; completions: logprobs given */
    int32_t top_logprobs;           /* 0..20 */
    bool ignore_eos;
    bool echo;                      /* completions: the prompt's text before each choice's */
    const char *suffix;             /* completions: fill in between prompt and suffix (NULL: none) */
    int32_t priority;
    bool priority_given;
    struct gen_structured st;       /* response_format, tools (server/structured.h) */
    /* chats: what the template gets beside the messages (vLLM's names) */
    json_t *tmpl_kwargs;            /* chat_template_kwargs (borrowed), or NULL */
    bool add_generation_prompt;     /* default true */
    bool continue_final;            /* continue_final_message: the last (assistant) message is left open */
    /* the "weft" extension (weft router <-> weft serve; ordinary clients leave it out) */
    bool ext_ids;                   /* chunks carry their token ids; the effective seed is reported */
    bool cont;                      /* a continuation of an interrupted stream */
    int32_t *cont_ids;              /* malloc'd: the tokens it had generated */
    uint32_t n_cont;
    const char *ext_rid;            /* the completion id to keep (NULL: a new one) */
    int64_t ext_created;            /* its created time (0: now's) */
};

/* Parse body[0..len) for the chat (chat=true) or completions endpoint.
 * On success *root holds the JSON (caller json_decref's it after freeing p).
 * On failure returns false with *param (static or NULL) and msg filled. */
bool weft_gen_params_parse(const char *body, size_t len, bool chat, struct gen_params *p, json_t **root,
                      const char **param, char *msg, size_t msg_size);
void weft_gen_params_free(struct gen_params *p);

/* JSON nesting depth of text, counting brackets outside strings, stopping
 * early past limit (jansson recurses; a 100k-deep body must be refused
 * before it is parsed). */
int weft_json_depth_exceeds(const char *text, size_t len, int limit);

#endif
