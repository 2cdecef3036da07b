/* test_metrics.c: unit tests of the Prometheus exposition: samples, escaping, cumulative
 * histograms. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/idemd/handler.h"
#include "metrics.h"
#include "tap.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* The exposition of qs[0..n-1] as a string (caller frees). */
static char *render(const metrics_queue_t *qs, int n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    metrics_render(out, qs, n, "9.8.7");
    fclose(out);
    return text;
}

/* Whether text has the line want, whole. */
static bool has_line(const char *text, const char *want)
{
    size_t wl = strlen(want);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (l == wl && memcmp(p, want, wl) == 0)
            return true;
        p = nl ? nl + 1 : NULL;
    }
    return false;
}

static void expect_line(const char *text, const char *want)
{
    if (!ok(has_line(text, want), "line: %s", want))
        printf("# exposition:\n%s", text);
}

static void test_counters(void)
{
    metrics_queue_t q;
    memset(&q, 0, sizeof(q));
    q.name = "orders";
    q.c.n_ok = 7;
    q.c.n_duplicate = 2;
    q.c.n_copies[METRICS_COPY_DEAD_LETTER][METRICS_COPY_REFUSED] = 3;
    q.restarts[METRICS_EXIT_DATABASE] = 4;
    q.workers = 2;
    q.workers_max = 4;
    q.autoscaled = 1;
    q.consuming = 1;
    q.progress_age_s = 1.5;
    char *text = render(&q, 1);
    expect_line(text, "idemd_build_info{version=\"9.8.7\",abi=\"" STR(
                          IDEMD_HANDLER_ABI_MAJOR) "." STR(IDEMD_HANDLER_ABI_MINOR) "\"} 1");
    expect_line(text, "# TYPE idemd_messages_total counter");
    expect_line(text, "idemd_messages_total{queue=\"orders\",outcome=\"ok\"} 7");
    expect_line(text, "idemd_messages_total{queue=\"orders\",outcome=\"duplicate\"} 2");
    expect_line(text, "idemd_messages_total{queue=\"orders\",outcome=\"reject\"} 0");
    expect_line(text, "idemd_dead_letter_copies_total{queue=\"orders\",outcome=\"refused\"} 3");
    expect_line(text, "idemd_worker_restarts_total{queue=\"orders\",outcome=\"database\"} 4");
    expect_line(text, "idemd_workers{queue=\"orders\"} 2");
    expect_line(text, "idemd_workers_max{queue=\"orders\"} 4");
    expect_line(text, "idemd_workers_auto{queue=\"orders\"} 1");
    expect_line(text, "idemd_workers_consuming{queue=\"orders\"} 1");
    expect_line(text, "idemd_worker_progress_age_seconds{queue=\"orders\"} 1.500");
    free(text);
}

static void test_histograms(void)
{
    static const uint64_t hb[] = METRICS_HANDLER_BOUNDS;
    metrics_queue_t q;
    memset(&q, 0, sizeof(q));
    q.name = "q";
    /* 1 ms falls in le 0.001; 2 s in le 2.5; 20 s above the last bound. */
    metrics_observe(q.c.handler, &q.c.handler_sum_us, hb, METRICS_HANDLER_N, 1000);
    metrics_observe(q.c.handler, &q.c.handler_sum_us, hb, METRICS_HANDLER_N, 2000000);
    metrics_observe(q.c.handler, &q.c.handler_sum_us, hb, METRICS_HANDLER_N, 20000000);
    static const uint64_t bb[] = METRICS_BATCH_BOUNDS;
    metrics_observe(q.c.batch, &q.c.batch_sum, bb, METRICS_BATCH_N, 100);
    char *text = render(&q, 1);
    expect_line(text, "# TYPE idemd_handler_duration_seconds histogram");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"0.0005\"} 0");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"0.001\"} 1");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"1\"} 1");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"2.5\"} 2");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"10\"} 2");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"+Inf\"} 3");
    expect_line(text, "idemd_handler_duration_seconds_sum{queue=\"q\"} 22.001000");
    expect_line(text, "idemd_handler_duration_seconds_count{queue=\"q\"} 3");
    expect_line(text, "idemd_batch_size_bucket{queue=\"q\",le=\"50\"} 0");
    expect_line(text, "idemd_batch_size_bucket{queue=\"q\",le=\"100\"} 1");
    expect_line(text, "idemd_batch_size_sum{queue=\"q\"} 100");
    expect_line(text, "idemd_publish_to_commit_seconds_bucket{queue=\"q\",le=\"300\"} 0");
    free(text);
}

