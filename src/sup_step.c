/* sup_step.c: one round of the supervisor's work over its ports (process, clock, slots): reap exits
 * under the reap rule, start the workers due, the autoscaler's tick; what supervisor.c loops on and
 * the simulator runs.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "log.h"
#include "metrics.h"
#include "slot.h"
#include "sup.h"
#include "worker.h"

#ifdef IDEMD_TESTING
bool sup_test_lost_note = false;
bool sup_test_retire_gap = false;
#endif

#define SUP_BACKOFF_MIN_MS 200
#define SUP_BACKOFF_MAX_MS 30000
#define SUP_HEALTHY_MS 30000 /* a worker up this long resets its backoff */
/* Failures that take sup_backoff to its cap: a server too old is tried again only that often. */
#define SUP_HOLD_FAILURES 16

/* Whether a worker of queue name is held (sup_hold). */
static bool sup_queue_held(const supervisor_t *s, const char *name)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++)
        if (s->workers[i].used && s->workers[i].held && strcmp(s->workers[i].q->name, name) == 0)
            return true;
    return false;
}

/*
 * Worker w exited because its handler ended idemd's transaction where the
 * server could not refuse it (the reason in its slot): what came before is
 * committed with its records, so a redelivery would pass for a duplicate.
 * Hold its queue: stop its other workers and start none until a reload.
 */
static void sup_hold(supervisor_t *s, sup_worker_t *w)
{
    snprintf(w->error, sizeof(w->error), "%s", w->slot->error);
    w->error_kind = WORKER_ERROR_ENDED;
    log_error("queue '%s' held: %s. Its workers are stopped and the messages stay in the "
              "queue; reconcile that message's effects, fix the handler, then reload (SIGHUP)",
              w->q->name, w->error);
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *o = &s->workers[i];
        if (!o->used || strcmp(o->q->name, w->q->name) != 0)
            continue;
        o->held = true;
        if (o->pid > 0)
            sup_signal(s, o->pid, SIGTERM);
    }
    s->next_status_ms = 0;
}

/* Start worker w through the process port, its slot made ready for the run. */
static void sup_spawn(supervisor_t *s, sup_worker_t *w)
{
    if (w->held || sup_queue_held(s, w->q->name)) {
        w->held = true;
        return;
    }
    /* Counters survive restarts; only the liveness fields start over. */
    __atomic_store_n(&w->slot->state, WORKER_STATE_STARTING, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->progress_ms, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->reconciling, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->consumed, 0, __ATOMIC_RELAXED);
    /* A span the last run left open ended with it. */
    __atomic_store_n(&w->slot->busy_since_us, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->idle_since_us, 0, __ATOMIC_RELAXED);
    w->slot->error[0] = '\0';
    w->slot->error_kind = WORKER_ERROR_DECLARE;
    __atomic_add_fetch(&w->slot->spawn_gen, 1, __ATOMIC_RELAXED); /* the crash note's owner */
    __atomic_store_n(&w->slot->note_only, w->note_only ? 1 : 0, __ATOMIC_RELAXED);
    pid_t pid = s->ports.proc->spawn(s->ports.proc_ctx, w);
    if (pid < 0) {
        w->restart_at_ms = sup_now(s) + SUP_BACKOFF_MAX_MS;
        return;
    }
    w->pid = pid;
    w->started_ms = sup_now(s);
    log_debug("started worker %s#%d as pid %d", w->q->name, w->index, (int)pid);
}

/* Describe how a worker ended, for the log. */
static void sup_describe_exit(int status, const sup_worker_t *w, char *buf, size_t len)
{
    const conf_queue_t *q = w->q;
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(buf, len, "exited with code %d%s", code,
                 code == WORKER_EXIT_TEMPFAIL ? " (lost broker or database)"
                 : code == WORKER_EXIT_CONFIG
                     ? " (configuration: declaration, handler or server version)"
                     : "");
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        if (sig == SIGALRM && __atomic_load_n(&w->slot->reconciling, __ATOMIC_RELAXED))
            snprintf(buf, len, "killed: reconcile() ran longer than reconcile_timeout = %d s",
                     w->conf->reconcile_timeout);
        else if (sig == SIGALRM)
            snprintf(buf, len, "killed: handler ran longer than handler_timeout = %d s",
                     q->handler_timeout);
        else
            snprintf(buf, len, "killed by signal %d (%s)%s", sig, strsignal(sig),
                     WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, len, "ended with status 0x%x", status);
    }
}

/* How a worker's run ended, for idemd_worker_restarts_total (see sup_describe_exit). */
static metrics_exit_t sup_exit_kind(int status, const sup_worker_t *w)
{
    if (WIFSIGNALED(status))
        return WTERMSIG(status) == SIGALRM ? METRICS_EXIT_TIMEOUT : METRICS_EXIT_CRASH;
    if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_CONFIG)
        return METRICS_EXIT_CONFIG;
    if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_TEMPFAIL) {
        int lost = __atomic_load_n(&w->slot->lost, __ATOMIC_RELAXED);
        if (lost == WORKER_LOST_BROKER)
            return METRICS_EXIT_BROKER;
        if (lost == WORKER_LOST_DATABASE)
            return METRICS_EXIT_DATABASE;
    }
    return METRICS_EXIT_CRASH;
}

