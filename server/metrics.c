#include "server/metrics.h"
#include "server/kv_fetch.h"
#include "server/kv_remote.h"
#include "server/pd.h"

#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[METRIC_HIST_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
                                                        1, 2.5, 5, 10, 20, 40, 80};
static const double itl_bounds[METRIC_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06,
                                                       0.08, 0.1, 0.15, 0.25, 0.5, 1, 2.5};
static const double e2e_bounds[METRIC_HIST_BUCKETS] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120, 300};

static const double queue_bounds[METRIC_HIST_BUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                         0.5, 1, 2.5, 5, 10, 30, 60};

void weft_metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof *m);
    m->queue.bounds = queue_bounds;
    m->ttft.bounds = ttft_bounds;
    m->itl.bounds = itl_bounds;
    m->e2e.bounds = e2e_bounds;
}

void weft_metrics_request(struct metrics *m, const char *endpoint, int status)
{
    for (uint32_t i = 0; i < m->n_reqs; i++)
        if (m->reqs[i].status == status && !strcmp(m->reqs[i].endpoint, endpoint)) {
            m->reqs[i].n++;
            return;
        }
    if (m->n_reqs == sizeof m->reqs / sizeof m->reqs[0]) return;  /* bounded: endpoints are a fixed set */
    struct metric_req_key *k = &m->reqs[m->n_reqs++];
    snprintf(k->endpoint, sizeof k->endpoint, "%s", endpoint);
    k->status = status;
    k->n = 1;
}

