/* sup_core.c: the supervisor's bookkeeping that its other files share: worker entries, queue stats,
 * the retirement of one. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sup.h"

sup_qstats_t *sup_qstats(supervisor_t *s, const char *name)
{
    for (int i = 0; i < s->n_qstats; i++)
        if (strcmp(s->qstats[i].name, name) == 0)
            return &s->qstats[i];
    sup_qstats_t *more = realloc(s->qstats, sizeof(*more) * (size_t)(s->n_qstats + 1));
    if (more == NULL) {
        log_error("queue '%s': out of memory for its metrics", name);
        return NULL;
    }
    s->qstats = more;
    sup_qstats_t *qs = &s->qstats[s->n_qstats];
    memset(qs, 0, sizeof(*qs));
    qs->name = strdup(name);
    if (qs->name == NULL) {
        log_error("queue '%s': out of memory for its metrics", name);
        return NULL;
    }
    s->n_qstats++;
    return qs;
}

/* Copy a slot's last error into *into when it is newer (both may be empty). */
void sup_newer_error(log_sink_t *into, const log_sink_t *slot)
{
    log_sink_t e;
    if (log_sink_get(slot, &e) && e.when_us > into->when_us)
        *into = e;
}

/*
 * Worker entry w is given up (its process is gone): move its slot's
 * counters to its queue's stats, so that the slot starts from zero for
 * whichever queue uses it next. (lat[] stays: only the exit totals read it.)
 */
void sup_remove_worker(supervisor_t *s, sup_worker_t *w)
{
    sup_qstats_t *qs = sup_qstats(s, w->q->name);
    if (qs) {
        metrics_counters_add(&qs->c, &w->slot->c);
        sup_newer_error(&qs->last_error, &w->slot->last_error);
    }
    memset(&w->slot->c, 0, sizeof(w->slot->c));
    memset(&w->slot->last_error, 0, sizeof(w->slot->last_error));
    w->slot->busy_us = w->slot->idle_us = 0;
    w->slot->busy_since_us = w->slot->idle_since_us = 0;
    w->slot->lost = WORKER_LOST_NONE; /* not a reconnect for the slot's next worker */
    w->slot->dlx_warned = 0;
    w->slot->classic_warned = 0;
    w->slot->note_only = 0;
    w->note_only = false;
    w->used = false;
}

/* Add a worker entry for queue q of conf; it starts at the next loop turn (unless waiting). */
void sup_add_worker(supervisor_t *s, const conf_t *conf, const conf_queue_t *q, int index,
                    bool waiting)
{
    (void)sup_qstats(s, q->name); /* listed in /metrics from now on */
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (w->used)
            continue;
        memset(w, 0, sizeof(*w));
        w->used = true;
        w->conf = conf;
        w->q = q;
        w->index = index;
        w->waiting = waiting;
        w->slot = &s->slots[i];
        w->last_progress_ms = sup_now(s);
        return;
    }
    log_error("queue '%s': more than %d workers at once: worker %d not started", q->name,
              SUP_MAX_SLOTS, index);
}

/*
 * Retire worker entry w. A running worker drains on SIGTERM. One waiting to
 * start again after it died in its handler left a crash note no successor
 * counted: the reap rule holds for it too, so it starts once more to count
 * it, then drains (note_only; found by the simulation's reloads). Any other
 * entry without a process is given up at once.
 */
void sup_retire_worker(supervisor_t *s, sup_worker_t *w)
{
    w->retiring = true;
    w->waiting = false;
    if (w->pid)
        sup_signal(s, w->pid, SIGTERM);
    else if (!s->stopping && !SUP_TEST(sup_test_retire_gap) &&
             __atomic_load_n(&w->slot->in_handler, __ATOMIC_ACQUIRE) != 0)
        w->note_only = true;
    else
        sup_remove_worker(s, w);
}

const conf_queue_t *sup_find_queue(const conf_t *conf, const char *name)
{
    for (int i = 0; i < conf->n_queues; i++)
        if (strcmp(conf->queues[i].name, name) == 0)
            return &conf->queues[i];
    return NULL;
}
