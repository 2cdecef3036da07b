/* supervisor.c: the main process: forks and restarts workers, reloads the config, talks to systemd.
 */
#include "supervisor.h"

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
#include "worker.h"

/* How often a held-back watchdog ping is tried again. */
#define SUP_WATCHDOG_RECHECK_MS 100

#define SUP_BACKOFF_MIN_MS 200
#define SUP_BACKOFF_MAX_MS 30000
#define SUP_HEALTHY_MS 30000 /* a worker up this long resets its backoff */
#define SUP_MAX_SLOTS 256    /* workers alive at once, old and new generations together */
/* Failures that take sup_backoff to its cap: a server too old is tried again only that often. */
#define SUP_HOLD_FAILURES 16

typedef struct sup_worker {
    bool used;
    const conf_t *conf; /* the generation it belongs to */
    const conf_queue_t *q;
    int index; /* worker number within the queue */
    pid_t pid; /* 0 when not running */
    uint64_t started_ms;
    uint64_t restart_at_ms; /* when pid == 0: when to start it (again) */
    int failures;           /* consecutive abnormal exits */
    bool retiring;          /* stopped by a reload: drained, never restarted */
    bool waiting;           /* started by a reload: waits for its queue's old workers */
    worker_slot_t *slot;
    char error[WORKER_ERROR_MAX]; /* its last failed declaration, until it consumes again */
    int error_kind;               /* worker_error_t of error */
    uint64_t last_progress_ms;    /* when pid == 0: its last run's last progress */
} sup_worker_t;

/*
 * What a queue name did, for /metrics: the counters of slots given up by
 * its workers (a slot is reused by any queue, so they move here), and what
 * only the supervisor sees. Kept for every name ever configured: counters
 * never go backwards, also across reloads that remove a queue.
 */
typedef struct sup_qstats {
    char *name;
    metrics_counters_t c;
    uint64_t restarts[METRICS_EXIT_KINDS];
    uint64_t reconcile_killed; /* reconcile runs killed at reconcile_timeout */
    log_sink_t last_error;     /* the newest of slots given up */
} sup_qstats_t;

/* A handler file as it was when the config generation was loaded. */
typedef struct sup_file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} sup_file_id_t;

typedef struct supervisor {
    conf_t *conf;       /* the current generation */
    sup_file_id_t *ids; /* per queue of conf */
    conf_t **old;       /* earlier generations that draining workers still point into */
    int n_old;
    sup_worker_t workers[SUP_MAX_SLOTS];
    worker_slot_t *slots; /* shared memory, SUP_MAX_SLOTS entries */
    int sigfd;
    int log_level_override; /* from the command line, or -1 */
    bool ready;
    bool stopping;
    uint64_t stop_deadline_ms;
    uint64_t watchdog_usec;
    uint64_t next_watchdog_ms;     /* the next WATCHDOG=1 is due then */
    uint64_t next_withhold_log_ms; /* a ping still held back is logged again from then */
    uint64_t next_status_ms;
    const char *version;
    sup_qstats_t *qstats;
    int n_qstats;
    metrics_server_t *metrics; /* NULL unless metrics.listen is set */
    char metrics_on[80];       /* the metrics.listen it serves */
    struct sockaddr_storage metrics_addr;
    metrics_queue_t *view; /* the last scrape's, n_qstats entries */
} supervisor_t;

static uint64_t sup_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Check every queue's handler (ownership, dlopen, ABI) in a child process,
 * so that no plugin code runs in the supervisor, and note each file's
 * identity into a new array in *ids (caller frees). Each worker loads its
 * own after fork, so a replaced file is picked up.
 * 0, or -1 (logged, naming the file).
 */
