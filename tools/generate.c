#include "tools/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/stop.h"
#include "tools/cli_common.h"

static weft_status append(struct gen_result *r, size_t *cap, const char *s, size_t n)
{
    if (r->text_len + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 256) + n;
        char *t = realloc(r->text, c);
        if (!t) return weft_error(WEFT_ERR_NOMEM, "out of memory");
        r->text = t;
        *cap = c;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return WEFT_OK;
}

/* The next token: the draw if the grammar allows it, else a second draw at
 * the same position over the allowed tokens (core/engine.c's rule). */
static weft_status draw(struct weft_sampler *smp, const float *logits, struct gen_grammar *gr,
                        struct weft_sample *out)
{
    uint64_t pos = weft_sampler_position(smp);
    weft_status st = weft_sampler_sample(smp, logits, out);
    if (st != WEFT_OK || !gr) return st;
    double t0 = weft_cli_now_ms();
    if (!weft_grammar_allowed(gr->st, out->id)) {
        gr->resampled++;
        st = weft_grammar_mask(gr->st, gr->mask);
        weft_sampler_set_position(smp, pos);
        if (st == WEFT_OK) st = weft_sampler_sample_masked(smp, logits, gr->mask, 1, out);
        if (st == WEFT_ERR_INVALID_ARG)
            st = weft_error(WEFT_ERR_INVALID_ARG, "grammar: no token of the vocabulary can continue the text");
    }
    gr->grammar_ms += weft_cli_now_ms() - t0;
    return st;
}

weft_status weft_gen_run(struct weft_session *s, const struct weft_model *m, struct weft_sampler *smp,
                    const int32_t *prompt, size_t n_prompt, int n_predict, const char *const *stops,
                    uint32_t n_stops, FILE *stream, struct gen_result *r)
{
    return weft_gen_run_grammar(s, m, smp, prompt, n_prompt, n_predict, stops, n_stops, stream, NULL, r);
}

weft_status weft_gen_run_grammar(struct weft_session *s, const struct weft_model *m, struct weft_sampler *smp,
                            const int32_t *prompt, size_t n_prompt, int n_predict, const char *const *stops,
                            uint32_t n_stops, FILE *stream, struct gen_grammar *gr, struct gen_result *r)
{
    memset(r, 0, sizeof *r);
    size_t cap_text = 0;
    weft_status st = append(r, &cap_text, "", 0);
    if (st != WEFT_OK) return st;
    r->ids = malloc(sizeof(int32_t) * (n_predict > 0 ? n_predict : 1));
    r->samples = malloc(sizeof(struct weft_sample) * (n_predict > 0 ? n_predict : 1));
    if (!r->ids || !r->samples) return weft_error(WEFT_ERR_NOMEM, "out of memory");

    const float *logits = NULL;
    double t0 = weft_cli_now_ms();
    if (n_prompt > 0 && (st = weft_session_eval(s, prompt, n_prompt, &logits)) != WEFT_OK) return st;
    r->prompt_ms = weft_cli_now_ms() - t0;
    r->n_prompt = n_prompt;
    if (!logits) return weft_error(WEFT_ERR_INVALID_ARG, "nothing to generate from: empty prompt");
    for (size_t i = 0; i < n_prompt; i++) weft_sampler_accept(smp, prompt[i]);

    struct weft_stop stop;
    struct weft_stop_cfg scfg = {.tok = weft_model_tokenizer(m), .strings = stops, .n_strings = n_stops,
                                 .continues_prompt = true};  /* keep the generation's leading space */
    if ((st = weft_stop_init(&stop, &scfg)) != WEFT_OK) return st;
    struct weft_stop_step step;
    t0 = weft_cli_now_ms();
    for (int i = 0; i < n_predict; i++) {
        struct weft_sample smpl;
        if (gr && weft_grammar_finished(gr->st)) { r->stopped_grammar = true; break; }
        if ((st = draw(smp, logits, gr, &smpl)) != WEFT_OK) break;
        if (gr && !weft_tokenizer_is_eog(weft_model_tokenizer(m), smpl.id)) {
            double t0g = weft_cli_now_ms();
            st = weft_grammar_advance(gr->st, smpl.id);
            gr->grammar_ms += weft_cli_now_ms() - t0g;
            if (st != WEFT_OK) break;
        }
        if ((st = weft_stop_push(&stop, smpl.id, &step)) != WEFT_OK) break;
        if (stream && step.emit_len) { fwrite(stop.text + step.emit_from, 1, step.emit_len, stream); fflush(stream); }
        if (step.stop == WEFT_STOP_TOKEN) { r->stopped_eog = true; break; }
        weft_sampler_accept(smp, smpl.id);
        r->ids[r->n] = smpl.id;
        r->samples[r->n] = smpl;
        r->n++;
        if ((st = weft_session_eval(s, &smpl.id, 1, &logits)) != WEFT_OK) {
            if (st == WEFT_ERR_CONTEXT) {  /* context full: stop, keep what we have */
                st = WEFT_OK;
                r->stopped_ctx = true;
            }
            break;
        }
        if (step.stop == WEFT_STOP_STRING) { r->stopped_string = true; break; }
    }
    r->gen_ms = weft_cli_now_ms() - t0;
    if (st == WEFT_OK && (st = weft_stop_end(&stop, &step)) == WEFT_OK) {
        if (stream && step.emit_len) fwrite(stop.text + step.emit_from, 1, step.emit_len, stream);
        st = append(r, &cap_text, stop.text, stop.len);
    }
    weft_stop_free(&stop);
    return st;
}

void weft_gen_result_free(struct gen_result *r)
{
    free(r->ids);
    free(r->samples);
    free(r->text);
    memset(r, 0, sizeof *r);
}
