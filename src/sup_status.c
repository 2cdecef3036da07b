/* sup_status.c: how the supervisor reports: systemd readiness, STATUS= and watchdog, /metrics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "clock.h"
#include "metrics.h"
#include "slot.h"
#include "sup.h"
#include "worker.h"

/* How often a held-back watchdog ping is tried again. */
#define SUP_WATCHDOG_RECHECK_MS 100

/* The counters of every worker ever run: given-up slots are zero, their counts are in qstats. */
static void sup_totals(const supervisor_t *s, metrics_counters_t *all)
{
    memset(all, 0, sizeof(*all));
    for (int i = 0; i < s->n_qstats; i++)
        metrics_counters_add(all, &s->qstats[i].c);
    for (int i = 0; i < SUP_MAX_SLOTS; i++)
        metrics_counters_add(all, &s->slots[i].c);
}

/* Tell systemd how the workers are doing: totals, then each queue's state. */
void sup_status(supervisor_t *s)
{
    char buf[4096];
    size_t off;
    metrics_counters_t all;
    int consuming = 0, total = 0;
    sup_totals(s, &all);
    uint64_t ok = all.n_ok, dup = all.n_duplicate;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        if (!w->used || w->retiring)
            continue;
        total++;
        if (w->pid && __atomic_load_n(&w->slot->state, __ATOMIC_RELAXED) == WORKER_STATE_CONSUMING)
            consuming++;
    }
    off = (size_t)snprintf(buf, sizeof(buf),
                           "STATUS=%d/%d workers consuming; %llu processed, %llu duplicates",
                           consuming, total, (unsigned long long)ok, (unsigned long long)dup);
    for (int q = 0; q < s->conf->n_queues && off < sizeof(buf); q++) {
        const char *name = s->conf->queues[q].name;
        int up = 0, n = 0;
        uint64_t qok = 0, qfail = 0;
        const char *error = NULL;
        int kind = WORKER_ERROR_DECLARE;
        for (int i = 0; i < SUP_MAX_SLOTS; i++) {
            const sup_worker_t *w = &s->workers[i];
            if (!w->used || w->retiring || strcmp(w->q->name, name) != 0)
                continue;
            n++;
            if (w->error[0]) {
                error = w->error;
                kind = w->error_kind;
            }
            up += w->pid &&
                  __atomic_load_n(&w->slot->state, __ATOMIC_RELAXED) == WORKER_STATE_CONSUMING;
            qok += __atomic_load_n(&w->slot->c.n_ok, __ATOMIC_RELAXED);
            qfail += __atomic_load_n(&w->slot->c.n_retry, __ATOMIC_RELAXED) +
                     __atomic_load_n(&w->slot->c.n_reject, __ATOMIC_RELAXED);
        }
        off +=
            (size_t)snprintf(buf + off, sizeof(buf) - off, "; %s: %d/%d up, %llu ok, %llu failed",
                             name, up, n, (unsigned long long)qok, (unsigned long long)qfail);
        if (s->conf->queues[q].workers == CONF_WORKERS_AUTO && off < sizeof(buf))
            off += (size_t)snprintf(buf + off, sizeof(buf) - off, ", auto (at most %d)",
                                    sup_auto_cap(s, &s->conf->queues[q]));
        if (error && off < sizeof(buf))
            off +=
                (size_t)snprintf(buf + off, sizeof(buf) - off, ", %s: %s",
                                 kind == WORKER_ERROR_SERVER ? "refused" : "declare failed", error);
    }
    sd_notify(0, buf);
}

/*
 * Every current worker consuming after startup or a reload, or failing to
 * declare its queue or refusing a server too old (shown in STATUS=, the
 * others work): announce readiness. Not announcing would have systemd stop
 * and restart the whole daemon in a loop.
 */
void sup_check_ready(supervisor_t *s)
{
    int n = 0, failed = 0, refused = 0;
    char more[160] = "";
    if (s->ready)
        return;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        if (!w->used || w->retiring)
            continue;
        if (w->pid && __atomic_load_n(&w->slot->state, __ATOMIC_RELAXED) == WORKER_STATE_CONSUMING)
            n++;
        else if (w->error[0] && w->error_kind == WORKER_ERROR_SERVER)
            refused++;
        else if (w->error[0])
            failed++;
        else
            return;
    }
    s->ready = true;
    if (failed || refused)
        snprintf(more, sizeof(more), "; %d not: %s%s%s", failed + refused,
                 failed ? "their queue's declaration failed" : "", failed && refused ? ", or " : "",
                 refused ? "the broker or database is older than idemd supports" : "");
    log_info("ready: %d queues, %d workers consuming%s", s->conf->n_queues, n, more);
    sd_notify(0, "READY=1");
    sup_status(s);
    s->next_status_ms = clock_mono_ms() + 5000;
}

/*
 * When running worker w last showed progress, as the watchdog and /metrics see it. A worker
 * inside reconcile() counts as alive (now) until reconcile_timeout, plus slack, has passed
 * since the run began (its progress_ms); SIGALRM ends it at the timeout. Past that (the
 * signal blocked, say) it shows its real age, and the watchdog stops pinging. 0 before
 * its first progress.
 */
