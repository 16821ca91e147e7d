/* The request parsing of server/structured.c (tools, tool_choice,
 * response_format, history tool calls) and the schema of a forced call's
 * arguments held by its grammar. Calls read back, per format, are
 * tests/test_chat_format.c's. */
#include <string.h>

#include "check.h"
#include "core/grammar.h"
#include "server/chat_format.h"
#include "server/structured.h"

static const char *BODY =
    "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]%s}";

static json_t *body(const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text, BODY, extra);
    json_t *j = json_loads(text, 0, NULL);
    CHECK(j != NULL);
    return j;
}

static void parse_ok(json_t *j, struct gen_structured *s)
{
    const char *param = NULL;
    char msg[256] = "";
    CHECK_MSG(weft_structured_parse(j, true, s, &param, msg, sizeof msg), "%s", msg);
}

/* The grammar of a required call matches exactly the calls the frame writes. */
static void required_and_named_choices_constrain_to_calls(void)
{
    const enum chat_calls styles[] = {CHAT_CALLS_HERMES, CHAT_CALLS_LLAMA3};
    const char *good[2][3] = {
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": 1}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
         "\"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
        {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
         "{\"name\": \"get_time\", \"parameters\": {\"tz\": 1}}", NULL},
    };
    const char *bad[2] = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}\n</tool_call>",
                          "{\"name\": \"get_weather\", \"parameters\": {}}"};
    for (int k = 0; k < 2; k++) {
        json_t *j = body(",\"tool_choice\":\"required\"");
        struct gen_structured s;
        parse_ok(j, &s);
        CHECK_EQ_INT(s.tool_choice, GEN_TOOLS_REQUIRED);
        char *text = NULL, msg[256] = "";
        const char *param = NULL;
        struct chat_call_frame fr;
        weft_chat_call_frame(styles[k], &fr);
        CHECK_MSG(weft_structured_grammar(&s, &fr, &text, &param, msg, sizeof msg), "%s", msg);
        struct weft_grammar *g = NULL;
        CHECK_MSG(text && weft_grammar_parse(text, strlen(text), &g) == WEFT_OK, "%s\n%s", weft_last_error(),
                  text ? text : "");
        for (int i = 0; i < 3 && g; i++)
            if (good[k][i])
                CHECK_MSG(weft_grammar_match(g, good[k][i], strlen(good[k][i])), "%d: %s", k, good[k][i]);
        CHECK(!g || !weft_grammar_match(g, bad[k], strlen(bad[k])));
        CHECK(!g || !weft_grammar_match(g, "Hello", 5));
        weft_grammar_unref(g);
        free(text);
        weft_structured_free(&s);
        json_decref(j);
        /* named: only that function */
        j = body(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                 "\"parallel_tool_calls\":false");
        parse_ok(j, &s);
        CHECK_EQ_INT(s.tool_choice, GEN_TOOLS_NAMED);
        CHECK(weft_structured_grammar(&s, &fr, &text, &param, msg, sizeof msg));
        g = NULL;
        CHECK(text && weft_grammar_parse(text, strlen(text), &g) == WEFT_OK);
        CHECK(!g || weft_grammar_match(g, good[k][0], strlen(good[k][0])));
        CHECK(!g || !weft_grammar_match(g, good[k][1], strlen(good[k][1])));
        if (k == 0) CHECK(!g || !weft_grammar_match(g, good[0][2], strlen(good[0][2])));  /* one call only */
        weft_grammar_unref(g);
        free(text);
        weft_structured_free(&s);
        json_decref(j);
    }
}

static void refusals_name_the_parameter(void)
{
    const struct {
        const char *json, *param, *word;
        bool chat;
    } cases[] = {
        {"{\"functions\":[{\"name\":\"f\"}]}", "functions", "tools", true},
        {"{\"function_call\":\"auto\"}", "function_call", "tool_choice", true},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools", "name", true},
        {"{\"tools\":[{\"type\":\"retrieval\"}]}", "tools", "function", true},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"always\"}",
         "tool_choice", "required", true},
        {"{\"tool_choice\":\"required\"}", "tool_choice", "tools", true},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "tools", "chat", false},
        {"{\"response_format\":{\"type\":\"yaml\"}}", "response_format", "yaml", true},
        {"{\"response_format\":{\"type\":\"json_schema\"}}", "response_format", "json_schema", true},
        {"{\"response_format\":{\"type\":\"json_object\"},\"tools\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\"}}],\"tool_choice\":\"required\"}", "response_format", "required", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *j = json_loads(cases[i].json, 0, NULL);
        struct gen_structured s;
        const char *param = NULL;
        char msg[256] = "";
        CHECK_MSG(!weft_structured_parse(j, cases[i].chat, &s, &param, msg, sizeof msg), "%s accepted", cases[i].json);
        CHECK_MSG(param && !strcmp(param, cases[i].param), "%s: param %s", cases[i].json, param ? param : "(null)");
        CHECK_MSG(strstr(msg, cases[i].word), "%s: '%s' not in: %s", cases[i].json, cases[i].word, msg);
        weft_structured_free(&s);
        json_decref(j);
    }
}

static void history_calls_are_checked(void)
{
    json_t *m = json_loads("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"
                           "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]}", 0, NULL);
    struct weft_chat_tool_call *calls = NULL;
    size_t n = 0;
    const char *id = NULL;
    char msg[256];
    CHECK(weft_structured_message_calls(m, 1, &calls, &n, &id, msg, sizeof msg));
    CHECK(n == 1 && calls && !strcmp(calls[0].name, "f") && !strcmp(calls[0].arguments, "{\"a\": 1}") &&
          !strcmp(calls[0].id, "call_1"));
    free(calls);
    json_decref(m);
    m = json_loads("{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}", 0,
                   NULL);
    CHECK(!weft_structured_message_calls(m, 3, &calls, &n, &id, msg, sizeof msg));
    CHECK(strstr(msg, "message 3") && strstr(msg, "arguments"));
    json_decref(m);
    m = json_loads("{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"x\"}", 0, NULL);
    CHECK(weft_structured_message_calls(m, 2, &calls, &n, &id, msg, sizeof msg) && n == 0 && id && !strcmp(id, "call_1"));
    json_decref(m);
}

int main(void)
{
    RUN(required_and_named_choices_constrain_to_calls);
    RUN(refusals_name_the_parameter);
    RUN(history_calls_are_checked);
    return check_summary();
}
