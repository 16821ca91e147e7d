/* Chat formats (server/chat_format.c, server/chat_template.c): what each
 * real template in ../shared/templates is read as; each family's calls read
 * back from the template's own rendering of a call and from canned replies
 * in its format; replies cut by max_tokens; reasoning split from content,
 * streamed prefixes growing into the final reading; tool_choice grammars
 * whose every string the parser reads back; and what weft writes into the
 * messages of a template without tools (the Hermes text weft's built-in
 * ChatML wrote). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/chat.h"
#include "core/gguf.h"
#include "core/grammar.h"
#include "core/stop.h"
#include "core/tokenizer.h"
#include "core/jinja.h"
#include "server/chat_format.h"
#include "server/chat_template.h"
#include "server/prompt.h"
#include "server/structured.h"

static const char *TOOLS_BODY =
    "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]%s}";

static void tools(struct gen_structured *s, json_t **j, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text, TOOLS_BODY, extra);
    *j = json_loads(text, 0, NULL);
    const char *param = NULL;
    char msg[256] = "";
    CHECK_MSG(*j && weft_structured_parse(*j, true, s, &param, msg, sizeof msg), "%s", msg);
}

#define BOS_EOS "\"bos_token\":\"<s>\",\"eos_token\":\"</s>\""

static char *read_template(const char *name, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/templates/%s", WEFT_SHARED_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[*n] = 0;
    return buf;
}

struct tmpl {
    struct weft_jinja *t;
    struct chat_format f;
};

static bool load(const char *name, struct tmpl *out)
{
    size_t n = 0;
    char *src = read_template(name, &n);
    if (!src) return false;
    bool ok = weft_jinja_compile(src, n, &out->t) == WEFT_OK;
    if (ok) {
        weft_chat_format_detect(&out->f, src, n);
        weft_chat_format_probe(&out->f, out->t);
    }
    free(src);
    return ok;
}

static char *render(const struct tmpl *t, const char *vars)
{
    char *out = NULL;
    size_t n = 0;
    if (weft_jinja_render(t->t, vars, strlen(vars), NULL, &out, &n) != WEFT_OK) return NULL;
    return out;
}

/* ---- what each template is read as ---- */

static const struct {
    const char *file;
    enum chat_calls calls;
    bool native_tools, native_calls, system_role;
    enum chat_think think;
} FAMILIES[] = {
    {"Qwen-Qwen3-0.6B.jinja", CHAT_CALLS_HERMES, true, true, true, CHAT_THINK_TAGS},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", CHAT_CALLS_HERMES, true, true, true, CHAT_THINK_NONE},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", CHAT_CALLS_HERMES, true, true, true, CHAT_THINK_NONE},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", CHAT_CALLS_LLAMA3, true, true, true, CHAT_THINK_NONE},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", CHAT_CALLS_LLAMA3, true, true, true, CHAT_THINK_NONE},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", CHAT_CALLS_MISTRAL, true, true, true, CHAT_THINK_NONE},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", CHAT_CALLS_MISTRAL_ARGS, true, true, true, CHAT_THINK_NONE},
    {"unsloth-mistral-Devstral-Small-2507.jinja", CHAT_CALLS_MISTRAL_ARGS, true, true, true, CHAT_THINK_NONE},
    {"openai-gpt-oss-120b.jinja", CHAT_CALLS_HARMONY, true, true, true, CHAT_THINK_HARMONY},
    /* DeepSeek's templates write calls but leave the tools to the system prompt: weft writes them there */
    {"deepseek-ai-DeepSeek-V3.1.jinja", CHAT_CALLS_DEEPSEEK, false, true, true, CHAT_THINK_TAGS},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", CHAT_CALLS_DEEPSEEK, false, true, true, CHAT_THINK_TAGS},
    /* SmolLM2-like: no tools at all; Gemma 2: no system role either */
    {"google-gemma-2-2b-it.jinja", CHAT_CALLS_HERMES, false, false, false, CHAT_THINK_NONE},
};

