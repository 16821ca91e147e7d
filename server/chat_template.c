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

weft_status weft_chat_template_load(struct chat_template *ct, const struct weft_gguf *g,
                                    const struct weft_tokenizer *tok, const char *path)
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
        return st;
    }
    if (weft_tokenizer_find(tok, "<|im_start|>") >= 0 && weft_tokenizer_find(tok, "<|im_end|>") >= 0) {
        snprintf(ct->source, sizeof ct->source, "chatml");
        return compile(CHATML, sizeof CHATML - 1, "the built-in ChatML template", &ct->t);
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

weft_status weft_chat_template_apply(const struct chat_template *ct, const json_t *body, char **out, size_t *n,
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
