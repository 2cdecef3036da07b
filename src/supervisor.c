/* supervisor.c: the main process: the signal loop around sup_step (sup_step.c) over the real
 * ports (fork, kill, waitpid, clock.c, the slots in shared memory).
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

/* ---------- the real ports: fork, kill, waitpid, clock.c ---------- */

/* Fork worker w; the child runs it and never returns. Its pid, or -1 (logged). */
static pid_t sup_fork(void *ctx, sup_worker_t *w)
{
    supervisor_t *s = ctx;
    pid_t pid = fork();
    if (pid < 0) {
        log_error("fork for queue '%s' worker %d: %s", w->q->name, w->index, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(s->sigfd);
        /* Inherited from the supervisor already; a worker holds the passwords and the
         * messages, so it makes sure. */
        (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        metrics_forget_fds(s->metrics);
        worker_main(w->conf, w->q, w->index, w->slot);
    }
    return pid;
}

static void sup_kill(void *ctx, pid_t pid, int sig)
{
    (void)ctx;
    kill(pid, sig);
}

static pid_t sup_waitpid(void *ctx, int *status)
{
    (void)ctx;
    pid_t pid = waitpid(-1, status, WNOHANG);
    return pid > 0 ? pid : 0;
}

static uint32_t sup_rand(void *ctx, uint32_t n)
{
    (void)ctx;
    return (uint32_t)rand() % n;
}

static const sup_proc_ops_t sup_proc_ops = {
    .spawn = sup_fork,
    .signal = sup_kill,
    .wait = sup_waitpid,
    .draw = sup_rand,
};

static const port_clock_ops_t sup_clock_ops = {
    .now_ms = clock_port_mono_ms,
    .now_us = clock_port_mono_us,
    .wall_ms = clock_port_wall_ms,
};

static void sup_begin_stop(supervisor_t *s, int sig)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->stop_deadline_ms = sup_now(s) + (uint64_t)s->conf->shutdown_timeout * 1000;
    log_info("signal %d: stopping (finishing in-flight transactions)", sig);
    sd_notify(0, "STOPPING=1");
    for (int i = 0; i < SUP_MAX_SLOTS; i++)
        if (s->workers[i].used && s->workers[i].pid)
            sup_signal(s, s->workers[i].pid, SIGTERM);
}

static int sup_running(const supervisor_t *s)
{
    int n = 0;
    for (int i = 0; i < SUP_MAX_SLOTS; i++)
        n += s->workers[i].used && s->workers[i].pid != 0;
    return n;
}

/* After the step, unless stopping: readiness, watchdog, status. */
static void sup_report(supervisor_t *s, uint64_t now)
{
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
    s->ports = (sup_ports_t){.proc = &sup_proc_ops, .proc_ctx = s, .clock = {&sup_clock_ops, s}};
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
        sup_step(s); /* reaps; unless stopping, starts the workers due and autoscales */
        if (s->n_old)
            sup_free_old(s);
        if (!s->stopping) {
            sup_report(s, now);
            continue;
        }
        if (sup_running(s) == 0)
            break;
        if (now >= s->stop_deadline_ms) {
            log_warn("shutdown_timeout reached: killing %d workers", sup_running(s));
            for (int i = 0; i < SUP_MAX_SLOTS; i++)
                if (s->workers[i].used && s->workers[i].pid)
                    sup_signal(s, s->workers[i].pid, SIGKILL);
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