static uint64_t sup_progress_ms(const sup_worker_t *w, uint64_t now, uint64_t slack_ms)
{
    /* Acquire: the worker stores progress_ms before it changes reconciling (release). */
    int reconciling = __atomic_load_n(&w->slot->reconciling, __ATOMIC_ACQUIRE);
    uint64_t p = __atomic_load_n(&w->slot->progress_ms, __ATOMIC_RELAXED);
    if (p && reconciling && now < p + (uint64_t)w->conf->reconcile_timeout * 1000 + slack_ms)
        return now;
    return p;
}

/*
 * Ping the watchdog every half interval, but only while every running worker showed progress
 * within the last half interval. A ping held back is tried again at every turn of the loop
 * (SUP_WATCHDOG_RECHECK_MS apart) and sent as soon as every worker shows progress again, not a
 * half interval later: otherwise a worker late by a few milliseconds at one check (an idle
 * worker shows progress about once a second) stretches the gap between two pings to the whole
 * interval, and systemd kills a healthy service.
 */
void sup_watchdog(supervisor_t *s, uint64_t now)
{
    uint64_t half_ms = s->watchdog_usec / 2000;
    if (!s->watchdog_usec || now < s->next_watchdog_ms)
        return;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        if (!w->used || !w->pid)
            continue;
        uint64_t p = sup_progress_ms(w, now, half_ms);
        if (p && now > p && now - p > half_ms) {
            if (now >= s->next_withhold_log_ms) {
                log_warn("worker %s#%d shows no progress for %llu ms: withholding watchdog ping",
                         w->q->name, w->index, (unsigned long long)(now - p));
                s->next_withhold_log_ms = now + half_ms;
            }
            return;
        }
    }
    sd_notify(0, "WATCHDOG=1");
    s->next_watchdog_ms = now + half_ms;
    s->next_withhold_log_ms = 0;
}

/* How long the loop may wait for a signal: until the next watchdog ping is due, at most 100 ms
 * before ready and 500 ms after; SUP_WATCHDOG_RECHECK_MS while a ping is held back. */
int sup_poll_ms(const supervisor_t *s, uint64_t now)
{
    int ms = s->ready ? 500 : 100;
    if (!s->watchdog_usec || s->stopping)
        return ms;
    if (now >= s->next_watchdog_ms)
        return SUP_WATCHDOG_RECHECK_MS;
    if (s->next_watchdog_ms - now < (uint64_t)ms)
        ms = (int)(s->next_watchdog_ms - now);
    return ms;
}

/* At exit: each stage's count, median and 99th percentile over all slots (fine histograms). */
static void sup_log_stages(const supervisor_t *s)
{
    char line[600];
    size_t len = 0;
    for (int st = 0; st < METRICS_STAGES; st++) {
        uint64_t hist[METRICS_LAT_BUCKETS] = {0}, n = 0;
        for (int i = 0; i < SUP_MAX_SLOTS; i++)
            for (int b = 0; b < METRICS_LAT_BUCKETS; b++) {
                hist[b] += s->slots[i].stage_lat[st][b];
                n += s->slots[i].stage_lat[st][b];
            }
        if (n == 0 || len >= sizeof(line))
            continue;
        len +=
            (size_t)snprintf(line + len, sizeof(line) - len, " %s n=%llu p50_us=%llu p99_us=%llu",
                             metrics_stage_name(st), (unsigned long long)n,
                             (unsigned long long)metrics_lat_quantile(hist, n, 0.5),
                             (unsigned long long)metrics_lat_quantile(hist, n, 0.99));
    }
    if (len)
        log_info("stages:%s", line);
}

/* At exit: the counters of all workers, and publish-to-commit latency if measured. */
void sup_log_totals(const supervisor_t *s)
{
    uint64_t hist[METRICS_LAT_BUCKETS] = {0}, n = 0;
    metrics_counters_t all;
    sup_totals(s, &all);
    uint64_t ok = all.n_ok, dup = all.n_duplicate, retry = all.n_retry, rej = all.n_reject,
             com = all.n_commits;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const worker_slot_t *sl = &s->slots[i];
        for (int b = 0; b < METRICS_LAT_BUCKETS; b++) {
            hist[b] += sl->lat[b];
            n += sl->lat[b];
        }
    }
    log_info("totals: ok=%llu duplicate=%llu retry=%llu reject=%llu commits=%llu",
             (unsigned long long)ok, (unsigned long long)dup, (unsigned long long)retry,
             (unsigned long long)rej, (unsigned long long)com);
    if (n)
        log_info("latency publish-to-commit: n=%llu p50_us=%llu p99_us=%llu", (unsigned long long)n,
                 (unsigned long long)metrics_lat_quantile(hist, n, 0.5),
                 (unsigned long long)metrics_lat_quantile(hist, n, 0.99));
    sup_log_stages(s);
}

