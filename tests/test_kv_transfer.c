/* KV blocks between engines on different backends, in format v3: blocks a
 * CPU engine computed, exported and imported by a Vulkan engine (and the
 * reverse), come out again byte-identical; a greedy run on the importing
 * engine equals that engine's own all-local run, and the import counters
 * show the imported blocks served the prompt (on lavapipe the backends agree
 * to the bit or nearly, so a silent recompute would pass otherwise). A stream from
 * another model is refused whole; another KV type only with conversion on.
 * stories260K and SmolLM2-135M (when fetched); the Vulkan half needs a
 * Vulkan device (lavapipe here), else only CPU -> CPU runs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/model_impl.h"
#include "tests/check.h"
#include "tools/cli.h"

#define NGEN 16

static const char *TEXT =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she "
    "saw a big, red ball in the park. She ran to it and kicked it as hard as she could. The ball flew";

struct out {
    int32_t ids[NGEN];
    uint32_t n;
    bool done;
};

static void on_event(void *user, const struct weft_event *ev)
{
    struct out *o = user;
    if (ev->has_token && o->n < NGEN) o->ids[o->n++] = ev->token.id;
    if (ev->finish == WEFT_FINISH_ERROR) fprintf(stderr, "  request failed: %s\n", ev->message ? ev->message : "?");
    if (ev->finish != WEFT_FINISH_NONE) o->done = true;
}

static struct weft_engine *engine(const struct weft_model *m, enum weft_type kv_type, bool convert)
{
    struct weft_engine_config cfg = {.n_ctx = 512, .max_seqs = 4, .max_step_tokens = 128, .kv_type = kv_type,
                                     .kv_import_convert = convert};
    struct weft_engine *e = NULL;
    CHECK_MSG(weft_engine_create(m, &cfg, &e) == WEFT_OK, "engine: %s", weft_last_error());
    return e;
}

static bool run(struct weft_engine *e, const int32_t *p, size_t n, struct out *o)
{
    memset(o, 0, sizeof *o);
    struct weft_request rq = {.prompt = p, .n_prompt = (uint32_t)n, .max_tokens = NGEN, .ignore_eos = true,
                              .cb = on_event, .user = o};
    weft_sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    uint64_t id;
    bool ok = weft_engine_submit(e, &rq, &id) == WEFT_OK && weft_engine_run_all(e) == WEFT_OK;
    return ok && o->done && o->n == NGEN;
}

/* ||a - b|| / ||a|| over two streams' F16 payloads */
static double payload_error(const unsigned char *a, const unsigned char *b, size_t n)
{
    struct weft_kvb_header h;
    if (weft_kvb_read_header(a, n, &h) != WEFT_OK || h.layout[0].type != WEFT_TYPE_F16) return NAN;
    size_t rec = weft_kvb_record_bytes(&h);
    double err = 0, ref = 0;
    for (size_t off = h.header_bytes; off + rec <= n; off += rec)
        for (size_t i = 0; i < h.payload_bytes / 2; i++) {
            weft_half x, y;
            memcpy(&x, a + off + WEFT_KVB_BLOCK_META + 2 * i, 2);
            memcpy(&y, b + off + WEFT_KVB_BLOCK_META + 2 * i, 2);
            double d = (double)weft_half_to_f32(x) - weft_half_to_f32(y);
            err += d * d;
            ref += (double)weft_half_to_f32(x) * weft_half_to_f32(x);
        }
    return ref > 0 ? sqrt(err / ref) : 0;
}

/* One direction: `from` computes the prompt, exports; a fresh `to` engine
 * imports, runs; compared with a fresh `to` engine's own run. *made: the
 * stream `from` exported (free() it). */
