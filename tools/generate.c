/* tools/generate.h: weft run and weft chat through the engine. */
#include "tools/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "core/stop.h"
#include "tools/cli_common.h"

weft_status weft_gen_engine(const struct weft_model *m, uint32_t n_ctx, uint32_t batch, struct weft_engine **out)
{
    struct weft_engine_config cfg = {
        .n_ctx = n_ctx,
        .max_seqs = 1,
        .max_step_tokens = batch ? batch : 512,
        .itl_target_ms = -1,   /* one stream: nothing to hold a prompt back for */
        .no_swap = true,       /* one sequence is never preempted: no host swap area */
    };
    return weft_engine_create(m, &cfg, out);
}

/* what one request's events leave, and the text through core/stop.h */
struct gen_run {
    struct gen_result *r;
    const struct gen_opts *go;
    struct weft_stop stop;
    size_t cap;                /* of r->ids / r->samples */
    double t_submit, t_first;
    bool done, stop_string;
    enum weft_finish fin;
    bool fin_token;            /* the final event carried a token */
    weft_status st;
    char message[256];
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct gen_run *g = user;
    struct gen_result *r = g->r;
    if (ev->n_prompt && !r->n_prompt) r->n_prompt = ev->n_prompt - ev->n_cached;
    if (ev->has_token && !g->stop_string && g->st == WEFT_OK) {
        if (!g->t_first) g->t_first = weft_cli_now_ms();
        struct weft_stop_step step;
        weft_status st = weft_stop_push(&g->stop, ev->token.id, &step);
        if (st != WEFT_OK) {
            g->st = st;
        } else if (step.stop == WEFT_STOP_TOKEN) {
            g->done = true;   /* a stop token the engine let through: as end of generation */
            r->stopped_eog = true;
        } else {
            if (g->go->stream && step.emit_len) {
                fwrite(g->stop.text + step.emit_from, 1, step.emit_len, g->go->stream);
                fflush(g->go->stream);
            }
            if (r->n < g->cap) {
                r->ids[r->n] = ev->token.id;
                r->samples[r->n] = ev->token;
                r->n++;
            }
            if (step.stop == WEFT_STOP_STRING) g->stop_string = true;
        }
    }
    if (ev->finish != WEFT_FINISH_NONE) {
        g->done = true;
        g->fin = ev->finish;
        g->fin_token = ev->has_token;
        if (ev->finish == WEFT_FINISH_ERROR) {
            g->st = ev->status ? ev->status : WEFT_ERR_INVALID_ARG;
            snprintf(g->message, sizeof g->message, "%s", ev->message ? ev->message : "generation failed");
        }
    }
}

