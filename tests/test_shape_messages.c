/* Anthropic's Messages API as a translation (server/shape_messages.c): a
 * request into a chat body that the chat parser (server/params.c) takes, a
 * chat.completion back into a Message, and a chat stream's chunks into the
 * Messages events the anthropic SDK's stream accumulates. The HTTP side is
 * tests/e2e/test_anthropic_sdk.py's. */
#include <string.h>

#include "check.h"
#include "server/params.h"
#include "server/shape.h"

/* The chat body of an Anthropic request text; NULL (refused) with *param and msg filled. */
static json_t *req(const char *text, const char **param, char *msg, size_t n)
{
    json_t *body = json_loads(text, 0, NULL);
    CHECK_MSG(body != NULL, "bad test JSON: %s", text);
    *param = "(unset)";
    json_t *chat = body ? weft_shape_messages_request(body, param, msg, n) : NULL;
    json_decref(body);
    return chat;
}

/* The translation of text, which must be accepted, and accepted again by the chat parser. */
static json_t *req_ok(const char *text)
{
    const char *param;
    char msg[256] = "";
    json_t *chat = req(text, &param, msg, sizeof msg);
    CHECK_MSG(chat != NULL, "refused (%s): %s", param ? param : "-", msg);
    if (!chat) return NULL;
    char *s = json_dumps(chat, JSON_COMPACT);
    struct gen_params p;
    json_t *root = NULL;
    const char *cparam = NULL;
    char cmsg[256] = "";
    bool ok = s && weft_gen_params_parse(s, strlen(s), true, &p, &root, &cparam, cmsg, sizeof cmsg);
    CHECK_MSG(ok, "the chat parser refused (%s): %s\n%s", cparam ? cparam : "-", cmsg, s ? s : "");
    if (ok) weft_gen_params_free(&p);
    json_decref(root);
    free(s);
    return chat;
}

/* text must be refused naming want_param (NULL: none) with a message containing want_msg. */
static void refused(const char *text, const char *want_param, const char *want_msg)
{
    const char *param;
    char msg[256] = "";
    json_t *chat = req(text, &param, msg, sizeof msg);
    CHECK_MSG(chat == NULL, "accepted: %s", text);
    json_decref(chat);
    if (want_param) CHECK_MSG(param && !strcmp(param, want_param), "param %s, want %s (%s)", param ? param : "NULL",
                              want_param, msg);
    else CHECK_MSG(param == NULL, "param %s, want none (%s)", param, msg);
    CHECK_MSG(strstr(msg, want_msg) != NULL, "message '%s' lacks '%s'", msg, want_msg);
}

static bool str_is(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

/* The n-th chat message's field k. */
static json_t *msg_at(const json_t *chat, size_t n, const char *k)
{
    return json_object_get(json_array_get(json_object_get(chat, "messages"), n), k);
}

/* A content value (string or text parts) joined. */
static void text_of(const json_t *c, char *out, size_t n)
{
    out[0] = '\0';
    if (json_is_string(c)) {
        snprintf(out, n, "%s", json_string_value(c));
        return;
    }
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) strncat(out, json_string_value(json_object_get(p, "text")), n - strlen(out) - 1);
}

#define HEAD "{\"model\": \"m\", \"max_tokens\": 16, "

static void system_string_and_blocks_become_one_system_message(void)
{
    json_t *c = req_ok(HEAD "\"system\": \"Be brief.\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}");
    char t[256];
    CHECK(c && json_array_size(json_object_get(c, "messages")) == 2);
    CHECK(str_is(msg_at(c, 0, "role"), "system") && str_is(msg_at(c, 0, "content"), "Be brief."));
    CHECK(str_is(msg_at(c, 1, "role"), "user") && str_is(msg_at(c, 1, "content"), "Hi"));
    CHECK(str_is(json_object_get(c, "model"), "m") && json_integer_value(json_object_get(c, "max_tokens")) == 16);
    json_decref(c);
    c = req_ok(HEAD "\"system\": [{\"type\": \"text\", \"text\": \"Be \"}, {\"type\": \"text\", \"text\": \"brief.\","
                    " \"cache_control\": {\"type\": \"ephemeral\"}}],"
                    " \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}]}");
    CHECK(c && json_array_size(json_object_get(c, "messages")) == 2);
    text_of(msg_at(c, 0, "content"), t, sizeof t);
    CHECK(str_is(msg_at(c, 0, "role"), "system") && !strcmp(t, "Be brief."));
    text_of(msg_at(c, 1, "content"), t, sizeof t);
    CHECK(!strcmp(t, "Hi"));
    json_decref(c);
}

