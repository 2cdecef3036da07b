/* sup.h: the supervisor's state and ports, shared by its files: supervisor.c (the loop and the
 * real ports) over sup_reload.c, sup_status.c and sup_step.c (one round over the ports), which
 * runs sup_auto.c; all over sup_core.c. */
#ifndef IDEMD_SUP_H
#define IDEMD_SUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "autoscale.h"
#include "conf.h"
#include "log.h"
#include "metrics.h"
#include "port.h"
#include "slot.h"

#define SUP_MAX_SLOTS 256 /* workers alive at once, old and new generations together */

typedef struct sup_worker {
    bool used;
    const conf_t *conf; /* the generation it belongs to */
    const conf_queue_t *q;
    int index; /* worker number within the queue */
    pid_t pid; /* 0 when not running */
    uint64_t started_ms;
    uint64_t restart_at_ms; /* when pid == 0: when to start it (again) */
    int failures;           /* consecutive abnormal exits */
    bool retiring;          /* stopped by a reload or the autoscaler: drained, never restarted */
    bool note_only;         /* retiring, but died in its handler: started once more to count
                             * that crash (slot note_only), then drains (sup_reap) */
    bool waiting;           /* started by a reload: waits for its queue's old workers */
    bool held;              /* its queue is held (a handler ended idemd's transaction): not
                             * started again until a reload */
    worker_slot_t *slot;
    char error[WORKER_ERROR_MAX]; /* its last failed declaration, until it consumes again */
    int error_kind;               /* worker_error_t of error */
    uint64_t last_progress_ms;    /* when pid == 0: its last run's last progress */
    /* workers = "auto": its slot's messages done, busy and idle microseconds when last sampled */
    uint64_t seen_done, seen_busy_us, seen_idle_us;
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
    bool autoscaled;           /* the current generation's queue has workers = "auto" */
    autoscale_t as;            /* its controller (sup_auto.c) */
} sup_qstats_t;

/* A handler file as it was when the config generation was loaded. */
typedef struct sup_file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} sup_file_id_t;

struct sup_worker;

/*
 * The process port: the worker processes as the supervisor sees them
 * (fork, kill and waitpid in supervisor.c; simulated workers in tests/sim).
 */
typedef struct sup_proc_ops {
    /* Start worker w (its slot made ready for the run): its pid, or -1 (logged). */
    pid_t (*spawn)(void *ctx, struct sup_worker *w);
    /* Send sig to the worker process pid. */
    void (*signal)(void *ctx, pid_t pid, int sig);
    /* A worker process that ended, without waiting: its pid and status (as waitpid's), or 0
     * when none has. */
    pid_t (*wait)(void *ctx, int *status);
    /* A random number below n (n > 0): the restart backoff's jitter. */
    uint32_t (*draw)(void *ctx, uint32_t n);
} sup_proc_ops_t;

/* The supervisor's ports: the processes, the clock (now_ms, now_us), and the slots (the
 * supervisor_t's slots: shared memory in the daemon, an array in the simulator). */
typedef struct sup_ports {
    const sup_proc_ops_t *proc;
    void *proc_ctx;
    port_clock_t clock;
} sup_ports_t;

typedef struct supervisor {
    sup_ports_t ports;
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
    uint64_t auto_at_ms;   /* the last sample of the workers = "auto" queues (sup_auto.c) */
} supervisor_t;

/* The supervisor's clock (its port), monotonic ms and us. */
static inline uint64_t sup_now(const supervisor_t *s)
{
    return s->ports.clock.ops->now_ms(s->ports.clock.ctx);
}
static inline uint64_t sup_now_us(const supervisor_t *s)
{
    return s->ports.clock.ops->now_us(s->ports.clock.ctx);
}
/* Send sig to worker process pid through the process port. */
static inline void sup_signal(const supervisor_t *s, pid_t pid, int sig)
{
    s->ports.proc->signal(s->ports.proc_ctx, pid, sig);
}

/* sup_step.c: one round over the ports. */

/*
 * One round of the supervisor's work: reap the workers that ended (the
 * reap rule: a retiring worker that died in its handler runs once more to
 * count its crash note), and unless stopping, start the workers due and
 * run the autoscaler's tick. Readiness, status and the watchdog are the
 * loop's (sup_status.c).
 */
