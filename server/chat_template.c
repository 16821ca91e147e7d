/* The instance's chat template (server/chat_template.h). */
#include "server/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "core/tokenizer.h"

/* What a model without a template of its own gets when its vocabulary has
 * ChatML's tokens (Hugging Face's default ChatML template). */
static const char CHATML[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static weft_status compile(const char *src, size_t n, const char *what, struct weft_jinja **out)
{
    weft_status st = weft_jinja_compile(src, n, out);
    if (st == WEFT_OK) return WEFT_OK;
    char why[300];
    snprintf(why, sizeof why, "%s", weft_last_error());  /* weft_error writes the same buffer */
    return weft_error(st, "%s cannot be used: %s (give another with --chat-template FILE)", what, why);
}

static weft_status load(struct chat_template *ct, const struct weft_gguf *g, const struct weft_tokenizer *tok,
                        const char *path);

/* The format's markers that are control tokens (left out of replies unless kept). */
static void find_markers(struct chat_template *ct, const struct weft_tokenizer *tok)
{
    static const char *const M[] = {
        "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]",
        "<think>", "</think>", "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>",
        "<|python_tag|>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>",
    };
    ct->n_markers = 0;
    if (!ct->t || !tok) return;
    for (size_t i = 0; i < sizeof M / sizeof *M && ct->n_markers < sizeof ct->markers / sizeof *ct->markers; i++) {
        int32_t id = weft_tokenizer_find(tok, M[i]);
        if (id >= 0 && weft_tokenizer_is_control(tok, id)) ct->markers[ct->n_markers++] = id;
    }
}

weft_status weft_chat_template_load(struct chat_template *ct, const struct weft_gguf *g,
                                    const struct weft_tokenizer *tok, const char *path)
{
    weft_status st = load(ct, g, tok, path);
    if (st == WEFT_OK) find_markers(ct, tok);
    return st;
}

static weft_status load(struct chat_template *ct, const struct weft_gguf *g, const struct weft_tokenizer *tok,
                        const char *path)
{
    memset(ct, 0, sizeof *ct);
    int32_t bos = weft_tokenizer_bos(tok), eos = weft_tokenizer_eos(tok);
    snprintf(ct->bos, sizeof ct->bos, "%s", bos >= 0 ? weft_tokenizer_piece(tok, bos) : "");
    snprintf(ct->eos, sizeof ct->eos, "%s", eos >= 0 ? weft_tokenizer_piece(tok, eos) : "");
    if (path) {
        FILE *f = fopen(path, "rb");
        if (!f) return weft_error(WEFT_ERR_IO, "--chat-template %s: cannot open it", path);
        char *src = malloc(1 << 20);
        size_t n = src ? fread(src, 1, (1 << 20) - 1, f) : 0;
        bool more = src && !feof(f);
        fclose(f);
        if (!src) return weft_error(WEFT_ERR_NOMEM, "out of memory");
        if (more) {
            free(src);
            return weft_error(WEFT_ERR_INVALID_ARG, "--chat-template %s: more than 1 MiB", path);
        }
        char what[300];
        snprintf(what, sizeof what, "the chat template %s", path);
        weft_status st = compile(src, n, what, &ct->t);
        if (st == WEFT_OK) {
            weft_chat_format_detect(&ct->fmt, src, n);
            weft_chat_format_probe(&ct->fmt, ct->t);
        }
        free(src);
        snprintf(ct->source, sizeof ct->source, "file");
        return st;
    }
    const char *s = NULL, *su = NULL;
    size_t n = 0, nu = 0;
    weft_gguf_get_str(g, "tokenizer.chat_template", &s, &n);
    weft_gguf_get_str(g, "tokenizer.chat_template.tool_use", &su, &nu);
    if (s) {
        snprintf(ct->source, sizeof ct->source, "gguf");
        weft_status st = compile(s, n, "the model's chat template (tokenizer.chat_template)", &ct->t);
        if (st == WEFT_OK && su)
            st = compile(su, nu, "the model's tool_use chat template (tokenizer.chat_template.tool_use)", &ct->tools);
        if (st == WEFT_OK) {
            weft_chat_format_detect(&ct->fmt, su ? su : s, su ? nu : n);
            weft_chat_format_probe(&ct->fmt, ct->tools ? ct->tools : ct->t);
        }
        return st;
    }
    if (weft_tokenizer_find(tok, "<|im_start|>") >= 0 && weft_tokenizer_find(tok, "<|im_end|>") >= 0) {
        snprintf(ct->source, sizeof ct->source, "chatml");
        weft_status st = compile(CHATML, sizeof CHATML - 1, "the built-in ChatML template", &ct->t);
        if (st == WEFT_OK) {
            weft_chat_format_detect(&ct->fmt, CHATML, sizeof CHATML - 1);
            weft_chat_format_probe(&ct->fmt, ct->t);
        }
        return st;
    }
    snprintf(ct->source, sizeof ct->source, "none");
    return WEFT_OK;
}

void weft_chat_template_free(struct chat_template *ct)
{
    weft_jinja_free(ct->t);
    weft_jinja_free(ct->tools);
    memset(ct, 0, sizeof *ct);
}

/* ---- what the template renders itself (probes) ---- */

static bool render_has(const struct weft_jinja *t, const char *vars, const char *needle)
{
    char *out = NULL;
    size_t n = 0;
    if (weft_jinja_render(t, vars, strlen(vars), NULL, &out, &n) != WEFT_OK) return false;
    bool found = strstr(out, needle) != NULL;
    free(out);
    return found;
}

#define PROBE_TOOL                                                                                              \
    "{\"type\":\"function\",\"function\":{\"name\":\"weft_probe_tool\",\"description\":\"d\",\"parameters\":"   \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}}}"

