/* The GPU backends' shared host code (backends/gpu/gpu_common.c) over a
 * fake runtime: hooks that log what they are asked to do. Pins what the
 * CUDA and HIP backends rely on without needing a GPU:
 *  - supports: views inside their buffer, aligned, weight types from type_ok;
 *  - step graphs: eager on the first sighting of a key, captured and launched
 *    on the second, replayed from then on; a different key runs eagerly;
 *  - a failed capture turns graphs off and runs the ops eagerly; an
 *    out-of-memory capture is an error;
 *  - scratch grows to 1.5x what an op needs (256-aligned) and drops graphs;
 *  - the LRU table keeps WEFT_GPU_GRAPHS keys;
 *  - a failing launch names the op. */
#include <string.h>

#include "backends/gpu/gpu_common.c"
#include "tests/check.h"

static char log_[4096];
static int fail_capture_begin, fail_encode_at = -1, n_encoded;
static size_t mm_scratch;

static void logf_(const char *s)
{
    if (strlen(log_) + strlen(s) + 2 < sizeof log_) { strcat(log_, s); strcat(log_, " "); }
}

static int f_type_ok(int wt) { return wt == WEFT_TYPE_F32 || wt == WEFT_TYPE_Q8_0; }
static size_t f_mm_scratch(int wt, int64_t K, int64_t R) { return mm_scratch; }
static int f_attn_splits(int64_t n_rows, int n_head, int n_mp) { return 1; }
static size_t f_attn_scratch(int64_t n_rows, int n_head, int hd, int n_split) { return 0; }
static weft_status f_error(int e, const char *what)
{
    return weft_error(e == 2 ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE, "fake: %s: error %d", what, e);
}
static const char *f_error_str(int e) { return "fake error"; }
static void f_clear_error(void) { logf_("clear"); }
static int f_stream_sync(struct weft_gpu *g) { logf_("sync"); return 0; }
static int f_dev_alloc(struct weft_gpu *g, size_t n, void **out)
{
    char s[64];
    snprintf(s, sizeof s, "alloc%zu", n);
    logf_(s);
    *out = malloc(n);
    return *out ? 0 : 2;
}
static void f_dev_free(struct weft_gpu *g, void *p) { logf_("free"); free(p); }
static int f_encode(struct weft_gpu *g, const struct weft_op *op)
{
    logf_(op->kind == WEFT_OP_ADD ? "add" : "op");
    return n_encoded++ == fail_encode_at ? 9 : 0;
}
static int f_capture_begin(struct weft_gpu *g) { logf_("begin"); return fail_capture_begin; }
static int f_capture_end(struct weft_gpu *g, bool launched_ok, void **exec)
{
    logf_("end");
    *exec = launched_ok ? malloc(1) : NULL;
    return launched_ok ? 0 : 5;
}
static int f_graph_launch(struct weft_gpu *g, void *exec) { logf_("launch"); return 0; }
static void f_graph_destroy(void *exec) { logf_("destroy"); free(exec); }

static const struct weft_gpu_hooks fake = {
    .name = "fake", .err_oom = 2,
    .type_ok = f_type_ok, .matmul_scratch = f_mm_scratch, .attn_splits = f_attn_splits,
    .attention_scratch = f_attn_scratch, .error = f_error, .error_str = f_error_str,
    .clear_error = f_clear_error, .stream_sync = f_stream_sync, .dev_alloc = f_dev_alloc,
    .dev_free = f_dev_free, .encode = f_encode, .capture_begin = f_capture_begin,
    .capture_end = f_capture_end, .graph_launch = f_graph_launch, .graph_destroy = f_graph_destroy,
};

static struct weft_gpu gpu;
static struct weft_buffer buf;
static uint8_t mem[4096];

static void reset(bool graphs)
{
    weft_gpu_release(&gpu);
    memset(&gpu, 0, sizeof gpu);
    gpu.hooks = &fake;
    gpu.graphs = graphs;
    buf = (struct weft_buffer){&gpu, mem, sizeof mem, weft_gpu_next_buffer_id()};
    log_[0] = 0;
    fail_capture_begin = 0;
    fail_encode_at = -1;
    n_encoded = 0;
    mm_scratch = 0;
}

static struct weft_op add_op(size_t off)
{
    struct weft_op op = {.kind = WEFT_OP_ADD};
    op.u.add.a = weft_view_2d(&buf, off, WEFT_TYPE_F32, 16, 2);
    op.u.add.b = weft_view_2d(&buf, 256, WEFT_TYPE_F32, 16, 2);
    op.u.add.out = weft_view_2d(&buf, 512, WEFT_TYPE_F32, 16, 2);
    return op;
}

static bool run_expect(const struct weft_op *ops, size_t n, const char *want)
{
    log_[0] = 0;
    weft_status st = weft_gpu_run(&gpu, ops, n);
    CHECK_MSG(st == WEFT_OK, "%s", weft_last_error());
    CHECK_MSG(!strcmp(log_, want), "log \"%s\", want \"%s\"", log_, want);
    return st == WEFT_OK && !strcmp(log_, want);
}

