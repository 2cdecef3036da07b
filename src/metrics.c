/* metrics.c: Prometheus metrics: the counters workers keep, the text exposition (Prometheus and
 * OpenMetrics with exemplars) and /status JSON. The HTTP endpoint serving them is metrics_http.c.
 */
#include "metrics.h"
#include "clock.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../include/idemd/handler.h"
#include "log.h"

/* 16 lowercase hex digits of s as a number; false when they are not. */
static bool metrics_hex64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return false;
        v = v << 4 | d;
    }
    *out = v;
    return true;
}

void metrics_exemplar_put(metrics_exemplar_t *ex, const char *trace_id, const char *span_id,
                          uint64_t value_us, uint64_t when_ms)
{
    uint64_t hi, lo, span;
    if (strlen(trace_id) != 32 || strlen(span_id) != 16 || !metrics_hex64(trace_id, &hi) ||
        !metrics_hex64(trace_id + 16, &lo) || !metrics_hex64(span_id, &span))
        return;
    uint64_t seq = __atomic_load_n(&ex->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&ex->seq, seq | 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&ex->trace_hi, hi, __ATOMIC_RELAXED);
    __atomic_store_n(&ex->trace_lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&ex->span, span, __ATOMIC_RELAXED);
    __atomic_store_n(&ex->value_us, value_us, __ATOMIC_RELAXED);
    __atomic_store_n(&ex->when_ms, when_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&ex->seq, (seq | 1) + 1, __ATOMIC_RELEASE);
}

/* A consistent copy of ex into out; false when a write was under way (out untouched). */
static bool metrics_exemplar_get(const metrics_exemplar_t *ex, metrics_exemplar_t *out)
{
    uint64_t a = __atomic_load_n(&ex->seq, __ATOMIC_ACQUIRE);
    if (a & 1)
        return false;
    metrics_exemplar_t c;
    c.trace_hi = __atomic_load_n(&ex->trace_hi, __ATOMIC_RELAXED);
    c.trace_lo = __atomic_load_n(&ex->trace_lo, __ATOMIC_RELAXED);
    c.span = __atomic_load_n(&ex->span, __ATOMIC_RELAXED);
    c.value_us = __atomic_load_n(&ex->value_us, __ATOMIC_RELAXED);
    c.when_ms = __atomic_load_n(&ex->when_ms, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&ex->seq, __ATOMIC_RELAXED) != a)
        return false;
    c.seq = 0;
    *out = c;
    return true;
}

void metrics_counters_add(metrics_counters_t *to, const metrics_counters_t *from)
{
    _Static_assert(sizeof(metrics_counters_t) % sizeof(uint64_t) == 0, "only uint64_t fields");
    _Static_assert(offsetof(metrics_counters_t, handler_ex) + sizeof(to->handler_ex) ==
                       sizeof(metrics_counters_t),
                   "the exemplars come last");
    uint64_t *t = (uint64_t *)(void *)to;
    const uint64_t *f = (const uint64_t *)(const void *)from;
    for (size_t i = 0; i < offsetof(metrics_counters_t, handler_ex) / sizeof(uint64_t); i++)
        t[i] += __atomic_load_n(&f[i], __ATOMIC_RELAXED);
    for (int b = 0; b <= METRICS_HANDLER_N; b++) {
        metrics_exemplar_t e;
        if (metrics_exemplar_get(&from->handler_ex[b], &e) && e.when_ms > to->handler_ex[b].when_ms)
            to->handler_ex[b] = e;
    }
}

void metrics_observe_batch(metrics_counters_t *c, uint64_t messages)
{
    static const uint64_t bounds[] = METRICS_BATCH_BOUNDS;
    metrics_observe(c->batch, &c->batch_sum, bounds, METRICS_BATCH_N, messages);
}

int metrics_observe_handler(metrics_counters_t *c, uint64_t us)
{
    static const uint64_t bounds[] = METRICS_HANDLER_BOUNDS;
    return metrics_observe(c->handler, &c->handler_sum_us, bounds, METRICS_HANDLER_N, us);
}

