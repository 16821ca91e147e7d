/* `weft chat`: a conversation using the model's chat template.
 *
 * Reading messages from stdin: Ctrl-C (SIGINT) stops the reply being
 * written (what it has so far stays in the conversation) and the prompt
 * comes back; Ctrl-C at the prompt, Ctrl-D (end of input) or /exit ends
 * the program; /reset forgets the conversation (the system message stays). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/chat.h"
#include "core/stop.h"
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
    c->msgs[c->n] = (struct weft_chat_msg){.role = role, .content = dup};
    c->n++;
    return 0;
}

static void conv_free(struct conv *c)
{
    for (size_t i = 0; i < c->n; i++) free(c->owned[i]);
    free(c->owned);
    free(c->msgs);
}

/* SIGINT while reading messages: set by the handler, read by the reply loop */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
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
    bool cancellable;              /* the reply stops when `interrupted` is set */
};

/* weft_gen_run (tools/generate.h) with a way out: the same steps, stopping
 * before the next token once `interrupted` is set (the session then holds
 * the prompt and every token generated, as weft_gen_run leaves it). */
static weft_status chat_generate(struct chat_state *cs, const int32_t *prompt, size_t n_prompt,
                                 struct gen_result *r)
{
    memset(r, 0, sizeof *r);
    int n_predict = cs->n_predict > 0 ? cs->n_predict : 1;
    r->ids = malloc(sizeof(int32_t) * (size_t)n_predict);
    r->samples = malloc(sizeof(struct weft_sample) * (size_t)n_predict);
    if (!r->ids || !r->samples) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    const float *logits = NULL;
    weft_status st = weft_session_eval(cs->s, prompt, n_prompt, &logits);
    if (st != WEFT_OK) return st;
    if (!logits) return weft_error(WEFT_ERR_INVALID_ARG, "nothing to generate from: empty prompt");
    r->n_prompt = n_prompt;
    for (size_t i = 0; i < n_prompt; i++) weft_sampler_accept(cs->smp, prompt[i]);
    struct weft_stop stop;
    struct weft_stop_cfg scfg = {.tok = weft_model_tokenizer(cs->m), .strings = cs->stops, .n_strings = cs->n_stops,
                                 .continues_prompt = true};
    if ((st = weft_stop_init(&stop, &scfg)) != WEFT_OK) return st;
    struct weft_stop_step step;
    for (int i = 0; i < cs->n_predict && !interrupted; i++) {
        struct weft_sample smpl;
        if ((st = weft_sampler_sample(cs->smp, logits, &smpl)) != WEFT_OK) break;
        if ((st = weft_stop_push(&stop, smpl.id, &step)) != WEFT_OK) break;
        if (step.emit_len) {
            fwrite(stop.text + step.emit_from, 1, step.emit_len, stdout);
            fflush(stdout);
        }
        if (step.stop == WEFT_STOP_TOKEN) break;
        weft_sampler_accept(cs->smp, smpl.id);
        r->ids[r->n] = smpl.id;
        r->samples[r->n] = smpl;
        r->n++;
        if ((st = weft_session_eval(cs->s, &smpl.id, 1, &logits)) != WEFT_OK) {
            if (st == WEFT_ERR_CONTEXT) st = WEFT_OK;  /* context full: keep what we have */
            break;
        }
        if (step.stop == WEFT_STOP_STRING) break;
    }
    if (st == WEFT_OK && (st = weft_stop_end(&stop, &step)) == WEFT_OK) {
        if (step.emit_len) fwrite(stop.text + step.emit_from, 1, step.emit_len, stdout);
        r->text = malloc(stop.len + 1);
        if (r->text) {
            memcpy(r->text, stop.text ? stop.text : "", stop.len);
            r->text[stop.len] = '\0';
            r->text_len = stop.len;
        } else {
            st = weft_error(WEFT_ERR_NOMEM, "out of memory");
        }
    }
    weft_stop_free(&stop);
    return st;
}

/* Render the conversation, evaluate what the session does not hold yet, and
 * generate the assistant's reply (streamed to stdout). */
