/* The op lists the forward pass builds, pinned: a canonical dump of each op
 * (kind, every operand's buffer role, offset, type and shape, every scalar
 * field — api 5's only where set, so older lists hash as before; buffers
 * named by first use, never by pointer) for every model in
 * ../shared/models/ plus split and tied/untied generated ones, over two
 * steps (prefill chunks with hidden rows, then decodes), hashed and compared
 * with tests/data/opdump.txt. A change to a family's op list must change
 * that file on purpose: WEFT_OPDUMP_WRITE=FILE writes the current hashes,
 * WEFT_OPDUMP_TEXT=DIR writes each model's full dump for a diff. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/forward.h"
#include "core/fingerprint.h"
#include "core/model_impl.h"
#include "tests/check.h"
#include "tools/gen_model.h"

struct dump {
    char *text;
    size_t len, cap;
    const struct weft_buffer *bufs[64];
    int n_bufs;
};

static void put(struct dump *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct dump *d, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (d->len + (size_t)n + 1 > d->cap) {
        d->cap = (d->len + (size_t)n + 1) * 2;
        d->text = realloc(d->text, d->cap);
        if (!d->text) abort();
    }
    memcpy(d->text + d->len, line, (size_t)n + 1);
    d->len += (size_t)n;
}

static int buf_id(struct dump *d, const struct weft_buffer *b)
{
    if (!b) return -1;
    for (int i = 0; i < d->n_bufs; i++)
        if (d->bufs[i] == b) return i;
    if (d->n_bufs == 64) return 99;
    d->bufs[d->n_bufs] = b;
    return d->n_bufs++;
}

static void view(struct dump *d, const char *role, const struct weft_view *v)
{
    if (!v->buf && !v->ne0) return;
    put(d, " %s=b%d+%zu:%s[%lld,%lld]/%zu", role, buf_id(d, v->buf), v->offset, weft_type_name(v->type),
        (long long)v->ne0, (long long)v->ne1, v->nb1);
}

static void kvv(struct dump *d, const struct weft_kv_view *k)
{
    put(d, " kv=b%d:%s,L%u/%u,h%u,d%u", buf_id(d, k->buf), weft_type_name(k->type), k->layer, k->n_layer,
        k->n_kv_head, k->head_dim);
}

static void batch(struct dump *d, const struct weft_batch_view *b)
{
    put(d, " rows=%u seqs=%u", b->n_rows, b->n_seq);
    view(d, "pos", &b->pos);
    view(d, "seq", &b->seq);
    view(d, "slot", &b->slot);
    view(d, "btoff", &b->bt_off);
    view(d, "bt", &b->bt);
}

static void dump_op(struct dump *d, const struct weft_op *op)
{
    put(d, "%s", weft_op_name(op->kind));
    switch (op->kind) {
    case WEFT_OP_EMBED:
        view(d, "table", &op->u.embed.table); view(d, "ids", &op->u.embed.ids); view(d, "out", &op->u.embed.out);
        if (op->u.embed.scale != 0) put(d, " scale=%a", op->u.embed.scale);
        break;
    case WEFT_OP_RMSNORM: {
        const struct weft_op_rmsnorm *o = &op->u.rmsnorm;
        view(d, "x", &o->x);
        if (o->has_add) { view(d, "add", &o->add); view(d, "sum", &o->sum); }
        view(d, "w", &o->w); view(d, "out", &o->out);
        put(d, " eps=%a", o->eps);
        break;
    }
    case WEFT_OP_MATMUL: {
        const struct weft_op_matmul *o = &op->u.matmul;
        view(d, "x", &o->x); view(d, "w", &o->w); view(d, "out", &o->out);
        if (o->has_add) view(d, "add", &o->add);
        if (o->has_bias) view(d, "bias", &o->bias);
        break;
    }
    case WEFT_OP_ROPE_KV: {
        const struct weft_op_rope_kv *o = &op->u.rope_kv;
        view(d, "q", &o->q); view(d, "k", &o->k); view(d, "v", &o->v);
        kvv(d, &o->kv); batch(d, &o->batch);
        put(d, " heads=%u rot=%u base=%a scale=%a mode=%d", o->n_head, o->n_rot, o->freq_base, o->freq_scale,
            (int)o->mode);
        if (o->has_freq_factors) view(d, "freq_factors", &o->freq_factors);
        if (o->ext_factor != 0 || o->attn_factor != 0)
            put(d, " ext=%a attn=%a corr=%a,%a", o->ext_factor, o->attn_factor, o->corr_dims[0], o->corr_dims[1]);
        break;
    }
    case WEFT_OP_ATTENTION: {
        const struct weft_op_attention *o = &op->u.attention;
        view(d, "q", &o->q); view(d, "out", &o->out);
        kvv(d, &o->kv); batch(d, &o->batch);
        put(d, " heads=%u scale=%a", o->n_head, o->scale);
        if (o->window) put(d, " window=%u", o->window);
        if (o->softcap != 0) put(d, " softcap=%a", o->softcap);
        break;
    }
    case WEFT_OP_SILU_MUL:
        view(d, "gate", &op->u.silu_mul.gate); view(d, "up", &op->u.silu_mul.up); view(d, "out", &op->u.silu_mul.out);
        if (op->u.silu_mul.act) put(d, " act=%d", (int)op->u.silu_mul.act);
        break;
    case WEFT_OP_ADD:
        view(d, "a", &op->u.add.a); view(d, "b", &op->u.add.b); view(d, "out", &op->u.add.out);
        break;
    case WEFT_OP_COPY: {
        const struct weft_op_copy *o = &op->u.copy;
        put(d, " src=b%d+%zu dst=b%d+%zu bytes=%zu", buf_id(d, o->src), o->src_off, buf_id(d, o->dst), o->dst_off,
            o->bytes);
        break;
    }
    case WEFT_OP_LOGITS: {
        const struct weft_op_logits *o = &op->u.logits;
        view(d, "x", &o->x); view(d, "rows", &o->rows); view(d, "norm", &o->norm_w); view(d, "w", &o->w);
        view(d, "out", &o->out);
        put(d, " eps=%a", o->eps);
        if (o->softcap != 0) put(d, " softcap=%a", o->softcap);
        break;
    }
    default:
        put(d, " ?");
    }
    put(d, "\n");
}

/* Two steps over two sequences: a 20-token prefill chunk (no logits) beside a
 * 5-token one asking for logits and 2 hidden rows; then a decode of each. */
