/* supervisor.c: the main process: forks, reaps and restarts workers, and runs the signal loop.
 */
#include "supervisor.h"
#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "plugin.h"
#include "slot.h"
#include "sup.h"
#include "worker.h"

#define SUP_BACKOFF_MIN_MS 200
#define SUP_BACKOFF_MAX_MS 30000
#define SUP_HEALTHY_MS 30000 /* a worker up this long resets its backoff */
/* Failures that take sup_backoff to its cap: a server too old is tried again only that often. */
#define SUP_HOLD_FAILURES 16

/* Fork worker w. The child never returns. */
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
            kill(o->pid, SIGTERM);
    }
    s->next_status_ms = 0;
}

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
    pid_t pid = fork();
    if (pid < 0) {
        log_error("fork for queue '%s' worker %d: %s", w->q->name, w->index, strerror(errno));
        w->restart_at_ms = clock_mono_ms() + SUP_BACKOFF_MAX_MS;
        return;
    }
    if (pid == 0) {
        close(s->sigfd);
        /* Inherited from the supervisor already; a worker holds the passwords and the
         * messages, so it makes sure. */
        (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        metrics_forget_fds(s->metrics);
        worker_main(w->conf, w->q, w->index, w->slot);
    }
    w->pid = pid;
    w->started_ms = clock_mono_ms();
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
static uint64_t sup_backoff(sup_worker_t *w, uint64_t now)
{
    if (now - w->started_ms > SUP_HEALTHY_MS)
        w->failures = 0;
    uint64_t delay = SUP_BACKOFF_MIN_MS;
    for (int k = 0; k < w->failures && delay < SUP_BACKOFF_MAX_MS; k++)
        delay *= 2;
    if (delay > SUP_BACKOFF_MAX_MS)
        delay = SUP_BACKOFF_MAX_MS;
    w->failures++;
    return delay / 2 + (uint64_t)rand() % (delay / 2 + 1);
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

/* Reap exited workers: free retired ones, schedule the restart of the others. */
static void sup_reap(supervisor_t *s)
{
    int status;
    pid_t pid;
    char why[160];
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < SUP_MAX_SLOTS; i++) {
            sup_worker_t *w = &s->workers[i];
            if (!w->used || w->pid != pid)
                continue;
            uint64_t now = clock_mono_ms();
            w->pid = 0;
            log_set_sink(&w->slot->last_error); /* what is said of its exit is the queue's */
            /* For the successor's crash-loop guard: did the handler kill it, or someone else?
             * A crash note still pending from an earlier worker (its successor died, by
             * kill -9 say, before counting it) keeps that worker's signal: else the crash
             * would pass for a kill from outside and not be counted (found by the
             * simulation, docs/simulation.md). */
            bool pending = __atomic_load_n(&w->slot->in_handler, __ATOMIC_ACQUIRE) != 0 &&
                           __atomic_load_n(&w->slot->crash_gen, __ATOMIC_RELAXED) !=
                               __atomic_load_n(&w->slot->spawn_gen, __ATOMIC_RELAXED);
            if (!pending)
                __atomic_store_n(&w->slot->exit_signal, WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                                 __ATOMIC_RELAXED);
            uint64_t p = __atomic_load_n(&w->slot->progress_ms, __ATOMIC_RELAXED);
            w->last_progress_ms = p ? p : w->started_ms;
            sup_describe_exit(status, w, why, sizeof(why));
            sup_count_exit(s, w, status);
            /* A retiring worker that died in its handler left a crash note: the reap rule is
             * that it is counted, so one more run in its slot counts it, then drains (while
             * stopping it goes, as every note does when the daemon stops). */
            w->note_only = w->retiring && !s->stopping &&
                           __atomic_load_n(&w->slot->in_handler, __ATOMIC_ACQUIRE) != 0;
            if (w->note_only) {
                w->restart_at_ms = now + sup_backoff(w, now);
                log_warn("worker %s#%d (pid %d) %s while draining, in its handler: one more "
                         "run in its slot counts the crash, then drains",
                         w->q->name, w->index, (int)pid, why);
                log_set_sink(NULL);
                break;
            }
            if (s->stopping || w->retiring) {
                log_info("worker %s#%d (pid %d) drained: %s", w->q->name, w->index, (int)pid, why);
                log_set_sink(NULL);
                sup_remove_worker(s, w);
                break;
            }
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
                log_set_sink(NULL);
                break;
            }
            /* A server's version does not change in a second: hold the queue at the cap. */
            if (refused && w->slot->error_kind == WORKER_ERROR_SERVER)
                w->failures = SUP_HOLD_FAILURES;
            uint64_t delay = sup_backoff(w, now);
            w->restart_at_ms = now + delay;
            bool again = refused && sup_declare_failed(s, w);
            log_msg(again ? LOG_LEVEL_INFO : LOG_LEVEL_WARNING,
                    "worker %s#%d (pid %d) %s%s; restarting in %llu ms", w->q->name, w->index,
                    (int)pid, why,
                    !again                                 ? ""
                    : w->error_kind == WORKER_ERROR_SERVER ? ", server still too old"
                                                           : ", declaration failed again",
                    (unsigned long long)delay);
            log_set_sink(NULL);
            break;
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

static void sup_begin_stop(supervisor_t *s, int sig)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->stop_deadline_ms = clock_mono_ms() + (uint64_t)s->conf->shutdown_timeout * 1000;
    log_info("signal %d: stopping (finishing in-flight transactions)", sig);
    sd_notify(0, "STOPPING=1");
    for (int i = 0; i < SUP_MAX_SLOTS; i++)
        if (s->workers[i].used && s->workers[i].pid)
            kill(s->workers[i].pid, SIGTERM);
}

static int sup_running(const supervisor_t *s)
{
    int n = 0;
    for (int i = 0; i < SUP_MAX_SLOTS; i++)
        n += s->workers[i].used && s->workers[i].pid != 0;
    return n;
}

/* One turn of the loop after signals: start due workers, readiness, watchdog, status. */
static void sup_tick(supervisor_t *s, uint64_t now)
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
    sup_auto_tick(s, now);
    sup_check_ready(s);
    sup_watchdog(s, now);
    if (s->ready && now >= s->next_status_ms) {
        sup_status(s);
        s->next_status_ms = now + 5000;
    }
}