static void one_way(const char *what, const struct weft_model *from, const struct weft_model *to, const int32_t *p,
                    size_t n, unsigned char **made, size_t *n_made)
{
    uint32_t want_blocks = (uint32_t)(n / WEFT_KV_BLOCK_TOKENS), usable = (uint32_t)((n - 1) / WEFT_KV_BLOCK_TOKENS);
    struct out ref, got, local;
    struct weft_engine *a = engine(from, WEFT_TYPE_F16, false), *b = engine(to, WEFT_TYPE_F16, false),
                       *c = engine(to, WEFT_TYPE_F16, false);
    if (!a || !b || !c) goto done;
    CHECK(run(a, p, n, &ref));
    uint32_t nb = 0;
    CHECK(weft_engine_kv_export_prefix(a, p, (uint32_t)n, made, n_made, &nb) == WEFT_OK);
    CHECK_EQ_INT(nb, want_blocks);
    uint32_t added = 0;
    CHECK_MSG(weft_engine_kv_import(b, *made, *n_made, &added) == WEFT_OK, "%s: import: %s", what, weft_last_error());
    CHECK_EQ_INT(added, nb);
    CHECK(run(b, p, n, &got));
    CHECK(run(c, p, n, &local));
    CHECK_MSG(!memcmp(got.ids, local.ids, sizeof got.ids), "%s: greedy after import differs from the local run", what);
    struct weft_engine_kv_stats ks;
    weft_engine_kv_stats(b, &ks);
    CHECK_EQ_INT(ks.imported, nb);
    CHECK_EQ_INT(ks.hit_imported, usable);  /* the blocks the prompt could take, all from the import */
    struct weft_engine_stats es;
    weft_engine_stats(b, &es);
    CHECK_EQ_INT(es.prefill_tokens, n - usable * WEFT_KV_BLOCK_TOKENS);  /* only the rest was computed */
    /* and out again: the same bytes */
    unsigned char *again = NULL;
    size_t n_again = 0;
    uint32_t nb2 = 0;
    CHECK(weft_engine_kv_export_prefix(b, p, (uint32_t)n, &again, &n_again, &nb2) == WEFT_OK);
    CHECK_MSG(n_again == *n_made && !memcmp(again, *made, n_again), "%s: re-exported blocks differ", what);
    /* the importing backend's own blocks for the same tokens, against the imported ones */
    unsigned char *own = NULL;
    size_t n_own = 0;
    CHECK(weft_engine_kv_export_prefix(c, p, (uint32_t)n, &own, &n_own, &nb2) == WEFT_OK);
    double err = n_own == *n_made ? payload_error(*made, own, n_own) : NAN;
    printf("  %s: %u blocks (%zu bytes) imported, %u prompt blocks served from them, %u tokens computed; "
           "greedy %u tokens == local; re-export byte-identical; its own blocks vs the imported: error %.2e\n",
           what, nb, *n_made, (unsigned)ks.hit_imported, (unsigned)es.prefill_tokens, NGEN, err);
    (void)ref;
    free(again);
    free(own);
done:
    weft_engine_free(a);
    weft_engine_free(b);
    weft_engine_free(c);
}