static void templates_are_read_by_family(void)
{
    for (size_t i = 0; i < sizeof FAMILIES / sizeof *FAMILIES; i++) {
        struct tmpl t;
        if (!load(FAMILIES[i].file, &t)) {
            CHECK_MSG(0, "%s does not load", FAMILIES[i].file);
            continue;
        }
        CHECK_MSG(t.f.calls == FAMILIES[i].calls, "%s: calls %s", FAMILIES[i].file, weft_chat_calls_name(t.f.calls));
        CHECK_MSG(t.f.native_calls == FAMILIES[i].native_calls, "%s: native_calls %d", FAMILIES[i].file,
                  t.f.native_calls);
        CHECK_MSG(t.f.system_role == FAMILIES[i].system_role, "%s: system_role %d", FAMILIES[i].file,
                  t.f.system_role);
        CHECK_MSG(t.f.think == FAMILIES[i].think, "%s: think %d", FAMILIES[i].file, t.f.think);
        CHECK_MSG(t.f.native_tools == FAMILIES[i].native_tools, "%s: native_tools %d", FAMILIES[i].file,
                  t.f.native_tools);
        weft_jinja_free(t.t);
    }
    /* DeepSeek-R1's generation prompt opens the reasoning block (this one when enable_thinking says so) */
    struct tmpl t;
    CHECK(load("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", &t));
    char *p = render(&t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true,"
                         "\"enable_thinking\":true}");
    CHECK(p && weft_chat_format_prompt_thinks(&t.f, p, strlen(p)));
    free(p);
    p = render(&t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true}");
    CHECK(p && !weft_chat_format_prompt_thinks(&t.f, p, strlen(p)));
    free(p);
    weft_jinja_free(t.t);
    CHECK(load("Qwen-Qwen3-0.6B.jinja", &t));
    p = render(&t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true,"
                   "\"enable_thinking\":false}");
    CHECK(p && strstr(p, "</think>") && !weft_chat_format_prompt_thinks(&t.f, p, strlen(p)));
    free(p);
    weft_jinja_free(t.t);
}

/* ---- each family's calls, read back from its template's own rendering ---- */

static const char *const END_MARKS[] = {
    "<|im_end|>", "<|eot_id|>", "</s>", "<|call|>", "<|end|>", "<|return|>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "\n", " "};

static void strip_end_marks(char *s)
{
    for (bool again = true; again;) {
        again = false;
        size_t n = strlen(s);
        for (size_t k = 0; k < sizeof END_MARKS / sizeof *END_MARKS; k++) {
            size_t m = strlen(END_MARKS[k]);
            if (n >= m && !strcmp(s + n - m, END_MARKS[k])) {
                s[n - m] = 0;
                again = true;
                break;
            }
        }
    }
}

static void template_calls_are_read_back(void)
{
    struct gen_structured s;
    json_t *j;
    tools(&s, &j, "");
    int n_checked = 0;
    for (size_t i = 0; i < sizeof FAMILIES / sizeof *FAMILIES; i++) {
        if (!FAMILIES[i].native_calls) continue;
        struct tmpl t;
        if (!load(FAMILIES[i].file, &t)) continue;
        /* the generation prompt P, then the same conversation with the call made: F = P + the call's turn */
        const char *user = "{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}";
        const char *call = "{\"role\":\"assistant\",\"content\":%s,\"tool_calls\":[{\"id\":\"abc123xyz\",\"type\":"
                           "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":%s}}]}";
        char callmsg[512], vp[2048], vf[2048];
        snprintf(callmsg, sizeof callmsg, call, t.f.calls_need_content ? "\"\"" : "null",
                 t.f.string_args ? "\"{\\\"city\\\": \\\"Oslo\\\"}\"" : "{\"city\":\"Oslo\"}");
        const char *tl = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
                         "\"parameters\":{\"type\":"
                         "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
        snprintf(vp, sizeof vp, "{\"messages\":[%s],\"tools\":%s,\"add_generation_prompt\":true,%s}", user, tl, BOS_EOS);
        snprintf(vf, sizeof vf, "{\"messages\":[%s,%s],\"tools\":%s,\"add_generation_prompt\":false,%s}", user,
                 callmsg, tl, BOS_EOS);
        char *P = render(&t, vp), *F = render(&t, vf);
        CHECK_MSG(P && F, "%s: %s", FAMILIES[i].file, weft_last_error());
        if (P && F) {
            /* the call's turn: after the generation prompt (or, where that prompt also opens and closes a
             * reasoning block the call's turn does not have, after the marker both share) */
            size_t np = 0;
            while (P[np] && P[np] == F[np]) np++;
            if (P[np])
                while (np > 0 && F[np - 1] != '>') np--;
            CHECK_MSG(np > 0, "%s: the call's turn does not follow the generation prompt", FAMILIES[i].file);
            char *reply = strdup(F + np);
            strip_end_marks(reply);
            struct chat_reply r;
            weft_chat_reply_parse(&t.f, &s, false, reply, strlen(reply), false, &r);
            CHECK_MSG(r.n_calls == 1 && !strcmp(r.calls[0].name, "get_weather") &&
                          !strcmp(r.calls[0].arguments, "{\"city\":\"Oslo\"}") && r.c_len == 0,
                      "%s: [%s] -> %u calls", FAMILIES[i].file, reply, r.n_calls);
            n_checked++;
            weft_chat_reply_free(&r);
            free(reply);
        }
        free(P);
        free(F);
        weft_jinja_free(t.t);
    }
    CHECK_EQ_INT(n_checked, 11);
    weft_structured_free(&s);
    json_decref(j);
}

