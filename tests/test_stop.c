/* core/stop: stop tokens, stop strings and their hold-back, on the SmolLM2
 * vocabulary (byte-level BPE) and stories260K (SentencePiece). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "core/stop.h"
#include "core/tokenizer.h"
#include "tests/check.h"
#include "tests/test_rand.h"

#ifndef WEFT_SHARED_DIR
#define WEFT_SHARED_DIR "../shared"
#endif

static struct weft_tokenizer *bpe, *spm;

static struct weft_tokenizer *load(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", WEFT_SHARED_DIR, name);
    struct weft_gguf *g = NULL;
    if (weft_gguf_open(path, &g)) return NULL;
    struct weft_tokenizer *t = NULL;
    if (weft_tokenizer_load(g, &t)) t = NULL;
    weft_gguf_close(g);
    return t;
}

static int32_t *tok(struct weft_tokenizer *t, const char *text, size_t *n)
{
    int32_t *ids = NULL;
    *n = 0;
    CHECK_EQ_INT(weft_tokenize(t, text, strlen(text), false, false, &ids, n), WEFT_OK);
    return ids;
}

/* Push every id, collecting what is released; returns the stop kind. */
static enum weft_stop_kind run(struct weft_stop *s, const int32_t *ids, size_t n, char *out, size_t *out_len,
                               size_t *max_released)
{
    struct weft_stop_step st;
    enum weft_stop_kind k = WEFT_STOP_NONE;
    *out_len = 0;
    *max_released = 0;
    for (size_t i = 0; i < n && k == WEFT_STOP_NONE; i++) {
        CHECK_EQ_INT(weft_stop_push(s, ids[i], &st), WEFT_OK);
        CHECK_EQ_INT(st.emit_from, *out_len);
        memcpy(out + *out_len, s->text + st.emit_from, st.emit_len);
        *out_len += st.emit_len;
        if (s->released > *max_released) *max_released = s->released;
        k = st.stop;
    }
    CHECK_EQ_INT(weft_stop_end(s, &st), WEFT_OK);
    memcpy(out + *out_len, s->text + st.emit_from, st.emit_len);
    *out_len += st.emit_len;
    return k;
}

static void no_stop_strings_release_everything_at_once(void)
{
    size_t n;
    int32_t *ids = tok(bpe, "Hello world, this is a test.", &n);
    struct weft_stop_cfg cfg = {.tok = bpe, .continues_prompt = true};
    struct weft_stop s;
    CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
    struct weft_stop_step st;
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(weft_stop_push(&s, ids[i], &st), WEFT_OK);
        CHECK_EQ_INT(st.stop, WEFT_STOP_NONE);
        CHECK_EQ_INT(s.released, s.len);  /* nothing held back */
    }
    CHECK(s.len == strlen("Hello world, this is a test.") && !memcmp(s.text, "Hello world, this is a test.", s.len));
    CHECK_EQ_INT(s.n_tokens, n);
    weft_stop_free(&s);
    free(ids);
}

/* "o w" spans two tokens: "Hello" releases "Hell" (its "o" may begin it),
 * " world" completes it and the text is cut before it. */
static void a_stop_string_across_tokens_is_held_back_then_cut(void)
{
    size_t n;
    int32_t *ids = tok(bpe, "Hello world again", &n);
    const char *stops[] = {"o w"};
    struct weft_stop_cfg cfg = {.tok = bpe, .strings = stops, .n_strings = 1, .continues_prompt = true};
    struct weft_stop s;
    CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
    struct weft_stop_step st;
    CHECK_EQ_INT(weft_stop_push(&s, ids[0], &st), WEFT_OK);
    CHECK_EQ_INT(s.len, 5);
    CHECK_EQ_INT(s.released, 4);
    CHECK(st.emit_from == 0 && st.emit_len == 4 && st.tok_from == 0 && st.tok_len == 5);
    CHECK_EQ_INT(weft_stop_push(&s, ids[1], &st), WEFT_OK);
    CHECK_EQ_INT(st.stop, WEFT_STOP_STRING);
    CHECK(s.len == 4 && !memcmp(s.text, "Hell", 4) && s.released == 4 && st.emit_len == 0);
    CHECK(st.tok_from == 5 && st.tok_len == 6 && !memcmp(s.text + st.tok_from, " world", 6));
    /* after a stop nothing more is taken or released */
    CHECK_EQ_INT(weft_stop_push(&s, ids[2], &st), WEFT_OK);
    CHECK(st.stop == WEFT_STOP_STRING && st.emit_len == 0 && s.len == 4);
    CHECK_EQ_INT(weft_stop_end(&s, &st), WEFT_OK);
    CHECK(st.emit_len == 0 && s.len == 4);
    weft_stop_free(&s);
    free(ids);
}

