/* sup_reload.c: SIGHUP in the supervisor: load the config again, check its handlers, drain and
 * start what changed. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include <sys/stat.h>

#include "conf.h"
#include "log.h"
#include "plugin.h"
#include "slot.h"
#include "sqlh.h"
#include "sup.h"

/* Ask every worker of queue name (or all when name is NULL) to drain and exit. */
static void sup_retire(supervisor_t *s, const char *name)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (!w->used || w->retiring || (name && strcmp(w->q->name, name) != 0))
            continue;
        sup_retire_worker(s, w);
    }
}

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

/* The log level in effect: --log-level, else the current generation's daemon.log_level. */
static log_level_t sup_log_level(const supervisor_t *s)
{
    return (log_level_t)(s->log_level_override >= 0 ? s->log_level_override : s->conf->log_level);
}

/*
 * Hand every slot the daemon settings that running workers follow without
 * a restart (see worker_slot_t); the supervisor follows its own.
 */
void sup_share_settings(supervisor_t *s)
{
    log_set_level(sup_log_level(s));
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        __atomic_store_n(&s->slots[i].log_level, (int)sup_log_level(s), __ATOMIC_RELAXED);
        __atomic_store_n(&s->slots[i].reconcile_interval, s->conf->reconcile_interval,
                         __ATOMIC_RELAXED);
    }
}

/*
 * The workers of a queue that a reload keeps running belong to the new
 * generation from now on: a later restart uses its settings (equal for the
 * queue and the connections, newer for the daemon group), and the old
 * generation is freed once its draining workers are gone.
 */
static void sup_adopt(supervisor_t *s, const conf_t *next, const conf_queue_t *nq)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (w->used && !w->retiring && strcmp(w->q->name, nq->name) == 0) {
            w->conf = next;
            w->q = nq;
        }
    }
}

/* Free (conf_free: passwords zeroed) every earlier generation no worker points into. */
void sup_free_old(supervisor_t *s)
{
    int kept = 0;
    for (int g = 0; g < s->n_old; g++) {
        bool used = false;
        for (int i = 0; i < SUP_MAX_SLOTS && !used; i++)
            used = s->workers[i].used && s->workers[i].conf == s->old[g];
        if (used)
            s->old[kept++] = s->old[g];
        else
            conf_free(s->old[g]);
    }
    s->n_old = kept;
}

static bool sup_file_changed(const sup_file_id_t *a, const sup_file_id_t *b)
{
    return a->dev != b->dev || a->ino != b->ino || a->size != b->size ||
           a->mtime.tv_sec != b->mtime.tv_sec || a->mtime.tv_nsec != b->mtime.tv_nsec;
}

/*
 * SIGHUP: load the file again. Queues whose settings or handler file
 * changed are drained (their workers finish and ack their transaction,
 * unacked deliveries return to the queue) before their new workers start;
 * removed queues are drained; new queues start; the rest keep running. A
 * change of broker or database restarts every queue this way. A config
 * that does not load, or a handler that does not, leaves everything as it
 * was.
 */
void sup_reload(supervisor_t *s)
{
    char err[1024], what[600];
    conf_t *next = NULL;
    sup_file_id_t *ids = NULL;
    conf_t **old;

    sd_notify(0, "RELOADING=1");
    log_info("SIGHUP: reloading %s", s->conf->path);
    if (conf_load(s->conf->path, &next, err, sizeof(err)) != 0) {
        log_error("reload failed, keeping the running configuration: %s", err);
        goto keep;
    }
    for (int i = 0; i < next->n_warnings; i++)
        log_warn("%s", next->warnings[i]);
    if (sup_check_plugins(next, &ids) != 0) {
        log_error("reload failed, keeping the running configuration: a handler did not load");
        goto keep;
    }
    old = realloc(s->old, sizeof(*old) * (size_t)(s->n_old + 1));
    if (old == NULL)
        goto keep;
    s->old = old;

    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        if (s->workers[i].used && s->workers[i].held)
            log_info("reload: queue '%s' is no longer held", s->workers[i].q->name);
        s->workers[i].held = false;
    }
    bool all = conf_connections_differ(s->conf, next, what, sizeof(what));
    if (all)
        log_info("reload: %s changed: draining and restarting every worker", what);
    for (int i = 0; i < s->conf->n_queues; i++)
        if (!sup_find_queue(next, s->conf->queues[i].name)) {
            log_info("reload: queue '%s' removed: draining its workers", s->conf->queues[i].name);
            sup_retire(s, s->conf->queues[i].name);
        }
    for (int i = 0; i < next->n_queues; i++) {
        const conf_queue_t *nq = &next->queues[i];
        const conf_queue_t *oq = sup_find_queue(s->conf, nq->name);
        bool changed = all;
        if (oq && !changed && conf_queue_differs(oq, nq, what, sizeof(what))) {
            log_info("reload: %s changed: draining queue '%s'", what, nq->name);
            changed = true;
        }
        if (oq && !changed && sup_file_changed(&s->ids[oq - s->conf->queues], &ids[i])) {
            log_info("reload: handler file %s changed: draining queue '%s'", nq->handler, nq->name);
            changed = true;
        }
        if (oq && !changed) {
            sup_adopt(s, next, nq); /* its workers keep running with identical settings */
            continue;
        }
        if (!oq)
            log_info("reload: new queue '%s'", nq->name);
        else
            sup_retire(s, nq->name);
        sup_auto_start(s, next, nq, oq != NULL);
    }
    s->old[s->n_old++] = s->conf;
    s->conf = next;
    free(s->ids);
    s->ids = ids;
    sup_share_settings(s); /* log level and reconcile interval reach running workers */
    (void)sup_metrics_listen(s, next);
    sup_free_old(s);
    s->ready = false; /* READY=1 again once every current worker consumes */
    return;
keep:
    conf_free(next);
    free(ids);
    sd_notify(0, "READY=1");
}