void metrics_observe_latency(metrics_counters_t *c, uint64_t us)
{
    static const uint64_t bounds[] = METRICS_LATENCY_BOUNDS;
    metrics_observe(c->latency, &c->latency_sum_us, bounds, METRICS_LATENCY_N, us);
}

const char *metrics_stage_name(metrics_stage_t stage)
{
    static const char *const names[METRICS_STAGES] = {"wait",    "collect", "begin", "insert",
                                                      "handler", "commit",  "ack"};
    return stage >= 0 && stage < METRICS_STAGES ? names[stage] : "?";
}

int metrics_observe_stage(metrics_counters_t *c, metrics_stage_t stage, uint64_t us)
{
    static const uint64_t bounds[] = METRICS_STAGE_BOUNDS;
    return metrics_observe(c->stage[stage], &c->stage_sum_us[stage], bounds, METRICS_STAGE_N, us);
}

/* ---------------------------------------------------------------------- */
/* The fine latency histogram of the exit summary */

/* 4 latency buckets per power of two: 2^(k/4) for k = 0..3. */
static const double metrics_lat_step[4] = {1.0, 1.189207115, 1.414213562, 1.681792831};

int metrics_lat_bucket(uint64_t us)
{
    if (us == 0)
        return 0;
    int e = 63 - __builtin_clzll(us);
    double frac = (double)us / (double)(1ULL << e);
    int q = 0;
    while (q < 3 && frac >= metrics_lat_step[q + 1])
        q++;
    int b = e * 4 + q;
    return b < METRICS_LAT_BUCKETS ? b : METRICS_LAT_BUCKETS - 1;
}

uint64_t metrics_lat_bucket_floor(int bucket)
{
    return (uint64_t)((double)(1ULL << (bucket / 4)) * metrics_lat_step[bucket % 4]);
}

/* Value below which a fraction q of the merged latency samples fall, in microseconds. */
uint64_t metrics_lat_quantile(const uint64_t *hist, uint64_t total, double q)
{
    uint64_t want = (uint64_t)((double)total * q), seen = 0;
    for (int b = 0; b < METRICS_LAT_BUCKETS; b++) {
        seen += hist[b];
        if (seen > want)
            return metrics_lat_bucket_floor(b + 1);
    }
    return metrics_lat_bucket_floor(METRICS_LAT_BUCKETS - 1);
}

/* ---------------------------------------------------------------------- */
/* The text exposition (format 0.0.4) */

/* A label value with \, " and newline escaped. */
static void metrics_label(FILE *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(out, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", out);
        else
            fputc(*v, out);
    }
}

/* Rendering OpenMetrics rather than Prometheus text: set for the length of one render (the
 * server renders one scrape at a time, in one thread). */
static bool metrics_om;

static void metrics_head(FILE *out, const char *name, const char *type, const char *help)
{
    size_t n = strlen(name);
    /* OpenMetrics names a counter family without the _total of its sample. */
    if (metrics_om && strcmp(type, "counter") == 0 && n > 6 && strcmp(name + n - 6, "_total") == 0)
        n -= 6;
    fprintf(out, "# HELP %.*s %s\n# TYPE %.*s %s\n", (int)n, name, help, (int)n, name, type);
}

/* name{queue="q"[,outcome="o"]} value */
static void metrics_sample(FILE *out, const char *name, const char *queue, const char *outcome,
                           unsigned long long v)
{
    fprintf(out, "%s{queue=\"", name);
    metrics_label(out, queue);
    if (outcome)
        fprintf(out, "\",outcome=\"%s", outcome);
    fprintf(out, "\"} %llu\n", v);
}

/* A counter family with one sample per queue; field is the byte offset of its counter. */
static void metrics_counter(FILE *out, const metrics_queue_t *qs, int n, const char *name,
                            size_t field, const char *help)
{
    metrics_head(out, name, "counter", help);
    for (int i = 0; i < n; i++)
        metrics_sample(out, name, qs[i].name, NULL,
                       *(const uint64_t *)(const void *)((const char *)&qs[i].c + field));
}