static bool probe_calls(const struct weft_jinja *t, const char *content, const char *args, bool *results)
{
    char vars[1024];
    snprintf(vars, sizeof vars,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":%s,"
             "\"tool_calls\":[{\"id\":\"weftprobe\",\"type\":\"function\",\"function\":{\"name\":\"weft_probe_tool\","
             "\"arguments\":%s}}]},{\"role\":\"tool\",\"tool_call_id\":\"weftprobe\",\"content\":\"weft_probe_result\"}"
             "],\"tools\":[" PROBE_TOOL "],\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
             content, args);
    char *out = NULL;
    size_t n = 0;
    if (weft_jinja_render(t, vars, strlen(vars), NULL, &out, &n) != WEFT_OK) return false;
    /* the call's name, apart from the tool definition's (rendered or not) */
    const char *first = strstr(out, "weft_probe_tool");
    bool twice = first && strstr(first + 1, "weft_probe_tool");
    bool native_tools = render_has(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[" PROBE_TOOL
                                      "],\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}", "weft_probe_tool");
    bool ok = native_tools ? twice : first != NULL;
    *results = strstr(out, "weft_probe_result") != NULL;
    free(out);
    return ok;
}

void weft_chat_format_probe(struct chat_format *f, const struct weft_jinja *t)
{
    f->system_role = render_has(t, "{\"messages\":[{\"role\":\"system\",\"content\":\"weft_probe_system\"},"
                                   "{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
                                "weft_probe_system");
    f->native_tools = render_has(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[" PROBE_TOOL
                                    "],\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}", "weft_probe_tool");
    bool results = false;
    if (probe_calls(t, "null", "{\"a\":\"b\"}", &results)) {
        f->native_calls = true;
    } else if (probe_calls(t, "\"\"", "{\"a\":\"b\"}", &results)) {
        f->native_calls = f->calls_need_content = true;
    } else if (probe_calls(t, "\"\"", "\"{\\\"a\\\": \\\"b\\\"}\"", &results)) {
        f->native_calls = f->calls_need_content = f->string_args = true;
    }
    if (f->native_calls) {
        f->native_results = results;
    } else {
        f->native_results = render_has(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
                                          "\"content\":\"ok\"},{\"role\":\"tool\",\"tool_call_id\":\"call_1\","
                                          "\"content\":\"weft_probe_result\"}],\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
                                       "weft_probe_result");
    }
    /* a template that renders tools but not the calls they lead to (or any role as it is named, "tool"
     * too, without knowing calls): weft writes all three */
    if (!f->native_calls) f->native_tools = f->native_results = false;
}

void weft_chat_template_describe(const struct chat_template *ct, char *out, size_t n)
{
    const struct chat_format *f = &ct->fmt;
    snprintf(out, n, "%s: calls %s%s, reasoning %s", ct->source, weft_chat_calls_name(f->calls),
             f->native_calls ? "" : " (written by weft)",
             f->think == CHAT_THINK_TAGS ? f->think_open : f->think == CHAT_THINK_HARMONY ? "harmony" : "none");
}

/* ---- rendering ---- */

static weft_status fail_msg(char *msg, size_t cap, weft_status st, const char *text)
{
    if (msg && cap) snprintf(msg, cap, "%s", text);
    return st;
}

weft_status weft_chat_template_render(const struct chat_template *ct, const struct gen_params *p, char **out,
                                      size_t *n, bool *in_think, char *msg, size_t msg_cap)
{
    *out = NULL;
    *n = 0;
    if (in_think) *in_think = false;
    if (!ct->t)
        return fail_msg(msg, msg_cap, WEFT_ERR_INVALID_ARG,
                        "the model has no chat template (tokenizer.chat_template) and its vocabulary is not ChatML's: "
                        "start weft with --chat-template FILE to chat with it");
    bool tools = p->st.tool_choice != GEN_TOOLS_OFF && p->st.n_tools;
    json_t *defs = NULL;
    json_t *msgs = weft_chat_format_messages(&ct->fmt, p->msgs, p->n_msgs, p->st.tool_defs, tools ? p->st.n_tools : 0,
                                             &defs);
    json_t *vars = msgs ? json_object() : NULL;
    if (!vars) {
        json_decref(msgs);
        json_decref(defs);
        return fail_msg(msg, msg_cap, WEFT_ERR_NOMEM, "out of memory");
    }
    if (p->tmpl_kwargs) json_object_update(vars, p->tmpl_kwargs);
    json_object_set_new(vars, "messages", msgs);
    if (defs) json_object_set_new(vars, "tools", defs);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(p->add_generation_prompt));
    json_object_set_new(vars, "bos_token", json_string(ct->bos));
    json_object_set_new(vars, "eos_token", json_string(ct->eos));
    char *text = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    if (!text) return fail_msg(msg, msg_cap, WEFT_ERR_NOMEM, "out of memory");
    const struct weft_jinja *t = tools && ct->tools ? ct->tools : ct->t;
    weft_status st = weft_jinja_render(t, text, strlen(text), NULL, out, n);
    free(text);
    if (st != WEFT_OK) {
        snprintf(msg, msg_cap, "%s", weft_last_error());
        return st;
    }
    if (p->continue_final) {
        /* the last message left open: the text ends where its content does (as vLLM cuts it) */
        const char *c = p->msgs[p->n_msgs - 1].content, *at = NULL;
        size_t k = strlen(c);
        for (const char *q = *out; (q = strstr(q, c)); q++) at = q;
        if (!at) {
            free(*out);
            *out = NULL;
            return fail_msg(msg, msg_cap, WEFT_ERR_INVALID_ARG,
                            "continue_final_message: the template does not render the last message's content as given");
        }
        *n = (size_t)(at - *out) + k;
        (*out)[*n] = 0;
    }
    if (in_think) *in_think = weft_chat_format_prompt_thinks(&ct->fmt, *out, *n);
    return WEFT_OK;
}

weft_status weft_chat_template_apply(const struct chat_template *ct, const json_t *body, char **out, size_t *n,
                                     char *msg, size_t msg_cap)
{
    *out = NULL;
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text) return fail_msg(msg, msg_cap, WEFT_ERR_NOMEM, "out of memory");
    struct gen_params p;
    json_t *root = NULL;
    const char *param = NULL;
    bool ok = weft_gen_params_parse(text, strlen(text), true, &p, &root, &param, msg, msg_cap);
    free(text);
    weft_status st = ok ? weft_chat_template_render(ct, &p, out, n, NULL, msg, msg_cap) : WEFT_ERR_INVALID_ARG;
    weft_gen_params_free(&p);
    json_decref(root);
    return st;
}