/*
 * metrics_collect_fn: one view per queue name ever configured, from its
 * stats and the slots of its workers now. The array is kept in s.
 */
static void sup_collect(void *ctx, metrics_queue_t **out, int *n)
{
    supervisor_t *s = ctx;
    uint64_t now = clock_mono_ms();
    metrics_queue_t *v = realloc(s->view, sizeof(*v) * (size_t)(s->n_qstats ? s->n_qstats : 1));
    *out = NULL;
    *n = 0;
    if (v == NULL)
        return;
    s->view = v;
    for (int k = 0; k < s->n_qstats; k++) {
        const sup_qstats_t *qs = &s->qstats[k];
        metrics_queue_t *q = &v[k];
        memset(q, 0, sizeof(*q));
        q->name = qs->name;
        q->last_error = qs->last_error;
        q->c = qs->c;
        q->c.n_reconcile_runs += qs->reconcile_killed;
        q->c.n_reconcile_failures += qs->reconcile_killed;
        memcpy(q->restarts, qs->restarts, sizeof(q->restarts));
        const conf_queue_t *cq = sup_find_queue(s->conf, qs->name);
        q->workers = cq ? cq->workers : 0;
        q->workers_max = cq ? sup_auto_cap(s, cq) : 0;
        q->autoscaled = cq && cq->workers == CONF_WORKERS_AUTO;
        if (q->autoscaled)
            q->workers = qs->as.target;
        uint64_t outbox_seen = 0;
        for (int i = 0; i < SUP_MAX_SLOTS; i++) {
            const sup_worker_t *w = &s->workers[i];
            if (!w->used || strcmp(w->q->name, qs->name) != 0)
                continue;
            metrics_counters_add(&q->c, &w->slot->c);
            sup_newer_error(&q->last_error, &w->slot->last_error);
            if (w->retiring) {
                q->draining += w->pid != 0;
                continue;
            }
            uint64_t last = w->last_progress_ms;
            if (w->pid) {
                uint64_t p = sup_progress_ms(w, now, 0);
                last = p ? p : w->started_ms;
                if (__atomic_load_n(&w->slot->state, __ATOMIC_RELAXED) == WORKER_STATE_CONSUMING)
                    q->consuming++;
                else
                    q->connecting++;
            } else {
                q->restarting++;
            }
            double age = now > last ? (double)(now - last) / 1000.0 : 0.0;
            if (age > q->progress_age_s)
                q->progress_age_s = age;
            uint64_t seen = __atomic_load_n(&w->slot->outbox_seen_ms, __ATOMIC_RELAXED);
            if (seen && seen >= outbox_seen) { /* the newest sweep of the queue's workers */
                outbox_seen = seen;
                q->outbox_known = true;
                q->outbox_rows = __atomic_load_n(&w->slot->outbox_rows, __ATOMIC_RELAXED);
                q->outbox_retrying = __atomic_load_n(&w->slot->outbox_retrying, __ATOMIC_RELAXED);
                q->outbox_exhausted = __atomic_load_n(&w->slot->outbox_exhausted, __ATOMIC_RELAXED);
                q->outbox_oldest_s =
                    (double)__atomic_load_n(&w->slot->outbox_oldest_us, __ATOMIC_RELAXED) / 1e6;
            }
        }
    }
    *out = v;
    *n = s->n_qstats;
}

/*
 * Serve metrics.listen of conf (nothing when unset), asking for its token (a digest is kept).
 * Called at startup and after a reload: a changed address gets a new listener; when it cannot
 * listen there, the old one goes on, with the new token. 0, or -1 (logged).
 */
int sup_metrics_listen(supervisor_t *s, const conf_t *conf)
{
    const char *want = conf->metrics.listen;
    char was[sizeof(s->metrics_on)];
    struct sockaddr_storage was_addr = s->metrics_addr;

    if (want == NULL ? s->metrics == NULL : s->metrics && strcmp(s->metrics_on, want) == 0) {
        metrics_set_token(s->metrics, conf->metrics.token);
        return 0;
    }
    snprintf(was, sizeof(was), "%s", s->metrics_on);
    metrics_stop(s->metrics);
    s->metrics = NULL;
    s->metrics_on[0] = '\0';
    if (want == NULL) {
        log_info("metrics: no longer served (metrics.listen removed)");
        return 0;
    }
    s->metrics = metrics_start(&conf->metrics.addr, want, sup_collect, s, s->version);
    if (s->metrics) {
        metrics_set_token(s->metrics, conf->metrics.token);
        snprintf(s->metrics_on, sizeof(s->metrics_on), "%s", want);
        s->metrics_addr = conf->metrics.addr;
        return 0;
    }
    if (was[0]) {
        s->metrics = metrics_start(&was_addr, was, sup_collect, s, s->version);
        metrics_set_token(s->metrics, conf->metrics.token);
        if (s->metrics)
            snprintf(s->metrics_on, sizeof(s->metrics_on), "%s", was);
    }
    return -1;
}