static int sup_check_plugins(const conf_t *conf, sup_file_id_t **ids)
{
    char err[512];
    struct stat st;
    *ids = calloc((size_t)conf->n_queues, sizeof(**ids));
    if (*ids == NULL)
        return -1;
    for (int i = 0; i < conf->n_queues; i++) {
        const conf_queue_t *q = &conf->queues[i];
        char name[256];
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

/* The stats of queue name, made on first use; NULL when out of memory (logged). */
static sup_qstats_t *sup_qstats(supervisor_t *s, const char *name)
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
static void sup_newer_error(log_sink_t *into, const log_sink_t *slot)
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
static void sup_release_worker(supervisor_t *s, sup_worker_t *w)
{
    sup_qstats_t *qs = sup_qstats(s, w->q->name);
    if (qs) {
        metrics_counters_add(&qs->c, &w->slot->c);
        sup_newer_error(&qs->last_error, &w->slot->last_error);
    }
    memset(&w->slot->c, 0, sizeof(w->slot->c));
    memset(&w->slot->last_error, 0, sizeof(w->slot->last_error));
    w->slot->lost = WORKER_LOST_NONE; /* not a reconnect for the slot's next worker */
    w->slot->dlx_warned = 0;
    w->used = false;
}

/* Add a worker entry for queue q of conf; it starts at the next loop turn (unless waiting). */
static void sup_add_worker(supervisor_t *s, const conf_t *conf, const conf_queue_t *q, int index,
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
        w->last_progress_ms = sup_now_ms();
        return;
    }
    log_error("queue '%s': more than %d workers at once: worker %d not started", q->name,
              SUP_MAX_SLOTS, index);
}

/* Fork worker w. The child never returns. */
static void sup_spawn(supervisor_t *s, sup_worker_t *w)
{
    /* Counters survive restarts; only the liveness fields start over. */
    __atomic_store_n(&w->slot->state, WORKER_STATE_STARTING, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->progress_ms, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->reconciling, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->consumed, 0, __ATOMIC_RELAXED);
    w->slot->error[0] = '\0';
    w->slot->error_kind = WORKER_ERROR_DECLARE;
    pid_t pid = fork();
    if (pid < 0) {
        log_error("fork for queue '%s' worker %d: %s", w->q->name, w->index, strerror(errno));
        w->restart_at_ms = sup_now_ms() + SUP_BACKOFF_MAX_MS;
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
    w->started_ms = sup_now_ms();
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
            uint64_t now = sup_now_ms();
            w->pid = 0;
            log_set_sink(&w->slot->last_error); /* what is said of its exit is the queue's */
            /* For the successor's crash-loop guard: did the handler kill it, or someone else? */
            __atomic_store_n(&w->slot->exit_signal, WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                             __ATOMIC_RELAXED);
            uint64_t p = __atomic_load_n(&w->slot->progress_ms, __ATOMIC_RELAXED);
            w->last_progress_ms = p ? p : w->started_ms;
            sup_describe_exit(status, w, why, sizeof(why));
            sup_count_exit(s, w, status);
            if (s->stopping || w->retiring) {
                log_info("worker %s#%d (pid %d) drained: %s", w->q->name, w->index, (int)pid, why);
                log_set_sink(NULL);
                sup_release_worker(s, w);
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

/* Whether a retiring worker of the queue named name is still running. */
static bool sup_draining(const supervisor_t *s, const char *name)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const sup_worker_t *w = &s->workers[i];
        if (w->used && w->retiring && w->pid && strcmp(w->q->name, name) == 0)
            return true;
    }
    return false;
}

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
static void sup_status(supervisor_t *s)
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
static void sup_check_ready(supervisor_t *s)
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
    s->next_status_ms = sup_now_ms() + 5000;
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
static void sup_watchdog(supervisor_t *s, uint64_t now)
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
static int sup_poll_ms(const supervisor_t *s, uint64_t now)
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

/* Value below which a fraction q of the merged latency samples fall, in microseconds. */
static uint64_t sup_lat_quantile(const uint64_t *hist, uint64_t total, double q)
{
    uint64_t want = (uint64_t)((double)total * q), seen = 0;
    for (int b = 0; b < WORKER_LAT_BUCKETS; b++) {
        seen += hist[b];
        if (seen > want)
            return worker_lat_bucket_floor(b + 1);
    }
    return worker_lat_bucket_floor(WORKER_LAT_BUCKETS - 1);
}

/* At exit: the counters of all workers, and publish-to-commit latency if measured. */
static void sup_log_totals(const supervisor_t *s)
{
    uint64_t hist[WORKER_LAT_BUCKETS] = {0}, n = 0;
    metrics_counters_t all;
    sup_totals(s, &all);
    uint64_t ok = all.n_ok, dup = all.n_duplicate, retry = all.n_retry, rej = all.n_reject,
             com = all.n_commits;
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        const worker_slot_t *sl = &s->slots[i];
        for (int b = 0; b < WORKER_LAT_BUCKETS; b++) {
            hist[b] += sl->lat[b];
            n += sl->lat[b];
        }
    }
    log_info("totals: ok=%llu duplicate=%llu retry=%llu reject=%llu commits=%llu",
             (unsigned long long)ok, (unsigned long long)dup, (unsigned long long)retry,
             (unsigned long long)rej, (unsigned long long)com);
    if (n)
        log_info("latency publish-to-commit: n=%llu p50_us=%llu p99_us=%llu", (unsigned long long)n,
                 (unsigned long long)sup_lat_quantile(hist, n, 0.5),
                 (unsigned long long)sup_lat_quantile(hist, n, 0.99));
}

/* Ask every worker of queue name (or all when name is NULL) to drain and exit. */
static void sup_retire(supervisor_t *s, const char *name)
{
    for (int i = 0; i < SUP_MAX_SLOTS; i++) {
        sup_worker_t *w = &s->workers[i];
        if (!w->used || w->retiring || (name && strcmp(w->q->name, name) != 0))
            continue;
        w->retiring = true;
        w->waiting = false;
        if (w->pid)
            kill(w->pid, SIGTERM);
        else
            sup_release_worker(s, w);
    }
}

static const conf_queue_t *sup_find_queue(const conf_t *conf, const char *name)
{
    for (int i = 0; i < conf->n_queues; i++)
        if (strcmp(conf->queues[i].name, name) == 0)
            return &conf->queues[i];
    return NULL;
}

/*
 * metrics_collect_fn: one view per queue name ever configured, from its
 * stats and the slots of its workers now. The array is kept in s.
 */
static void sup_collect(void *ctx, metrics_queue_t **out, int *n)
{
    supervisor_t *s = ctx;
    uint64_t now = sup_now_ms();
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
static int sup_metrics_listen(supervisor_t *s, const conf_t *conf)
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

/* The log level in effect: --log-level, else the current generation's daemon.log_level. */
static log_level_t sup_log_level(const supervisor_t *s)
{
    return (log_level_t)(s->log_level_override >= 0 ? s->log_level_override : s->conf->log_level);
}

/*
 * Hand every slot the daemon settings that running workers follow without
 * a restart (see worker_slot_t); the supervisor follows its own.
 */
static void sup_share_settings(supervisor_t *s)
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
static void sup_free_old(supervisor_t *s)
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
static void sup_reload(supervisor_t *s)
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
        for (int k = 0; k < nq->workers; k++)
            sup_add_worker(s, next, nq, k, oq != NULL);
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

static void sup_begin_stop(supervisor_t *s, int sig)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->stop_deadline_ms = sup_now_ms() + (uint64_t)s->conf->shutdown_timeout * 1000;
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
        if (!w->used || w->pid || w->retiring || now < w->restart_at_ms)
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
        for (int k = 0; k < conf->queues[i].workers; k++)
            sup_add_worker(s, conf, &conf->queues[i], k, false);
    if (sd_watchdog_enabled(0, &s->watchdog_usec) <= 0)
        s->watchdog_usec = 0;
    sd_notify(0, "STATUS=starting workers");

    for (;;) {
        /* Metrics are served from this loop, without a thread: see metrics.h. */
        struct pollfd pfd[2] = {{s->sigfd, POLLIN, 0}, {metrics_fd(s->metrics), POLLIN, 0}};
        int r = poll(pfd, 2, sup_poll_ms(s, sup_now_ms()));
        uint64_t now = sup_now_ms();
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