/* A gauge family with one integer sample per queue; field is the offset in metrics_queue_t. */
static void metrics_gauge(FILE *out, const metrics_queue_t *qs, int n, const char *name,
                          size_t field, const char *help)
{
    metrics_head(out, name, "gauge", help);
    for (int i = 0; i < n; i++)
        metrics_sample(
            out, name, qs[i].name, NULL,
            (unsigned long long)*(const int *)(const void *)((const char *)&qs[i] + field));
}

/* An exemplar after a bucket's value (OpenMetrics): " # {trace_id=...,span_id=...} v ts". */
static void metrics_exemplar(FILE *out, const metrics_exemplar_t *ex, double scale)
{
    if (!metrics_om || ex == NULL || ex->when_ms == 0)
        return;
    fprintf(out, " # {trace_id=\"%016llx%016llx\",span_id=\"%016llx\"} %.6f %llu.%03llu",
            (unsigned long long)ex->trace_hi, (unsigned long long)ex->trace_lo,
            (unsigned long long)ex->span, (double)ex->value_us / scale,
            (unsigned long long)(ex->when_ms / 1000), (unsigned long long)(ex->when_ms % 1000));
}

/* The start of a sample of a histogram: name+suffix{queue="q" and the labels in extra
 * (",stage=\"insert\""; "" for none). */
static void metrics_hist_open(FILE *out, const char *name, const char *suffix, const char *queue,
                              const char *extra)
{
    fprintf(out, "%s%s{queue=\"", name, suffix);
    metrics_label(out, queue);
    fprintf(out, "\"%s", extra);
}

/* A histogram of one queue: cumulative buckets (with exemplars ex[0..nb] when not NULL), sum
 * and count; values divided by scale; extra: more labels, as metrics_hist_open. */
static void metrics_histogram(FILE *out, const char *name, const char *queue, const char *extra,
                              const uint64_t *buckets, const uint64_t *bounds, int nb, uint64_t sum,
                              double scale, const metrics_exemplar_t *ex)
{
    unsigned long long cum = 0;
    for (int b = 0; b <= nb; b++) {
        cum += buckets[b];
        metrics_hist_open(out, name, "_bucket", queue, extra);
        if (b < nb)
            fprintf(out, ",le=\"%g\"} %llu", (double)bounds[b] / scale, cum);
        else
            fprintf(out, ",le=\"+Inf\"} %llu", cum);
        metrics_exemplar(out, ex ? &ex[b] : NULL, scale);
        fputc('\n', out);
    }
    metrics_hist_open(out, name, "_sum", queue, extra);
    if (scale == 1)
        fprintf(out, "} %llu\n", (unsigned long long)sum);
    else
        fprintf(out, "} %.6f\n", (double)sum / scale);
    metrics_hist_open(out, name, "_count", queue, extra);
    fprintf(out, "} %llu\n", cum);
}

#define METRICS_C(fld) offsetof(metrics_counters_t, fld)
#define METRICS_Q(fld) offsetof(metrics_queue_t, fld)

static void metrics_render_body(FILE *out, const metrics_queue_t *qs, int n, const char *version);

void metrics_render(FILE *out, const metrics_queue_t *qs, int n, const char *version)
{
    metrics_om = false;
    metrics_render_body(out, qs, n, version);
}

void metrics_render_openmetrics(FILE *out, const metrics_queue_t *qs, int n, const char *version)
{
    metrics_om = true;
    metrics_render_body(out, qs, n, version);
    fputs("# EOF\n", out);
    metrics_om = false;
}

