/* supervisor.c: the main process: forks and restarts workers, handles signals, talks to systemd. */
#include "supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "plugin.h"
#include "worker.h"

#define SUPERVISOR_BACKOFF_MIN_MS 200
#define SUPERVISOR_BACKOFF_MAX_MS 30000
#define SUPERVISOR_HEALTHY_MS 30000 /* a worker up this long resets its backoff */

typedef struct sup_worker {
    int queue; /* index into conf->queues */
    int index; /* worker number within the queue */
    pid_t pid; /* 0 when not running */
    uint64_t started_ms;
    uint64_t restart_at_ms; /* when pid == 0: when to start it again */
    int failures;           /* consecutive abnormal exits */
    worker_slot_t *slot;
} sup_worker_t;

typedef struct supervisor {
    conf_t *conf;
    plugin_t **plugins; /* one per queue */
    sup_worker_t *workers;
    int n_workers;
    worker_slot_t *slots; /* shared memory, n_workers entries */
    int sigfd;
    bool ready;
    bool stopping;
    uint64_t stop_deadline_ms;
    uint64_t watchdog_usec;
    uint64_t next_watchdog_ms;
    uint64_t next_status_ms;
} supervisor_t;

static uint64_t supervisor_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Load every queue's handler to check its ABI. 0, or -1 (logged, naming the file). */
static int supervisor_load_plugins(supervisor_t *s)
{
    char err[512];
    s->plugins = calloc((size_t)s->conf->n_queues, sizeof(*s->plugins));
    if (s->plugins == NULL)
        return -1;
    for (int i = 0; i < s->conf->n_queues; i++) {
        const conf_queue_t *q = &s->conf->queues[i];
        if (plugin_load(q->handler, &s->plugins[i], err, sizeof(err)) != 0) {
            log_error("queue '%s': %s", q->name, err);
            return -1;
        }
        log_info("queue '%s': handler '%s' from %s", q->name, s->plugins[i]->handler->name,
                 q->handler);
    }
    return 0;
}

/* Fork worker w. The child never returns. */
static void supervisor_spawn(supervisor_t *s, sup_worker_t *w)
{
    const conf_queue_t *q = &s->conf->queues[w->queue];
    /* Counters survive restarts; only the liveness fields start over. */
    __atomic_store_n(&w->slot->state, WORKER_STATE_STARTING, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->progress_ms, 0, __ATOMIC_RELAXED);
    pid_t pid = fork();
    if (pid < 0) {
        log_error("fork for queue '%s' worker %d: %s", q->name, w->index, strerror(errno));
        w->restart_at_ms = supervisor_now_ms() + SUPERVISOR_BACKOFF_MAX_MS;
        return;
    }
    if (pid == 0) {
        close(s->sigfd);
        worker_main(s->conf, q, w->index, s->plugins[w->queue], w->slot);
    }
    w->pid = pid;
    w->started_ms = supervisor_now_ms();
    log_debug("started worker %s#%d as pid %d", q->name, w->index, (int)pid);
}

/* Describe how a worker ended, for the log. */
static void supervisor_describe_exit(int status, const conf_queue_t *q, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(buf, len, "exited with code %d%s", code,
                 code == WORKER_EXIT_TEMPFAIL ? " (lost broker or database)"
                 : code == WORKER_EXIT_CONFIG ? " (configuration or handler init problem)"
                                              : "");
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        if (sig == SIGALRM)
            snprintf(buf, len, "killed: handler ran longer than handler_timeout = %d s",
                     q->handler_timeout);
        else
            snprintf(buf, len, "killed by signal %d (%s)%s", sig, strsignal(sig),
                     WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, len, "ended with status 0x%x", status);
    }
}