static void refusals(const struct weft_model *m, const struct weft_model *other, const int32_t *p, size_t n,
                     const unsigned char *s, size_t ns)
{
    /* another model's blocks: refused whole, counted, nothing imported */
    if (other) {
        struct weft_engine *e = engine(other, WEFT_TYPE_F16, false);
        uint32_t added = 9;
        CHECK(weft_engine_kv_import(e, s, ns, &added) == WEFT_ERR_MISMATCH && added == 0);
        struct weft_engine_kv_stats ks;
        weft_engine_kv_stats(e, &ks);
        CHECK(ks.rejected_streams == 1 && ks.imported == 0);
        weft_engine_free(e);
    }
    /* a Q8_0 cache: refused without conversion; with it, converted and used */
    bool q8 = weft_model_hparams(m)->head_dim % 32 == 0;  /* Q8_0 KV needs whole 32-blocks per head */
    struct weft_engine *q = q8 ? engine(m, WEFT_TYPE_Q8_0, false) : NULL, *qc = q8 ? engine(m, WEFT_TYPE_Q8_0, true) : NULL;
    if (q && qc) {
        uint32_t added = 0;
        CHECK(weft_engine_kv_import(q, s, ns, &added) == WEFT_ERR_MISMATCH && added == 0);
        CHECK(weft_engine_kv_import(qc, s, ns, &added) == WEFT_OK && added == n / WEFT_KV_BLOCK_TOKENS);
        struct out o;
        CHECK(run(qc, p, n, &o));
        struct weft_engine_kv_stats ks;
        weft_engine_kv_stats(qc, &ks);
        CHECK(ks.converted == added && ks.hit_imported == (n - 1) / WEFT_KV_BLOCK_TOKENS);
        printf("  Q8_0 cache: F16 blocks refused without conversion; with it %u converted and used\n", added);
    }
    weft_engine_free(q);
    weft_engine_free(qc);
    /* the same blocks re-framed as one layer's (good CRCs, whole records): refused
     * before any is read, and nothing imported (it used to copy a whole block's
     * bytes from the one-layer payload) */
    {
        struct weft_kvb_header full, one;
        CHECK(weft_kvb_read_header(s, ns, &full) == WEFT_OK);
        one = full;
        one.n_layers = 1;
        one.layout[0].n_layers = 1;
        CHECK(weft_kvb_header_init(&one) == WEFT_OK);
        size_t rf = weft_kvb_record_bytes(&full), ro = weft_kvb_record_bytes(&one);
        size_t nb = (ns - full.header_bytes) / rf, no = one.header_bytes + nb * ro;
        unsigned char *part = malloc(no);
        weft_kvb_write_header(&one, part);
        for (size_t i = 0; i < nb; i++) {
            struct weft_kvb_block b;
            CHECK(weft_kvb_read_block(&full, NULL, s + full.header_bytes + i * rf, rf, &b) == WEFT_OK);
            weft_kvb_write_block(&one, NULL, b.parent, b.hash, b.tokens, 0, b.payload, NULL, part + one.header_bytes + i * ro);
        }
        struct weft_engine *e = engine(m, WEFT_TYPE_F16, false);
        uint32_t added = 9;
        CHECK(weft_engine_kv_import(e, part, no, &added) == WEFT_ERR_FORMAT && added == 0);
        CHECK(strstr(weft_last_error(), "needs all") != NULL);
        struct weft_engine_kv_stats ks;
        weft_engine_kv_stats(e, &ks);
        CHECK(ks.rejected_streams == 1 && ks.imported == 0);
        weft_engine_free(e);
        free(part);
    }
    /* the fleet secret: blocks exported under it are taken by an engine with
     * the same secret, refused whole by one with another secret and by a
     * keyed engine offered unsigned blocks (counted as MAC refusals) */
    {
        struct weft_kvb_keys k1, k2;
        CHECK(weft_kvb_keys_derive("transfer-secret-0001", NULL, &k1) == WEFT_OK);
        CHECK(weft_kvb_keys_derive("transfer-secret-0002", NULL, &k2) == WEFT_OK);
        struct weft_engine *src = engine(m, WEFT_TYPE_F16, false), *same = engine(m, WEFT_TYPE_F16, false),
                           *other = engine(m, WEFT_TYPE_F16, false);
        uint32_t added = 0;
        CHECK(weft_engine_kv_import(src, s, ns, &added) == WEFT_OK && added == n / WEFT_KV_BLOCK_TOKENS);
        weft_engine_kv_set_keys(src, &k1);
        weft_engine_kv_set_keys(same, &k1);
        weft_engine_kv_set_keys(other, &k2);
        unsigned char *signed_s = NULL;
        size_t nss = 0;
        uint32_t nb = 0;
        CHECK(weft_engine_kv_export_prefix(src, p, (uint32_t)n, &signed_s, &nss, &nb) == WEFT_OK && nb == added);
        CHECK(weft_engine_kv_import(same, signed_s, nss, &added) == WEFT_OK && added == nb);
        CHECK(weft_engine_kv_import(other, signed_s, nss, &added) == WEFT_ERR_AUTH && added == 0);
        CHECK(weft_engine_kv_import(other, s, ns, &added) == WEFT_ERR_AUTH && added == 0);
        struct weft_engine_kv_stats ks;
        weft_engine_kv_stats(other, &ks);
        CHECK(ks.rejected_mac == 2 && ks.imported == 0);
        printf("  fleet secret: %u signed blocks taken under it; refused under another secret and unsigned\n", nb);
        free(signed_s);
        weft_engine_free(src);
        weft_engine_free(same);
        weft_engine_free(other);
    }
    /* a corrupt block: the ones before it are kept, it and the rest are not */
    unsigned char *bad = malloc(ns);
    memcpy(bad, s, ns);
    struct weft_kvb_header h;
    CHECK(weft_kvb_read_header(s, ns, &h) == WEFT_OK);
    bad[h.header_bytes + weft_kvb_record_bytes(&h) + 100] ^= 0x10;  /* inside block 1 */
    struct weft_engine *e = engine(m, WEFT_TYPE_F16, false);
    uint32_t added = 0;
    CHECK(weft_engine_kv_import(e, bad, ns, &added) == WEFT_ERR_FORMAT && added == 1);
    CHECK(weft_engine_kv_import(e, bad, ns - 7, &added) == WEFT_ERR_FORMAT && added == 0);  /* truncated */
    struct weft_engine_kv_stats ks;
    weft_engine_kv_stats(e, &ks);
    CHECK(ks.rejected == 1 && ks.rejected_streams == 1 && ks.imported == 1);
    weft_engine_free(e);
    free(bad);
}