/* Stage histograms: each observation lands in the first bucket whose bound is >= it, one
 * family with a stage label per stage, and metrics_counters_add carries them. */
static void test_stages(void)
{
    metrics_queue_t q;
    memset(&q, 0, sizeof(q));
    q.name = "q";
    ok(metrics_observe_stage(&q.c, METRICS_STAGE_INSERT, 0) == 0, "0 µs: the first bucket");
    ok(metrics_observe_stage(&q.c, METRICS_STAGE_INSERT, 50) == 0, "50 µs: le 0.00005");
    ok(metrics_observe_stage(&q.c, METRICS_STAGE_INSERT, 51) == 1, "51 µs: le 0.0001");
    ok(metrics_observe_stage(&q.c, METRICS_STAGE_COMMIT, 4000) == 6, "4 ms: le 0.005");
    ok(metrics_observe_stage(&q.c, METRICS_STAGE_COMMIT, 10000000) == METRICS_STAGE_N - 1,
       "10 s: the last bound");
    ok(metrics_observe_stage(&q.c, METRICS_STAGE_ACK, 10000001) == METRICS_STAGE_N,
       "above the last bound: +Inf");
    ok(q.c.stage[METRICS_STAGE_INSERT][0] == 2 && q.c.stage_sum_us[METRICS_STAGE_INSERT] == 101,
       "the insert stage counts 2 in its first bucket, sum 101 µs");
    metrics_counters_t more;
    memset(&more, 0, sizeof(more));
    metrics_observe_stage(&more, METRICS_STAGE_WAIT, 700);
    metrics_counters_add(&q.c, &more);
    ok(q.c.stage[METRICS_STAGE_WAIT][4] == 1, "metrics_counters_add adds the stages");
    char *text = render(&q, 1);
    expect_line(text, "# TYPE idemd_stage_seconds histogram");
    expect_line(text, "idemd_stage_seconds_bucket{queue=\"q\",stage=\"insert\",le=\"5e-05\"} 2");
    expect_line(text, "idemd_stage_seconds_bucket{queue=\"q\",stage=\"insert\",le=\"+Inf\"} 3");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"insert\"} 3");
    expect_line(text, "idemd_stage_seconds_sum{queue=\"q\",stage=\"insert\"} 0.000101");
    expect_line(text, "idemd_stage_seconds_bucket{queue=\"q\",stage=\"commit\",le=\"0.0025\"} 0");
    expect_line(text, "idemd_stage_seconds_bucket{queue=\"q\",stage=\"commit\",le=\"0.005\"} 1");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"commit\"} 2");
    expect_line(text, "idemd_stage_seconds_bucket{queue=\"q\",stage=\"ack\",le=\"10\"} 0");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"ack\"} 1");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"wait\"} 1");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"collect\"} 0");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"handler\"} 0");
    expect_line(text, "idemd_stage_seconds_count{queue=\"q\",stage=\"begin\"} 0");
    ok(strcmp(metrics_stage_name(METRICS_STAGE_HANDLER), "handler") == 0, "stage names");
    free(text);
}

static void test_escaping_and_adding(void)
{
    metrics_queue_t q[2];
    memset(q, 0, sizeof(q));
    q[0].name = "a\"b\\c\nd";
    q[1].name = "second";
    q[1].c.n_commits = 5;
    metrics_counters_t more;
    memset(&more, 0, sizeof(more));
    more.n_commits = 6;
    more.latency[3] = 2;
    metrics_counters_add(&q[1].c, &more);
    ok(q[1].c.n_commits == 11 && q[1].c.latency[3] == 2, "metrics_counters_add adds every field");
    char *text = render(q, 2);
    expect_line(text, "idemd_commits_total{queue=\"a\\\"b\\\\c\\nd\"} 0");
    expect_line(text, "idemd_commits_total{queue=\"second\"} 11");
    int types = 0;
    for (const char *p = text; (p = strstr(p, "# TYPE idemd_commits_total ")) != NULL; p++)
        types++;
    ok(types == 1, "one TYPE line per family, whatever the number of queues (%d)", types);
    free(text);
}