/* min_tokens: a stop string ends nothing before that many tokens ("o w"
 * ends at token 2: with min_tokens 3 it is passed by; "ag" at token 3 stops) */
static void stop_strings_wait_for_min_tokens(void)
{
    size_t n;
    int32_t *ids = tok(bpe, "Hello world again", &n);
    const char *stops[] = {"o w", "ag"};
    struct weft_stop_cfg cfg = {.tok = bpe, .strings = stops, .n_strings = 2, .min_tokens = 3,
                                .continues_prompt = true};
    struct weft_stop s;
    CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
    struct weft_stop_step st;
    CHECK_EQ_INT(weft_stop_push(&s, ids[0], &st), WEFT_OK);
    CHECK_EQ_INT(weft_stop_push(&s, ids[1], &st), WEFT_OK);
    CHECK_EQ_INT(st.stop, WEFT_STOP_NONE);
    CHECK_EQ_INT(weft_stop_push(&s, ids[2], &st), WEFT_OK);
    CHECK_EQ_INT(st.stop, WEFT_STOP_STRING);
    CHECK_MSG(s.len == strlen("Hello world ") && !memcmp(s.text, "Hello world ", s.len), "%.*s", (int)s.len, s.text);
    weft_stop_free(&s);
    free(ids);
}

/* Random texts and stop strings drawn from them: the released text never
 * retracts (every released byte is in the final output), everything
 * released concatenates to the output, the output holds no stop string and
 * ends exactly where the first one began; and a fresh state that replays
 * the first k tokens (a continuation) is in the very state the
 * uninterrupted one was after k. */