static bool dump_model(struct weft_model *m, struct dump *d)
{
    const struct weft_hparams *hp = &m->hp;
    struct weft_kv_config kc = {.n_kv_head = hp->n_head_kv, .head_dim = hp->head_dim, .n_blocks = 8};
    weft_forward_kv_parts(m, &kc);
    struct weft_kv_pool kv;
    if (weft_kv_pool_create(&kv, m->be, &kc) != WEFT_OK) return false;
    struct weft_kv_seq sa = {0}, sb = {0};
    struct weft_forward *fw = NULL;
    bool ok = weft_kv_seq_reserve(&kv, &sa, 21) == WEFT_OK && weft_kv_seq_reserve(&kv, &sb, 6) == WEFT_OK &&
              weft_forward_init(m, &kv, 32, 2, 4, &fw) == WEFT_OK;
    int32_t toks[32];
    for (int i = 0; i < 32; i++) toks[i] = (int32_t)((i * 7 + 3) % hp->n_vocab);
    const float *lg;
    uint32_t n_out;
    struct weft_fwd_seq s1[2] = {{toks, 20, 0, &sa, false, 0}, {toks + 20, 5, 0, &sb, true, 2}};
    struct weft_fwd_seq s2[2] = {{toks + 25, 1, 20, &sa, true, 0}, {toks + 26, 1, 5, &sb, true, 1}};
    for (int step = 0; ok && step < 2; step++) {
        ok = weft_forward_step(fw, step ? s2 : s1, 2, &lg, &n_out) == WEFT_OK;
        size_t n = 0;
        const struct weft_op *ops = weft_forward_ops(fw, &n);
        put(d, "step %d: %zu ops\n", step, n);
        for (size_t i = 0; ok && i < n; i++) dump_op(d, &ops[i]);
    }
    weft_forward_free(fw);
    weft_kv_seq_release(&kv, &sa);
    weft_kv_seq_release(&kv, &sb);
    weft_kv_pool_free(&kv);
    return ok;
}

struct entry { char name[128]; char hash[WEFT_FINGERPRINT_STR + 8]; };
static struct entry want[64], got[64];
static int n_want, n_got;

static void record(const char *name, const struct dump *d)
{
    struct weft_fphash h;
    weft_fphash_init(&h, 0);
    weft_fphash_update(&h, d->text, d->len);
    struct weft_fingerprint f = weft_fphash_final(&h);
    struct entry *e = &got[n_got++];
    snprintf(e->name, sizeof e->name, "%s", name);
    weft_fingerprint_str(&f, e->hash);
    const char *dir = getenv("WEFT_OPDUMP_TEXT");
    if (dir) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s.txt", dir, name);
        FILE *f2 = fopen(p, "w");
        if (f2) { fwrite(d->text, 1, d->len, f2); fclose(f2); }
    }
}

