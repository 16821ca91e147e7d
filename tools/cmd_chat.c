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
#include "server/chat_template.h"
#include "server/prompt.h"
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
    struct weft_engine *e;         /* its prefix cache keeps the conversation's KV between turns */
    const struct weft_sampling_params *sp;
    struct prompt_rules rules;     /* the model's chat template (or --chat-template FILE) and tokenizer */
    int n_predict;
    const char *const *stops;
    uint32_t n_stops;
    bool cancellable;              /* the reply stops when `interrupted` is set */
    uint32_t draws;                /* the sampler's draws in earlier turns: a seeded chat continues its stream */
};

/* Render the conversation and generate the assistant's reply (streamed to
 * stdout): the whole conversation is the prompt; the engine's prefix cache
 * computes only what the last turn did not. */
static int chat_turn(struct chat_state *st, struct conv *c)
{
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    struct gen_result r = {0};
    /* the conversation as a chat request renders it (server/prompt.h): the same prompt weft serve computes */
    struct gen_params p;
    memset(&p, 0, sizeof p);
    p.chat = true;
    p.msgs = c->msgs;
    p.n_msgs = (uint32_t)c->n;
    p.add_generation_prompt = true;
    char why[512];
    if (weft_prompt_tokens(&st->rules, &p, &ids, &n, NULL, why, sizeof why) != WEFT_OK) {
        fprintf(stderr, "weft: %s\n", why);
        goto out;
    }
    if (n >= weft_engine_n_ctx(st->e)) {
        fprintf(stderr, "weft: conversation is %zu tokens, the context holds %u\n", n, weft_engine_n_ctx(st->e));
        goto out;
    }
    struct gen_opts go = {.sp = st->sp, .n_predict = st->n_predict, .stops = st->stops, .n_stops = st->n_stops,
                          .stream = stdout, .cancel = st->cancellable ? &interrupted : NULL, .sample_pos = st->draws};
    weft_status ws = weft_gen_run(st->e, st->m, ids, n, &go, &r);
    if (interrupted) fputs(" [stopped]", stdout);
    interrupted = 0;
    fputc('\n', stdout);
    fflush(stdout);
    if (ws != WEFT_OK) { weft_cli_fail("generation failed"); goto out; }
    st->draws += (uint32_t)r.n + (r.stopped_eog ? 1u : 0u);   /* the end-of-generation token was a draw too */
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
    const char *system = NULL, *tmpl_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--system") && i + 1 < argc) { system = argv[++i]; continue; }
        if (!strcmp(argv[i], "--chat-template") && i + 1 < argc) { tmpl_path = argv[++i]; continue; }
        if (!strcmp(argv[i], "--template-system")) {
            fprintf(stderr, "weft chat: --template-system is gone: the model's own template renders the chat and "
                            "adds its default system prompt itself\n");
            return 2;
        }
        int r = weft_cli_parse_common(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            bool help = !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
            if (!help) {
                weft_cli_unknown_option("chat", argv[i], i + 1 == argc);
                return 2;
            }
            printf("usage: weft chat [-m MODEL] [-p MESSAGE] [--system TEXT] [--chat-template FILE] [options]\n"
                   "  with -p: answer that one message and exit; otherwise read messages from stdin:\n"
                   "  Ctrl-C stops the reply being written; Ctrl-C at the prompt, Ctrl-D or /exit quits;\n"
                   "  /reset starts the conversation over\n"
                   "  the model's own Jinja chat template renders the conversation (a default system prompt\n"
                   "  included where it has one); --chat-template FILE gives another\n");
            weft_cli_usage_common_to(stdout);
            return 0;
        }
    }
    struct weft_backend *be;
    struct weft_model *m;
    if (weft_cli_open(&o, &be, &m)) return 1;
    int rc = 1;
    struct conv c = {0};
    struct chat_state st = {.m = m, .sp = &o.sp, .n_predict = o.n_predict, .stops = o.stops, .n_stops = o.n_stops};
    struct chat_template ct;
    if (weft_chat_template_load(&ct, weft_model_gguf(m), weft_model_tokenizer(m), tmpl_path) != WEFT_OK) {
        fprintf(stderr, "weft chat: %s\n", weft_last_error());
        weft_cli_close(be, m);
        return 1;
    }
    if (!ct.t) {
        fprintf(stderr, "weft chat: the model has no chat template (tokenizer.chat_template) and its vocabulary is "
                        "not ChatML's: give one with --chat-template FILE\n");
        weft_chat_template_free(&ct);
        weft_cli_close(be, m);
        return 1;
    }
    st.rules.tok = weft_model_tokenizer(m);
    st.rules.tmpl = &ct;
    if (system && conv_add(&c, "system", system)) goto out;
    struct weft_sampler *probe = NULL;   /* the sampling options checked before any work */
    if (weft_sampler_init(&o.sp, (int32_t)weft_model_hparams(m)->n_vocab, &probe) != WEFT_OK ||
        weft_gen_engine(m, o.n_ctx ? (uint32_t)o.n_ctx : weft_model_hparams(m)->n_ctx_train, (uint32_t)o.batch,
                        &st.e) != WEFT_OK) {
        weft_sampler_free(probe);
        weft_cli_fail("cannot start chat");
        goto out;
    }
    weft_sampler_free(probe);
    if (o.verbose) {
        char d[160];
        weft_chat_template_describe(&ct, d, sizeof d);
        fprintf(stderr, "weft: chat template %s\n", d);
    }
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
            st.draws = 0;   /* the sampler's stream starts over, as at the first turn */
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
    weft_chat_template_free(&ct);
    weft_engine_free(st.e);
    weft_cli_close(be, m);
    return rc;
}