static void tool_use_and_tool_result_map_to_calls_and_tool_messages(void)
{
    json_t *c = req_ok(
        HEAD "\"tools\": [{\"name\": \"get_weather\", \"description\": \"Weather\", \"input_schema\": {\"type\": "
             "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}],"
             "\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Oslo and Rome?\"},"
             "{\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"Two calls.\", "
             "\"signature\": \"sig\"}, {\"type\": \"text\", \"text\": \"Checking.\"},"
             "{\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": {\"city\": \"Oslo\"}},"
             "{\"type\": \"tool_use\", \"id\": \"toolu_2\", \"name\": \"get_weather\", \"input\": {\"city\": \"Rome\"}, "
             "\"caller\": null, \"toolset_name\": null}]},"
             "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\", "
             "\"content\": \"5 C\"}, {\"type\": \"tool_result\", \"tool_use_id\": \"toolu_2\", \"is_error\": true, "
             "\"content\": [{\"type\": \"text\", \"text\": \"no data\"}]}, {\"type\": \"text\", \"text\": \"Thanks\"}]}]}");
    CHECK(c && json_array_size(json_object_get(c, "messages")) == 5);
    char t[256];
    CHECK(str_is(msg_at(c, 0, "role"), "user"));
    /* the assistant turn: text, reasoning, calls with their input as JSON text */
    CHECK(str_is(msg_at(c, 1, "role"), "assistant") && str_is(msg_at(c, 1, "reasoning_content"), "Two calls."));
    text_of(msg_at(c, 1, "content"), t, sizeof t);
    CHECK(!strcmp(t, "Checking."));
    json_t *calls = msg_at(c, 1, "tool_calls");
    CHECK(json_array_size(calls) == 2);
    json_t *c0 = json_array_get(calls, 0), *fn = json_object_get(c0, "function");
    CHECK(str_is(json_object_get(c0, "id"), "toolu_1") && str_is(json_object_get(c0, "type"), "function"));
    CHECK(str_is(json_object_get(fn, "name"), "get_weather"));
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
    CHECK(args && str_is(json_object_get(args, "city"), "Oslo"));
    json_decref(args);
    /* the results as tool messages, before the rest of the user turn */
    CHECK(str_is(msg_at(c, 2, "role"), "tool") && str_is(msg_at(c, 2, "tool_call_id"), "toolu_1"));
    CHECK(str_is(msg_at(c, 2, "content"), "5 C"));
    CHECK(str_is(msg_at(c, 3, "role"), "tool") && str_is(msg_at(c, 3, "tool_call_id"), "toolu_2"));
    text_of(msg_at(c, 3, "content"), t, sizeof t);
    CHECK_MSG(!strcmp(t, "Error: no data"), "%s", t);
    CHECK(str_is(msg_at(c, 4, "role"), "user"));
    text_of(msg_at(c, 4, "content"), t, sizeof t);
    CHECK(!strcmp(t, "Thanks"));
    /* the tool as a function */
    json_t *tool = json_array_get(json_object_get(c, "tools"), 0);
    fn = json_object_get(tool, "function");
    CHECK(str_is(json_object_get(tool, "type"), "function") && str_is(json_object_get(fn, "name"), "get_weather"));
    CHECK(str_is(json_object_get(fn, "description"), "Weather"));
    CHECK(str_is(json_object_get(json_object_get(fn, "parameters"), "type"), "object"));
    json_decref(c);
    /* a user turn of tool results alone adds no user message; a call alone has null content */
    c = req_ok(HEAD "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}], \"messages\": ["
                    "{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", \"content\": [{\"type\": "
                    "\"tool_use\", \"id\": \"t1\", \"name\": \"f\", \"input\": {}}]}, {\"role\": \"user\", \"content\": "
                    "[{\"type\": \"tool_result\", \"tool_use_id\": \"t1\"}]}]}");
    CHECK(c && json_array_size(json_object_get(c, "messages")) == 3);
    CHECK(json_is_null(msg_at(c, 1, "content")));
    CHECK(str_is(msg_at(c, 2, "role"), "tool") && str_is(msg_at(c, 2, "content"), ""));
    json_decref(c);
}

static void tool_choice_variants(void)
{
    static const char *const fmt =
        HEAD "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}], \"tool_choice\": %s, "
             "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    char text[512];
    const char *choices[] = {"{\"type\": \"auto\"}", "{\"type\": \"any\"}", "{\"type\": \"none\"}",
                             "{\"type\": \"tool\", \"name\": \"f\"}",
                             "{\"type\": \"any\", \"disable_parallel_tool_use\": true}"};
    for (int i = 0; i < 5; i++) {
        snprintf(text, sizeof text, fmt, choices[i]);
        json_t *c = req_ok(text);
        json_t *tc = json_object_get(c, "tool_choice");
        if (i == 0) CHECK(str_is(tc, "auto"));
        if (i == 1 || i == 4) CHECK(str_is(tc, "required"));
        if (i == 2) CHECK(str_is(tc, "none"));
        if (i == 3)
            CHECK(str_is(json_object_get(tc, "type"), "function") &&
                  str_is(json_object_get(json_object_get(tc, "function"), "name"), "f"));
        CHECK_MSG(i == 4 ? json_is_false(json_object_get(c, "parallel_tool_calls"))
                         : json_object_get(c, "parallel_tool_calls") == NULL, "%d", i);
        json_decref(c);
    }
    /* strict is honoured where the call is constrained */
    snprintf(text, sizeof text,
             HEAD "\"tools\": [{\"name\": \"f\", \"strict\": true, \"input_schema\": {\"type\": \"object\"}}], "
                  "\"tool_choice\": {\"type\": \"tool\", \"name\": \"f\"}, \"messages\": [{\"role\": \"user\", "
                  "\"content\": \"x\"}]}");
    json_decref(req_ok(text));
    refused(HEAD "\"tools\": [{\"name\": \"f\", \"strict\": true, \"input_schema\": {\"type\": \"object\"}}], "
                 "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
            "tools", "'strict'");
    refused(HEAD "\"tools\": [{\"name\": \"f\", \"input_schema\": {}}], \"tool_choice\": {\"type\": \"some\"}, "
                 "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
            "tool_choice", "auto, any, tool or none");
}

static void sampling_stream_metadata_and_format_map(void)
{
    json_t *c = req_ok(HEAD "\"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"stop_sequences\": [\"END\"], "
                            "\"stream\": true, \"metadata\": {\"user_id\": \"u1\"}, \"thinking\": {\"type\": "
                            "\"disabled\"}, \"service_tier\": \"auto\", \"container\": null, \"mcp_servers\": [], "
                            "\"output_config\": {\"format\": {\"type\": \"json_schema\", \"schema\": {\"type\": "
                            "\"object\"}}}, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    CHECK(c != NULL);
    CHECK_NEAR(json_number_value(json_object_get(c, "temperature")), 0.5, 0);
    CHECK_NEAR(json_number_value(json_object_get(c, "top_p")), 0.9, 0);
    CHECK(json_integer_value(json_object_get(c, "top_k")) == 40);
    CHECK(str_is(json_array_get(json_object_get(c, "stop"), 0), "END"));
    CHECK(json_is_true(json_object_get(c, "stream")));
    CHECK(json_is_true(json_object_get(json_object_get(c, "stream_options"), "include_usage")));
    CHECK(str_is(json_object_get(c, "user"), "u1"));
    json_t *rf = json_object_get(c, "response_format");
    CHECK(str_is(json_object_get(rf, "type"), "json_schema"));
    CHECK(str_is(json_object_get(json_object_get(json_object_get(rf, "json_schema"), "schema"), "type"), "object"));
    CHECK(json_object_get(c, "thinking") == NULL && json_object_get(c, "metadata") == NULL);
    json_decref(c);
    /* not streamed: no stream options */
    c = req_ok(HEAD "\"stream\": false, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    CHECK(c && !json_object_get(c, "stream") && !json_object_get(c, "stream_options"));
    json_decref(c);
}

/* A last assistant message is a prefill: the chat carries it on. */
static void last_assistant_message_is_a_prefill(void)
{
    json_t *c = req_ok(HEAD "\"messages\": [{\"role\": \"user\", \"content\": \"Count\"}, {\"role\": \"assistant\", "
                            "\"content\": \"1, 2,\"}]}");
    CHECK(c && json_is_true(json_object_get(c, "continue_final_message")));
    json_decref(c);
    c = req_ok(HEAD "\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
                    "\"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}");
    CHECK(c && !json_object_get(c, "continue_final_message"));
    json_decref(c);
}

static void refusals_name_the_field(void)
{
    static const char *const user = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
    char t[1024];
    refused("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "max_tokens",
            "'max_tokens' is required");
    refused(HEAD "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"source\": {\"type\": "
                 "\"base64\", \"media_type\": \"image/png\", \"data\": \"AA==\"}}]}]}",
            "messages", "'image'");
    refused(HEAD "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"document\", \"source\": {}}]}]}",
            "messages", "'document'");
    snprintf(t, sizeof t, HEAD "\"frobnicate\": 1, %s}", user);
    refused(t, NULL, "unknown field 'frobnicate'");
    snprintf(t, sizeof t, HEAD "\"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"web_search\"}], %s}", user);
    refused(t, "tools", "web_search_20250305");
    snprintf(t, sizeof t, HEAD "\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1024}, %s}", user);
    refused(t, "thinking", "\"enabled\"");
    snprintf(t, sizeof t, HEAD "\"metadata\": {\"user_id\": \"u\", \"tag\": \"x\"}, %s}", user);
    refused(t, "metadata", "'tag'");
    snprintf(t, sizeof t, HEAD "\"service_tier\": \"priority\", %s}", user);
    refused(t, "service_tier", "one tier");
    snprintf(t, sizeof t, HEAD "\"container\": \"c1\", %s}", user);
    refused(t, "container", "'container'");
    snprintf(t, sizeof t, HEAD "\"mcp_servers\": [{\"type\": \"url\", \"url\": \"http://x\", \"name\": \"x\"}], %s}",
             user);
    refused(t, "mcp_servers", "'mcp_servers'");
    snprintf(t, sizeof t, HEAD "\"temperature\": 1.5, %s}", user);
    refused(t, "temperature", "0 to 1");
    snprintf(t, sizeof t, HEAD "\"output_config\": {\"effort\": \"high\"}, %s}", user);
    refused(t, "output_config", "effort");
    refused("{\"model\": \"m\", \"max_tokens\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
            "max_tokens", "from 1");
    refused(HEAD "\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", "messages", "'role'");
    refused(HEAD "\"messages\": []}", "messages", "non-empty");
    refused(HEAD "\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
                 "[{\"type\": \"redacted_thinking\", \"data\": \"xx\"}]}]}",
            "messages", "redacted_thinking");
    refused(HEAD "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"t\", "
                 "\"content\": [{\"type\": \"image\", \"source\": {}}]}]}]}",
            "messages", "'image'");
    refused(HEAD "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\", \"extra\": "
                 "1}]}]}",
            "messages", "'extra'");
    /* a prefill must have text to carry on */
    refused(HEAD "\"tools\": [{\"name\": \"f\", \"input_schema\": {}}], \"messages\": [{\"role\": \"user\", "
                 "\"content\": \"a\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"t\", "
                 "\"name\": \"f\", \"input\": {}}]}]}",
            "messages", "prefill");
}

/* ---- answers ---- */

static json_t *answer(const char *body_text, const char *completion_text)
{
    json_t *body = json_loads(body_text, 0, NULL), *comp = json_loads(completion_text, 0, NULL);
    CHECK(body && comp);
    json_t *m = weft_shape_messages_response(body, comp, "msg_1");
    json_decref(body);
    json_decref(comp);
    CHECK(m != NULL);
    CHECK(str_is(json_object_get(m, "id"), "msg_1") && str_is(json_object_get(m, "type"), "message"));
    CHECK(str_is(json_object_get(m, "role"), "assistant"));
    return m;
}

#define COMP(msg, fin) \
    "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion\", \"model\": \"weft-model\", \"choices\": [{\"index\": 0, " \
    "\"message\": " msg ", \"finish_reason\": \"" fin "\"}], \"usage\": {\"prompt_tokens\": 12, "                      \
    "\"completion_tokens\": 5, \"total_tokens\": 17, \"prompt_tokens_details\": {\"cached_tokens\": 4}}}"

static json_t *block(const json_t *m, size_t i) { return json_array_get(json_object_get(m, "content"), i); }

static void response_text_thinking_calls_and_length(void)
{
    json_t *m = answer("{\"model\": \"claude-x\"}", COMP("{\"role\": \"assistant\", \"content\": \"Hello.\"}", "stop"));
    CHECK(str_is(json_object_get(m, "model"), "claude-x"));
    CHECK(json_array_size(json_object_get(m, "content")) == 1);
    CHECK(str_is(json_object_get(block(m, 0), "type"), "text") && str_is(json_object_get(block(m, 0), "text"), "Hello."));
    CHECK(str_is(json_object_get(m, "stop_reason"), "end_turn") && json_is_null(json_object_get(m, "stop_sequence")));
    json_t *u = json_object_get(m, "usage");
    /* Anthropic's input_tokens leaves out what was read from the cache */
    CHECK(json_integer_value(json_object_get(u, "input_tokens")) == 8);
    CHECK(json_integer_value(json_object_get(u, "cache_read_input_tokens")) == 4);
    CHECK(json_integer_value(json_object_get(u, "output_tokens")) == 5);
    json_decref(m);

    m = answer("{}", COMP("{\"role\": \"assistant\", \"content\": \"Yes.\", \"reasoning_content\": \"Think.\"}", "stop"));
    CHECK(str_is(json_object_get(m, "model"), "weft-model"));
    CHECK(json_array_size(json_object_get(m, "content")) == 2);
    CHECK(str_is(json_object_get(block(m, 0), "type"), "thinking"));
    CHECK(str_is(json_object_get(block(m, 0), "thinking"), "Think.") && str_is(json_object_get(block(m, 0), "signature"), ""));
    CHECK(str_is(json_object_get(block(m, 1), "text"), "Yes."));
    json_decref(m);

    m = answer("{\"model\": \"m\"}",
               COMP("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_a\", \"type\": "
                    "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
                    "\\\"Oslo\\\"}\"}}, {\"id\": \"call_b\", \"type\": \"function\", \"function\": {\"name\": \"t\", "
                    "\"arguments\": \"{}\"}}]}",
                    "tool_calls"));
    CHECK(json_array_size(json_object_get(m, "content")) == 2);
    json_t *b0 = block(m, 0);
    CHECK(str_is(json_object_get(b0, "type"), "tool_use") && str_is(json_object_get(b0, "id"), "call_a"));
    CHECK(str_is(json_object_get(b0, "name"), "get_weather"));
    CHECK(str_is(json_object_get(json_object_get(b0, "input"), "city"), "Oslo"));
    CHECK(json_is_object(json_object_get(block(m, 1), "input")));
    CHECK(str_is(json_object_get(m, "stop_reason"), "tool_use"));
    json_decref(m);

    m = answer("{\"model\": \"m\"}", COMP("{\"role\": \"assistant\", \"content\": \"Once upon\"}", "length"));
    CHECK(str_is(json_object_get(m, "stop_reason"), "max_tokens"));
    json_decref(m);
    /* an empty reply: no blocks */
    m = answer("{\"model\": \"m\"}", COMP("{\"role\": \"assistant\", \"content\": \"\"}", "stop"));
    CHECK(json_is_array(json_object_get(m, "content")) && json_array_size(json_object_get(m, "content")) == 0);
    json_decref(m);
}

/* ---- streams ---- */

struct ev {
    char name[32];
    json_t *data;
};

/* Split SSE text into events; each data's "type" must be its event name. */
static size_t parse_events(const char *text, struct ev *evs, size_t cap)
{
    size_t n = 0;
    const char *p = text;
    while (p && *p && n < cap) {
        const char *end = strstr(p, "\n\n");
        CHECK_MSG(end != NULL, "an event without its blank line: %s", p);
        if (!end) break;
        const char *nl = strchr(p, '\n');
        CHECK(!strncmp(p, "event: ", 7) && nl && nl < end && !strncmp(nl + 1, "data: ", 6));
        size_t ln = (size_t)(nl - p - 7);
        snprintf(evs[n].name, sizeof evs[n].name, "%.*s", (int)(ln < 31 ? ln : 31), p + 7);
        evs[n].data = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, NULL);
        CHECK_MSG(evs[n].data != NULL, "event %zu's data is not JSON", n);
        CHECK_MSG(str_is(json_object_get(evs[n].data, "type"), evs[n].name), "event %s's data has another type",
                  evs[n].name);
        n++;
        p = end + 2;
    }
    return n;
}

static void free_events(struct ev *evs, size_t n)
{
    for (size_t i = 0; i < n; i++) json_decref(evs[i].data);
}

static void feed(struct shape_messages_stream *s, struct weft_strbuf *out, const char *chunk_text)
{
    json_t *j = json_loads(chunk_text, 0, NULL);
    CHECK_MSG(j != NULL, "bad chunk: %s", chunk_text);
    weft_shape_messages_chunk(s, j, out);
    json_decref(j);
}

#define CHUNK(delta, fin)                                                                                         \
    "{\"id\": \"c1\", \"object\": \"chat.completion.chunk\", \"model\": \"w\", \"choices\": [{\"index\": 0, "     \
    "\"delta\": " delta ", \"logprobs\": null, \"finish_reason\": " fin "}]}"
#define USAGE                                                                                                      \
    "{\"id\": \"c1\", \"object\": \"chat.completion.chunk\", \"model\": \"w\", \"choices\": [], \"usage\": "      \
    "{\"prompt_tokens\": 9, \"completion_tokens\": 6, \"total_tokens\": 15, \"prompt_tokens_details\": "           \
    "{\"cached_tokens\": 0}}}"

static void new_stream(struct shape_messages_stream *s)
{
    memset(s, 0, sizeof *s);
    s->block = -1;
    snprintf(s->id, sizeof s->id, "msg_s");
    snprintf(s->model, sizeof s->model, "claude-x");
}

static const char *ev_type(const struct ev *e, const char *k)
{
    return json_string_value(json_object_get(json_object_get(e->data, k), "type"));
}

static void stream_reasoning_then_text(void)
{
    struct shape_messages_stream s;
    new_stream(&s);
    struct weft_strbuf out = {0};
    feed(&s, &out, CHUNK("{\"role\": \"assistant\"}", "null"));
    feed(&s, &out, CHUNK("{\"reasoning_content\": \"Hm\"}", "null"));
    feed(&s, &out, CHUNK("{\"reasoning_content\": \"m.\"}", "null"));
    feed(&s, &out, CHUNK("{\"content\": \"Hel\"}", "null"));
    feed(&s, &out, CHUNK("{\"content\": \"\"}", "null"));
    feed(&s, &out, CHUNK("{\"content\": \"lo!\"}", "null"));
    feed(&s, &out, CHUNK("{}", "\"stop\""));
    feed(&s, &out, USAGE);
    weft_shape_messages_end(&s, &out);
    weft_shape_messages_end(&s, &out);  /* a second end writes nothing */
    CHECK(!out.oom && out.p);
    struct ev evs[32];
    size_t n = parse_events(out.p ? out.p : "", evs, 32);
    static const char *const want[] = {"message_start", "content_block_start", "content_block_delta",
                                       "content_block_delta", "content_block_stop", "content_block_start",
                                       "content_block_delta", "content_block_delta", "content_block_stop",
                                       "message_delta", "message_stop"};
    CHECK_EQ_INT(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n && i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(!strcmp(evs[i].name, want[i]), "event %zu: %s, want %s", i, evs[i].name, want[i]);
    if (n == 11) {
        json_t *msg = json_object_get(evs[0].data, "message");
        CHECK(str_is(json_object_get(msg, "id"), "msg_s") && str_is(json_object_get(msg, "model"), "claude-x"));
        CHECK(json_is_array(json_object_get(msg, "content")) && json_is_null(json_object_get(msg, "stop_reason")));
        CHECK(json_is_integer(json_object_get(json_object_get(msg, "usage"), "input_tokens")));
        CHECK(!strcmp(ev_type(&evs[1], "content_block"), "thinking"));
        CHECK(json_integer_value(json_object_get(evs[1].data, "index")) == 0);
        CHECK(!strcmp(ev_type(&evs[2], "delta"), "thinking_delta"));
        CHECK(!strcmp(ev_type(&evs[5], "content_block"), "text"));
        char text[64] = "";
        for (size_t i = 6; i <= 7; i++) {
            CHECK(json_integer_value(json_object_get(evs[i].data, "index")) == 1);
            CHECK(!strcmp(ev_type(&evs[i], "delta"), "text_delta"));
            strcat(text, json_string_value(json_object_get(json_object_get(evs[i].data, "delta"), "text")));
        }
        CHECK_MSG(!strcmp(text, "Hello!"), "%s", text);
        CHECK(json_integer_value(json_object_get(evs[8].data, "index")) == 1);
        json_t *d = json_object_get(evs[9].data, "delta"), *u = json_object_get(evs[9].data, "usage");
        CHECK(str_is(json_object_get(d, "stop_reason"), "end_turn") && json_is_null(json_object_get(d, "stop_sequence")));
        CHECK(json_integer_value(json_object_get(u, "output_tokens")) == 6);
        CHECK(json_integer_value(json_object_get(u, "input_tokens")) == 9);
    }
    free_events(evs, n);
    weft_sb_free(&out);
}

static void stream_tool_calls_and_no_usage_chunk(void)
{
    struct shape_messages_stream s;
    new_stream(&s);
    struct weft_strbuf out = {0};
    feed(&s, &out, CHUNK("{\"role\": \"assistant\", \"content\": \"Let me check.\"}", "null"));
    feed(&s, &out, CHUNK("{\"tool_calls\": [{\"index\": 0, \"id\": \"call_1\", \"type\": \"function\", \"function\": "
                         "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}}, {\"index\": 1, "
                         "\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"get_time\", "
                         "\"arguments\": \"{}\"}}]}",
                         "null"));
    feed(&s, &out, CHUNK("{}", "\"tool_calls\""));
    weft_shape_messages_end(&s, &out);  /* the usage chunk never came */
    struct ev evs[32];
    size_t n = parse_events(out.p ? out.p : "", evs, 32);
    static const char *const want[] = {"message_start", "content_block_start", "content_block_delta",
                                       "content_block_stop", "content_block_start", "content_block_delta",
                                       "content_block_stop", "content_block_start", "content_block_delta",
                                       "content_block_stop", "message_delta", "message_stop"};
    CHECK_EQ_INT(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n && i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(!strcmp(evs[i].name, want[i]), "event %zu: %s, want %s", i, evs[i].name, want[i]);
    if (n == 12) {
        json_t *cb = json_object_get(evs[4].data, "content_block");
        CHECK(str_is(json_object_get(cb, "type"), "tool_use") && str_is(json_object_get(cb, "id"), "call_1"));
        CHECK(str_is(json_object_get(cb, "name"), "get_weather") && json_is_object(json_object_get(cb, "input")));
        CHECK(json_integer_value(json_object_get(evs[4].data, "index")) == 1);
        json_t *d = json_object_get(evs[5].data, "delta");
        CHECK(str_is(json_object_get(d, "type"), "input_json_delta"));
        json_t *in = json_loads(json_string_value(json_object_get(d, "partial_json")), 0, NULL);
        CHECK(in && str_is(json_object_get(in, "city"), "Oslo"));
        json_decref(in);
        CHECK(json_integer_value(json_object_get(evs[7].data, "index")) == 2);
        CHECK(str_is(json_object_get(json_object_get(evs[7].data, "content_block"), "name"), "get_time"));
        CHECK(str_is(json_object_get(json_object_get(evs[10].data, "delta"), "stop_reason"), "tool_use"));
        CHECK(json_is_integer(json_object_get(json_object_get(evs[10].data, "usage"), "output_tokens")));
    }
    free_events(evs, n);
    weft_sb_free(&out);
}

/* OpenAI-style argument pieces (no id after the first) join one tool_use block; length says max_tokens. */
static void stream_argument_pieces_and_length(void)
{
    struct shape_messages_stream s;
    new_stream(&s);
    struct weft_strbuf out = {0};
    feed(&s, &out, CHUNK("{\"role\": \"assistant\", \"tool_calls\": [{\"index\": 0, \"id\": \"c\", \"type\": "
                         "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \"}}]}",
                         "null"));
    feed(&s, &out, CHUNK("{\"tool_calls\": [{\"index\": 0, \"function\": {\"arguments\": \"1}\"}}]}", "null"));
    feed(&s, &out, CHUNK("{}", "\"length\""));
    feed(&s, &out, USAGE);
    weft_shape_messages_end(&s, &out);
    struct ev evs[16];
    size_t n = parse_events(out.p ? out.p : "", evs, 16);
    CHECK_EQ_INT(n, 7);  /* start, block start, 2 deltas, block stop, message_delta, stop */
    if (n == 7) {
        CHECK(!strcmp(evs[3].name, "content_block_delta"));
        CHECK(str_is(json_object_get(json_object_get(evs[3].data, "delta"), "partial_json"), "1}"));
        CHECK(str_is(json_object_get(json_object_get(evs[5].data, "delta"), "stop_reason"), "max_tokens"));
    }
    free_events(evs, n);
    weft_sb_free(&out);
    /* a stream with no chunks at all still opens and closes the message */
    new_stream(&s);
    weft_shape_messages_end(&s, &out);
    n = parse_events(out.p ? out.p : "", evs, 16);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK(!strcmp(evs[0].name, "message_start") && !strcmp(evs[2].name, "message_stop"));
    free_events(evs, n);
    weft_sb_free(&out);
}

int main(void)
{
    RUN(system_string_and_blocks_become_one_system_message);
    RUN(tool_use_and_tool_result_map_to_calls_and_tool_messages);
    RUN(tool_choice_variants);
    RUN(sampling_stream_metadata_and_format_map);
    RUN(last_assistant_message_is_a_prefill);
    RUN(refusals_name_the_field);
    RUN(response_text_thinking_calls_and_length);
    RUN(stream_reasoning_then_text);
    RUN(stream_tool_calls_and_no_usage_chunk);
    RUN(stream_argument_pieces_and_length);
    return check_summary();
}