/* The build, message, copy and transaction counters of qs[0..n-1] (borrowed). */
static void metrics_render_counters(FILE *out, const metrics_queue_t *qs, int n,
                                    const char *version)
{
    static const char *const copy_outcomes[METRICS_COPY_OUTCOMES] = {"published", "refused"};

    metrics_head(out, "idemd_build_info", "gauge", "idemd's version and plugin ABI; always 1.");
    fputs("idemd_build_info{version=\"", out);
    metrics_label(out, version);
    fprintf(out, "\",abi=\"%d.%d\"} 1\n", IDEMD_HANDLER_ABI_MAJOR, IDEMD_HANDLER_ABI_MINOR);

    metrics_head(out, "idemd_messages_total", "counter",
                 "Messages settled, by outcome: ok (committed), duplicate (already committed), "
                 "retry, reject.");
    for (int i = 0; i < n; i++) {
        const metrics_counters_t *c = &qs[i].c;
        metrics_sample(out, "idemd_messages_total", qs[i].name, "ok", c->n_ok);
        metrics_sample(out, "idemd_messages_total", qs[i].name, "duplicate", c->n_duplicate);
        metrics_sample(out, "idemd_messages_total", qs[i].name, "retry", c->n_retry);
        metrics_sample(out, "idemd_messages_total", qs[i].name, "reject", c->n_reject);
    }
    metrics_head(out, "idemd_retry_copies_total", "counter",
                 "Copies of retried messages published to a delay queue: published (confirmed "
                 "by the broker) or refused (not confirmed; the original is held or requeued).");
    for (int i = 0; i < n; i++)
        for (int o = 0; o < METRICS_COPY_OUTCOMES; o++)
            metrics_sample(out, "idemd_retry_copies_total", qs[i].name, copy_outcomes[o],
                           qs[i].c.n_copies[METRICS_COPY_RETRY][o]);
    metrics_head(out, "idemd_dead_letter_copies_total", "counter",
                 "Copies of rejected or exhausted messages published to the dead letter queue: "
                 "published (confirmed) or refused (not confirmed; the original is held or "
                 "requeued).");
    for (int i = 0; i < n; i++)
        for (int o = 0; o < METRICS_COPY_OUTCOMES; o++)
            metrics_sample(out, "idemd_dead_letter_copies_total", qs[i].name, copy_outcomes[o],
                           qs[i].c.n_copies[METRICS_COPY_DEAD_LETTER][o]);
    metrics_counter(out, qs, n, "idemd_commits_total", METRICS_C(n_commits),
                    "Batch transactions committed.");
    metrics_counter(out, qs, n, "idemd_transaction_redos_total", METRICS_C(n_redos),
                    "Batch transactions lost (deadlock, Galera certification conflict, lost "
                    "savepoint), rolled back and redone.");
    metrics_counter(out, qs, n, "idemd_lock_wait_retries_total", METRICS_C(n_lock_waits),
                    "Messages retried because their record waited too long for another "
                    "transaction's lock.");
    metrics_counter(out, qs, n, "idemd_redelivered_total", METRICS_C(n_redelivered),
                    "Deliveries that came redelivered (or with an x-delivery-count): each ran "
                    "alone, in case it was what stopped a worker.");
}

/* The per-stage histograms of qs[0..n-1] (borrowed): idemd_stage_seconds{stage=...}. */
static void metrics_render_stages(FILE *out, const metrics_queue_t *qs, int n)
{
    static const uint64_t stage_b[] = METRICS_STAGE_BOUNDS;
    char extra[40];

    metrics_head(out, "idemd_stage_seconds", "histogram",
                 "Time in each stage: wait (publisher's idemd-pub-us stamp to the delivery read, "
                 "per stamped message), collect (first delivery read to batch taken, per batch), "
                 "begin (XA START or START TRANSACTION), "
                 "insert (one record INSERT statement), handler (one handler call), commit (per "
                 "COMMIT), ack (settling a batch with the broker).");
    for (int i = 0; i < n; i++)
        for (int st = 0; st < METRICS_STAGES; st++) {
            snprintf(extra, sizeof(extra), ",stage=\"%s\"", metrics_stage_name(st));
            metrics_histogram(out, "idemd_stage_seconds", qs[i].name, extra, qs[i].c.stage[st],
                              stage_b, METRICS_STAGE_N, qs[i].c.stage_sum_us[st], 1e6, NULL);
        }
}