/* Reap exited workers and schedule their restart with capped exponential backoff and jitter. */
static void supervisor_reap(supervisor_t *s)
{
    int status;
    pid_t pid;
    char why[160];
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < s->n_workers; i++) {
            sup_worker_t *w = &s->workers[i];
            if (w->pid != pid)
                continue;
            const conf_queue_t *q = &s->conf->queues[w->queue];
            uint64_t now = supervisor_now_ms();
            w->pid = 0;
            if (s->stopping) {
                log_debug("worker %s#%d stopped", q->name, w->index);
                break;
            }
            supervisor_describe_exit(status, q, why, sizeof(why));
            if (now - w->started_ms > SUPERVISOR_HEALTHY_MS)
                w->failures = 0;
            uint64_t delay = SUPERVISOR_BACKOFF_MIN_MS;
            for (int k = 0; k < w->failures && delay < SUPERVISOR_BACKOFF_MAX_MS; k++)
                delay *= 2;
            if (delay > SUPERVISOR_BACKOFF_MAX_MS)
                delay = SUPERVISOR_BACKOFF_MAX_MS;
            delay = delay / 2 + (uint64_t)rand() % (delay / 2 + 1); /* jitter */
            w->failures++;
            w->restart_at_ms = now + delay;
            log_warn("worker %s#%d (pid %d) %s; restarting in %llu ms", q->name, w->index, (int)pid,
                     why, (unsigned long long)delay);
            break;
        }
    }
}

/* Tell systemd (and the log) how the queues are doing. */
static void supervisor_status(supervisor_t *s)
{
    char buf[1024];
    size_t off = 0;
    uint64_t total_ok = 0, total_dup = 0;
    int consuming = 0;
    for (int i = 0; i < s->n_workers; i++) {
        worker_slot_t *sl = s->workers[i].slot;
        total_ok += __atomic_load_n(&sl->n_ok, __ATOMIC_RELAXED);
        total_dup += __atomic_load_n(&sl->n_duplicate, __ATOMIC_RELAXED);
        if (s->workers[i].pid &&
            __atomic_load_n(&sl->state, __ATOMIC_RELAXED) == WORKER_STATE_CONSUMING)
            consuming++;
    }
    off += (size_t)snprintf(buf + off, sizeof(buf) - off,
                            "STATUS=%d/%d workers consuming; %llu processed, %llu duplicates",
                            consuming, s->n_workers, (unsigned long long)total_ok,
                            (unsigned long long)total_dup);
    sd_notify(0, buf);
}

/* All workers consuming for the first time: announce readiness. */
static void supervisor_check_ready(supervisor_t *s)
{
    if (s->ready)
        return;
    for (int i = 0; i < s->n_workers; i++)
        if (!s->workers[i].pid ||
            __atomic_load_n(&s->workers[i].slot->state, __ATOMIC_RELAXED) != WORKER_STATE_CONSUMING)
            return;
    s->ready = true;
    log_info("ready: %d queues, %d workers consuming", s->conf->n_queues, s->n_workers);
    sd_notify(0, "READY=1");
    supervisor_status(s);
}

/* Ping the watchdog only while every running worker showed progress within the interval. */
static void supervisor_watchdog(supervisor_t *s, uint64_t now)
{
    uint64_t limit_ms = s->watchdog_usec / 1000;
    if (!s->watchdog_usec || now < s->next_watchdog_ms)
        return;
    s->next_watchdog_ms = now + limit_ms / 2;
    for (int i = 0; i < s->n_workers; i++) {
        sup_worker_t *w = &s->workers[i];
        uint64_t p = __atomic_load_n(&w->slot->progress_ms, __ATOMIC_RELAXED);
        if (w->pid && p && now > p && now - p > limit_ms / 2) {
            log_warn("worker %s#%d shows no progress for %llu ms: withholding watchdog ping",
                     s->conf->queues[w->queue].name, w->index, (unsigned long long)(now - p));
            return;
        }
    }
    sd_notify(0, "WATCHDOG=1");
}

/* Value below which a fraction q of the merged latency samples fall, in microseconds. */
static uint64_t supervisor_lat_quantile(const uint64_t *hist, uint64_t total, double q)
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
static void supervisor_log_totals(const supervisor_t *s)
{
    uint64_t hist[WORKER_LAT_BUCKETS] = {0}, n = 0, ok = 0, dup = 0, retry = 0, rej = 0, com = 0;
    for (int i = 0; i < s->n_workers; i++) {
        const worker_slot_t *sl = s->workers[i].slot;
        ok += sl->n_ok;
        dup += sl->n_duplicate;
        retry += sl->n_retry;
        rej += sl->n_reject;
        com += sl->n_commits;
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
                 (unsigned long long)supervisor_lat_quantile(hist, n, 0.5),
                 (unsigned long long)supervisor_lat_quantile(hist, n, 0.99));
}