weft_status weft_chat_template_apply_raw(const struct chat_template *ct, const json_t *body, char **out, size_t *n,
                                     char *msg, size_t msg_cap)
{
    *out = NULL;
    json_t *msgs = json_object_get(body, "messages"), *tools = json_object_get(body, "tools");
    json_t *kw = json_object_get(body, "chat_template_kwargs"), *gen = json_object_get(body, "add_generation_prompt");
    if (!ct->t) {
        snprintf(msg, msg_cap, "the model has no chat template (tokenizer.chat_template) and its vocabulary is not "
                               "ChatML's: give one with --chat-template FILE");
        return WEFT_ERR_INVALID_ARG;
    }
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        snprintf(msg, msg_cap, "'messages' must be a non-empty array");
        return WEFT_ERR_INVALID_ARG;
    }
    if (tools && !json_is_array(tools) && !json_is_null(tools)) {
        snprintf(msg, msg_cap, "'tools' must be an array");
        return WEFT_ERR_INVALID_ARG;
    }
    if (kw && !json_is_object(kw) && !json_is_null(kw)) {
        snprintf(msg, msg_cap, "'chat_template_kwargs' must be an object");
        return WEFT_ERR_INVALID_ARG;
    }
    if (gen && !json_is_boolean(gen)) {
        snprintf(msg, msg_cap, "'add_generation_prompt' must be a boolean");
        return WEFT_ERR_INVALID_ARG;
    }
    json_t *vars = json_object();
    if (json_is_object(kw)) json_object_update(vars, kw);
    json_object_set(vars, "messages", msgs);
    bool with_tools = json_is_array(tools) && json_array_size(tools);
    if (with_tools) json_object_set(vars, "tools", tools);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(!gen || json_is_true(gen)));
    if (!json_object_get(vars, "bos_token")) json_object_set_new(vars, "bos_token", json_string(ct->bos));
    if (!json_object_get(vars, "eos_token")) json_object_set_new(vars, "eos_token", json_string(ct->eos));
    char *text = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    if (!text) {
        snprintf(msg, msg_cap, "out of memory");
        return WEFT_ERR_NOMEM;
    }
    const struct weft_jinja *t = with_tools && ct->tools ? ct->tools : ct->t;
    weft_status st = weft_jinja_render(t, text, strlen(text), NULL, out, n);
    free(text);
    if (st != WEFT_OK) snprintf(msg, msg_cap, "%s", weft_last_error());
    return st;
}
