/* sup_auto.c: workers = "auto" in the supervisor: feed each queue's controller, start and retire.
 */
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autoscale.h"
#include "conf.h"
#include "log.h"
#include "slot.h"
#include "sup.h"

/* workers_max = "auto": two per online CPU (a worker waits on round trips about half its
 * time), at most this many (each holds a database connection and up to prefetch messages). */
#define SUP_AUTO_MAX_WORKERS 16

int sup_auto_max(const conf_queue_t *q)
{
    if (q->workers_max != CONF_WORKERS_AUTO)
        return q->workers_max;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = cpus > 0 ? 2 * cpus : 2;
    return n > SUP_AUTO_MAX_WORKERS ? SUP_AUTO_MAX_WORKERS : (int)n;
}

int sup_auto_budget(const supervisor_t *s)
{
    if (s->conf->db_connection_budget != CONF_WORKERS_AUTO)
        return s->conf->db_connection_budget;
    int most = 0;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        int m = __atomic_load_n(&s->slots[i].db_max_connections, __ATOMIC_RELAXED);
        if (s->workers[i].used && m > most)
            most = m;
    }
    return most / 2;
}

/* Workers of queue name that are not retiring (running, starting or waiting to restart). */
static int sup_auto_count(const supervisor_t *s, const char *name)
{
    int n = 0;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        n += w->used && !w->retiring && (name == NULL || strcmp(w->q->name, name) == 0);
    }
    return n;
}

int sup_auto_cap(const supervisor_t *s, const conf_queue_t *q)
{
    if (q->workers != CONF_WORKERS_AUTO)
        return q->workers;
    int cap = sup_auto_max(q), budget = sup_auto_budget(s);
    if (budget > 0) {
        /* What the other queues hold is theirs; this one may grow into the rest. */
        int left = budget - (sup_auto_count(s, NULL) - sup_auto_count(s, q->name));
        if (left < cap)
            cap = left;
    }
    return cap < q->workers_min ? q->workers_min : cap;
}

void sup_auto_start(supervisor_t *s, const conf_t *conf, const conf_queue_t *q, bool waiting)
{
    sup_qstats_t *qs = sup_qstats(s, q->name);
    int n = q->workers;
    if (q->workers == CONF_WORKERS_AUTO) {
        int max = sup_auto_max(q);
        n = autoscale_start_count(q->workers_min, max);
        if (qs)
            autoscale_init(&qs->as, q->workers_min, max);
        log_info("queue '%s': workers = \"auto\": %d to start, at most %d", q->name, n, max);
    }
    if (qs)
        qs->autoscaled = q->workers == CONF_WORKERS_AUTO;
    for (int k = 0; k < n; k++)
        sup_add_worker(s, conf, q, k, waiting);
}

/* The lowest worker number of queue q not in use, also by one still draining (logs name it). */
static int sup_auto_free_index(const supervisor_t *s, const conf_queue_t *q)
{
    for (int k = 0;; k++) {
        bool used = false;
        for (int i = 0; i < SUP_MAX_SLOTS && !used; i++) {
            const sup_worker_t *w = &s->workers[i];
            used = w->used && w->index == k && strcmp(w->q->name, q->name) == 0;
        }
        if (!used)
            return k;
    }
}

/*
 * Retire the current worker of queue q with the highest number, as a
 * reload does: SIGTERM, it finishes and settles its batch, cancels its
 * consumer and runs what it already received (worker_go_on, step_drain), and it is not
 * restarted.
 */
static void sup_auto_retire(supervisor_t *s, const conf_queue_t *q)
{
    sup_worker_t *last = NULL;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (w->used && !w->retiring && strcmp(w->q->name, q->name) == 0 &&
            (last == NULL || w->index > last->index))
            last = w;
    }
    if (last == NULL)
        return;
    sup_retire_worker(s, last);
}

