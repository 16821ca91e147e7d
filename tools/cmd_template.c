/* `weft template`: a model's own chat template (its GGUF's
 * tokenizer.chat_template, the .tool_use one when tools are given and the
 * file has it, or --chat-template FILE) rendered over a conversation with
 * core/jinja, printed as it is: the prompt a chat request with these
 * messages gets (what POST /apply-template answers), or with --raw the
 * template over the variables exactly as given (Hugging Face's
 * apply_chat_template). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "server/chat_template.h"
#include "core/tokenizer.h"
#include "tools/cli.h"
#include "tools/cli_common.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft template [-m MODEL] [--chat-template FILE] --messages FILE.json [--tools FILE.json]\n"
            "                     [--kwargs JSON] [--no-generation-prompt] [--raw]\n"
            "  Prints the prompt the model's own chat template makes of a conversation: the prompt\n"
            "  /v1/chat/completions computes for these messages (POST /apply-template's answer).\n"
            "  --raw: the template over the variables exactly as given (arguments as written, nothing\n"
            "      weft writes in for what the template does not render), as Hugging Face's\n"
            "      apply_chat_template renders them\n"
            "  --messages FILE.json: an array of {\"role\": ..., \"content\": ...} (or an object with \"messages\")\n"
            "  --tools FILE.json: an array of {\"type\": \"function\", \"function\": {...}}\n"
            "  --kwargs JSON: more template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  --chat-template FILE: this template instead of the model's\n"
            "  --no-generation-prompt: add_generation_prompt false (default true)\n");
}

static json_t *load_json(const char *path, const char *what)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) fprintf(stderr, "weft template: %s %s: %s (line %d)\n", what, path, e.text, e.line);
    return j;
}

int weft_cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tmpl_path = NULL, *msgs_path = NULL, *tools_path = NULL, *kwargs = NULL;
    bool gen = true, raw = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
        else if (!strcmp(a, "--chat-template") && v) tmpl_path = argv[++i];
        else if (!strcmp(a, "--messages") && v) msgs_path = argv[++i];
        else if (!strcmp(a, "--tools") && v) tools_path = argv[++i];
        else if (!strcmp(a, "--kwargs") && v) kwargs = argv[++i];
        else if (!strcmp(a, "--no-generation-prompt")) gen = false;
        else if (!strcmp(a, "--raw")) raw = true;
        else {
            bool help = !strcmp(a, "-h") || !strcmp(a, "--help");
            if (!help) fprintf(stderr, "weft template: unknown option '%s'\n", a);
            usage(help ? stdout : stderr);
            return help ? 0 : 2;
        }
    }
    if (!msgs_path) {
        fprintf(stderr, "weft template: --messages FILE.json is required\n");
        usage(stderr);
        return 2;
    }
    int rc = 1;
    char *def = NULL, *out = NULL;
    struct weft_gguf *g = NULL;
    struct weft_tokenizer *tok = NULL;
    struct chat_template ct = {0};
    json_t *vars = json_object(), *body = json_object(), *msgs = load_json(msgs_path, "messages"), *tools = NULL;
    if (!msgs) goto done;
    if (json_is_object(msgs)) {
        json_t *m = json_incref(json_object_get(msgs, "messages"));
        json_decref(msgs);
        msgs = m;
    }
    if (!json_is_array(msgs)) {
        fprintf(stderr, "weft template: %s is not an array of messages\n", msgs_path);
        goto done;
    }
    if (tools_path && !(tools = load_json(tools_path, "tools"))) goto done;
    if (kwargs) {
        json_error_t e;
        json_t *kw = json_loads(kwargs, 0, &e);
        if (!json_is_object(kw)) {
            fprintf(stderr, "weft template: --kwargs is not a JSON object: %s\n", kw ? "" : e.text);
            json_decref(kw);
            goto done;
        }
        json_object_update(vars, kw);
        json_decref(kw);
    }
    const char *path = model ? model : (def = weft_default_model_path());
    if (!path) goto done;
    if (weft_gguf_open(path, &g) != WEFT_OK || weft_tokenizer_load(g, &tok) != WEFT_OK) {
        fprintf(stderr, "weft template: cannot read %s: %s\n", path, weft_last_error());
        goto done;
    }
    /* the server's choice of template (server/chat_template.h): the file's, the
     * GGUF's (its tool_use one with tools), or ChatML for a ChatML vocabulary */
    if (weft_chat_template_load(&ct, g, tok, tmpl_path) != WEFT_OK) {
        fprintf(stderr, "weft template: %s\n", weft_last_error());
        goto done;
    }
    json_object_set(body, "messages", msgs);
    if (tools) json_object_set(body, "tools", tools);
    if (json_object_size(vars) || raw) json_object_set(body, "chat_template_kwargs", vars);
    json_object_set_new(body, "add_generation_prompt", json_boolean(gen));
    char msg[600];
    size_t n_out = 0;
    weft_status st = raw ? weft_chat_template_apply_raw(&ct, body, &out, &n_out, msg, sizeof msg)
                         : weft_chat_template_apply(&ct, body, &out, &n_out, msg, sizeof msg);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft template: %s\n", msg);
        goto done;
    }
    fwrite(out, 1, n_out, stdout);
    rc = 0;
done:
    free(out);
    free(def);
    weft_chat_template_free(&ct);
    json_decref(body);
    weft_tokenizer_free(tok);
    weft_gguf_close(g);
    json_decref(vars);
    json_decref(msgs);
    json_decref(tools);
    return rc;
}