/* ---- canned replies per format ---- */

struct canned {
    enum chat_calls calls;
    const char *reply;
    int n_calls;         /* -1: not a call reply (all content) */
    const char *content; /* NULL: "" */
    bool cut;
};

#define DS(x) "<\xef\xbd\x9ctool\xe2\x96\x81" x "\xef\xbd\x9c>"

static const struct canned CANNED[] = {
    /* Hermes (Qwen2.5, Qwen3, Hermes 2/3) */
    {CHAT_CALLS_HERMES,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", 2, "Let me check.", false},
    {CHAT_CALLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}", 1, NULL, false},
    {CHAT_CALLS_HERMES,
     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\","
     " \"arguments\": {\"ci", 1, NULL, true},
    {CHAT_CALLS_HERMES, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_c", 1, NULL, true},
    {CHAT_CALLS_HERMES, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
                        "</tool_call>", 1, NULL, false},
    {CHAT_CALLS_HERMES, "The weather is fine.", -1, "The weather is fine.", false},
    {CHAT_CALLS_HERMES, "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>", -1,
     "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>", false},
    {CHAT_CALLS_HERMES, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call> and then", -1,
     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call> and then", false},
    /* Llama 3.x JSON */
    {CHAT_CALLS_LLAMA3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 1, NULL, false},
    {CHAT_CALLS_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 1, NULL,
     false},
    {CHAT_CALLS_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": "
                        "{\"city\": \"Rome\"}}", 2, NULL, false},
    {CHAT_CALLS_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_wea", 1, NULL, true},
    {CHAT_CALLS_LLAMA3, "It is sunny in Oslo.", -1, "It is sunny in Oslo.", false},
    {CHAT_CALLS_LLAMA3, "{\"answer\": 4}", -1, "{\"answer\": 4}", false},
    /* Mistral (Nemo, 7B v0.3) */
    {CHAT_CALLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}, \"id\": "
                         "\"abcdefghi\"}, {\"name\": \"get_time\", \"arguments\": {}}]", 2, NULL, false},
    {CHAT_CALLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", "
                         "\"argu", 1, NULL, true},
    {CHAT_CALLS_MISTRAL, "Sunny.", -1, "Sunny.", false},
    /* Mistral Small 3.2 / Devstral / Ministral 3 */
    {CHAT_CALLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]get_time[ARGS]{}", 2,
     NULL, false},
    {CHAT_CALLS_MISTRAL_ARGS, "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CA", 1, NULL, true},
    {CHAT_CALLS_MISTRAL_ARGS, "I will look.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Os", 0, "I will look.", true},
    /* gpt-oss harmony */
    {CHAT_CALLS_HARMONY,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}", 1, NULL, false},
    {CHAT_CALLS_HARMONY, "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
                         "It is 4.", 0, "It is 4.", false},
    /* DeepSeek V3.1 and V3 / R1 */
    {CHAT_CALLS_DEEPSEEK, DS("calls\xe2\x96\x81" "begin") DS("call\xe2\x96\x81" "begin") "get_weather" DS("sep")
     "{\"city\": \"Oslo\"}" DS("call\xe2\x96\x81" "end") DS("call\xe2\x96\x81" "begin") "get_time" DS("sep") "{}"
     DS("call\xe2\x96\x81" "end") DS("calls\xe2\x96\x81" "end"), 2, NULL, false},
    {CHAT_CALLS_DEEPSEEK, "Checking." DS("calls\xe2\x96\x81" "begin") DS("call\xe2\x96\x81" "begin") "function"
     DS("sep") "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" DS("call\xe2\x96\x81" "end")
     DS("calls\xe2\x96\x81" "end"), 1, "Checking.", false},
    {CHAT_CALLS_DEEPSEEK, DS("calls\xe2\x96\x81" "begin") DS("call\xe2\x96\x81" "begin") "get_weather" DS("sep")
     "{\"city\": \"Os", 0, NULL, true},
};

static void canned_replies_are_read_per_format(void)
{
    struct gen_structured s;
    json_t *j;
    tools(&s, &j, "");
    for (size_t i = 0; i < sizeof CANNED / sizeof *CANNED; i++) {
        const struct canned *k = &CANNED[i];
        struct chat_format f;
        memset(&f, 0, sizeof f);
        f.calls = k->calls;
        if (k->calls == CHAT_CALLS_HARMONY) f.think = CHAT_THINK_HARMONY;
        struct chat_reply r;
        weft_chat_reply_parse(&f, &s, false, k->reply, strlen(k->reply), false, &r);
        int want = k->n_calls < 0 ? 0 : k->n_calls;
        CHECK_MSG((int)r.n_calls == want, "case %zu (%s): %u calls, want %d", i, weft_chat_calls_name(k->calls),
                  r.n_calls, want);
        const char *content = k->content ? k->content : "";
        CHECK_MSG(r.c_len == strlen(content) && !memcmp(k->reply + r.c_from, content, r.c_len),
                  "case %zu: content [%.*s]", i, (int)r.c_len, k->reply + r.c_from);
        CHECK_MSG(r.cut_call == k->cut, "case %zu: cut %d", i, r.cut_call);
        for (uint32_t c = 0; c < r.n_calls; c++) {
            if (k->calls == CHAT_CALLS_MISTRAL || k->calls == CHAT_CALLS_MISTRAL_ARGS)
                CHECK(strlen(r.calls[c].id) == 9);  /* Mistral's templates want 9 letters and digits */
            else
                CHECK(!strncmp(r.calls[c].id, "call_", 5) && strlen(r.calls[c].id) == 29);
            CHECK(!strcmp(r.calls[c].name, "get_weather") || !strcmp(r.calls[c].name, "get_time"));
            if (!strcmp(r.calls[c].name, "get_weather"))
                CHECK_MSG(!strcmp(r.calls[c].arguments, "{\"city\":\"Oslo\"}") ||
                              !strcmp(r.calls[c].arguments, "{\"city\":\"Rome\"}"),
                          "case %zu: %s", i, r.calls[c].arguments);
        }
        weft_chat_reply_free(&r);
    }
    /* tools not offered: nothing is read as a call */
    weft_structured_free(&s);
    json_decref(j);
    memset(&s, 0, sizeof s);
    struct chat_format f = {.calls = CHAT_CALLS_HERMES};
    struct chat_reply r;
    weft_chat_reply_parse(&f, &s, false, CANNED[0].reply, strlen(CANNED[0].reply), false, &r);
    CHECK(r.n_calls == 0 && r.c_len == strlen(CANNED[0].reply));
    weft_chat_reply_free(&r);
}

/* ---- reasoning ---- */

static void check_split(const struct chat_format *f, const struct gen_structured *s, bool in_think, const char *text,
                        const char *reasoning, const char *content)
{
    struct chat_reply r;
    weft_chat_reply_parse(f, s, in_think, text, strlen(text), false, &r);
    CHECK_MSG(r.r_len == strlen(reasoning) && !memcmp(text + r.r_from, reasoning, r.r_len), "[%s]: reasoning [%.*s]",
              text, (int)r.r_len, text + r.r_from);
    CHECK_MSG(r.c_len == strlen(content) && !memcmp(text + r.c_from, content, r.c_len), "[%s]: content [%.*s]", text,
              (int)r.c_len, text + r.c_from);
    /* every prefix, read as a stream, shows a prefix of the final reading */
    for (size_t n = 0; n <= strlen(text); n++) {
        struct chat_reply p;
        weft_chat_reply_parse(f, s, in_think, text, n, true, &p);
        CHECK_MSG(p.r_len <= r.r_len && !memcmp(text + p.r_from, text + r.r_from, p.r_len) &&
                      (p.r_len == 0 || p.r_from == r.r_from),
                  "[%s] at %zu: reasoning [%.*s]", text, n, (int)p.r_len, text + p.r_from);
        CHECK_MSG(p.c_len <= r.c_len && (p.c_len == 0 || p.c_from == r.c_from), "[%s] at %zu: content [%.*s]", text, n,
                  (int)p.c_len, text + p.c_from);
        CHECK(p.n_calls == 0);
        weft_chat_reply_free(&p);
    }
    weft_chat_reply_free(&r);
}

static void reasoning_is_split_from_content(void)
{
    struct gen_structured none;
    memset(&none, 0, sizeof none);
    struct chat_format f;
    weft_chat_format_detect(&f, "{{ '<think>' }}", 13);
    CHECK(f.think == CHAT_THINK_TAGS);
    check_split(&f, &none, false, "<think>\nThe user wants 3+5.\n</think>\n\nIt is 8.", "The user wants 3+5.", "It is 8.");
    check_split(&f, &none, false, "It is 8.", "", "It is 8.");
    check_split(&f, &none, false, "<think>\nStill thinking about", "Still thinking about", "");
    /* the prompt opened the block (DeepSeek-R1): no opening tag in the reply */
    check_split(&f, &none, true, "Two and two.\n</think>\n\nFour.", "Two and two.", "Four.");
    /* Mistral's [THINK] */
    weft_chat_format_detect(&f, "[THINK]", 7);
    check_split(&f, &none, false, "[THINK]Hmm.[/THINK]Yes.", "Hmm.", "Yes.");
    /* reasoning, then calls */
    struct gen_structured s;
    json_t *j;
    tools(&s, &j, "");
    weft_chat_format_detect(&f, "<tool_call></think>", 19);
    check_split(&f, &s, false,
                "<think>\nNeed the weather.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
                "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                "Need the weather.", "Checking.");
    struct chat_reply r;
    const char *t = "<think>x</think><tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    weft_chat_reply_parse(&f, &s, false, t, strlen(t), false, &r);
    CHECK(r.n_calls == 1 && r.r_len == 1 && r.c_len == 0);
    weft_chat_reply_free(&r);
    /* harmony */
    weft_chat_format_detect(&f, "<|channel|>", 11);
    check_split(&f, &none, false,
                "<|channel|>analysis<|message|>Easy sum.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
                "Easy sum.", "It is 4.");
    weft_structured_free(&s);
    json_decref(j);
}

/* ---- grammars of forced calls, read back ---- */

static void forced_call_grammars_are_read_back(void)
{
    for (int c = CHAT_CALLS_HERMES; c <= CHAT_CALLS_DEEPSEEK; c++) {
        struct chat_call_frame fr;
        weft_chat_call_frame((enum chat_calls)c, &fr);
        struct chat_format f;
        memset(&f, 0, sizeof f);
        f.calls = (enum chat_calls)c;
        if (c == CHAT_CALLS_HARMONY) f.think = CHAT_THINK_HARMONY;
        for (int named = 0; named < 2; named++) {
            struct gen_structured s;
            json_t *j;
            tools(&s, &j, named ? ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"
                                : ",\"tool_choice\":\"required\"");
            char *text = NULL, msg[256] = "";
            const char *param = NULL;
            CHECK_MSG(weft_structured_grammar(&s, &fr, &text, &param, msg, sizeof msg), "%s", msg);
            struct weft_grammar *g = NULL;
            CHECK_MSG(text && weft_grammar_parse(text, strlen(text), &g) == WEFT_OK, "%s: %s",
                      weft_chat_calls_name(f.calls), weft_last_error());
            char one[512], two[1024];
            snprintf(one, sizeof one, "%s%sget_weather%s{\"city\": \"Oslo\"}%s%s", fr.begin, fr.open, fr.mid, fr.after,
                     fr.end);
            snprintf(two, sizeof two, "%s%sget_weather%s{\"city\": \"Oslo\"}%s%s%sget_time%s{}%s%s", fr.begin, fr.open,
                     fr.mid, fr.after, fr.sep, fr.open, fr.mid, fr.after, fr.end);
            CHECK_MSG(g && weft_grammar_match(g, one, strlen(one)), "%s: %s", weft_chat_calls_name(f.calls), one);
            /* a named function: exactly one call; required: several where the format writes several */
            bool many_ok = g && weft_grammar_match(g, two, strlen(two));
            CHECK_MSG(many_ok == (!named && fr.many), "%s named %d: two calls %d", weft_chat_calls_name(f.calls),
                      named, many_ok);
            struct chat_reply r;
            weft_chat_reply_parse(&f, &s, false, one, strlen(one), false, &r);
            CHECK_MSG(r.n_calls == 1 && !strcmp(r.calls[0].arguments, "{\"city\":\"Oslo\"}"), "%s: read back %u",
                      weft_chat_calls_name(f.calls), r.n_calls);
            weft_chat_reply_free(&r);
            if (!named && fr.many) {
                weft_chat_reply_parse(&f, &s, false, two, strlen(two), false, &r);
                CHECK_MSG(r.n_calls == 2, "%s: two read back as %u", weft_chat_calls_name(f.calls), r.n_calls);
                weft_chat_reply_free(&r);
            }
            weft_grammar_unref(g);
            free(text);
            weft_structured_free(&s);
            json_decref(j);
        }
    }
}

/* ---- a template without tools: weft writes them in (Hermes) ---- */

static void tools_are_written_into_a_plain_template(void)
{
    /* SmolLM2-Instruct's template: no tools, content concatenated (null content raises) */
    const char *smol =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
        "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
        "{% endif %}";
    struct tmpl t;
    CHECK(weft_jinja_compile(smol, strlen(smol), &t.t) == WEFT_OK);
    weft_chat_format_detect(&t.f, smol, strlen(smol));
    weft_chat_format_probe(&t.f, t.t);
    CHECK(!t.f.native_tools && !t.f.native_calls && !t.f.native_results && t.f.system_role);
    const char *def = "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}";
    struct weft_chat_tool_call call = {.id = "call_1", .name = "get_weather", .arguments = "{\"city\": \"Oslo\"}"};
    struct weft_chat_msg conv[] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Weather in Oslo?"},
        {.role = "assistant", .content = NULL, .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "{\"temp\": 3}", .tool_call_id = "call_1"},
        {.role = "tool", .content = "{\"wind\": 5}", .tool_call_id = "call_1"},
    };
    char *defs[] = {(char *)def};
    json_t *tl = NULL;
    json_t *msgs = weft_chat_format_messages(&t.f, conv, 5, defs, 1, &tl);
    CHECK(msgs && !tl);
    json_t *vars = json_pack("{s:o,s:b}", "messages", msgs, "add_generation_prompt", 1);
    char *vj = json_dumps(vars, JSON_COMPACT), *out = NULL;
    size_t n = 0;
    CHECK(weft_jinja_render(t.t, vj, strlen(vj), NULL, &out, &n) == WEFT_OK);
    /* Qwen2.5's Hermes layout, as weft's old built-in ChatML renderer wrote it */
    const char *want =
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}\n</tools>\n\nFor each function call, "
        "return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "
        "\"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
        "<tool_response>\n{\"temp\": 3}\n</tool_response>\n<tool_response>\n{\"wind\": 5}\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n";
    CHECK_MSG(out && !strcmp(out, want), "\n%s\n---\n%s", out ? out : "", want);
    free(out);
    free(vj);
    json_decref(vars);
    /* a template without a system role (Gemma 2): the system text goes before the first user message */
    struct tmpl g;
    CHECK(load("google-gemma-2-2b-it.jinja", &g));
    msgs = weft_chat_format_messages(&g.f, conv, 2, NULL, 0, &tl);
    CHECK(json_array_size(msgs) == 1 &&
          !strcmp(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "Be brief.\n\nWeather in Oslo?"));
    json_decref(msgs);
    weft_jinja_free(g.t);
    weft_jinja_free(t.t);
}

/* ---- a format's markers that are control tokens come out as their text ---- */

static void control_markers_are_kept_in_replies(void)
{
    /* a vocabulary whose [TOOL_CALLS] is a control token (as Mistral's tekken has it) */
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "[TOOL_CALLS]", "a", "b", "{", "}"};
    const float scores[8] = {0, 0, 0, 0, -1, -2, -3, -4};
    const int32_t types[8] = {2, 3, 3, 3, 1, 1, 1, 1};
    struct weft_gguf_writer *w = NULL;
    CHECK(weft_gguf_writer_init(&w) == WEFT_OK);
    weft_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    weft_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
    weft_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, 8);
    weft_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 8);
    weft_gguf_writer_set_str(w, "tokenizer.chat_template",
                             "{% for m in messages %}[INST]{{ m.content }}[/INST]{% if m.tool_calls %}[TOOL_CALLS]"
                             "{% endif %}{% endfor %}");
    void *buf = NULL;
    size_t size = 0;
    CHECK(weft_gguf_writer_to_memory(w, &buf, &size) == WEFT_OK);
    weft_gguf_writer_free(w);
    struct weft_gguf *g = NULL;
    struct weft_tokenizer *tok = NULL;
    CHECK(weft_gguf_open_memory(buf, size, &g) == WEFT_OK && weft_tokenizer_load(g, &tok) == WEFT_OK);
    struct chat_template ct;
    CHECK(g && tok && weft_chat_template_load(&ct, g, tok, NULL) == WEFT_OK);
    CHECK(ct.fmt.calls == CHAT_CALLS_MISTRAL && ct.n_markers == 1 && ct.markers[0] == 3);
    const int32_t reply[] = {3, 6, 4, 7};
    for (int keep = 0; keep < 2; keep++) {
        struct weft_stop st;
        struct weft_stop_cfg cfg = {.tok = tok, .render_ids = keep ? ct.markers : NULL,
                                    .n_render_ids = keep ? ct.n_markers : 0};
        CHECK(weft_stop_init(&st, &cfg) == WEFT_OK);
        struct weft_stop_step step;
        for (int i = 0; i < 4; i++) weft_stop_push(&st, reply[i], &step);
        weft_stop_end(&st, &step);
        CHECK_MSG(!strcmp(st.text, keep ? "[TOOL_CALLS]{a}" : "{a}"), "keep %d: %s", keep, st.text);
        weft_stop_free(&st);
    }
    weft_chat_template_free(&ct);
    weft_tokenizer_free(tok);
    weft_gguf_close(g);
    free(buf);
}