static void supervisor_begin_stop(supervisor_t *s, int sig)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->stop_deadline_ms = supervisor_now_ms() + (uint64_t)s->conf->shutdown_timeout * 1000;
    log_info("signal %d: stopping (finishing in-flight transactions)", sig);
    sd_notify(0, "STOPPING=1");
    for (int i = 0; i < s->n_workers; i++)
        if (s->workers[i].pid)
            kill(s->workers[i].pid, SIGTERM);
}

static int supervisor_running(const supervisor_t *s)
{
    int n = 0;
    for (int i = 0; i < s->n_workers; i++)
        n += s->workers[i].pid != 0;
    return n;
}

/* Allocate workers and their shared slots. 0 or -1 (logged). */
static int supervisor_setup(supervisor_t *s)
{
    for (int i = 0; i < s->conf->n_queues; i++)
        s->n_workers += s->conf->queues[i].workers;
    s->workers = calloc((size_t)s->n_workers, sizeof(*s->workers));
    s->slots = mmap(NULL, sizeof(worker_slot_t) * (size_t)s->n_workers, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s->workers == NULL || s->slots == MAP_FAILED) {
        log_error("out of memory for %d workers", s->n_workers);
        s->slots = NULL;
        return -1;
    }
    int k = 0;
    for (int i = 0; i < s->conf->n_queues; i++)
        for (int j = 0; j < s->conf->queues[i].workers; j++, k++) {
            s->workers[k].queue = i;
            s->workers[k].index = j;
            s->workers[k].slot = &s->slots[k];
        }
    return 0;
}

int supervisor_run(conf_t *conf)
{
    supervisor_t s;
    sigset_t mask;
    int rc = 1;

    memset(&s, 0, sizeof(s));
    s.conf = conf;
    s.sigfd = -1;
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    s.sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s.sigfd < 0) {
        log_error("signalfd: %s", strerror(errno));
        goto fail;
    }
    if (supervisor_load_plugins(&s) != 0 || supervisor_setup(&s) != 0)
        goto fail;
    if (sd_watchdog_enabled(0, &s.watchdog_usec) <= 0)
        s.watchdog_usec = 0;
    sd_notify(0, "STATUS=starting workers");
    for (int i = 0; i < s.n_workers; i++)
        supervisor_spawn(&s, &s.workers[i]);

    for (;;) {
        struct pollfd pfd = {s.sigfd, POLLIN, 0};
        int r = poll(&pfd, 1, s.ready ? 500 : 100);
        uint64_t now = supervisor_now_ms();
        if (r > 0) {
            struct signalfd_siginfo si;
            while (read(s.sigfd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGCHLD)
                    continue; /* reaped below */
                if (si.ssi_signo == SIGHUP) {
                    log_warn("SIGHUP: configuration reload is not supported yet; restart to "
                             "apply changes");
                    continue;
                }
                supervisor_begin_stop(&s, (int)si.ssi_signo);
            }
        }
        supervisor_reap(&s);
        if (s.stopping) {
            if (supervisor_running(&s) == 0)
                break;
            if (now >= s.stop_deadline_ms) {
                log_warn("shutdown_timeout reached: killing %d workers", supervisor_running(&s));
                for (int i = 0; i < s.n_workers; i++)
                    if (s.workers[i].pid)
                        kill(s.workers[i].pid, SIGKILL);
                s.stop_deadline_ms = UINT64_MAX;
            }
            continue;
        }
        for (int i = 0; i < s.n_workers; i++) {
            sup_worker_t *w = &s.workers[i];
            if (w->pid == 0 && now >= w->restart_at_ms)
                supervisor_spawn(&s, w);
        }
        supervisor_check_ready(&s);
        supervisor_watchdog(&s, now);
        if (s.ready && now >= s.next_status_ms) {
            supervisor_status(&s);
            s.next_status_ms = now + 5000;
        }
    }
    supervisor_log_totals(&s);
    log_info("stopped");
    rc = 0;
fail:
    if (s.plugins)
        for (int i = 0; i < conf->n_queues; i++)
            plugin_free(s.plugins[i]);
    free(s.plugins);
    if (s.slots)
        munmap(s.slots, sizeof(worker_slot_t) * (size_t)s.n_workers);
    free(s.workers);
    if (s.sigfd >= 0)
        close(s.sigfd);
    conf_free(conf);
    return rc;
}