/* The status document: valid JSON, the view's numbers, a last error with quotes kept whole. */
static void test_status_json(void)
{
    metrics_queue_t q[2];
    memset(q, 0, sizeof(q));
    q[0].name = "orders";
    q[0].workers = 3;
    q[0].consuming = 2;
    q[0].restarting = 1;
    q[0].c.n_ok = 41;
    q[0].restarts[METRICS_EXIT_CRASH] = 4;
    q[0].last_error.when_us = 1700000000123456LL;
    q[0].last_error.level = LOG_LEVEL_WARNING;
    snprintf(q[0].last_error.text, sizeof(q[0].last_error.text), "worker \"x\"\nkilled");
    q[1].name = "quiet";
    char *doc = metrics_status_json(q, 2, "9.8.7");
    ok(doc != NULL, "status document made");
    if (doc == NULL)
        return;
    ok(strstr(doc, "\"version\":\"9.8.7\"") != NULL, "status: version");
    ok(strstr(doc, "\"queue\":\"orders\",\"workers\":3,\"consuming\":2,\"connecting\":0,"
                   "\"restarting\":1") != NULL,
       "status: workers by state");
    ok(strstr(doc, "\"draining\":0,\"workers_mode\":\"fixed\",\"workers_max\":0") != NULL,
       "status: workers mode and cap");
    ok(strstr(doc, "\"ok\":41") != NULL && strstr(doc, "\"crash\":4") != NULL,
       "status: messages and restarts");
    ok(strstr(doc, "\"time\":\"2023-11-14T22:13:20.123Z\"") != NULL &&
           strstr(doc, "\"level\":\"warning\"") != NULL &&
           strstr(doc, "\"text\":\"worker \\\"x\\\"\\nkilled\"") != NULL,
       "status: last error time (UTC), level and escaped text");
    ok(strstr(doc, "\"queue\":\"quiet\"") != NULL && strstr(doc, "\"last_error\":null") != NULL,
       "status: a queue without errors has last_error null");
    ok(doc[strlen(doc) - 1] == '\n', "status: one line");
    free(doc);
}

/* Exemplars: written by a worker, the newer kept when adding, shown only in OpenMetrics. */
static void test_exemplars(void)
{
    metrics_queue_t q;
    metrics_counters_t w1, w2;
    memset(&q, 0, sizeof(q));
    memset(&w1, 0, sizeof(w1));
    memset(&w2, 0, sizeof(w2));
    q.name = "q";
    w1.handler[1] = 1;
    metrics_exemplar_put(&w1.handler_ex[1], "0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7",
                         700, 1700000000123ULL);
    w2.handler[1] = 1;
    metrics_exemplar_put(&w2.handler_ex[1], "4bf92f3577b34da6a3ce929d0e0e4736", "b7ad6b7169203331",
                         800, 1700000000000ULL);
    metrics_exemplar_put(&w2.handler_ex[2], "not hex", "00f067aa0ba902b7", 1, 1);
    ok(w1.handler_ex[1].seq == 2 && w2.handler_ex[2].when_ms == 0,
       "an exemplar is written under its sequence; ids that are not hex are not");
    metrics_counters_add(&q.c, &w2);
    metrics_counters_add(&q.c, &w1);
    ok(q.c.handler[1] == 2 && q.c.handler_ex[1].when_ms == 1700000000123ULL,
       "adding: buckets add up, the newer exemplar stays");
    char *text = render(&q, 1);
    ok(strstr(text, " # {") == NULL && strstr(text, "# EOF") == NULL,
       "plain Prometheus text: no exemplars, no EOF");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"0.001\"} 2");
    free(text);
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    metrics_render_openmetrics(out, &q, 1, "9.8.7");
    fclose(out);
    expect_line(text,
                "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"0.001\"} 2 # "
                "{trace_id=\"0af7651916cd43dd8448eb211c80319c\",span_id=\"00f067aa0ba902b7\"} "
                "0.000700 1700000000.123");
    expect_line(text, "idemd_handler_duration_seconds_bucket{queue=\"q\",le=\"0.0025\"} 2");
    expect_line(text, "# TYPE idemd_messages counter");
    expect_line(text, "idemd_messages_total{queue=\"q\",outcome=\"ok\"} 0");
    ok(len > 6 && strcmp(text + len - 6, "# EOF\n") == 0, "OpenMetrics ends with # EOF");
    free(text);
}

int main(void)
{
    test_counters();
    test_status_json();
    test_histograms();
    test_escaping_and_adding();
    test_stages();
    test_exemplars();
    return done();
}