static void model_case(const char *path, const char *other_path)
{
    struct weft_backend *cpu = NULL, *vk = NULL;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    const struct weft_backend_iface *vi = weft_backend_find("vulkan");
    struct weft_device_info info[4];
    const char *why = NULL;
    if (vi && vi->devices(info, 4, &why) > 0 && weft_backend_open("vulkan:0", 0, &vk) != WEFT_OK) vk = NULL;
    if (!vk) printf("  (no Vulkan device: CPU -> CPU only)\n");
    struct weft_model *mc = NULL, *mv = NULL, *other = NULL;
    CHECK_MSG(weft_model_load_split(path, &(struct weft_split_part){cpu, 0}, 1, &mc) == WEFT_OK, "%s", weft_last_error());
    if (vk) CHECK(weft_model_load_split(path, &(struct weft_split_part){vk, 0}, 1, &mv) == WEFT_OK);
    if (other_path) CHECK(weft_model_load_split(other_path, &(struct weft_split_part){cpu, 0}, 1, &other) == WEFT_OK);
    if (!mc) goto done;
    int32_t *p = NULL;
    size_t n = 0;
    CHECK(weft_tokenize(mc->tok, TEXT, strlen(TEXT), true, false, &p, &n) == WEFT_OK);
    CHECK(n >= 48);
    unsigned char *s1 = NULL, *s2 = NULL;
    size_t n1 = 0, n2 = 0;
    char what[160];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (mv) {
        snprintf(what, sizeof what, "%s cpu -> vulkan", base);
        one_way(what, mc, mv, p, n, &s1, &n1);
        snprintf(what, sizeof what, "%s vulkan -> cpu", base);
        one_way(what, mv, mc, p, n, &s2, &n2);
        /* computed apart, the blocks agree to rounding (F32 sums in another order can land an F16
         * ulp away); the imports above are exact whatever they hold */
        double err = n1 == n2 ? payload_error(s1, s2, n1) : NAN;
        printf("  %s: CPU- vs Vulkan-computed blocks: %s (normalised error %.2e)\n", base,
               n1 == n2 && !memcmp(s1, s2, n1) ? "byte-identical" : "not byte-identical", err);
        CHECK(err < 1e-3);
    } else {
        snprintf(what, sizeof what, "%s cpu -> cpu", base);
        one_way(what, mc, mc, p, n, &s1, &n1);
    }
    if (s1) refusals(mc, other, p, n, s1, n1);
    free(s1);
    free(s2);
    free(p);
done:
    weft_model_free(mc);
    weft_model_free(mv);
    weft_model_free(other);
    if (vk) weft_backend_close(vk);
    weft_backend_close(cpu);
}

static void stories260k(void)
{
    char *smol = weft_default_model_path();
    model_case(WEFT_SHARED_DIR "/models/stories260K.gguf", smol);
    free(smol);
}

static void smollm2(void)
{
    char *path = weft_default_model_path();
    if (!path) {
        printf("  (SmolLM2-135M not fetched: skipped)\n");
        return;
    }
    model_case(path, WEFT_SHARED_DIR "/models/stories260K.gguf");
    free(path);
}

/* The host prefix tier on one engine: four prefixes that need 4x the
 * device's KV, run twice with new suffixes. With the tier, the second
 * round's prefixes come back from host RAM: the outputs equal the run
 * without it, and the host-hit counter accounts for exactly the prompt
 * tokens the tier-less engine recomputed and this one did not. */
#define NPFX 4
#define PFX_BLOCKS 23

static void round_of(struct weft_engine *e, int32_t (*prompts)[PFX_BLOCKS * 16 + 5], uint32_t round,
                     struct out *outs)
{
    for (uint32_t i = 0; i < NPFX; i++) {
        int32_t *p = prompts[i];
        for (int k = 0; k < 5; k++) p[PFX_BLOCKS * 16 + k] = (int32_t)(10 + round * 7 + k + i);
        CHECK(run(e, p, PFX_BLOCKS * 16 + 5, &outs[i]));
    }
}