int supervisor_run(conf_t *conf, int log_level_override, const char *version)
{
    supervisor_t *s = calloc(1, sizeof(*s));
    sigset_t mask;
    int rc = 1;

    if (s == NULL) {
        conf_free(conf);
        return 1;
    }
    s->conf = conf;
    s->sigfd = -1;
    s->log_level_override = log_level_override;
    s->version = version;
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    s->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s->sigfd < 0) {
        log_error("signalfd: %s", strerror(errno));
        goto fail;
    }
    s->slots = mmap(NULL, sizeof(worker_slot_t) * SUP_MAX_SLOTS, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s->slots == MAP_FAILED) {
        log_error("mmap of worker slots: %s", strerror(errno));
        s->slots = NULL;
        goto fail;
    }
    if (sup_check_plugins(conf, &s->ids) != 0)
        goto fail;
    if (sup_metrics_listen(s, conf) != 0)
        goto fail;
    sup_share_settings(s);
    for (int i = 0; i < conf->n_queues; i++)
        sup_auto_start(s, conf, &conf->queues[i], false);
    if (sd_watchdog_enabled(0, &s->watchdog_usec) <= 0)
        s->watchdog_usec = 0;
    sd_notify(0, "STATUS=starting workers");

    for (;;) {
        /* Metrics are served from this loop, without a thread: see metrics.h. */
        struct pollfd pfd[2] = {{s->sigfd, POLLIN, 0}, {metrics_fd(s->metrics), POLLIN, 0}};
        int r = poll(pfd, 2, sup_poll_ms(s, clock_mono_ms()));
        uint64_t now = clock_mono_ms();
        metrics_serve(s->metrics);
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGCHLD)
                    continue; /* reaped below */
                if (si.ssi_signo == SIGHUP) {
                    if (!s->stopping)
                        sup_reload(s);
                    continue;
                }
                sup_begin_stop(s, (int)si.ssi_signo);
            }
        }
        sup_reap(s);
        if (s->n_old)
            sup_free_old(s);
        if (!s->stopping) {
            sup_tick(s, now);
            continue;
        }
        if (sup_running(s) == 0)
            break;
        if (now >= s->stop_deadline_ms) {
            log_warn("shutdown_timeout reached: killing %d workers", sup_running(s));
            for (int i = 0; i < SUP_MAX_SLOTS; i++)
                if (s->workers[i].used && s->workers[i].pid)
                    kill(s->workers[i].pid, SIGKILL);
            s->stop_deadline_ms = UINT64_MAX;
        }
    }
    sup_log_totals(s);
    log_info("stopped");
    rc = 0;
fail:
    metrics_stop(s->metrics);
    for (int i = 0; i < s->n_qstats; i++)
        free(s->qstats[i].name);
    free(s->qstats);
    free(s->view);
    if (s->slots)
        munmap(s->slots, sizeof(worker_slot_t) * SUP_MAX_SLOTS);
    if (s->sigfd >= 0)
        close(s->sigfd);
    for (int i = 0; i < s->n_old; i++)
        conf_free(s->old[i]);
    free(s->old);
    free(s->ids);
    conf_free(s->conf);
    free(s);
    return rc;
}