/* The histograms of qs[0..n-1] (borrowed): batch size, handler duration, publish to commit. */
static void metrics_render_histograms(FILE *out, const metrics_queue_t *qs, int n)
{
    static const uint64_t batch_b[] = METRICS_BATCH_BOUNDS, handler_b[] = METRICS_HANDLER_BOUNDS,
                          latency_b[] = METRICS_LATENCY_BOUNDS;

    metrics_head(out, "idemd_batch_size", "histogram", "Messages per batch transaction.");
    for (int i = 0; i < n; i++)
        metrics_histogram(out, "idemd_batch_size", qs[i].name, "", qs[i].c.batch, batch_b,
                          METRICS_BATCH_N, qs[i].c.batch_sum, 1, NULL);
    metrics_head(out, "idemd_handler_duration_seconds", "histogram",
                 "Duration of one handler call: handle() for one message, or handle_batch() "
                 "for a batch.");
    for (int i = 0; i < n; i++)
        metrics_histogram(out, "idemd_handler_duration_seconds", qs[i].name, "", qs[i].c.handler,
                          handler_b, METRICS_HANDLER_N, qs[i].c.handler_sum_us, 1e6,
                          qs[i].c.handler_ex);
    metrics_head(out, "idemd_publish_to_commit_seconds", "histogram",
                 "From the publisher's idemd-pub-us header (CLOCK_REALTIME microseconds) to the "
                 "commit of the message; only messages that carry it.");
    for (int i = 0; i < n; i++)
        metrics_histogram(out, "idemd_publish_to_commit_seconds", qs[i].name, "", qs[i].c.latency,
                          latency_b, METRICS_LATENCY_N, qs[i].c.latency_sum_us, 1e6, NULL);
    metrics_render_stages(out, qs, n);
}

/* The workers of qs[0..n-1] (borrowed): restarts, counts by state, progress, reconnects, chores. */
static void metrics_render_workers(FILE *out, const metrics_queue_t *qs, int n)
{
    static const char *const exits[METRICS_EXIT_KINDS] = {"crash", "timeout", "broker", "database",
                                                          "config"};

    metrics_head(out, "idemd_worker_restarts_total", "counter",
                 "Worker processes restarted, by how the previous run ended: crash (signal or "
                 "unexplained exit), timeout (handler_timeout or reconcile_timeout), broker or "
                 "database (connection lost), config (declaration or handler init refused).");
    for (int i = 0; i < n; i++)
        for (int e = 0; e < METRICS_EXIT_KINDS; e++)
            metrics_sample(out, "idemd_worker_restarts_total", qs[i].name, exits[e],
                           qs[i].restarts[e]);
    metrics_gauge(out, qs, n, "idemd_workers", METRICS_Q(workers),
                  "Worker processes the queue runs: the number configured, or with workers = "
                  "\"auto\" the count chosen now.");
    metrics_gauge(out, qs, n, "idemd_workers_max", METRICS_Q(workers_max),
                  "Most workers the queue may run: with workers = \"auto\" workers_max within "
                  "the database connection budget, else the number configured.");
    metrics_gauge(out, qs, n, "idemd_workers_auto", METRICS_Q(autoscaled),
                  "1 when the queue's workers = \"auto\" (adaptive), 0 when a number.");
    metrics_gauge(out, qs, n, "idemd_workers_consuming", METRICS_Q(consuming),
                  "Workers running and consuming.");
    metrics_gauge(out, qs, n, "idemd_workers_connecting", METRICS_Q(connecting),
                  "Workers running but not consuming yet (starting, waiting for the database, "
                  "connecting to the broker).");
    metrics_gauge(out, qs, n, "idemd_workers_restarting", METRICS_Q(restarting),
                  "Workers not running: waiting out the backoff before their restart.");
    metrics_gauge(out, qs, n, "idemd_workers_draining", METRICS_Q(draining),
                  "Workers of an earlier configuration finishing after a reload.");
    metrics_head(out, "idemd_worker_progress_age_seconds", "gauge",
                 "Longest time one of the queue's workers has gone without progress (a turn of "
                 "its loop, a handler call); idle workers make progress every second.");
    for (int i = 0; i < n; i++) {
        fputs("idemd_worker_progress_age_seconds{queue=\"", out);
        metrics_label(out, qs[i].name);
        fprintf(out, "\"} %.3f\n", qs[i].progress_age_s);
    }
    metrics_counter(out, qs, n, "idemd_broker_reconnects_total", METRICS_C(n_mq_reconnects),
                    "Broker connections opened again after one was lost.");
    metrics_counter(out, qs, n, "idemd_database_reconnects_total", METRICS_C(n_db_reconnects),
                    "Database connections opened again after one was lost.");

    metrics_counter(out, qs, n, "idemd_retention_deleted_rows_total", METRICS_C(n_retention_rows),
                    "Dedup records and crash counts deleted by retention.");
    metrics_counter(out, qs, n, "idemd_reconcile_runs_total", METRICS_C(n_reconcile_runs),
                    "Runs of the handler's reconcile().");
    metrics_counter(out, qs, n, "idemd_reconcile_failures_total", METRICS_C(n_reconcile_failures),
                    "Runs of reconcile() that failed, lost their lease or ran past "
                    "reconcile_timeout.");
}

