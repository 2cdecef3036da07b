/* stall.c: handler_timeout for one worker, which tells a hung handler from one the database holds
 * up.
 */
#include "stall.h"
#include "clock.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "version.h"

#define STALL_RECHECK_MS 1000 /* while the database holds the handler up: look again after */

/* What the handler's session is doing, as the server sees it. */
typedef enum stall_verdict {
    STALL_OWN_CODE,   /* no statement, or one that does not wait for a lock: the handler's time */
    STALL_DB_WAIT,    /* a statement waiting for a lock another session holds */
    STALL_CANNOT_TELL /* no second connection, or the session is gone */
} stall_verdict_t;

struct stall {
    const conf_database_t *cfg;
    worker_slot_t *slot;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    bool idle; /* the thread waits without a deadline: the next stall_arm must wake it */
    /* Under mu: the handler call being watched. */
    bool armed;
    unsigned long gen;   /* counts handler calls: a verdict about an old call is dropped */
    uint64_t started_ms; /* CLOCK_MONOTONIC */
    uint64_t deadline_ms;
    int timeout_s;         /* handler_timeout of this call */
    unsigned long tid;     /* the handler's session (mysql_thread_id) */
    const db_t *db;        /* its connection: open while armed */
    uint64_t waited_since; /* the first time a lock wait was seen in this call, or 0 */
    bool warned;           /* this call's lock wait was logged */
};

/* Whether a PROCESSLIST state is a wait for a lock another session holds. */
static bool stall_lock_state(const char *state)
{
    /* "Waiting for table metadata lock", "... table level lock", "... global read lock",
     * "... backup lock", "... table flush", "... commit lock"; "Locked" on old servers. */
    return strncmp(state, "Waiting for ", 12) == 0 || strcmp(state, "Locked") == 0;
}

/* Whether session tid waits for an InnoDB row lock (needs the PROCESS privilege: false
 * without it). */