weft_status weft_gen_run(struct weft_engine *e, const struct weft_model *m, const int32_t *prompt, size_t n_prompt,
                         const struct gen_opts *go, struct gen_result *r)
{
    memset(r, 0, sizeof *r);
    if (n_prompt == 0) return weft_error(WEFT_ERR_INVALID_ARG, "nothing to generate from: empty prompt");
    const uint32_t n_ctx = weft_engine_n_ctx(e);
    if (n_prompt > n_ctx)
        return weft_error(WEFT_ERR_CONTEXT, "prompt of %zu tokens exceeds the context of %u", n_prompt, n_ctx);
    /* the engine holds prompt + new tokens within n_ctx: fewer new ones when
     * the context ends first */
    size_t room = n_ctx - n_prompt, want = go->n_predict > 0 ? (size_t)go->n_predict : 0;
    size_t max_new = want < room ? want : room;
    struct gen_run g = {.r = r, .go = go, .cap = max_new ? max_new : 1};
    r->ids = malloc(sizeof *r->ids * g.cap);
    r->samples = malloc(sizeof *r->samples * g.cap);
    if (!r->ids || !r->samples) return weft_error(WEFT_ERR_NOMEM, "out of memory");
    struct weft_stop_cfg scfg = {.tok = weft_model_tokenizer(m), .strings = go->stops, .n_strings = go->n_stops,
                                 .continues_prompt = true};  /* keep the generation's leading space */
    weft_status st = weft_stop_init(&g.stop, &scfg);
    if (st != WEFT_OK) return st;
    struct weft_engine_stats s0;
    weft_engine_stats(e, &s0);
    g.t_submit = weft_cli_now_ms();
    if (max_new == 0) {   /* -n 0, or the prompt fills the context: nothing is generated */
        r->stopped_ctx = want > 0;
        g.t_submit = weft_cli_now_ms();
        goto text;
    }
    uint32_t pos = go->sample_pos <= n_prompt ? go->sample_pos : (uint32_t)n_prompt;
    struct weft_request rq = {.prompt = prompt, .n_prompt = (uint32_t)n_prompt, .max_tokens = (uint32_t)max_new,
                              .sampling = *go->sp, .grammar = go->grammar, .sample_pos = go->grammar ? 0 : pos,
                              .cb = on_event, .user = &g};
    uint64_t id = 0;
    if ((st = weft_engine_submit(e, &rq, &id)) != WEFT_OK) goto out;
    g.t_submit = weft_cli_now_ms();   /* after submit: a grammar's index is built there */
    bool aborting = false;
    while (!g.done) {
        bool did = false;
        if ((st = weft_engine_step(e, &did)) != WEFT_OK) break;
        bool cancel = go->cancel && *go->cancel;
        if (!g.done && !aborting && (g.stop_string || cancel || g.st != WEFT_OK)) {
            weft_engine_abort(e, id);
            aborting = true;
            r->cancelled = cancel && !g.stop_string;
        }
        if (!did && !g.done && !aborting) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "engine: the request made no progress");
            break;
        }
    }
    if (!g.done) {   /* an error: end the request before its callback's state goes */
        weft_engine_abort(e, id);
        for (int i = 0; i < 64 && !g.done; i++) {
            bool did = false;
            if (weft_engine_step(e, &did) != WEFT_OK && !did) break;
        }
        goto out;
    }
    if (g.st != WEFT_OK) {
        st = g.message[0] ? weft_error(g.st, "%s", g.message) : g.st;
        goto out;
    }
    r->stopped_string = g.stop_string;
    if (!g.stop_string && !r->cancelled) {
        if (g.fin == WEFT_FINISH_STOP && g.fin_token) r->stopped_grammar = true;
        else if (g.fin == WEFT_FINISH_STOP) r->stopped_eog = true;
        else if (g.fin == WEFT_FINISH_LENGTH && max_new < want) r->stopped_ctx = true;
    }
text:
    if (g.t_first) {
        r->prompt_ms = g.t_first - g.t_submit;
        r->gen_ms = weft_cli_now_ms() - g.t_first;
    } else {
        r->prompt_ms = weft_cli_now_ms() - g.t_submit;
    }
    struct weft_engine_stats s1;
    weft_engine_stats(e, &s1);
    r->grammar_masks = s1.grammar_masks - s0.grammar_masks;
    r->grammar_mask_hits = s1.grammar_mask_hits - s0.grammar_mask_hits;
    r->grammar_resampled = s1.grammar_resampled - s0.grammar_resampled;
    r->grammar_ms = (s1.grammar_seconds - s0.grammar_seconds) * 1e3;
    struct weft_stop_step step;
    if ((st = weft_stop_end(&g.stop, &step)) == WEFT_OK) {
        if (go->stream && step.emit_len) fwrite(g.stop.text + step.emit_from, 1, step.emit_len, go->stream);
        r->text = malloc(g.stop.len + 1);
        if (!r->text) {
            st = weft_error(WEFT_ERR_NOMEM, "out of memory");
        } else {
            if (g.stop.len) memcpy(r->text, g.stop.text, g.stop.len);
            r->text[g.stop.len] = '\0';
            r->text_len = g.stop.len;
        }
    }
out:
    weft_stop_free(&g.stop);
    return st;
}

double weft_gen_tps(const struct gen_result *r)
{
    return r->n > 1 && r->gen_ms > 0 ? (double)(r->n - 1) * 1e3 / r->gen_ms : 0.0;
}

void weft_gen_result_free(struct gen_result *r)
{
    free(r->ids);
    free(r->samples);
    free(r->text);
    memset(r, 0, sizeof *r);
}