/* Count worker w's exit (the process is gone) in its queue's stats. */
static void sup_count_exit(supervisor_t *s, const sup_worker_t *w, int status)
{
    sup_qstats_t *qs = sup_qstats(s, w->q->name);
    if (qs == NULL)
        return;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM &&
        __atomic_load_n(&w->slot->reconciling, __ATOMIC_RELAXED))
        qs->reconcile_killed++;
    if (!s->stopping && !w->retiring)
        qs->restarts[sup_exit_kind(status, w)]++;
}

/* After an abnormal exit: restart with capped exponential backoff and jitter. */
static uint64_t sup_backoff(supervisor_t *s, sup_worker_t *w, uint64_t now)
{
    if (now - w->started_ms > SUP_HEALTHY_MS)
        w->failures = 0;
    uint64_t delay = SUP_BACKOFF_MIN_MS;
    for (int k = 0; k < w->failures && delay < SUP_BACKOFF_MAX_MS; k++)
        delay *= 2;
    if (delay > SUP_BACKOFF_MAX_MS)
        delay = SUP_BACKOFF_MAX_MS;
    w->failures++;
    return delay / 2 + s->ports.proc->draw(s->ports.proc_ctx, (uint32_t)(delay / 2 + 1));
}

/*
 * Whether a current worker of queue name (of any queue when any) other
 * than skip already failed for the same reason (the reason is then logged
 * already).
 */
static bool sup_error_known(const supervisor_t *s, const sup_worker_t *skip, const char *name,
                            bool any, const char *error)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        if (w != skip && w->used && !w->retiring && (any || strcmp(w->q->name, name) == 0) &&
            strcmp(w->error, error) == 0)
            return true;
    }
    return false;
}

/*
 * A worker exited after a failed declaration, or found a server too old
 * (the reason is in its slot; the process is gone, so the slot is ours to
 * read). The reason is logged once per queue (a server's once for all
 * queues), not on every restart, and shown in STATUS= until a worker of
 * the queue consumes. Returns whether it was known already.
 */
static bool sup_declare_failed(supervisor_t *s, sup_worker_t *w)
{
    bool server = w->slot->error_kind == WORKER_ERROR_SERVER;
    bool known = strcmp(w->error, w->slot->error) == 0 ||
                 sup_error_known(s, w, w->q->name, server, w->slot->error);
    snprintf(w->error, sizeof(w->error), "%s", w->slot->error);
    w->error_kind = w->slot->error_kind;
    if (!known && server)
        log_error("queue '%s': %s; its workers try again every %d to %d s and take no "
                  "messages meanwhile",
                  w->q->name, w->error, SUP_BACKOFF_MAX_MS / 2000, SUP_BACKOFF_MAX_MS / 1000);
    else if (!known)
        log_error("queue '%s': %s; its workers start again with backoff (at most %d s apart) "
                  "until the declaration succeeds",
                  w->q->name, w->error, SUP_BACKOFF_MAX_MS / 1000);
    if (!known)
        s->next_status_ms = 0; /* show it in STATUS= now */
    return known;
}

/*
 * For the successor's crash-loop guard: did the handler kill it, or someone
 * else? A crash note still pending from an earlier worker (its successor
 * died, by kill -9 say, before counting it) keeps that worker's signal: else
 * the crash would pass for a kill from outside and not be counted (found by
 * the simulation, docs/simulation.md; sup_test_lost_note puts that back).
 */
static void sup_note_signal(worker_slot_t *sl, int status)
{
    bool pending = __atomic_load_n(&sl->in_handler, __ATOMIC_ACQUIRE) != 0 &&
                   __atomic_load_n(&sl->crash_gen, __ATOMIC_RELAXED) !=
                       __atomic_load_n(&sl->spawn_gen, __ATOMIC_RELAXED);
    if (!pending || SUP_TEST(sup_test_lost_note))
        __atomic_store_n(&sl->exit_signal, WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                         __ATOMIC_RELAXED);
}

/*
 * The reap rule for a retiring worker (drained by a reload or the
 * autoscaler), or any worker while stopping. One that died in its handler
 * left a crash note, which is counted: one more run in its slot counts it,
 * then drains (while stopping it goes, as every note does when the daemon
 * stops). Any other exit is its drain, and its entry is given up. Returns
 * false for a worker this rule does not cover.
 */
