/* The answer's JSON for server/api_gen.c: stream chunks (content,
 * reasoning_content and tool-call deltas, logprobs, the weft extension's
 * token ids), the final choices, events in another API's shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/api_gen_internal.h"
#include "server/chat_template.h"

/* weft.ids: remember a token for the next chunk */
void weft_gen_chunk_id_add(struct gen_choice *c, int32_t id)
{
    if (c->n_chunk_ids == c->cap_chunk_ids) {
        int32_t *a = weft_grow32(c->chunk_ids, &c->cap_chunk_ids, (size_t)c->n_chunk_ids + 1, sizeof *a);
        if (!a) return;  /* the router then continues from fewer tokens: still exact */
        c->chunk_ids = a;
    }
    c->chunk_ids[c->n_chunk_ids++] = id;
}

bool weft_gen_send_sse(struct gen_ctx *g, json_t *j)
{
    if (g->sh) {
        /* another API's stream: its events for this chat chunk */
        struct weft_strbuf b = {0};
        weft_shape_stream_chunk(g->sh, j, &b);
        json_decref(j);
        bool ok = g->conn && (!b.len || weft_http_stream_write(g->conn, b.p, b.len));
        weft_sb_free(&b);
        return ok;
    }
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s || !g->conn) {
        free(s);
        return false;
    }
    size_t n = strlen(s);
    char *buf = malloc(n + 9);
    bool ok = false;
    if (buf) {
        memcpy(buf, "data: ", 6);
        memcpy(buf + 6, s, n);
        memcpy(buf + 6 + n, "\n\n", 2);
        ok = weft_http_stream_write(g->conn, buf, n + 8);
    }
    free(buf);
    free(s);
    return ok;
}

/* An error event in the stream ({"error": {...}}), e.g. before it is cut. */
void weft_gen_send_sse_error(struct gen_ctx *g, const char *type, const char *msg)
{
    if (!g->conn) return;
    if (g->sh) {
        struct weft_strbuf b = {0};
        weft_shape_stream_error(g->sh, type, msg, &b);
        if (b.len) weft_http_stream_write(g->conn, b.p, b.len);
        weft_sb_free(&b);
        return;
    }
    char body[600];
    memcpy(body, "data: ", 6);
    size_t n = weft_http_error_body(body + 6, sizeof body - 8, type, NULL, msg);
    memcpy(body + 6 + n, "\n\n", 2);
    weft_http_stream_write(g->conn, body, n + 8);
}

/* The text of token id where it stands in the completion (first: it is
 * the first piece, whose SentencePiece space the text drops), rendered the
 * way the completion's text is (logprobs keys and tokens). */
static json_t *token_str(const struct weft_tokenizer *t, int32_t id, bool first)
{
    struct weft_detok d;
    weft_detok_init(&d, t, false);
    d.first = first;
    const char *a, *b;
    size_t na = 0, nb = 0;
    json_t *j = NULL;
    char *both = NULL;
    if (weft_detok_push(&d, id, &a, &na) == WEFT_OK && (both = malloc(na + 16))) {
        memcpy(both, a, na);
        if (weft_detok_flush(&d, &b, &nb) == WEFT_OK && nb <= 15) memcpy(both + na, b, nb);
        else nb = 0;
        j = json_stringn(both, na + nb);
    }
    free(both);
    weft_detok_free(&d);
    return j ? j : json_string("");
}

/* The sampled token's string: exactly the text it added, so the strings of
 * a completion's tokens concatenate to its text. */
static json_t *sampled_str(const struct gen_choice *c, size_t from, size_t len)
{
    json_t *j = json_stringn(c->st.text ? c->st.text + from : "", len);
    return j ? j : json_string("");
}

static json_t *token_bytes(const struct weft_tokenizer *t, int32_t id)
{
    char *s = NULL;
    size_t n = 0;
    json_t *a = json_array();
    if (weft_detokenize(t, &id, 1, false, &s, &n) == WEFT_OK && s)
        for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    free(s);
    return a;
}

/* Logprob entries of one sampled token, in the endpoint's format; appended
 * to `into` (chat: array of entries; completions: object of arrays). */