void weft_metrics_observe(struct metric_hist *h, double s)
{
    int i = 0;
    while (i < METRIC_HIST_BUCKETS && s > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += s;
    h->n++;
}

/* Every series carries the model's name (model_name="..."), so one
 * Prometheus can hold several models' instances apart. */
struct out {
    struct weft_strbuf b;
    char lbl[200];              /* model_name="..." */
};

static void hist(struct out *o, const char *name, const char *help, const struct metric_hist *h)
{
    weft_sb_printf(&o->b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < METRIC_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        weft_sb_printf(&o->b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, o->lbl, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[METRIC_HIST_BUCKETS];
    weft_sb_printf(&o->b, "%s_bucket{%s,le=\"+Inf\"} %llu\n%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, o->lbl,
        (unsigned long long)cum, name, o->lbl, h->sum, name, o->lbl, (unsigned long long)h->n);
}

static void one(struct out *o, const char *name, const char *type, const char *help, double v)
{
    weft_sb_printf(&o->b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name, type, name, o->lbl, v);
}

static void head(struct out *o, const char *name, const char *type, const char *help)
{
    weft_sb_printf(&o->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, quote and newline escaped (Prometheus text format). */
static void label_value(char *dst, size_t cap, const char *v)
{
    size_t n = 0;
    for (; *v && n + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') dst[n++] = '\\', dst[n++] = *v;
        else if (*v == '\n') dst[n++] = '\\', dst[n++] = 'n';
        else dst[n++] = *v;
    }
    dst[n] = '\0';
}

static const char *const finish_names[METRIC_FINISH_N] = {"stop", "length", "abort", "error", "client_gone",
                                                         "slow_client", "shutdown"};

const char *weft_metrics_finish_name(enum metric_finish f) { return f < METRIC_FINISH_N ? finish_names[f] : "?"; }

char *weft_metrics_render(const struct metrics *m, const struct weft_engine_stats *es, uint64_t kv_bytes,
                     uint64_t weight_bytes, const struct metrics_extra *x, size_t *len)
{
    struct out o = {0};
    if (!weft_sb_reserve(&o.b, 16384)) return NULL;
    char model[160];
    label_value(model, sizeof model, x && x->model_name ? x->model_name : "default");
    snprintf(o.lbl, sizeof o.lbl, "model_name=\"%s\"", model);
    struct weft_strbuf *b = &o.b;
    head(&o, "weft_requests_total", "counter", "HTTP requests by endpoint and status.");
    for (uint32_t i = 0; i < m->n_reqs; i++)
        weft_sb_printf(b, "weft_requests_total{%s,endpoint=\"%s\",status=\"%d\"} %llu\n", o.lbl, m->reqs[i].endpoint,
            m->reqs[i].status, (unsigned long long)m->reqs[i].n);
    head(&o, "weft_request_finish_total", "counter", "Generation requests ended, by reason.");
    for (int i = 0; i < METRIC_FINISH_N; i++)
        weft_sb_printf(b, "weft_request_finish_total{%s,reason=\"%s\"} %llu\n", o.lbl, finish_names[i],
            (unsigned long long)m->finish[i]);
    one(&o, "weft_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)m->prompt_tokens);
    one(&o, "weft_generation_tokens_total", "counter", "Generated tokens sent.", (double)m->generation_tokens);
    one(&o, "weft_rejected_rate_limit_total", "counter", "Requests refused by a tenant's rate limit (429).",
        (double)m->rejected_rate);
    one(&o, "weft_rejected_queue_full_total", "counter", "Requests refused because the queue was full (503).",
        (double)m->rejected_queue);
    one(&o, "weft_rejected_no_kv_room_total", "counter",
        "Requests refused because this instance's KV cache could never hold them (503).", (double)m->rejected_no_room);
    one(&o, "weft_continuations_total", "counter",
        "Interrupted streams carried on here from their generated tokens (weft.continue).", (double)m->continuations);
    one(&o, "weft_rejected_auth_total", "counter", "Requests refused for a missing or wrong API key (401).",
        (double)m->rejected_auth);
    one(&o, "weft_client_disconnects_total", "counter", "Requests aborted because the client went away.",
        (double)m->client_disconnects);
    one(&o, "weft_rejected_connections_total", "counter",
        "Connections refused past the per-client connection limit (429).", (double)m->rejected_conns);
    one(&o, "weft_slow_client_aborts_total", "counter",
        "Streams ended because the client did not read (more than --max-stream-buffer queued).",
        (double)m->slow_client_aborts);
    hist(&o, "weft_time_to_first_token_seconds", "Time from request to first token.", &m->ttft);
    hist(&o, "weft_inter_token_latency_seconds", "Time between consecutive tokens of a request.", &m->itl);
    hist(&o, "weft_request_duration_seconds", "Time from request to last token.", &m->e2e);
    hist(&o, "weft_request_queue_seconds", "Time from admission to the first engine step that ran the request.",
         &m->queue);
    one(&o, "weft_requests_running", "gauge", "Requests being computed.", es->running);
    one(&o, "weft_requests_waiting", "gauge", "Requests queued (including preempted).", es->waiting);
    one(&o, "weft_requests_swapped", "gauge", "Preempted requests whose KV is in host memory.", es->swapped);
    one(&o, "weft_queued_prefill_tokens", "gauge", "Prompt tokens admitted and not yet computed.",
        (double)es->queued_prefill_tokens);
    one(&o, "weft_kv_blocks_used", "gauge", "KV blocks referenced by sequences.", es->kv.used);
    one(&o, "weft_kv_blocks_free", "gauge", "KV blocks never used or released unregistered.", es->kv.free);
    one(&o, "weft_kv_blocks_cached", "gauge", "Free KV blocks kept for prefix reuse.", es->kv.cached);
    one(&o, "weft_kv_blocks", "gauge", "KV blocks in the device pool.", es->kv.n_blocks);
    one(&o, "weft_kv_bytes_per_token", "gauge",
        "Bytes of K/V cache one token takes over every layer (a latent cache: its latent and rope parts).",
        (double)es->kv.bytes_per_token);
    double usage = es->kv.n_blocks ? (double)es->kv.used / es->kv.n_blocks : 0;
    one(&o, "weft_kv_cache_usage_ratio", "gauge", "Share of the device KV pool held by sequences (0..1).", usage);
    if (es->kv.n_state_slots) {
        /* a hybrid model's recurrent state (core/kv.h's state slots) */
        one(&o, "weft_state_slots", "gauge", "Recurrent state slots of a hybrid model (one per running sequence).",
            es->kv.n_state_slots);
        one(&o, "weft_state_slots_used", "gauge", "Recurrent state slots held by sequences.", es->kv.state_used);
        one(&o, "weft_state_bytes_per_seq", "gauge",
            "Bytes of recurrent state one sequence holds over every recurrent layer (the same at any length).",
            (double)es->kv.state_bytes_per_seq);
        one(&o, "weft_state_swaps_total", "counter", "Recurrent states copied to host memory with a preempted sequence.",
            (double)es->kv.state_swaps);
    }
    if (es->kv.n_ckpts) {
        /* its prefix cache: the state checkpointed at block boundaries */
        one(&o, "weft_state_checkpoint_tokens", "gauge", "A hybrid's recurrent state is checkpointed every this many tokens.",
            es->kv.ckpt_every);
        one(&o, "weft_state_checkpoints", "gauge", "Recurrent state checkpoints the host holds at most.", es->kv.n_ckpts);
        one(&o, "weft_state_checkpoints_used", "gauge", "Recurrent state checkpoints held.", es->kv.ckpts_used);
        one(&o, "weft_state_checkpoint_bytes", "gauge", "Bytes of one recurrent state checkpoint.",
            (double)es->kv.ckpt_bytes);
        one(&o, "weft_state_checkpoints_stored_total", "counter", "Recurrent state checkpoints taken.",
            (double)es->kv.ckpts_stored);
        one(&o, "weft_state_checkpoint_hits_total", "counter",
            "Prefix hits that restored a recurrent state checkpoint.", (double)es->kv.ckpt_hits);
        one(&o, "weft_state_checkpoints_replaced_total", "counter",
            "Recurrent state checkpoints replaced by newer ones (the least recently used).",
            (double)es->kv.ckpts_replaced);
        one(&o, "weft_state_checkpoints_imported_total", "counter",
            "Recurrent state checkpoints taken with imported KV blocks (a transfer, a hand-off, Redis).",
            (double)es->kv.ckpts_imported);
    }
    if (es->kv.n_window_blocks) {
        /* sliding-window layers' blocks (core/kv.h's window group) */
        one(&o, "weft_kv_window_blocks", "gauge", "KV blocks of the sliding-window layers' group.",
            es->kv.n_window_blocks);
        one(&o, "weft_kv_window_blocks_used", "gauge", "Window-layer KV blocks inside a sequence's window.",
            es->kv.window_used);
        one(&o, "weft_kv_window_blocks_cached", "gauge", "Window-layer KV blocks kept for prefix reuse.",
            es->kv.window_cached);
        one(&o, "weft_kv_window_dropped_total", "counter",
            "Window-layer KV blocks sequences let go of once out of their window.", (double)es->kv.window_dropped);
    }
    one(&o, "weft_kv_host_blocks_used", "gauge", "Host-tier KV blocks holding swapped sequences.", es->kv.host_used);
    one(&o, "weft_kv_host_blocks", "gauge", "KV blocks in the host tier.", es->kv.n_host_blocks);
    one(&o, "weft_kv_host_cache_blocks", "gauge", "Blocks the host prefix tier holds at most (--kv-host-mib).",
        es->kv.n_host_cache_blocks);
    one(&o, "weft_kv_host_cache_blocks_used", "gauge", "Blocks in the host prefix tier.", es->kv.host_cache_used);
    one(&o, "weft_kv_host_hit_tokens_total", "counter",
        "Prompt tokens served from the host prefix tier (promoted, not recomputed).",
        (double)es->kv.host_hit_blocks * WEFT_KV_BLOCK_TOKENS);
    one(&o, "weft_kv_host_demotions_total", "counter", "Cached blocks the device evicted into the host prefix tier.",
        (double)es->kv.host_demotions);
    one(&o, "weft_kv_host_evictions_total", "counter", "Blocks the host prefix tier evicted.",
        (double)es->kv.host_evictions);
    one(&o, "weft_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
        (double)es->prefix_hit_tokens);
    one(&o, "weft_prefill_tokens_total", "counter", "Prompt tokens computed.", (double)es->prefill_tokens);
    one(&o, "weft_embedding_requests_total", "counter", "Embedding inputs computed (one engine request each).",
        (double)es->embed_requests);
    one(&o, "weft_embedding_tokens_total", "counter", "Tokens of the embedding inputs computed.",
        (double)es->embed_tokens);
    one(&o, "weft_preemptions_total", "counter", "Sequences preempted (swap or recompute).",
        (double)(es->preempt_swap + es->preempt_recompute));
    one(&o, "weft_engine_steps_total", "counter", "Engine steps run.", (double)es->steps);
    one(&o, "weft_engine_step_tokens_total", "counter", "Tokens computed over all steps.", (double)es->step_tokens);
    one(&o, "weft_engine_low_priority_prefill_tokens", "gauge",
        "Most prompt tokens of lower priorities in one step now (--low-priority-step-ms; 0 = no limit).",
        es->low_prefill_tokens);
    one(&o, "weft_engine_low_priority_prefill_limited_steps_total", "counter",
        "Steps that held lower-priority prompts to that limit.", (double)es->low_prefill_limited);
    one(&o, "weft_engine_itl_target_seconds", "gauge",
        "The inter-token-latency target the last step with decode rows was planned against "
        "(--itl-target-ms; 0 = none or not measured yet).", es->itl_target_s);
    one(&o, "weft_engine_decode_step_fixed_seconds", "gauge",
        "The decode step's cost model (fitted to measured decode-only steps): its fixed part.", es->decode_fixed_s);
    one(&o, "weft_engine_decode_step_row_seconds", "gauge",
        "The decode step's cost model: its part per decode row.", es->decode_row_s);
    one(&o, "weft_engine_itl_limited_steps_total", "counter",
        "Steps whose prompt tokens the ITL target held back (spread over later steps).", (double)es->itl_limited);
    one(&o, "weft_engine_itl_spread_steps_total", "counter",
        "Steps whose prompt tokens the auto target raised to their share of the waiting prompt backlog "
        "(spread over 16 steps).",
        (double)es->itl_spread);
    one(&o, "weft_engine_itl_over_target_steps_total", "counter",
        "Steps with decode rows planned over the ITL target (the backlog's share or a one-token floor).",
        (double)es->itl_over);
    one(&o, "weft_engine_step_planned_seconds", "gauge", "The last step's cost by the scheduler's model.",
        es->last_plan.planned_s);
    one(&o, "weft_engine_step_prefill_tokens", "gauge", "Prompt tokens of the last step.",
        (double)es->last_plan.prefill_tokens);
    one(&o, "weft_engine_step_decode_rows", "gauge", "Decode rows of the last step.", (double)es->last_plan.decode_rows);
    one(&o, "weft_tenant_share_deferred_steps_total", "counter",
        "Steps that gave a tenant ahead of its time slice only the prompt tokens others left.",
        (double)es->share_deferred);
    if (x && x->eng) {
        head(&o, "weft_tenant_prefill_tokens_total", "counter", "Prompt tokens computed, by tenant (\"\" = default).");
        char tn[WEFT_TENANT_NAME_MAX], lv[2 * WEFT_TENANT_NAME_MAX + 4];
        uint64_t tok;
        for (uint32_t i = 0; weft_engine_tenant_prefill(x->eng, i, tn, &tok); i++) {
            label_value(lv, sizeof lv, tn);
            weft_sb_printf(b, "weft_tenant_prefill_tokens_total{%s,tenant=\"%s\"} %llu\n", o.lbl, lv, (unsigned long long)tok);
        }
    }
    one(&o, "weft_prefill_tokens_per_second", "gauge", "Measured prefill rate (moving average over live steps).",
        es->prefill_tps);
    one(&o, "weft_decode_tokens_per_second", "gauge", "Measured decode rate (moving average over live steps).",
        es->decode_tps);
    one(&o, "weft_engine_stalled_seconds", "gauge",
        "Seconds since the engine last stepped while it has work (0 without work); past --watchdog-ms /health "
        "and /load answer 503.", es->stalled_s);
    head(&o, "weft_device_memory_bytes", "gauge", "Device memory held, by use.");
    weft_sb_printf(b, "weft_device_memory_bytes{%s,use=\"weights\"} %llu\nweft_device_memory_bytes{%s,use=\"kv_cache\"} %llu\n",
        o.lbl, (unsigned long long)weight_bytes, o.lbl, (unsigned long long)kv_bytes);
    if (x) {
        one(&o, "weft_http_output_buffered_bytes", "gauge", "Response bytes queued unsent, all connections.",
            (double)x->out_now);
        one(&o, "weft_http_output_peak_bytes", "gauge", "The most response bytes ever queued unsent on one connection.",
            (double)x->out_peak);
        one(&o, "weft_http_connections", "gauge", "Open client connections.", x->conns);
        one(&o, "weft_http_connections_stalled", "gauge",
            "Connections stalled on a client that reads nothing: past the output bound, kernel buffer full.",
            x->stalled);
        head(&o, "weft_tokenize_total", "counter", "Prompts tokenized, by the thread that did it.");
        weft_sb_printf(b, "weft_tokenize_total{%s,thread=\"worker\"} %llu\nweft_tokenize_total{%s,thread=\"loop\"} %llu\n", o.lbl,
            (unsigned long long)x->tok_worker, o.lbl, (unsigned long long)x->tok_loop);
        one(&o, "weft_tokenize_pending", "gauge", "Requests tokenizing or waiting to.", x->tok_pending);
        one(&o, "weft_grammar_compiles_total", "counter",
            "Request grammars (response_format, tool calls) compiled, on the grammar thread (never a tokenizing "
            "worker's).", (double)x->grammar_compiles);
        one(&o, "weft_grammar_pending", "gauge", "Requests whose grammar is compiling or waiting to.",
            x->grammar_pending);
        one(&o, "weft_kv_push_held_bytes", "gauge",
            "Bytes of POST /v1/kv/blocks bodies held now, on every connection (bounded by --max-kv-push-total-mib).",
            (double)x->kv_push_held);
        one(&o, "weft_kv_push_refused_total", "counter",
            "KV pushes refused (503) because the bodies held already would pass --max-kv-push-total-mib.",
            (double)x->kv_push_refused);
        if (x->kvio) {
            const struct weft_engine_kv_stats *k = x->kvio;
            head(&o, "weft_kv_transfer_blocks_total", "counter", "KV blocks sent to or taken from another instance.");
            weft_sb_printf(b, "weft_kv_transfer_blocks_total{%s,direction=\"out\"} %llu\n"
                   "weft_kv_transfer_blocks_total{%s,direction=\"in\"} %llu\n", o.lbl, (unsigned long long)k->exported,
                o.lbl, (unsigned long long)k->imported);
            head(&o, "weft_kv_transfer_bytes_total", "counter", "Bytes of KV block streams, by direction.");
            weft_sb_printf(b, "weft_kv_transfer_bytes_total{%s,direction=\"out\"} %llu\n"
                   "weft_kv_transfer_bytes_total{%s,direction=\"in\"} %llu\n", o.lbl, (unsigned long long)k->bytes_out,
                o.lbl, (unsigned long long)k->bytes_in);
            head(&o, "weft_kv_rejected_total", "counter",
                 "KV blocks or streams refused: a bad block (corrupt, truncated, misnamed), a foreign stream, or "
                 "blocks without a MAC made under the fleet secret (mac).");
            weft_sb_printf(b, "weft_kv_rejected_total{%s,what=\"block\"} %llu\nweft_kv_rejected_total{%s,what=\"stream\"} %llu\n"
                "weft_kv_rejected_total{%s,what=\"mac\"} %llu\n",
                o.lbl, (unsigned long long)k->rejected, o.lbl, (unsigned long long)k->rejected_streams, o.lbl,
                (unsigned long long)k->rejected_mac);
            one(&o, "weft_kv_imported_converted_total", "counter", "Imported KV blocks converted to this cache's type.",
                (double)k->converted);
            one(&o, "weft_kv_imported_hit_tokens_total", "counter", "Prompt tokens served from imported KV blocks.",
                (double)k->hit_imported * WEFT_KV_BLOCK_TOKENS);
        }
        if (x->remote) {
            const struct weft_kv_remote_stats *k = x->remote;
            one(&o, "weft_kv_remote_up", "gauge", "The Redis KV tier answered its last call (1) or not (0).", k->up);
            one(&o, "weft_kv_remote_written_blocks_total", "counter", "Blocks written to Redis (new keys).",
                (double)k->written);
            one(&o, "weft_kv_remote_write_dropped_total", "counter",
                "Blocks not written: the write-behind queue was full or Redis was down.", (double)k->write_dropped);
            one(&o, "weft_kv_remote_write_errors_total", "counter", "Redis writes that failed (errors, timeouts, OOM).",
                (double)k->write_errors);
            one(&o, "weft_kv_remote_lookups_total", "counter", "Pipelined MGETs along a prompt's hash chain.",
                (double)k->lookups);
            one(&o, "weft_kv_remote_hit_blocks_total", "counter", "Blocks found in Redis and imported.",
                (double)k->hit_blocks);
            one(&o, "weft_kv_remote_miss_blocks_total", "counter", "Blocks looked up and not found (or past a gap).",
                (double)k->miss_blocks);
            one(&o, "weft_kv_remote_bytes_total", "counter", "Bytes read from Redis.", (double)k->fetched_bytes);
            one(&o, "weft_kv_remote_rejected_total", "counter", "Values from Redis the block reader refused.",
                (double)k->rejected);
            head(&o, "weft_kv_remote_decisions_total", "counter",
                 "Prompts missing blocks: fetched from Redis, or recomputed (the link predicted slower, or down).");
            weft_sb_printf(b, "weft_kv_remote_decisions_total{%s,choice=\"fetch\"} %llu\n"
                   "weft_kv_remote_decisions_total{%s,choice=\"recompute\"} %llu\n", o.lbl,
                (unsigned long long)k->chose_fetch, o.lbl, (unsigned long long)k->chose_recompute);
            one(&o, "weft_kv_remote_errors_total", "counter", "Redis connect and command failures, timeouts included.",
                (double)k->errors);
            one(&o, "weft_kv_remote_bytes_per_second", "gauge", "Measured Redis read throughput (0: not yet).",
                k->bytes_per_s);
        }
        if (x->fetch) {
            const struct kv_fetch_stats *f = x->fetch;
            one(&o, "weft_kv_remote_stalled", "gauge",
                "1 while a Redis fetch runs past its deadline (what recomputing would take): the tier is stalled, "
                "requests go on without it.", f->stalled);
            head(&o, "weft_kv_remote_fetches_total", "counter",
                 "Remote fetches by how they ended for their request: in time, late (the request went on at its "
                 "deadline), dropped (the deadline passed in the queue), queue_full (not queued).");
            weft_sb_printf(b, "weft_kv_remote_fetches_total{%s,result=\"in_time\"} %llu\n"
                   "weft_kv_remote_fetches_total{%s,result=\"late\"} %llu\n"
                   "weft_kv_remote_fetches_total{%s,result=\"dropped\"} %llu\n"
                   "weft_kv_remote_fetches_total{%s,result=\"queue_full\"} %llu\n", o.lbl,
                (unsigned long long)f->in_time, o.lbl, (unsigned long long)f->late, o.lbl,
                (unsigned long long)f->dropped, o.lbl, (unsigned long long)f->queue_full);
        }
        if (x->pd) {
            const struct pd_stats *p = x->pd;
            head(&o, "weft_pd_requests_total", "counter",
                 "Requests that waited for a prefill instance's blocks, by how the wait ended: every block arrived "
                 "(complete), none for too long (timeout) or the prefill side ended short (ended); the last two "
                 "computed the rest here.");
            weft_sb_printf(b, "weft_pd_requests_total{%s,outcome=\"complete\"} %llu\n"
                   "weft_pd_requests_total{%s,outcome=\"timeout\"} %llu\n"
                   "weft_pd_requests_total{%s,outcome=\"ended\"} %llu\n", o.lbl, (unsigned long long)p->complete,
                o.lbl, (unsigned long long)p->fallback_timeout, o.lbl, (unsigned long long)p->fallback_ended);
            one(&o, "weft_pd_fallbacks_total", "counter", "PD requests that computed missing blocks themselves.",
                (double)(p->fallback_timeout + p->fallback_ended));
            one(&o, "weft_pd_received_blocks_total", "counter", "KV blocks taken from prefill instances.",
                (double)p->blocks_in);
            one(&o, "weft_pd_received_bytes_total", "counter", "Bytes of KV blocks pushed by prefill instances.",
                (double)p->bytes_in);
            one(&o, "weft_pd_wait_seconds_total", "counter", "Seconds PD requests waited for their blocks, in all.",
                p->wait_s);
            one(&o, "weft_pd_leases_expired_total", "counter",
                "Pushed blocks whose request never came, unpinned after the lease.", (double)p->leases_expired);
            one(&o, "weft_pd_pins_refused_total", "counter",
                "Pushed blocks left unpinned (cached, evictable): past what one request's prompt can use, or past "
                "half the KV pool pinned by every hand-off.", (double)p->pins_refused);
            one(&o, "weft_pd_tickets", "gauge", "PD hand-offs open (blocks pinned for a request).", p->tickets);
            one(&o, "weft_pd_pushes_total", "counter", "Prompts this instance prefilled for a decode instance.",
                (double)p->pushes);
            head(&o, "weft_pd_pushes_ended_total", "counter", "Pushes ended, by result.");
            weft_sb_printf(b, "weft_pd_pushes_ended_total{%s,result=\"done\"} %llu\n"
                   "weft_pd_pushes_ended_total{%s,result=\"failed\"} %llu\n", o.lbl,
                (unsigned long long)p->pushes_done, o.lbl, (unsigned long long)p->pushes_failed);
            one(&o, "weft_pd_pushed_blocks_total", "counter", "KV blocks pushed to decode instances.",
                (double)p->blocks_out);
            one(&o, "weft_pd_pushed_bytes_total", "counter", "Bytes pushed to decode instances.", (double)p->bytes_out);
            one(&o, "weft_pd_push_batches_total", "counter", "POSTs of pushed blocks (one per commit batch).",
                (double)p->batches);
            one(&o, "weft_pd_push_seconds_total", "counter", "Seconds from each push's start to its end, in all.",
                p->push_s);
        }
        head(&o, "weft_config_reloads_total", "counter", "Tenant config reloads (SIGHUP), by result.");
        weft_sb_printf(b, "weft_config_reloads_total{%s,result=\"ok\"} %llu\nweft_config_reloads_total{%s,result=\"error\"} %llu\n",
            o.lbl, (unsigned long long)x->reloads_ok, o.lbl, (unsigned long long)x->reloads_err);
        if (x->mock_injected) {
            static const char *kinds[5] = {"429", "503", "500", "hang", "nokv"};
            head(&o, "weft_mock_injected_failures_total", "counter", "Failures a --mock instance injected, by kind.");
            for (int k = 0; k < 5; k++)
                weft_sb_printf(b, "weft_mock_injected_failures_total{%s,kind=\"%s\"} %llu\n", o.lbl, kinds[k],
                    (unsigned long long)x->mock_injected[k]);
        }
    }
    if (x && x->vllm_compat) {
        /* the names endpoint pickers and autoscalers built for vLLM already read */
        one(&o, "vllm:num_requests_running", "gauge", "Requests being computed (weft_requests_running).", es->running);
        one(&o, "vllm:num_requests_waiting", "gauge", "Requests queued (weft_requests_waiting).", es->waiting);
        one(&o, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 0..1 (weft_kv_cache_usage_ratio).", usage);
        head(&o, "vllm:cache_config_info", "gauge", "KV cache configuration.");
        weft_sb_printf(b, "vllm:cache_config_info{%s,block_size=\"%d\",num_gpu_blocks=\"%u\"} 1\n", o.lbl, WEFT_KV_BLOCK_TOKENS,
            es->kv.n_blocks);
        /* what vLLM's v1 engine exports for latency and volume, the series
         * its Grafana dashboards and llm-d read: the same observations as
         * weft's own series (named in each help) */
        hist(&o, "vllm:time_to_first_token_seconds", "Time to first token (weft_time_to_first_token_seconds).",
             &m->ttft);
        hist(&o, "vllm:inter_token_latency_seconds", "Inter-token latency (weft_inter_token_latency_seconds).",
             &m->itl);
        hist(&o, "vllm:e2e_request_latency_seconds", "End-to-end request latency (weft_request_duration_seconds).",
             &m->e2e);
        hist(&o, "vllm:request_queue_time_seconds", "Time in the waiting queue (weft_request_queue_seconds).",
             &m->queue);
        one(&o, "vllm:prompt_tokens_total", "counter", "Prompt tokens processed (weft_prompt_tokens_total).",
            (double)m->prompt_tokens);
        one(&o, "vllm:generation_tokens_total", "counter", "Generation tokens (weft_generation_tokens_total).",
            (double)m->generation_tokens);
        one(&o, "vllm:num_preemptions_total", "counter", "Preemptions (weft_preemptions_total).",
            (double)(es->preempt_swap + es->preempt_recompute));
        /* by vLLM's finished_reason: stop, length, abort (a client gone or
         * too slow, a shutdown, an abort), error */
        uint64_t by[4] = {m->finish[METRIC_FINISH_STOP], m->finish[METRIC_FINISH_LENGTH],
                          m->finish[METRIC_FINISH_ABORT] + m->finish[METRIC_FINISH_CLIENT_GONE] +
                              m->finish[METRIC_FINISH_SLOW_CLIENT] + m->finish[METRIC_FINISH_SHUTDOWN],
                          m->finish[METRIC_FINISH_ERROR]};
        static const char *const reason[4] = {"stop", "length", "abort", "error"};
        head(&o, "vllm:request_success_total", "counter", "Finished requests, by finish reason (weft_request_finish_total).");
        for (int i = 0; i < 4; i++)
            weft_sb_printf(b, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", o.lbl, reason[i],
                (unsigned long long)by[i]);
    }
    if (b->oom) { free(b->p); return NULL; }
    *len = b->len;
    return b->p;
}