static void supports_checks_views_and_types(void)
{
    reset(false);
    struct weft_op op = add_op(0);
    CHECK(weft_gpu_supports(&gpu.base, &op));
    op = add_op(2);   /* F32 rows must be 4-byte aligned */
    CHECK(!weft_gpu_supports(&gpu.base, &op));
    op = add_op(sizeof mem - 64);   /* runs past the buffer */
    CHECK(!weft_gpu_supports(&gpu.base, &op));
    struct weft_op mm = {.kind = WEFT_OP_MATMUL};
    mm.u.matmul.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 32, 1);
    mm.u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q8_0, 32, 4);
    mm.u.matmul.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 1);
    CHECK(weft_gpu_supports(&gpu.base, &mm));
    mm.u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q4_0, 32, 4);   /* type_ok says no */
    CHECK(!weft_gpu_supports(&gpu.base, &mm));
    struct weft_op cp = {.kind = WEFT_OP_COPY, .u.copy = {&buf, &buf, 0, 100, sizeof mem - 100}};
    CHECK(weft_gpu_supports(&gpu.base, &cp));
    cp.u.copy.bytes++;
    CHECK(!weft_gpu_supports(&gpu.base, &cp));
    CHECK(weft_gpu_range(&buf, 10, sizeof mem, "write") == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "fake: write [10, +4096) outside buffer of 4096") != NULL);
}

static void graphs_eager_then_captured_then_replayed(void)
{
    reset(true);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    run_expect(ops, 2, "add add ");
    run_expect(ops, 2, "begin add add end launch ");
    run_expect(ops, 2, "launch ");
    run_expect(ops, 2, "launch ");
    CHECK_EQ_INT(gpu.n_captures, 1);
    CHECK_EQ_INT(gpu.n_graph_launches, 3);
    struct weft_op other[2] = {add_op(0), add_op(64)};   /* a different key */
    run_expect(other, 2, "add add ");
    run_expect(ops, 1, "add ");   /* one op: never a graph */
    reset(false);
    run_expect(ops, 2, "add add ");
    run_expect(ops, 2, "add add ");
}

static void failed_capture_runs_eagerly_without_graphs(void)
{
    reset(true);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    run_expect(ops, 2, "add add ");
    fail_capture_begin = 7;
    run_expect(ops, 2, "begin clear add add ");
    CHECK(!gpu.graphs);
    run_expect(ops, 2, "add add ");
    /* a launch failing inside the capture invalidates it the same way */
    reset(true);
    run_expect(ops, 2, "add add ");
    fail_encode_at = n_encoded;
    run_expect(ops, 2, "begin add end clear add add ");
    CHECK(!gpu.graphs);
    /* out of memory while capturing is an error, not a fallback */
    reset(true);
    run_expect(ops, 2, "add add ");
    fail_capture_begin = 2;
    CHECK(weft_gpu_run(&gpu, ops, 2) == WEFT_ERR_NOMEM);
    CHECK(strstr(weft_last_error(), "capturing a step graph") != NULL);
}

static void scratch_grows_and_drops_graphs(void)
{
    reset(true);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    run_expect(ops, 2, "add add ");
    run_expect(ops, 2, "begin add add end launch ");
    struct weft_op mm[2] = {{.kind = WEFT_OP_MATMUL}, add_op(0)};
    mm[0].u.matmul.x = weft_view_2d(&buf, 0, WEFT_TYPE_F32, 32, 1);
    mm[0].u.matmul.w = weft_view_2d(&buf, 256, WEFT_TYPE_Q8_0, 32, 4);
    mm[0].u.matmul.out = weft_view_2d(&buf, 1024, WEFT_TYPE_F32, 4, 1);
    mm_scratch = 1000;   /* 1.5x = 1500 -> 1536 */
    run_expect(mm, 2, "sync destroy alloc1536 op add ");
    CHECK_EQ_INT(gpu.scratch_size, 1536);
    mm_scratch = 1536;   /* fits: no regrowth */
    run_expect(mm, 2, "begin op add end launch ");
    mm_scratch = 1537;   /* grows: the old scratch freed, graphs dropped */
    run_expect(mm, 2, "sync destroy free alloc2560 op add ");
    run_expect(ops, 2, "add add ");   /* its graph was dropped too */
}

static void lru_keeps_the_recent_keys(void)
{
    reset(true);
    struct weft_op ops[WEFT_GPU_GRAPHS + 1][2];
    for (int i = 0; i <= WEFT_GPU_GRAPHS; i++) {
        ops[i][0] = add_op(0);
        ops[i][1] = add_op(4 * (size_t)i);
        run_expect(ops[i], 2, "add add ");
    }
    /* key 0 was the least recently used: replaced by key 8; key 1 is still known */
    run_expect(ops[1], 2, "begin add add end launch ");
    run_expect(ops[0], 2, "add add ");
}

static void a_failing_launch_names_the_op(void)
{
    reset(false);
    struct weft_op ops[2] = {add_op(0), add_op(0)};
    fail_encode_at = 1;
    CHECK(weft_gpu_run(&gpu, ops, 2) == WEFT_ERR_DEVICE);
    CHECK_MSG(strstr(weft_last_error(), "op 1 (add)") != NULL, "%s", weft_last_error());
}

static void input_error_word_is_reported_once(void)
{
    reset(false);
    int word = 2;
    gpu.err_host = &word;
    CHECK(weft_gpu_take_input_error(&gpu) == WEFT_ERR_INVALID_ARG);
    CHECK(strstr(weft_last_error(), "fake: a LOGITS row index outside its table") != NULL);
    CHECK(weft_gpu_take_input_error(&gpu) == WEFT_OK);
    gpu.err_host = NULL;
}

int main(void)
{
    RUN(supports_checks_views_and_types);
    RUN(graphs_eager_then_captured_then_replayed);
    RUN(failed_capture_runs_eagerly_without_graphs);
    RUN(scratch_grows_and_drops_graphs);
    RUN(lru_keeps_the_recent_keys);
    RUN(a_failing_launch_names_the_op);
    RUN(input_error_word_is_reported_once);
    weft_gpu_release(&gpu);
    return check_summary();
}