/* The outbox gauges of qs[0..n-1] (borrowed), when a queue's handler can publish. */
static void metrics_render_outbox(FILE *out, const metrics_queue_t *qs, int n)
{
    /* Only queues whose handler can publish (ABI 1.3) have an outbox sweeper. */
    int known = 0;
    for (int i = 0; i < n; i++)
        known += qs[i].outbox_known;
    if (known == 0)
        return;
    metrics_head(out, "idemd_outbox_depth", "gauge",
                 "Onward messages waiting in idemd_outbox for the queue's consumer, as the "
                 "newest outbox sweep (every 5 s) saw them.");
    for (int i = 0; i < n; i++) {
        if (!qs[i].outbox_known)
            continue;
        fputs("idemd_outbox_depth{queue=\"", out);
        metrics_label(out, qs[i].name);
        fprintf(out, "\"} %lld\n", qs[i].outbox_rows);
    }
    metrics_head(out, "idemd_outbox_rows", "gauge",
                 "Rows in idemd_outbox for the queue's consumer by state: waiting (never refused), "
                 "retrying (refused by the broker, waiting out their backoff), exhausted "
                 "(refused outbox_max_attempts times and no dead_letter_queue to take them).");
    for (int i = 0; i < n; i++) {
        if (!qs[i].outbox_known)
            continue;
        static const char *const states[] = {"waiting", "retrying", "exhausted"};
        long long v[] = {qs[i].outbox_rows - qs[i].outbox_retrying - qs[i].outbox_exhausted,
                         qs[i].outbox_retrying, qs[i].outbox_exhausted};
        for (int k = 0; k < 3; k++) {
            fputs("idemd_outbox_rows{queue=\"", out);
            metrics_label(out, qs[i].name);
            fprintf(out, "\",state=\"%s\"} %lld\n", states[k], v[k] > 0 ? v[k] : 0);
        }
    }
    metrics_head(out, "idemd_outbox_oldest_age_seconds", "gauge",
                 "Age of the oldest row in idemd_outbox for the queue's consumer (0 when none).");
    for (int i = 0; i < n; i++) {
        if (!qs[i].outbox_known)
            continue;
        fputs("idemd_outbox_oldest_age_seconds{queue=\"", out);
        metrics_label(out, qs[i].name);
        fprintf(out, "\"} %.3f\n", qs[i].outbox_oldest_s);
    }
}

/* The exposition of qs[0..n-1] (borrowed), without the OpenMetrics # EOF. */
static void metrics_render_body(FILE *out, const metrics_queue_t *qs, int n, const char *version)
{
    metrics_render_counters(out, qs, n, version);
    metrics_render_histograms(out, qs, n);
    metrics_render_workers(out, qs, n);
    metrics_render_outbox(out, qs, n);
}