void weft_gen_add_logprobs(struct gen_choice *c, const struct weft_sample *sm, json_t *into, size_t text_offset,
                         size_t text_len, bool first)
{
    const struct gen_ctx *g = c->g;
    const struct weft_tokenizer *t = weft_model_tokenizer(g->srv->m);
    int ntop = g->p.top_logprobs < sm->n_top ? g->p.top_logprobs : sm->n_top;
    if (g->chat) {
        json_t *top = json_array();
        for (int i = 0; i < ntop; i++)
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", token_str(t, sm->top_id[i], first), "logprob",
                                                 (double)sm->top_logprob[i], "bytes", token_bytes(t, sm->top_id[i])));
        json_array_append_new(into, json_pack("{s:o,s:f,s:o,s:o}", "token", sampled_str(c, text_offset, text_len), "logprob",
                                              (double)sm->logprob, "bytes", token_bytes(t, sm->id), "top_logprobs",
                                              top));
    } else {
        json_t *top = json_object();
        for (int i = 0; i < ntop; i++) {
            json_t *k = token_str(t, sm->top_id[i], first);
            json_object_set_new(top, json_string_value(k), json_real(sm->top_logprob[i]));
            json_decref(k);
        }
        json_array_append_new(json_object_get(into, "tokens"), sampled_str(c, text_offset, text_len));
        json_array_append_new(json_object_get(into, "token_logprobs"), json_real(sm->logprob));
        json_array_append_new(json_object_get(into, "top_logprobs"), top);
        json_array_append_new(json_object_get(into, "text_offset"), json_integer((json_int_t)text_offset));
    }
}

json_t *weft_gen_new_logprobs(bool chat)
{
    if (chat) return json_array();
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* weft.ids: the tokens since the last chunk (and the seed, once), as the
 * chunk's last member, so a router can cut it off the line */
static void chunk_ext(struct gen_choice *c, json_t *j)
{
    if (!c->g->p.ext_ids) return;
    json_t *w = json_object(), *a = json_array();
    for (uint32_t i = 0; i < c->n_chunk_ids; i++) json_array_append_new(a, json_integer(c->chunk_ids[i]));
    c->n_chunk_ids = 0;
    json_object_set_new(w, "ids", a);
    if (!c->seed_sent) {
        json_object_set_new(w, "seed", json_integer((json_int_t)c->g->p.sp.seed));
        c->seed_sent = true;
    }
    json_object_set_new(j, "weft", w);
}

/* echo: the prompt's text, made once (ids detokenized) */
static const char *echo_text(struct gen_ctx *g, size_t *n)
{
    if (!g->echo) {
        if (g->p.prompt) {
            g->echo = strdup(g->p.prompt);
            g->n_echo = g->echo ? strlen(g->echo) : 0;
        } else if (weft_detokenize(weft_model_tokenizer(g->srv->m), g->p.prompt_ids, g->p.n_prompt_ids, true,
                                   &g->echo, &g->n_echo) != WEFT_OK) {  /* special tokens as their text */
            g->echo = NULL;
            g->n_echo = 0;
        }
    }
    *n = g->n_echo;
    return g->echo ? g->echo : "";
}

/* A stream chunk of choice c; the first one of each choice in a chat
 * stream names the role, in a completion stream with echo carries the
 * prompt's text before its own. */
static json_t *chunk(struct gen_choice *c, const char *text, size_t n, json_t *lp, const char *finish)
{
    struct gen_ctx *g = c->g;
    bool role = g->chat && !c->role_sent;
    bool echo = g->p.echo && !c->role_sent;
    c->role_sent = true;
    char *joined = NULL;
    if (echo) {
        size_t ne;
        const char *e = echo_text(g, &ne);
        joined = malloc(ne + (text ? n : 0) + 1);
        if (joined) {
            memcpy(joined, e, ne);
            if (text) memcpy(joined + ne, text, n);
            n = ne + (text ? n : 0);
            text = joined;
        }
    }
    json_t *choice;
    json_t *fin = finish ? json_string(finish) : json_null();
    if (g->chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (text) json_object_set_new(delta, "content", json_stringn(text, n));
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)c->index, "delta", delta, "logprobs",
                           lp ? json_pack("{s:o}", "content", lp) : json_null(), "finish_reason", fin);
    } else {
        choice = json_pack("{s:i,s:s%,s:o,s:o}", "index", (int)c->index, "text", text ? text : "", text ? n : 0, "logprobs",
                           lp ? lp : json_null(), "finish_reason", fin);
    }
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", g->rid, "object",
                          g->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)g->created,
                          "model", g->model, "choices", choice);
    free(joined);
    if (j) chunk_ext(c, j);
    return j;
}

/* A reasoning delta of choice c. */
static json_t *chunk_reasoning(struct gen_choice *c, const char *text, size_t n, json_t *lp)
{
    json_t *j = chunk(c, NULL, 0, lp, NULL);
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    json_object_set_new(delta, "reasoning_content", json_stringn(text, n));
    return j;
}

/* The ranges of c's text that may go out now: a chat's reasoning and
 * content (server/chat_format.h: what may still become a tag or a call is
 * held), a completion's released text. final: the choice is complete. */