/* A counter's growth since *seen (a counter that went back, a reused slot, counts from 0). */
static uint64_t sup_auto_delta(uint64_t *seen, uint64_t now)
{
    uint64_t d = now >= *seen ? now - *seen : now;
    *seen = now;
    return d;
}

/* Time in a span of a slot, including the one running now (see worker_time). */
static uint64_t sup_auto_span(const uint64_t *total, const uint64_t *since, uint64_t now_us)
{
    uint64_t t = __atomic_load_n(total, __ATOMIC_RELAXED);
    uint64_t at = __atomic_load_n(since, __ATOMIC_RELAXED);
    return t + (at && at < now_us ? now_us - at : 0);
}

/* One interval of queue q's current workers, for its controller. */
static void sup_auto_sample(supervisor_t *s, const conf_queue_t *q, uint64_t now, uint64_t dt,
                            autoscale_sample_t *out)
{
    uint64_t now_us = sup_now_us(s);
    memset(out, 0, sizeof(*out));
    out->now_ms = now;
    out->dt_ms = dt;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (!w->used || w->retiring || strcmp(w->q->name, q->name) != 0)
            continue;
        const worker_slot_t *sl = w->slot;
        uint64_t done = __atomic_load_n(&sl->c.n_ok, __ATOMIC_RELAXED) +
                        __atomic_load_n(&sl->c.n_duplicate, __ATOMIC_RELAXED) +
                        __atomic_load_n(&sl->c.n_retry, __ATOMIC_RELAXED) +
                        __atomic_load_n(&sl->c.n_reject, __ATOMIC_RELAXED);
        uint64_t d_done = sup_auto_delta(&w->seen_done, done);
        uint64_t d_busy = sup_auto_delta(&w->seen_busy_us,
                                         sup_auto_span(&sl->busy_us, &sl->busy_since_us, now_us));
        uint64_t d_idle = sup_auto_delta(&w->seen_idle_us,
                                         sup_auto_span(&sl->idle_us, &sl->idle_since_us, now_us));
        if (!w->pid || __atomic_load_n(&sl->state, __ATOMIC_RELAXED) != WORKER_STATE_CONSUMING)
            continue;
        out->consuming++;
        out->done += d_done;
        out->busy_us += d_busy;
        out->idle_us += d_idle;
    }
}

void sup_auto_tick(supervisor_t *s, uint64_t now)
{
    if (s->auto_at_ms == 0) {
        s->auto_at_ms = now;
        return;
    }
    if (now < s->auto_at_ms + AUTOSCALE_INTERVAL_MS)
        return;
    uint64_t dt = now - s->auto_at_ms;
    s->auto_at_ms = now;
    for (int i = 0; i < s->conf->n_queues; i++) {
        const conf_queue_t *q = &s->conf->queues[i];
        sup_qstats_t *qs = sup_qstats(s, q->name);
        if (q->workers != CONF_WORKERS_AUTO || qs == NULL || !qs->autoscaled)
            continue;
        autoscale_sample_t smp;
        sup_auto_sample(s, q, now, dt, &smp);
        autoscale_set_max(&qs->as, sup_auto_cap(s, q));
        /* The controller's count is the one running (a reload may have started others). */
        qs->as.target = sup_auto_count(s, q->name);
        switch (autoscale_feed(&qs->as, &smp)) {
        case AUTOSCALE_UP:
            log_info("queue '%s': workers %d -> %d: %s", q->name, qs->as.target - 1, qs->as.target,
                     qs->as.why);
            sup_add_worker(s, s->conf, q, sup_auto_free_index(s, q), false);
            s->next_status_ms = 0;
            break;
        case AUTOSCALE_DOWN:
            log_info("queue '%s': workers %d -> %d: %s", q->name, qs->as.target + 1, qs->as.target,
                     qs->as.why);
            sup_auto_retire(s, q);
            s->next_status_ms = 0;
            break;
        case AUTOSCALE_KEEP:
            break;
        }
    }
}