static void released_text_never_retracts_and_a_replay_reaches_the_same_state(void)
{
    const char *words[] = {"the", " cat", " sat", " on", " mat", "!", " ST", "OP", "\n", " é", "ü", " 12", "3"};
    int W = (int)(sizeof words / sizeof *words);
    for (int trial = 0; trial < 200; trial++) {
        struct weft_tokenizer *t = trial % 2 ? spm : bpe;
        char text[512] = "";
        int nw = 3 + (int)(rng_unit() * 20);
        for (int i = 0; i < nw; i++) strcat(text, words[(int)(rng_unit() * W) % W]);
        size_t tl = strlen(text), n;
        int32_t *ids = tok(t, text, &n);
        char stop_a[32], stop_b[32];
        size_t a0 = (size_t)(rng_unit() * (double)tl) % tl, al = 1 + (size_t)(rng_unit() * 6);
        if (a0 + al > tl) al = tl - a0;
        memcpy(stop_a, text + a0, al);
        stop_a[al] = '\0';
        snprintf(stop_b, sizeof stop_b, "%s", trial % 3 ? "nowhere to be found" : " sat on");
        const char *stops[] = {stop_a, stop_b};
        struct weft_stop_cfg cfg = {.tok = t, .strings = stops, .n_strings = 2, .continues_prompt = trial % 4 != 0};
        struct weft_stop s;
        CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
        char out[1024];
        size_t out_len, max_rel;
        enum weft_stop_kind k = run(&s, ids, n, out, &out_len, &max_rel);
        CHECK_MSG(max_rel <= s.len, "released %zu bytes, the output is %zu (trial %d)", max_rel, s.len, trial);
        CHECK(out_len == s.len && !memcmp(out, s.text, s.len));
        CHECK(memmem(s.text, s.len, stop_a, strlen(stop_a)) == NULL);
        /* the whole detokenized text, cut at the first stop string */
        char *full = NULL;
        size_t fl = 0;
        struct weft_detok d;
        weft_detok_init(&d, t, false);
        d.first = !cfg.continues_prompt;
        size_t cap = 0;
        for (size_t i = 0; i < n; i++) {
            const char *p;
            size_t pl;
            weft_detok_push(&d, ids[i], &p, &pl);
            full = realloc(full, (cap += pl + 16));
            memcpy(full + fl, p, pl);
            fl += pl;
        }
        const char *p;
        size_t pl;
        weft_detok_flush(&d, &p, &pl);
        full = realloc(full, cap + pl + 1);
        memcpy(full + fl, p, pl);
        fl += pl;
        full[fl] = '\0';
        weft_detok_free(&d);
        char *ca = strstr(full, stop_a), *cb = strstr(full, stop_b);
        size_t cut = fl;
        if (ca && (size_t)(ca - full) < cut) cut = (size_t)(ca - full);
        if (cb && (size_t)(cb - full) < cut) cut = (size_t)(cb - full);
        CHECK_MSG(s.len == cut && !memcmp(s.text, full, cut), "trial %d: output %zu bytes, want %zu", trial, s.len, cut);
        CHECK_EQ_INT(k, cut < fl ? WEFT_STOP_STRING : WEFT_STOP_NONE);
        weft_stop_free(&s);
        free(full);
        /* replay: the state after k pushes, from a fresh one, equals the state the run had */
        for (size_t kk = 0; kk <= n; kk += 1 + n / 5) {
            struct weft_stop a, b;
            CHECK_EQ_INT(weft_stop_init(&a, &cfg), WEFT_OK);
            CHECK_EQ_INT(weft_stop_init(&b, &cfg), WEFT_OK);
            struct weft_stop_step st;
            for (size_t i = 0; i < kk; i++) weft_stop_push(&a, ids[i], &st);
            for (size_t i = 0; i < kk; i++) weft_stop_push(&b, ids[i], &st);
            CHECK(a.len == b.len && a.released == b.released && a.stopped == b.stopped &&
                  !memcmp(a.text, b.text, a.len) && a.dt.first == b.dt.first && a.dt.n_pend == b.dt.n_pend);
            weft_stop_free(&a);
            weft_stop_free(&b);
        }
        free(ids);
    }
}

static void stop_tokens_end_without_output_and_ignore_eos_keeps_going(void)
{
    int32_t eos = weft_tokenizer_eos(bpe);
    CHECK(eos >= 0 && weft_tokenizer_is_eog(bpe, eos));
    CHECK(weft_stop_is_token(bpe, false, NULL, 0, eos));
    CHECK(!weft_stop_is_token(bpe, true, NULL, 0, eos));
    size_t n;
    int32_t *ids = tok(bpe, "one two three", &n);
    int32_t extra[] = {ids[1]};
    CHECK(weft_stop_is_token(bpe, true, extra, 1, ids[1]) && !weft_stop_is_token(bpe, true, extra, 1, ids[0]));
    const char *stops[] = {"e t"};  /* "one" ends with its possible beginning: held */
    struct weft_stop_cfg cfg = {.tok = bpe, .ids = extra, .n_ids = 1, .strings = stops, .n_strings = 1,
                                .continues_prompt = true};
    struct weft_stop s;
    CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
    struct weft_stop_step st;
    CHECK_EQ_INT(weft_stop_push(&s, ids[0], &st), WEFT_OK);
    CHECK(s.len == 3 && s.released == 2);
    CHECK_EQ_INT(weft_stop_push(&s, ids[1], &st), WEFT_OK);  /* the stop id */
    CHECK_EQ_INT(st.stop, WEFT_STOP_TOKEN);
    CHECK(s.len == 3 && s.released == 3 && st.emit_from == 2 && st.emit_len == 1);  /* the held "e" comes out */
    CHECK_EQ_INT(s.n_tokens, 1);
    weft_stop_free(&s);
    /* ignore_eos: end-of-generation is output like any token */
    struct weft_stop_cfg c2 = {.tok = bpe, .ignore_eos = true, .continues_prompt = true};
    CHECK_EQ_INT(weft_stop_init(&s, &c2), WEFT_OK);
    CHECK_EQ_INT(weft_stop_push(&s, eos, &st), WEFT_OK);
    CHECK(st.stop == WEFT_STOP_NONE && s.n_tokens == 1);
    weft_stop_free(&s);
    free(ids);
}

