/* `weft chat`: a conversation using the model's chat template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/chat.h"
#include "tools/cli.h"
#include "tools/cli_common.h"
#include "tools/generate.h"

struct conv {
    struct weft_chat_msg *msgs;
    char **owned;                  /* contents we allocated */
    size_t n, cap;
};

static int conv_add(struct conv *c, const char *role, const char *content)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        struct weft_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return -1;
        c->msgs = m;
        char **o = realloc(c->owned, cap * sizeof *o);
        if (!o) return -1;
        c->owned = o;
        c->cap = cap;
    }
    char *dup = strdup(content);
    if (!dup) return -1;
    c->owned[c->n] = dup;
    c->msgs[c->n].role = role;
    c->msgs[c->n].content = dup;
    c->n++;
    return 0;
}

static void conv_free(struct conv *c)
{
    for (size_t i = 0; i < c->n; i++) free(c->owned[i]);
    free(c->owned);
    free(c->msgs);
}

struct chat_state {
    struct weft_model *m;
    struct weft_session *s;
    struct weft_sampler *smp;
    enum weft_chat_style style;
    int32_t *hist;                 /* tokens the session holds */
    size_t n_hist, cap_hist;
    int n_predict;
    const char *const *stops;
    uint32_t n_stops;
};

/* Render the conversation, evaluate what the session does not hold yet, and
 * generate the assistant's reply (streamed to stdout). */
static int chat_turn(struct chat_state *st, struct conv *c)
{
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    struct gen_result r = {0};
    if (weft_chat_render(st->style, c->msgs, c->n, true, &text) != WEFT_OK) { cli_fail("chat template"); goto out; }
    if (weft_tokenize(st->m->tok, text, strlen(text), true, true, &ids, &n) != WEFT_OK) { cli_fail("tokenize"); goto out; }
    if (n >= weft_session_n_ctx(st->s)) {
        fprintf(stderr, "weft: conversation is %zu tokens, the context holds %u\n", n, weft_session_n_ctx(st->s));
        goto out;
    }
    size_t common = 0;
    while (common < n && common < st->n_hist && ids[common] == st->hist[common]) common++;
    if (common == n) common--;  /* re-evaluate the last token to get fresh logits */
    weft_session_truncate(st->s, (uint32_t)common);
    weft_status ws = gen_run(st->s, st->m, st->smp, ids + common, n - common, st->n_predict, st->stops, st->n_stops, stdout, &r);
    fputc('\n', stdout);
    fflush(stdout);
    if (ws != WEFT_OK) { cli_fail("generation failed"); goto out; }
    size_t need = n + r.n;
    if (need > st->cap_hist) {
        int32_t *h = realloc(st->hist, need * sizeof *h);
        if (!h) goto out;
        st->hist = h;
        st->cap_hist = need;
    }
    memcpy(st->hist, ids, n * sizeof *ids);
    memcpy(st->hist + n, r.ids, r.n * sizeof *ids);
    st->n_hist = need;
    if (conv_add(c, "assistant", r.text)) goto out;
    rc = 0;
out:
    gen_result_free(&r);
    free(ids);
    free(text);
    return rc;
}

int weft_cmd_chat(int argc, char **argv)
{
    struct cli_opts o;
    cli_opts_default(&o);
    o.n_predict = 512;
    const char *system = NULL;
    bool template_system = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--system") && i + 1 < argc) { system = argv[++i]; continue; }
        if (!strcmp(argv[i], "--template-system")) { template_system = true; continue; }
        int r = cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "usage: weft chat [-m MODEL] [-p MESSAGE] [--system TEXT | --template-system] [options]\n"
                            "  with -p: answer that one message and exit; otherwise read messages from stdin\n"
                            "  --template-system: use the default system prompt the model's template defines\n");
            cli_usage_common();
            return 2;
        }
    }
    struct weft_backend *be;
    struct weft_model *m;
    if (cli_open(&o, &be, &m)) return 1;
    int rc = 1;
    struct conv c = {0};
    struct chat_state st = {.m = m, .n_predict = o.n_predict, .stops = o.stops, .n_stops = o.n_stops};
    const char *tmpl = NULL;
    weft_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl, NULL);
    st.style = weft_chat_detect(tmpl);
    /* Like llama.cpp's built-in templates, no system message unless asked:
     * --template-system adds the one the Jinja template would inject. */
    if (!system && template_system) system = weft_chat_default_system(tmpl);
    if (system && conv_add(&c, "system", system)) goto out;
    if (weft_session_init(m, o.n_ctx ? (uint32_t)o.n_ctx : m->hp.n_ctx_train, (uint32_t)o.batch, &st.s) != WEFT_OK ||
        weft_sampler_init(&o.sp, (int32_t)m->hp.n_vocab, &st.smp) != WEFT_OK) {
        cli_fail("cannot start chat");
        goto out;
    }
    if (o.verbose) fprintf(stderr, "weft: chat template style %s\n", weft_chat_style_name(st.style));
    if (o.prompt) {
        if (conv_add(&c, "user", o.prompt) || chat_turn(&st, &c)) goto out;
        rc = 0;
        goto out;
    }
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (conv_add(&c, "user", line) || chat_turn(&st, &c)) { free(line); goto out; }
    }
    free(line);
    rc = 0;
out:
    conv_free(&c);
    free(st.hist);
    weft_sampler_free(st.smp);
    weft_session_free(st.s);
    cli_close(be, m);
    return rc;
}