void sup_step(supervisor_t *s);
#ifdef IDEMD_TESTING
/* Test builds: put old gaps back. lost_note: a successor's kill overwrites a pending crash
 * note's signal. retire_gap: a retiring worker's exit is its drain even when it died in its
 * handler, its crash note left uncounted in the slot. */
extern bool sup_test_lost_note, sup_test_retire_gap;
#define SUP_TEST(flag) (flag)
#else
#define SUP_TEST(flag) false
#endif

/* sup_core.c: workers, their slots and their queues' stats. */

/* Copy a slot's last error into *into when it is newer (both may be empty). */
void sup_newer_error(log_sink_t *into, const log_sink_t *slot);
/* Worker entry w is given up (its process is gone): its counters move to its queue's stats. */
void sup_remove_worker(supervisor_t *s, sup_worker_t *w);
/* Add a worker entry for queue q of conf; it starts at the next loop turn (unless waiting). */
void sup_add_worker(supervisor_t *s, const conf_t *conf, const conf_queue_t *q, int index,
                    bool waiting);
/* Retire worker entry w (a reload, the autoscaler): SIGTERM, it drains and is not restarted;
 * one without a process runs once more if its slot holds an uncounted crash note (the reap
 * rule), else it is given up at once. */
void sup_retire_worker(supervisor_t *s, sup_worker_t *w);
/* The queue named name in conf, or NULL. */
const conf_queue_t *sup_find_queue(const conf_t *conf, const char *name);

/* The stats of queue name, made on first use; NULL when out of memory (logged). */
sup_qstats_t *sup_qstats(supervisor_t *s, const char *name);

/* sup_auto.c: workers = "auto". */

/*
 * Add the workers queue q of conf starts with: workers, or with "auto"
 * workers_min, its controller started afresh (waiting: see sup_add_worker).
 */
void sup_auto_start(supervisor_t *s, const conf_t *conf, const conf_queue_t *q, bool waiting);
/* Every AUTOSCALE_INTERVAL_MS: sample each "auto" queue's workers, add or retire one. */
void sup_auto_tick(supervisor_t *s, uint64_t now);
/* The most workers queue q may run now: workers_max (its "auto": from the CPUs), and the
 * connection budget; the count of a fixed queue. */
int sup_auto_cap(const supervisor_t *s, const conf_queue_t *q);
/* workers_max in effect for q ("auto": 2 x online CPUs, at most 16). */
int sup_auto_max(const conf_queue_t *q);
/* The database connections all queues' workers may hold (0: unknown, no limit). */
int sup_auto_budget(const supervisor_t *s);

/* sup_status.c: systemd readiness, STATUS= and watchdog; the /metrics view. */

/* Tell systemd how the workers are doing: totals, then each queue's state. */
void sup_status(supervisor_t *s);
/* Announce READY=1 once every current worker consumes or is refused (see sup_status.c). */
void sup_check_ready(supervisor_t *s);
/* Ping the watchdog when due and every running worker shows progress. */
void sup_watchdog(supervisor_t *s, uint64_t now);
/* How long the loop may wait for a signal, in ms. */
int sup_poll_ms(const supervisor_t *s, uint64_t now);
/* At exit: the counters of all workers, and publish-to-commit latency if measured. */
void sup_log_totals(const supervisor_t *s);
/* Serve metrics.listen of conf (nothing when unset), at startup and after a reload. 0, or -1
 * (logged). */
int sup_metrics_listen(supervisor_t *s, const conf_t *conf);

/* sup_reload.c: SIGHUP, and the settings running workers follow. */

/*
 * Check every queue's handler in a child process and note each file's
 * identity into a new array in *ids (caller frees). 0, or -1 (logged).
 */
int sup_check_plugins(const conf_t *conf, sup_file_id_t **ids);

/* Hand every slot the daemon settings that running workers follow without a restart. */
void sup_share_settings(supervisor_t *s);
/* Free (conf_free: passwords zeroed) every earlier generation no worker points into. */
void sup_free_old(supervisor_t *s);
/* SIGHUP: load the file again; a config that does not load leaves everything as it was. */
void sup_reload(supervisor_t *s);

#endif