static void stream_ranges(const struct gen_choice *c, bool final, size_t *r_from, size_t *r_len, size_t *c_from,
                          size_t *c_len)
{
    const struct gen_ctx *g = c->g;
    *r_from = *r_len = *c_from = 0;
    *c_len = final ? c->st.len : c->st.released;
    if (!g->chat) return;
    struct chat_reply tmp;
    const struct chat_reply *r = &c->reply;
    if (!final || !c->parsed) {
        weft_chat_reply_parse(&g->srv->tmpl.fmt, &g->p.st, g->in_think, c->st.text, *c_len, !final, &tmp);
        r = &tmp;
    }
    *r_from = r->r_from;
    *r_len = r->r_len;
    *c_from = r->c_from;
    *c_len = r->c_len;
    if (r == &tmp) weft_chat_reply_free(&tmp);
}

/* Stream what of choice c's text has not gone out (lp: this token's
 * logprobs, sent with it, or NULL). */
void weft_gen_stream_progress(struct gen_choice *c, json_t *lp, bool final)
{
    struct gen_ctx *g = c->g;
    size_t rf, rl, cf, cl;
    stream_ranges(c, final, &rf, &rl, &cf, &cl);
    if (rl > c->sent_r) {
        bool with_lp = lp && cl <= c->sent;
        weft_gen_send_sse(g, chunk_reasoning(c, c->st.text + rf + c->sent_r, rl - c->sent_r, with_lp ? lp : NULL));
        if (with_lp) lp = NULL;
        c->sent_r = rl;
    }
    if (cl > c->sent || lp) {
        weft_gen_send_sse(g, chunk(c, c->st.text + cf + (cl > c->sent ? c->sent : 0), cl > c->sent ? cl - c->sent : 0, lp,
                          NULL));
        if (cl > c->sent) c->sent = cl;
    }
}

/* A continuation: mark sent what the interrupted stream had sent. */
void weft_gen_stream_mark_sent(struct gen_choice *c)
{
    size_t rf, rl, cf, cl;
    stream_ranges(c, false, &rf, &rl, &cf, &cl);
    c->sent_r = rl;
    c->sent = cl;
}

/* ---- finishing ---- */

/* The calls of choice c as OpenAI's tool_calls array (stream: with index). */
static json_t *tool_calls_json(const struct gen_choice *c, bool stream)
{
    json_t *a = json_array();
    const struct tool_call_out *calls = c->reply.calls;
    for (uint32_t i = 0; i < c->reply.n_calls; i++) {
        json_t *call = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", calls[i].id, "type", "function", "function",
                                 "name", calls[i].name, "arguments", calls[i].arguments);
        if (call && stream) json_object_set_new(call, "index", json_integer(i));
        json_array_append_new(a, call);
    }
    return a;
}

/* A streamed choice is complete: the rest of its text and its finish chunk. */
void weft_gen_stream_choice_end(struct gen_choice *c)
{
    struct gen_ctx *g = c->g;
    if (c->end_sent) return;
    c->end_sent = true;
    weft_gen_stream_progress(c, NULL, true);
    if (c->reply.n_calls) {
        /* the calls whole, in one delta (OpenAI streams their arguments in
         * pieces; a client joins the pieces, so one piece is the same) */
        json_t *j = chunk(c, NULL, 0, NULL, NULL);
        json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
        json_object_set_new(delta, "tool_calls", tool_calls_json(c, true));
        weft_gen_send_sse(g, j);
    }
    weft_gen_send_sse(g, chunk(c, g->chat ? NULL : "", 0, NULL, c->finish_reason));
}

json_t *weft_gen_choice_json(const struct gen_choice *c)
{
    json_t *lp = c->lp ? json_incref(c->lp) : json_null();
    const char *text = c->st.text ? c->st.text : "";
    if (c->g->chat) {
        const struct chat_reply *r = &c->reply;
        json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content",
                              r->c_len || !r->n_calls ? json_stringn(text + r->c_from, r->c_len) : json_null());
        if (m && r->r_len) json_object_set_new(m, "reasoning_content", json_stringn(text + r->r_from, r->r_len));
        if (m && r->n_calls) json_object_set_new(m, "tool_calls", tool_calls_json(c, false));
        return json_pack("{s:i,s:o,s:o,s:s}", "index", (int)c->index, "message", m, "logprobs",
                         c->lp ? json_pack("{s:o}", "content", lp) : lp, "finish_reason", c->finish_reason);
    }
    if (c->g->p.echo) {
        /* echo: the prompt's text, then the choice's */
        size_t ne;
        const char *e = echo_text(c->g, &ne);
        char *both = malloc(ne + c->st.len + 1);
        if (!both) return NULL;
        memcpy(both, e, ne);
        memcpy(both + ne, text, c->st.len);
        json_t *r = json_pack("{s:i,s:s%,s:o,s:s}", "index", (int)c->index, "text", both, ne + c->st.len, "logprobs",
                              lp, "finish_reason", c->finish_reason);
        free(both);
        return r;
    }
    return json_pack("{s:i,s:s%,s:o,s:s}", "index", (int)c->index, "text", text, c->st.len, "logprobs", lp,
                     "finish_reason", c->finish_reason);
}