/* ---------------------------------------------------------------------- */
/* The status document (JSON, for idemctl status) */

static void metrics_json_int(json_object *o, const char *key, long long v)
{
    json_object_object_add(o, key, json_object_new_int64(v));
}

/* The last error of one queue: null, or its time, age, level and text. */
static json_object *metrics_json_error(const log_sink_t *e)
{
    if (e->when_us == 0)
        return NULL;
    struct tm tm;
    char when[40];
    time_t sec = (time_t)(e->when_us / 1000000);
    gmtime_r(&sec, &tm);
    size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03dZ", (int)(e->when_us / 1000 % 1000));
    double age = ((double)clock_wall_us() - (double)e->when_us) / 1e6;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "time", json_object_new_string(when));
    json_object_object_add(o, "age_seconds", json_object_new_double(age > 0 ? age : 0));
    json_object_object_add(
        o, "level", json_object_new_string(e->level == LOG_LEVEL_ERROR ? "error" : "warning"));
    json_object_object_add(o, "text", json_object_new_string(e->text));
    return o;
}

char *metrics_status_json(const metrics_queue_t *qs, int n, const char *version)
{
    static const char *const exits[METRICS_EXIT_KINDS] = {"crash", "timeout", "broker", "database",
                                                          "config"};
    json_object *doc = json_object_new_object(), *arr = json_object_new_array();
    char *out = NULL;

    json_object_object_add(doc, "version", json_object_new_string(version));
    metrics_json_int(doc, "pid", (long long)getpid());
    for (int i = 0; i < n; i++) {
        const metrics_queue_t *q = &qs[i];
        json_object *o = json_object_new_object(), *m = json_object_new_object(),
                    *r = json_object_new_object();
        json_object_object_add(o, "queue", json_object_new_string(q->name));
        metrics_json_int(o, "workers", q->workers);
        metrics_json_int(o, "consuming", q->consuming);
        metrics_json_int(o, "connecting", q->connecting);
        metrics_json_int(o, "restarting", q->restarting);
        metrics_json_int(o, "draining", q->draining);
        json_object_object_add(o, "workers_mode",
                               json_object_new_string(q->autoscaled ? "auto" : "fixed"));
        metrics_json_int(o, "workers_max", q->workers_max);
        json_object_object_add(o, "progress_age_seconds",
                               json_object_new_double(q->progress_age_s));
        metrics_json_int(m, "ok", (long long)q->c.n_ok);
        metrics_json_int(m, "duplicate", (long long)q->c.n_duplicate);
        metrics_json_int(m, "retry", (long long)q->c.n_retry);
        metrics_json_int(m, "reject", (long long)q->c.n_reject);
        json_object_object_add(o, "messages", m);
        metrics_json_int(o, "commits", (long long)q->c.n_commits);
        for (int e = 0; e < METRICS_EXIT_KINDS; e++)
            metrics_json_int(r, exits[e], (long long)q->restarts[e]);
        json_object_object_add(o, "restarts", r);
        json_object_object_add(o, "last_error", metrics_json_error(&q->last_error));
        if (q->outbox_known) {
            json_object *ob = json_object_new_object();
            metrics_json_int(ob, "rows", q->outbox_rows);
            metrics_json_int(ob, "retrying", q->outbox_retrying);
            metrics_json_int(ob, "exhausted", q->outbox_exhausted);
            json_object_object_add(ob, "oldest_age_seconds",
                                   json_object_new_double(q->outbox_oldest_s));
            json_object_object_add(o, "outbox", ob);
        }
        json_object_array_add(arr, o);
    }
    json_object_object_add(doc, "queues", arr);
    const char *text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
    if (text != NULL) {
        size_t len = strlen(text);
        if ((out = malloc(len + 2)) != NULL) {
            memcpy(out, text, len);
            memcpy(out + len, "\n", 2);
        }
    }
    json_object_put(doc);
    return out;
}