static int chat_turn(struct chat_state *st, struct conv *c)
{
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    struct gen_result r = {0};
    if (weft_chat_render(st->style, c->msgs, c->n, true, &text) != WEFT_OK) { weft_cli_fail("chat template"); goto out; }
    if (weft_tokenize(weft_model_tokenizer(st->m), text, strlen(text), true, true, &ids, &n) != WEFT_OK) { weft_cli_fail("tokenize"); goto out; }
    if (n >= weft_session_n_ctx(st->s)) {
        fprintf(stderr, "weft: conversation is %zu tokens, the context holds %u\n", n, weft_session_n_ctx(st->s));
        goto out;
    }
    size_t common = 0;
    while (common < n && common < st->n_hist && ids[common] == st->hist[common]) common++;
    if (common == n) common--;  /* re-evaluate the last token to get fresh logits */
    weft_session_truncate(st->s, (uint32_t)common);
    weft_status ws = st->cancellable
                         ? chat_generate(st, ids + common, n - common, &r)
                         : weft_gen_run(st->s, st->m, st->smp, ids + common, n - common, st->n_predict, st->stops,
                                   st->n_stops, stdout, &r);
    if (interrupted) fputs(" [stopped]", stdout);
    interrupted = 0;
    fputc('\n', stdout);
    fflush(stdout);
    if (ws != WEFT_OK) { weft_cli_fail("generation failed"); goto out; }
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
    weft_gen_result_free(&r);
    free(ids);
    free(text);
    return rc;
}

int weft_cmd_chat(int argc, char **argv)
{
    struct cli_opts o;
    weft_cli_opts_default(&o);
    o.n_predict = 512;
    const char *system = NULL;
    bool template_system = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--system") && i + 1 < argc) { system = argv[++i]; continue; }
        if (!strcmp(argv[i], "--template-system")) { template_system = true; continue; }
        int r = weft_cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            bool help = !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
            if (!help) {
                weft_cli_unknown_option("chat", argv[i], i + 1 == argc);
                return 2;
            }
            printf("usage: weft chat [-m MODEL] [-p MESSAGE] [--system TEXT | --template-system] [options]\n"
                   "  with -p: answer that one message and exit; otherwise read messages from stdin:\n"
                   "  Ctrl-C stops the reply being written; Ctrl-C at the prompt, Ctrl-D or /exit quits;\n"
                   "  /reset starts the conversation over\n"
                   "  --template-system: use the default system prompt the model's template defines\n");
            weft_cli_usage_common_to(stdout);
            return 0;
        }
    }
    struct weft_backend *be;
    struct weft_model *m;
    if (weft_cli_open(&o, &be, &m)) return 1;
    int rc = 1;
    struct conv c = {0};
    struct chat_state st = {.m = m, .n_predict = o.n_predict, .stops = o.stops, .n_stops = o.n_stops};
    const char *tmpl = NULL;
    weft_gguf_get_str(weft_model_gguf(m), "tokenizer.chat_template", &tmpl, NULL);
    st.style = weft_chat_detect(tmpl);
    /* Like llama.cpp's built-in templates, no system message unless asked:
     * --template-system adds the one the Jinja template would inject. */
    if (!system && template_system) system = weft_chat_default_system(tmpl);
    if (system && conv_add(&c, "system", system)) goto out;
    if (weft_session_init(m, o.n_ctx ? (uint32_t)o.n_ctx : weft_model_hparams(m)->n_ctx_train, (uint32_t)o.batch, &st.s) != WEFT_OK ||
        weft_sampler_init(&o.sp, (int32_t)weft_model_hparams(m)->n_vocab, &st.smp) != WEFT_OK) {
        weft_cli_fail("cannot start chat");
        goto out;
    }
    if (o.verbose) fprintf(stderr, "weft: chat template style %s\n", weft_chat_style_name(st.style));
    if (o.prompt) {
        if (conv_add(&c, "user", o.prompt) || chat_turn(&st, &c)) goto out;
        rc = 0;
        goto out;
    }
    bool tty = isatty(STDIN_FILENO);
    /* Ctrl-C stops a reply, not the program: no SA_RESTART, so at the
     * prompt it ends the read (and the program) */
    struct sigaction sa = {.sa_handler = on_sigint}, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    st.cancellable = true;
    size_t n_keep = c.n;  /* /reset keeps the system message */
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        interrupted = 0;
        errno = 0;
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0 || interrupted) {
            if (tty) fputc('\n', stdout);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            for (size_t i = n_keep; i < c.n; i++) free(c.owned[i]);
            c.n = n_keep;
            st.n_hist = 0;
            weft_session_reset(st.s);
            weft_sampler_free(st.smp);
            st.smp = NULL;
            if (weft_sampler_init(&o.sp, (int32_t)weft_model_hparams(m)->n_vocab, &st.smp) != WEFT_OK) {
                weft_cli_fail("cannot restart the sampler");
                free(line);
                goto out;
            }
            if (tty) fputs("(the conversation starts over)\n", stdout);
            continue;
        }
        if (conv_add(&c, "user", line) || chat_turn(&st, &c)) { free(line); goto out; }
    }
    sigaction(SIGINT, &old_sa, NULL);
    free(line);
    rc = 0;
out:
    conv_free(&c);
    free(st.hist);
    weft_sampler_free(st.smp);
    weft_session_free(st.s);
    weft_cli_close(be, m);
    return rc;
}