/* ---- fill-in-the-middle: suffix ---- */

static struct weft_tokenizer *mini_vocab(const char *const *toks, const int32_t *types, int n, struct weft_gguf **g,
                                         void **buf)
{
    float scores[16];
    for (int i = 0; i < n; i++) scores[i] = -(float)i;
    struct weft_gguf_writer *w = NULL;
    CHECK(weft_gguf_writer_init(&w) == WEFT_OK);
    weft_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    weft_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    weft_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n);
    weft_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n);
    size_t size = 0;
    CHECK(weft_gguf_writer_to_memory(w, buf, &size) == WEFT_OK);
    weft_gguf_writer_free(w);
    struct weft_tokenizer *tok = NULL;
    CHECK(weft_gguf_open_memory(*buf, size, g) == WEFT_OK && weft_tokenizer_load(*g, &tok) == WEFT_OK);
    return tok;
}

static void suffix_is_prefix_suffix_middle(void)
{
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                       "\xe2\x96\x81" "a", "b", "a"};
    const int32_t types[] = {2, 3, 3, 3, 3, 3, 1, 1, 1};
    struct weft_gguf *g = NULL;
    void *buf = NULL;
    struct weft_tokenizer *tok = mini_vocab(toks, types, 9, &g, &buf);
    struct prompt_rules r = {.tok = tok};
    weft_prompt_rules_fim(&r, g);
    CHECK(r.fim_pre == 3 && r.fim_suf == 4 && r.fim_mid == 5);
    struct gen_params p;
    memset(&p, 0, sizeof p);
    p.prompt = "a";
    p.suffix = "b";
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[256] = "";
    CHECK_MSG(weft_prompt_tokens(&r, &p, &ids, &n, NULL, msg, sizeof msg) == WEFT_OK, "%s", msg);
    /* BOS, PRE, the prompt, SUF, the suffix, MID: the model writes the middle */
    CHECK_MSG(n >= 6 && ids[0] == 1 && ids[1] == 3 && ids[n - 1] == 5, "n %zu", n);
    bool suf = false;
    for (size_t i = 2; i + 1 < n; i++) suf = suf || ids[i] == 4;
    CHECK(suf);
    free(ids);
    weft_tokenizer_free(tok);
    weft_gguf_close(g);
    free(buf);
    /* a vocabulary without them: refused, naming suffix */
    static const char *const plain[] = {"<unk>", "<s>", "</s>", "a", "b"};
    const int32_t pt[] = {2, 3, 3, 1, 1};
    tok = mini_vocab(plain, pt, 5, &g, &buf);
    r = (struct prompt_rules){.tok = tok};
    weft_prompt_rules_fim(&r, g);
    CHECK(r.fim_pre == -1);
    CHECK(weft_prompt_tokens(&r, &p, &ids, &n, NULL, msg, sizeof msg) == WEFT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(msg, "suffix") && strstr(msg, "fill-in-the-middle"), "%s", msg);
    weft_tokenizer_free(tok);
    weft_gguf_close(g);
    free(buf);
}

int main(void)
{
    RUN(templates_are_read_by_family);
    RUN(template_calls_are_read_back);
    RUN(canned_replies_are_read_per_format);
    RUN(reasoning_is_split_from_content);
    RUN(forced_call_grammars_are_read_back);
    RUN(tools_are_written_into_a_plain_template);
    RUN(control_markers_are_kept_in_replies);
    RUN(suffix_is_prefix_suffix_middle);
    return check_summary();
}