static void dump_file(const char *label, const char *path, const char *split)
{
    struct weft_backend *cpu = NULL, *cpu2 = NULL;
    CHECK(weft_backend_open("cpu", 1, &cpu) == WEFT_OK);
    struct weft_model *m = NULL;
    weft_status st;
    if (split) {
        CHECK(weft_backend_open("cpu", 1, &cpu2) == WEFT_OK);
        struct weft_split_part parts[2] = {{cpu, 1}, {cpu2, 0}};
        st = weft_model_load_split(path, parts, 2, &m);
    } else {
        st = weft_model_load(path, cpu, &m);
    }
    CHECK_MSG(st == WEFT_OK, "%s: %s", path, weft_last_error());
    if (m) {
        struct dump d = {0};
        CHECK_MSG(dump_model(m, &d), "%s: %s", label, weft_last_error());
        record(label, &d);
        free(d.text);
        weft_model_free(m);
    }
    weft_backend_close(cpu2);
    weft_backend_close(cpu);
}

static int by_name(const void *a, const void *b) { return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name); }

static void op_lists_match_the_pinned_ones(void)
{
    /* every Llama-family file in ../shared/models/ (arch/ has its own families) */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", WEFT_SHARED_DIR);
    DIR *dd = opendir(dir);
    if (!dd) SKIP_ALL("no %s", dir);
    struct dirent *de;
    while ((de = readdir(dd)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".gguf") || n_got >= 48) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        dump_file(de->d_name, p, NULL);
    }
    closedir(dd);
    char p[2048];
    snprintf(p, sizeof p, "%s/models/stories260K.gguf", WEFT_SHARED_DIR);
    dump_file("split:stories260K.gguf", p, "cpu=1,cpu");
    /* the other families, one file each */
    static const char *const arch[] = {"qwen3-Q8_0.gguf", "qwen2-F16.gguf", "phi3-F16.gguf", "gemma3-F16.gguf",
                                       "llama-rope-freqs-F16.gguf", "llama-yarn-F16.gguf"};
    for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++) {
        char label[64];
        snprintf(p, sizeof p, "%s/models/arch/%s", WEFT_SHARED_DIR, arch[i]);
        snprintf(label, sizeof label, "arch:%s", arch[i]);
        dump_file(label, p, NULL);
    }
    /* generated: untied Q8_0 with GQA, and tied Q4_K split over two parts */
    char tmp[] = "/tmp/weft-opdump.XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    struct weft_gen_params gp;
    weft_gen_preset(&gp, "tiny");
    gp.type = WEFT_TYPE_Q8_0;
    gp.n_embd = 128; gp.n_head = 4; gp.n_head_kv = 2; gp.n_ff = 256; gp.n_layer = 3; gp.tied_output = false;
    snprintf(p, sizeof p, "%s/a.gguf", tmp);
    CHECK(weft_gen_model(&gp, p) == WEFT_OK);
    dump_file("gen:q8_0-untied", p, NULL);
    gp.type = WEFT_TYPE_Q4_K; gp.n_embd = 256; gp.tied_output = true;
    snprintf(p, sizeof p, "%s/b.gguf", tmp);
    CHECK(weft_gen_model(&gp, p) == WEFT_OK);
    dump_file("gen:q4_k-tied", p, NULL);
    dump_file("split:gen:q4_k-tied", p, "cpu=1,cpu");
    snprintf(p, sizeof p, "rm -rf '%s'", tmp);
    if (system(p) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    qsort(got, (size_t)n_got, sizeof got[0], by_name);

    const char *w = getenv("WEFT_OPDUMP_WRITE");
    if (w) {
        FILE *f = fopen(w, "w");
        CHECK(f != NULL);
        if (!f) return;
        fprintf(f, "# tests/test_opdump.c: canonical op-list hashes (name hash)\n");
        for (int i = 0; i < n_got; i++) fprintf(f, "%s %s\n", got[i].name, got[i].hash);
        fclose(f);
        return;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/opdump.txt", WEFT_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f) && n_want < 64) {
        if (line[0] == '#') continue;
        if (sscanf(line, "%127s %39s", want[n_want].name, want[n_want].hash) == 2) n_want++;
    }
    fclose(f);
    for (int i = 0; i < n_want; i++) {
        int j = 0;
        while (j < n_got && strcmp(got[j].name, want[i].name)) j++;
        CHECK_MSG(j < n_got, "%s: pinned but not dumped", want[i].name);
        if (j < n_got)
            CHECK_MSG(!strcmp(got[j].hash, want[i].hash), "%s: op list changed (%s, pinned %s)", want[i].name,
                      got[j].hash, want[i].hash);
    }
    CHECK_MSG(n_got == n_want, "%d op lists dumped, %d pinned", n_got, n_want);
}

int main(void)
{
    RUN(op_lists_match_the_pinned_ones);
    return check_summary();
}
