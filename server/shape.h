/* Other API shapes over the chat pipeline: OpenAI's Responses API
 * (/v1/responses) and Anthropic's Messages API (/v1/messages).
 *
 * A request in either shape is translated into a /v1/chat/completions body
 * (messages, tools, tool_choice, response_format, sampling), which then runs
 * exactly as a chat does (template, grammar, tool-call and reasoning
 * parsing, the router's routing and failover); the chat answer is translated
 * back: a chat.completion into the shape's response object, and a stream's
 * chat.completion.chunk's into the shape's server-sent events. What a shape
 * asks for that weft does not do is refused by name (400), as on the chat
 * endpoint.
 *
 * Pure JSON work, no sockets: weft serve and weft router both use it. */
#ifndef WEFT_SERVER_SHAPE_H
#define WEFT_SERVER_SHAPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

enum api_shape { SHAPE_CHAT = 0, SHAPE_RESPONSES, SHAPE_MESSAGES };

/* The shape of a request path ("/v1/responses", "/v1/messages"), SHAPE_CHAT otherwise. */
enum api_shape weft_shape_of_path(const char *path);
const char *weft_shape_path(enum api_shape sh);   /* "/v1/responses", ... */

/* Stored responses for previous_response_id (the Responses API): each
 * response's whole conversation as chat messages, kept for the most recent
 * `cap` responses (and at most max_bytes of JSON), oldest dropped first. One
 * thread uses a store. */
struct shape_store;
struct shape_store *weft_shape_store_new(uint32_t cap, size_t max_bytes);
void weft_shape_store_free(struct shape_store *st);
uint32_t weft_shape_store_count(const struct shape_store *st);

/* The chat body for a request of shape sh (a new reference), or NULL with
 * *param (the offending field, static or NULL) and msg filled: a 400. store
 * (may be NULL: previous_response_id is then refused) resolves
 * previous_response_id. */
json_t *weft_shape_request(enum api_shape sh, json_t *body, struct shape_store *store, const char **param, char *msg,
                           size_t msg_size);

struct shape_ctx;

/* The whole translation of a request body[0..len) of shape sh, as weft
 * serve and weft router take it: the chat body's JSON text (malloc'd) and
 * *ctx, the state its answer is translated back with; NULL (and *ctx NULL)
 * with *param and msg saying why (invalid JSON, nested too deep, a field
 * refused). */
char *weft_shape_translate(enum api_shape sh, const char *body, size_t len, struct shape_store *store,
                           struct shape_ctx **ctx, const char **param, char *msg, size_t msg_size);

/* A translated request's state: the original body's echoed fields, the
 * stream's progress, what the store keeps when it ends. */
struct shape_ctx *weft_shape_ctx_new(enum api_shape sh, const json_t *body, const json_t *chat_body,
                                     struct shape_store *store);
void weft_shape_ctx_free(struct shape_ctx *c);

/* A non-streamed answer: the chat.completion object -> the shape's
 * response object (a new reference); a stored response is stored. */
json_t *weft_shape_response(struct shape_ctx *c, const json_t *completion);

/* A streamed answer: each chat.completion.chunk (usage-only ones included)
 * appends the shape's events to out as server-sent-event text; at the end
 * (the chat stream's [DONE]) weft_shape_stream_end appends the closing
 * events. An error the chat stream reports mid-way goes out as the shape's
 * error event (weft_shape_stream_error). */
void weft_shape_stream_chunk(struct shape_ctx *c, const json_t *chunk, struct weft_strbuf *out);
void weft_shape_stream_end(struct shape_ctx *c, struct weft_strbuf *out);
void weft_shape_stream_error(struct shape_ctx *c, const char *type, const char *message, struct weft_strbuf *out);

/* An error answer's body in the shape's form (Anthropic's
 * {"type": "error", "error": {...}}; OpenAI's {"error": {...}} otherwise). */
json_t *weft_shape_error(enum api_shape sh, int status, const char *type, const char *param, const char *message);

/* ---- the Anthropic Messages translation (server/shape_messages.c) ---- */
json_t *weft_shape_messages_request(json_t *body, const char **param, char *msg, size_t msg_size);
json_t *weft_shape_messages_response(const json_t *body, const json_t *completion, const char *id);
/* Streaming state for one message: created by weft_shape_ctx_new. */
struct shape_messages_stream {
    bool started, stopped;
    int block;              /* index of the open content block, -1: none */
    int block_kind;         /* 0 none, 1 text, 2 thinking, 3 tool_use */
    int n_blocks;
    uint32_t tool_index;    /* chat tool_calls index of the open tool_use block */
    char stop_reason[32];
    uint64_t input_tokens, output_tokens;
    char id[48];
    char model[128];
};
void weft_shape_messages_chunk(struct shape_messages_stream *s, const json_t *chunk, struct weft_strbuf *out);
void weft_shape_messages_end(struct shape_messages_stream *s, struct weft_strbuf *out);

#endif
