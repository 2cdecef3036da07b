/* sup_core.c: the supervisor's bookkeeping that its other files share: worker entries, queue stats,
 * handler checks. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"
#include "clock.h"
#include "plugin.h"
#include "sqlh.h"
#include "sup.h"

/*
 * Check every queue's handler (ownership, dlopen, ABI) in a child process,
 * so that no plugin code runs in the supervisor, and note each file's
 * identity into a new array in *ids (caller frees). Each worker loads its
 * own after fork, so a replaced file is picked up.
 * 0, or -1 (logged, naming the file).
 */
int sup_check_plugins(const conf_t *conf, sup_file_id_t **ids)
{
    char err[1024];
    struct stat st;
    *ids = calloc((size_t)conf->n_queues, sizeof(**ids));
    if (*ids == NULL)
        return -1;
    for (int i = 0; i < conf->n_queues; i++) {
        const conf_queue_t *q = &conf->queues[i];
        char name[256];
        if (sqlh_is(q)) {
            /* The statements against the database; unreachable, the workers find out. */
            int rc = sqlh_check(conf, i, err, sizeof(err));
            if (rc == -1) {
                log_error("queue '%s': %s", q->name, err);
                goto fail;
            }
            if (rc != 0)
                log_warn("queue '%s': %s", q->name, err);
            else
                log_info("queue '%s': handler 'sql' with %d statement%s checked", q->name, q->n_sql,
                         q->n_sql == 1 ? "" : "s");
            continue;
        }
        if (plugin_check(q->handler, name, sizeof(name), err, sizeof(err)) != 0) {
            log_error("queue '%s': %s", q->name, err);
            goto fail;
        }
        log_info("queue '%s': handler '%s' from %s", q->name, name, q->handler);
        if (stat(q->handler, &st) == 0) {
            (*ids)[i].dev = st.st_dev;
            (*ids)[i].ino = st.st_ino;
            (*ids)[i].size = st.st_size;
            (*ids)[i].mtime = st.st_mtim;
        }
    }
    return 0;
fail:
    free(*ids);
    *ids = NULL;
    return -1;
}

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
        w->last_progress_ms = clock_mono_ms();
        return;
    }
    log_error("queue '%s': more than %d workers at once: worker %d not started", q->name,
              SUP_MAX_SLOTS, index);
}

const conf_queue_t *sup_find_queue(const conf_t *conf, const char *name)
{
    for (int i = 0; i < conf->n_queues; i++)
        if (strcmp(conf->queues[i].name, name) == 0)
            return &conf->queues[i];
    return NULL;
}