/* The first piece's SentencePiece space: kept when the output continues its
 * prompt, dropped when it starts a message; an incomplete character at the
 * end comes out as U+FFFD. */
static void first_space_and_incomplete_characters(void)
{
    size_t n;
    int32_t *ids = tok(spm, "hello there", &n);
    char outs[2][64];
    size_t lens[2];
    for (int cont = 0; cont < 2; cont++) {
        struct weft_stop_cfg cfg = {.tok = spm, .continues_prompt = cont};
        struct weft_stop s;
        CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
        struct weft_stop_step st;
        for (size_t i = 0; i < n; i++) {
            weft_stop_push(&s, ids[i], &st);
            if (i == 0) CHECK_EQ_INT(st.first_piece, !cont);
        }
        weft_stop_end(&s, &st);
        lens[cont] = s.len < 64 ? s.len : 63;
        memcpy(outs[cont], s.text, lens[cont]);
        weft_stop_free(&s);
    }
    /* "▁hello▁there": " hello there" continuing a prompt, "hello there" as a message */
    CHECK(lens[1] == lens[0] + 1 && outs[1][0] == ' ' && !memcmp(outs[1] + 1, outs[0], lens[0]));
    free(ids);
    /* "é" is bytes C3 A9; byte-level BPE spells the byte C3 "Ã" (U+00C3):
     * that token alone is half a character */
    int32_t half = weft_tokenizer_find(bpe, "\xc3\x83");
    CHECK(half >= 0);
    if (half >= 0) {
        struct weft_stop_cfg cfg = {.tok = bpe, .continues_prompt = true};
        struct weft_stop s;
        CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_OK);
        struct weft_stop_step st;
        weft_stop_push(&s, half, &st);
        CHECK_EQ_INT(s.len, 0);  /* nothing yet */
        weft_stop_end(&s, &st);
        CHECK(s.len == 3 && !memcmp(s.text, "\xef\xbf\xbd", 3) && st.emit_len == 3);
        weft_stop_free(&s);
    }
}

static void empty_stop_strings_are_refused(void)
{
    const char *stops[] = {"ok", ""};
    struct weft_stop_cfg cfg = {.tok = bpe, .strings = stops, .n_strings = 2};
    struct weft_stop s;
    CHECK_EQ_INT(weft_stop_init(&s, &cfg), WEFT_ERR_INVALID_ARG);
    struct weft_stop_cfg none = {0};
    CHECK_EQ_INT(weft_stop_init(&s, &none), WEFT_ERR_INVALID_ARG);
}

int main(void)
{
    bpe = load("synth-smollm2-vocab.gguf");
    spm = load("stories260K.gguf");
    if (!bpe || !spm) SKIP_ALL("../shared/models: synth-smollm2-vocab.gguf or stories260K.gguf missing");
    RUN(no_stop_strings_release_everything_at_once);
    RUN(a_stop_string_across_tokens_is_held_back_then_cut);
    RUN(stop_strings_wait_for_min_tokens);
    RUN(released_text_never_retracts_and_a_replay_reaches_the_same_state);
    RUN(stop_tokens_end_without_output_and_ignore_eos_keeps_going);
    RUN(first_space_and_incomplete_characters);
    RUN(empty_stop_strings_are_refused);
    weft_tokenizer_free(bpe);
    weft_tokenizer_free(spm);
    return check_summary();
}