static bool stall_row_lock(MYSQL *my, unsigned long tid)
{
    char sql[160];
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool wait = false;

    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %lu "
             "AND trx_state = 'LOCK WAIT'",
             tid);
    if (mysql_query(my, sql) != 0 || (res = mysql_store_result(my)) == NULL)
        return false;
    if ((row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
        wait = atol(row[0]) > 0;
    mysql_free_result(res);
    return wait;
}

/*
 * Look at session tid from a second connection to the same server. The
 * state goes to state (empty when none), the reason of STALL_CANNOT_TELL
 * to it as well.
 */
static stall_verdict_t stall_probe(stall_t *s, const db_t *where, unsigned long tid, char *state,
                                   size_t len)
{
    char sql[160];
    MYSQL *my;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    stall_verdict_t v = STALL_CANNOT_TELL;

    state[0] = '\0';
    if ((my = db_probe_open(where, s->cfg, state, len)) == NULL)
        return STALL_CANNOT_TELL;
    /* MySQL 8.0.22+ deprecates information_schema.PROCESSLIST for performance_schema's
     * (MariaDB has only the former); the latter is off when performance_schema is. */
    if (version_db_flavour(mysql_get_server_info(my)) == VERSION_MYSQL) {
        snprintf(sql, sizeof(sql),
                 "SELECT COMMAND, STATE FROM performance_schema.processlist WHERE ID = %lu", tid);
        if (mysql_query(my, sql) == 0)
            res = mysql_store_result(my);
    }
    snprintf(sql, sizeof(sql),
             "SELECT COMMAND, STATE FROM information_schema.PROCESSLIST WHERE ID = %lu", tid);
    if (res == NULL && (mysql_query(my, sql) != 0 || (res = mysql_store_result(my)) == NULL)) {
        snprintf(state, len, "reading the process list: %s", mysql_error(my));
        goto done;
    }
    if ((row = mysql_fetch_row(res)) == NULL) {
        snprintf(state, len, "the handler's session %lu is gone", tid);
        goto done;
    }
    snprintf(state, len, "%s", row[1] ? row[1] : "");
    if (row[0] == NULL || strcmp(row[0], "Sleep") == 0)
        v = STALL_OWN_CODE; /* the server waits for the handler */
    else if (stall_lock_state(state))
        v = STALL_DB_WAIT;
    else if (stall_row_lock(my, tid)) {
        snprintf(state, len, "Waiting for a row lock");
        v = STALL_DB_WAIT;
    } else
        v = STALL_OWN_CODE; /* a statement of its own that runs long */
done:
    if (res)
        mysql_free_result(res);
    mysql_close(my);
    return v;
}

/* The handler's deadline passed with mu held: decide, then kill, exit or wait on. */
static void stall_check(stall_t *s)
{
    unsigned long gen = s->gen, tid = s->tid;
    db_t where;
    char state[512];

    memset(&where, 0, sizeof(where));
    memcpy(where.host, s->db->host, sizeof(where.host)); /* s->db is freed only after disarm */
    where.port = s->db->port;
    pthread_mutex_unlock(&s->mu);
    stall_verdict_t v = stall_probe(s, &where, tid, state, sizeof(state));
    pthread_mutex_lock(&s->mu);
    if (!s->armed || s->gen != gen)
        return; /* the handler returned meanwhile */
    uint64_t now = clock_mono_ms();
    switch (v) {
    case STALL_DB_WAIT:
        if (s->waited_since == 0)
            s->waited_since = now;
        if (!s->warned) {
            log_warn("handler waits on the database: %s for %llu s; not counted as a crash "
                     "(database.read_timeout bounds the wait)",
                     state, (unsigned long long)(now - s->started_ms) / 1000);
            s->warned = true;
        }
        /* A known, bounded wait: not a wedged worker for the supervisor's watchdog. */
        __atomic_store_n(&s->slot->progress_ms, now, __ATOMIC_RELAXED);
        s->deadline_ms = now + STALL_RECHECK_MS;
        return;
    case STALL_OWN_CODE:
        if (s->waited_since != 0) {
            /* Out of a lock wait just now: its own time starts again (a look taken between
             * two of its statements must not kill it). */
            log_info("handler no longer waits on the database (%llu s into the call): "
                     "handler_timeout starts again",
                     (unsigned long long)(now - s->started_ms) / 1000);
            s->waited_since = 0;
            s->warned = false;
            s->deadline_ms = now + (uint64_t)s->timeout_s * 1000;
            return;
        }
        /* Past handler_timeout in its own code: end the worker by SIGALRM (its default
         * action), as alarm() would; the successor counts the crash. */
        kill(getpid(), SIGALRM);
        pause();
        return;
    case STALL_CANNOT_TELL:
        break;
    }
    log_warn("handler ran past handler_timeout = %d s, and its database session cannot be "
             "looked at (%s): the worker exits as one that lost its database; not counted as a "
             "crash",
             s->timeout_s, state);
    __atomic_store_n(&s->slot->in_handler, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&s->slot->lost, WORKER_LOST_DATABASE, __ATOMIC_RELAXED);
    _exit(WORKER_EXIT_TEMPFAIL);
}

static void *stall_main(void *arg)
{
    stall_t *s = arg;

    mysql_thread_init();
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        if (!s->armed) {
            s->idle = true;
            pthread_cond_wait(&s->cv, &s->mu);
            s->idle = false;
            continue;
        }
        uint64_t now = clock_mono_ms();
        if (now < s->deadline_ms) {
            struct timespec ts = {.tv_sec = (time_t)(s->deadline_ms / 1000),
                                  .tv_nsec = (long)(s->deadline_ms % 1000) * 1000000};
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            continue;
        }
        stall_check(s);
    }
    pthread_mutex_unlock(&s->mu);
    mysql_thread_end();
    return NULL;
}

stall_t *stall_start(const conf_database_t *cfg, worker_slot_t *slot)
{
    stall_t *s = calloc(1, sizeof(*s));
    pthread_condattr_t ca;
    sigset_t all, old;
    int rc;

    if (s == NULL) {
        log_error("out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->slot = slot;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* Signals (SIGTERM, SIGALRM of reconcile_timeout) stay the main thread's: it must see
     * EINTR. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&s->thread, NULL, stall_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        log_error("handler_timeout: cannot start the watchdog thread: %s", strerror(rc));
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

void stall_arm(stall_t *s, const db_t *db, int timeout_s)
{
    pthread_mutex_lock(&s->mu);
    s->armed = true;
    s->gen++;
    s->timeout_s = timeout_s;
    s->started_ms = clock_mono_ms();
    s->deadline_ms = s->started_ms + (uint64_t)timeout_s * 1000;
    s->tid = mysql_thread_id(db->my);
    s->db = db;
    s->waited_since = 0;
    s->warned = false;
    /* A thread asleep until an earlier deadline wakes then and sleeps on to this one: a
     * handler call costs no wake-up. */
    if (s->idle)
        pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void stall_disarm(stall_t *s)
{
    pthread_mutex_lock(&s->mu);
    bool waited = s->waited_since != 0;
    uint64_t started = s->started_ms;
    s->armed = false;
    pthread_mutex_unlock(&s->mu);
    if (waited)
        log_info("handler returned after waiting on the database (%llu s in all)",
                 (unsigned long long)(clock_mono_ms() - started) / 1000);
}

void stall_stop(stall_t *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