static void host_tier_serves_evicted_prefixes(void)
{
    struct weft_backend *cpu;
    CHECK(weft_backend_open("cpu", 2, &cpu) == WEFT_OK);
    struct weft_model *m = NULL;
    CHECK(weft_model_load_split(WEFT_SHARED_DIR "/models/stories260K.gguf", &(struct weft_split_part){cpu, 0}, 1, &m) ==
          WEFT_OK);
    if (!m) return;
    static int32_t prompts[NPFX][PFX_BLOCKS * 16 + 5];
    uint64_t r = 12345;
    for (uint32_t i = 0; i < NPFX; i++)
        for (uint32_t k = 0; k < PFX_BLOCKS * 16; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            prompts[i][k] = 2 + (int32_t)((r >> 33) % (weft_model_hparams(m)->n_vocab - 2));
        }
    struct out with[2][NPFX], without[2][NPFX];
    struct weft_engine_stats s_on[2], s_off[2];
    for (int tier = 0; tier < 2; tier++) {
        /* room for one prompt and its answer: PFX_BLOCKS + 2 blocks */
        struct weft_engine_config cfg = {.n_ctx = 512, .max_seqs = 1, .max_step_tokens = 128,
                                         .kv_blocks = PFX_BLOCKS + 2, .host_cache_mib = tier ? 1 : 0};
        struct weft_engine *e = NULL;
        CHECK_MSG(weft_engine_create(m, &cfg, &e) == WEFT_OK, "%s", weft_last_error());
        if (!e) break;
        struct out(*outs)[NPFX] = tier ? with : without;
        struct weft_engine_stats *st = tier ? s_on : s_off;
        for (uint32_t round = 0; round < 2; round++) {
            round_of(e, prompts, round, outs[round]);
            weft_engine_stats(e, &st[round]);
            if (round == 0) {
                /* the first prefix left the device: it is exported from the host tier (or, without one, not at all) */
                unsigned char *buf = NULL;
                size_t len = 0;
                uint32_t nb = 0;
                CHECK(weft_engine_kv_export_prefix(e, prompts[0], PFX_BLOCKS * 16, &buf, &len, &nb) == WEFT_OK);
                CHECK_EQ_INT(nb, tier ? PFX_BLOCKS : 0);
                if (tier) {
                    /* and serves that prefix on another engine, whole, with the same answer */
                    struct weft_engine_config c2 = {.n_ctx = 512, .max_seqs = 1, .max_step_tokens = 128,
                                                    .kv_blocks = PFX_BLOCKS + 2};
                    struct weft_engine *e2 = NULL;
                    CHECK(weft_engine_create(m, &c2, &e2) == WEFT_OK);
                    uint32_t added = 0;
                    struct out o2[NPFX];
                    memset(o2, 0, sizeof o2);
                    if (e2 && weft_engine_kv_import(e2, buf, len, &added) == WEFT_OK) {
                        CHECK_EQ_INT(added, PFX_BLOCKS);
                        CHECK(run(e2, prompts[0], PFX_BLOCKS * 16 + 5, &o2[0]));
                        CHECK(!memcmp(&o2[0], &outs[0][0], sizeof o2[0]));
                        struct weft_engine_kv_stats ks;
                        weft_engine_kv_stats(e2, &ks);
                        CHECK_EQ_INT(ks.hit_imported, PFX_BLOCKS);
                    } else {
                        CHECK_MSG(0, "import from the host tier's export failed: %s", weft_last_error());
                    }
                    weft_engine_free(e2);
                }
                free(buf);
            }
        }
        weft_engine_free(e);
    }
    CHECK_MSG(!memcmp(with, without, sizeof with), "outputs differ with the host tier on");
    uint64_t hits = s_on[1].kv.host_hit_blocks * WEFT_KV_BLOCK_TOKENS;
    uint64_t pf_on = s_on[1].prefill_tokens - s_on[0].prefill_tokens;
    uint64_t pf_off = s_off[1].prefill_tokens - s_off[0].prefill_tokens;
    CHECK_EQ_INT(s_on[1].kv.n_host_cache_blocks >= NPFX * PFX_BLOCKS, 1);
    CHECK_EQ_INT(s_off[1].kv.host_hit_blocks, 0);
    CHECK_EQ_INT(hits, (uint64_t)NPFX * PFX_BLOCKS * WEFT_KV_BLOCK_TOKENS);  /* every prefix, whole */
    CHECK_EQ_INT(pf_off - pf_on, hits);
    printf("  4 prefixes of %d tokens, device KV for one: second round computed %llu prompt tokens with the host "
           "tier, %llu without; %llu served from host RAM (%llu demotions); outputs identical\n",
           PFX_BLOCKS * 16, (unsigned long long)pf_on, (unsigned long long)pf_off, (unsigned long long)hits,
           (unsigned long long)s_on[1].kv.host_demotions);
    weft_model_free(m);
    weft_backend_close(cpu);
}

int main(void)
{
    RUN(stories260k);
    RUN(smollm2);
    RUN(host_tier_serves_evicted_prefixes);
    return check_summary();
}