static bool sup_reap_retiring(supervisor_t *s, sup_worker_t *w, pid_t pid, const char *why,
                              uint64_t now)
{
    if (!s->stopping && !w->retiring)
        return false;
    w->note_only = w->retiring && !s->stopping && !SUP_TEST(sup_test_retire_gap) &&
                   __atomic_load_n(&w->slot->in_handler, __ATOMIC_ACQUIRE) != 0;
    if (w->note_only) {
        w->restart_at_ms = now + sup_backoff(s, w, now);
        log_warn("worker %s#%d (pid %d) %s while draining, in its handler: one more "
                 "run in its slot counts the crash, then drains",
                 w->q->name, w->index, (int)pid, why);
        return true;
    }
    log_info("worker %s#%d (pid %d) drained: %s", w->q->name, w->index, (int)pid, why);
    sup_remove_worker(s, w);
    return true;
}

/* A current worker exited: hold its queue, or schedule its restart with backoff. */
static void sup_reap_restart(supervisor_t *s, sup_worker_t *w, pid_t pid, int status,
                             const char *why, uint64_t now)
{
    /*
     * It got as far as consuming: a connection loss, not a startup failure.
     * (Not the state: every worker sets STOPPING on its way out.)
     */
    if (__atomic_load_n(&w->slot->consumed, __ATOMIC_RELAXED) && w->failures > 1)
        w->failures = 1;
    bool refused =
        WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_CONFIG && w->slot->error[0];
    if (refused && w->slot->error_kind == WORKER_ERROR_ENDED) {
        sup_hold(s, w);
        return;
    }
    /* A server's version does not change in a second: hold the queue at the cap. */
    if (refused && w->slot->error_kind == WORKER_ERROR_SERVER)
        w->failures = SUP_HOLD_FAILURES;
    uint64_t delay = sup_backoff(s, w, now);
    w->restart_at_ms = now + delay;
    bool again = refused && sup_declare_failed(s, w);
    log_msg(again ? LOG_LEVEL_INFO : LOG_LEVEL_WARNING,
            "worker %s#%d (pid %d) %s%s; restarting in %llu ms", w->q->name, w->index, (int)pid,
            why,
            !again                                 ? ""
            : w->error_kind == WORKER_ERROR_SERVER ? ", server still too old"
                                                   : ", declaration failed again",
            (unsigned long long)delay);
}

/* Worker w's process pid ended with status (the process port's wait). */
static void sup_reap_one(supervisor_t *s, sup_worker_t *w, pid_t pid, int status)
{
    char why[160];
    uint64_t now = sup_now(s);
    w->pid = 0;
    log_set_sink(&w->slot->last_error); /* what is said of its exit is the queue's */
    sup_note_signal(w->slot, status);
    uint64_t p = __atomic_load_n(&w->slot->progress_ms, __ATOMIC_RELAXED);
    w->last_progress_ms = p ? p : w->started_ms;
    sup_describe_exit(status, w, why, sizeof(why));
    sup_count_exit(s, w, status);
    if (!sup_reap_retiring(s, w, pid, why, now))
        sup_reap_restart(s, w, pid, status, why, now);
    log_set_sink(NULL);
}

/* Reap exited workers (the process port's wait): free retired ones, schedule the restart of
 * the others. */
static void sup_reap(supervisor_t *s)
{
    int status;
    pid_t pid;
    while ((pid = s->ports.proc->wait(s->ports.proc_ctx, &status)) > 0) {
        for (int i = 0; i < SUP_MAX_SLOTS; i++) {
            sup_worker_t *w = &s->workers[i];
            if (w->used && w->pid == pid) {
                sup_reap_one(s, w, pid, status);
                break;
            }
        }
    }
}

/* Whether a retiring worker of the queue named name is still running (or runs once more to
 * count its crash note: sup_reap). */
static bool sup_draining(const supervisor_t *s, const char *name)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        if (w->used && w->retiring && (w->pid || w->note_only) && strcmp(w->q->name, name) == 0)
            return true;
    }
    return false;
}

/* Start the workers due (a waiting one once its queue's draining workers are gone), and note
 * the ones consuming again after a failed declaration. */
static void sup_start_due(supervisor_t *s, uint64_t now)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (!w->used || w->pid || (w->retiring && !w->note_only) || w->held ||
            now < w->restart_at_ms)
            continue;
        if (w->waiting) {
            if (sup_draining(s, w->q->name))
                continue;
            w->waiting = false;
        }
        sup_spawn(s, w);
    }
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (w->used && w->pid && w->error[0] &&
            __atomic_load_n(&w->slot->state, __ATOMIC_RELAXED) == WORKER_STATE_CONSUMING) {
            log_info("worker %s#%d %s: consuming", w->q->name, w->index,
                     w->error_kind == WORKER_ERROR_SERVER ? "accepted the servers"
                                                          : "declared its queues");
            w->error[0] = '\0';
            s->next_status_ms = 0;
        }
    }
}

void sup_step(supervisor_t *s)
{
    sup_reap(s);
    if (s->stopping)
        return;
    uint64_t now = sup_now(s);
    sup_start_due(s, now);
    sup_auto_tick(s, now);
}
