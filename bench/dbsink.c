/* dbsink.c: database-only ceiling for idemd's benchmark: idemd's SQL per message, no broker. */
/*
 * dbsink run -S SOCK [-u USER] -D DB -f WORKLOAD [-b BATCH] [-c CONNS] [--consumer NAME]
 *   WORKLOAD lines are "ID<TAB>{"orderId": N}" (what the benchmark publishes). The
 *   messages are cut into chunks of BATCH in file order; each of -c connections
 *   (threads, one MYSQL each) takes the next chunk whenever it is free (with
 *   -F PREFETCH: from its own window, dealt like the broker deals deliveries)
 *   and runs it as one transaction, the way idemd's worker runs a batch with
 *   dedup = "table" and order_pay guard = false:
 *     [SAVEPOINT mI]                 (only when BATCH > 1)
 *     INSERT INTO msg_id_record (consumer, msg_id) VALUES (?, ?)   1062 -> duplicate
 *     UPDATE orders SET status = 2, pay_time = NOW(), pay_count = pay_count + 1 WHERE id = ?
 *   then COMMIT (ROLLBACK when every message was a duplicate). Same session setup
 *   as idemd: autocommit off, READ COMMITTED, utf8mb4, prepared statements.
 *   A deadlocked chunk is redone. --no-savepoints leaves out the SAVEPOINTs (to
 *   measure what they cost). --set runs a chunk set-based instead, the way
 *   idemd's set-based pass with a batch handler does: repeats inside the chunk
 *   are dropped in memory, then
 *     INSERT INTO msg_id_record (consumer, msg_id) VALUES (..), (..), ...
 *       (1062: SELECT msg_id ... WHERE msg_id IN (...) finds the committed
 *        ones, which are duplicates; the INSERT is tried again without them)
 *     UPDATE orders SET status = 2, ... WHERE id IN (...)
 *     COMMIT
 *   Prints one line:
 *     dbsink conns=C batch=B messages=N ok=K duplicate=D commits=X redo=R secs=S rate=M
 *   With -r RATE, message i is offered at start + i / RATE s: a free connection
 *   waits for the next one, then takes every message offered by then (up to
 *   BATCH), as idemd does with batch_wait_ms = 0; the line then ends with
 *     offered=RATE/s latency n=K p50_us=P p99_us=Q
 *   (offer-to-commit of the committed, non-duplicate messages; exact quantiles).
 *
 * dbsink wait -S SOCK [-u USER] -D DB -q QUERY -e EXPECTED [-Q PRE -E PRE_EXPECTED]
 *             [-t TIMEOUT_S] [-i INTERVAL_MS]
 *   Runs QUERY on one connection every INTERVAL_MS (default 50) until its first
 *   column reads EXPECTED, then prints the CLOCK_REALTIME of that moment in
 *   seconds ("1790000000.123456"), and "queries=N" (how many it ran) to stderr,
 *   for bench/run to subtract from the server's counters.
 *   Exit 1 on timeout (default 300 s). With -Q,
 *   QUERY runs only once the cheap PRE reads PRE_EXPECTED, so that polling a
 *   full-table count does not load the server it measures.
 */
#include <errno.h>
#include <getopt.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DBSINK_ID_MAX 255
#define DBSINK_MAX_CONNS 64
#define DBSINK_REDO_MAX 20

typedef struct dbsink_msg {
    char id[DBSINK_ID_MAX + 1];
    unsigned long id_len;
    long long order_id;
} dbsink_msg_t;

typedef struct dbsink_opts {
    const char *socket;
    const char *user;
    const char *password;
    const char *db;
    const char *file;
    const char *consumer;
    const char *record_table;
    const char *table;
    const char *query;
    const char *expected;
    const char *pre_query;
    const char *pre_expected;
    int batch;
    int prefetch;   /* > 0: deal messages like the broker does to consumers with this prefetch */
    double rate;    /* > 0: offer message i at start + i / rate seconds and measure its latency */
    int savepoints; /* 0: no SAVEPOINT per message (for comparison only; idemd sets them) */
    int set;        /* 1: one multi-row INSERT and one UPDATE ... IN (...) per chunk */
    int conns;
    int timeout_s;
    int interval_ms;
} dbsink_opts_t;

typedef struct dbsink_conn {
    const dbsink_opts_t *o;
    const dbsink_msg_t *msgs;
    size_t n_msgs;
    int index;
    MYSQL *my;
    MYSQL_STMT *record;
    MYSQL_STMT *update;
    char consumer[129];
    unsigned long consumer_len;
    char id_buf[DBSINK_ID_MAX];
    unsigned long id_len;
    long long order_id;
    long ok, duplicate, commits, redo;
    size_t *window; /* -f: indices delivered to this connection and not yet taken (a ring) */
    char *sql;      /* --set: the statement being built */
    size_t sql_cap;
    int *keep; /* --set: chunk positions still to record */
    size_t win_head, win_len;
    int failed;
} dbsink_conn_t;

static atomic_size_t dbsink_next; /* first message of the next chunk to take */
static pthread_mutex_t dbsink_deal = PTHREAD_MUTEX_INITIALIZER; /* -f: guards dbsink_next */
static int64_t dbsink_t0_ns;   /* rate mode: when message 0 is due */
static int64_t *dbsink_lat_us; /* rate mode: due-to-commit latency per message, -1: none */

static void dbsink_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void dbsink_die(const char *fmt, ...)
{
    va_list ap;
    fputs("dbsink: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static double dbsink_now(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A new connection set up like idemd's (db.c). NULL on failure (printed). */
static MYSQL *dbsink_connect(const dbsink_opts_t *o, int autocommit)
{
    MYSQL *my = mysql_init(NULL);
    unsigned int t = 10;

    if (my == NULL)
        return NULL;
    mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    t = 60;
    mysql_options(my, MYSQL_OPT_READ_TIMEOUT, &t);
    mysql_options(my, MYSQL_OPT_WRITE_TIMEOUT, &t);
#ifdef LIBMARIADB /* libmysqlclient never reconnects unasked (and warns when told) */
    my_bool off = 0;
    mysql_options(my, MYSQL_OPT_RECONNECT, &off);
#endif
    mysql_options(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(my, MYSQL_INIT_COMMAND, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    if (mysql_real_connect(my, NULL, o->user, o->password, o->db, 0, o->socket, 0) == NULL ||
        mysql_autocommit(my, autocommit != 0) != 0) {
        fprintf(stderr, "dbsink: connect %s as %s: %s\n", o->socket, o->user, mysql_error(my));
        mysql_close(my);
        return NULL;
    }
    return my;
}

/* Read the workload file. Returns a malloc'd array (caller frees) and its length in *n. */
static dbsink_msg_t *dbsink_load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    dbsink_msg_t *v = NULL;
    size_t cap = 0, len = 0, lineno = 0;
    char *line = NULL;
    size_t linecap = 0;

    if (f == NULL)
        dbsink_die("%s: %s", path, strerror(errno));
    while (getline(&line, &linecap, f) >= 0) {
        lineno++;
        char *tab = strchr(line, '\t'), *num;
        if (line[0] == '\n' || line[0] == '\0')
            continue;
        if (tab == NULL || (size_t)(tab - line) > DBSINK_ID_MAX || tab == line)
            dbsink_die("%s:%zu: expected ID<TAB>BODY", path, lineno);
        num = strstr(tab, "\"orderId\"");
        if (num == NULL || (num = strchr(num, ':')) == NULL)
            dbsink_die("%s:%zu: no orderId in the body", path, lineno);
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            v = realloc(v, cap * sizeof(*v));
            if (v == NULL)
                dbsink_die("out of memory");
        }
        v[len].id_len = (unsigned long)(tab - line);
        memcpy(v[len].id, line, v[len].id_len);
        v[len].id[v[len].id_len] = '\0';
        v[len].order_id = strtoll(num + 1, NULL, 10);
        len++;
    }
    free(line);
    fclose(f);
    *n = len;
    return v;
}

static MYSQL_STMT *dbsink_prepare(dbsink_conn_t *c, const char *sql, MYSQL_BIND *bind)
{
    MYSQL_STMT *s = mysql_stmt_init(c->my);
    if (s == NULL || mysql_stmt_prepare(s, sql, strlen(sql)) != 0 ||
        mysql_stmt_bind_param(s, bind) != 0) {
        fprintf(stderr, "dbsink[%d]: prepare '%s': %s\n", c->index, sql,
                s ? mysql_stmt_error(s) : mysql_error(c->my));
        if (s)
            mysql_stmt_close(s);
        return NULL;
    }
    return s;
}

static int dbsink_setup(dbsink_conn_t *c)
{
    const dbsink_opts_t *o = c->o;
    MYSQL_BIND rb[2], ub[1];
    char sql[512];

    if ((c->my = dbsink_connect(o, 0)) == NULL)
        return -1;
    c->consumer_len = (unsigned long)strlen(o->consumer);
    if (c->consumer_len >= sizeof(c->consumer))
        return -1;
    memcpy(c->consumer, o->consumer, c->consumer_len);
    memset(rb, 0, sizeof(rb));
    rb[0].buffer_type = MYSQL_TYPE_BLOB;
    rb[0].buffer = c->consumer;
    rb[0].buffer_length = sizeof(c->consumer);
    rb[0].length = &c->consumer_len;
    rb[1].buffer_type = MYSQL_TYPE_BLOB;
    rb[1].buffer = c->id_buf;
    rb[1].buffer_length = sizeof(c->id_buf);
    rb[1].length = &c->id_len;
    snprintf(sql, sizeof(sql), "INSERT INTO `%s` (consumer, msg_id) VALUES (?, ?)",
             o->record_table);
    if ((c->record = dbsink_prepare(c, sql, rb)) == NULL)
        return -1;
    memset(ub, 0, sizeof(ub));
    ub[0].buffer_type = MYSQL_TYPE_LONGLONG;
    ub[0].buffer = &c->order_id;
    snprintf(sql, sizeof(sql),
             "UPDATE `%s` SET status = 2, pay_time = NOW(), pay_count = pay_count + 1 WHERE id = ?",
             o->table);
    if ((c->update = dbsink_prepare(c, sql, ub)) == NULL)
        return -1;
    return 0;
}

static int dbsink_query(dbsink_conn_t *c, const char *sql)
{
    if (mysql_real_query(c->my, sql, strlen(sql)) == 0)
        return 0;
    return (int)mysql_errno(c->my);
}

/* --set: append the chunk's kept ids (j in keep[0..k)) as a list: "('c', 'id'), ..." or "'id',
 * ...". */
static char *dbsink_id_list(dbsink_conn_t *c, char *o, const size_t *idx, int k, int rows)
{
    for (int j = 0; j < k; j++) {
        const dbsink_msg_t *m = &c->msgs[idx[c->keep[j]]];
        if (j)
            *o++ = ',';
        if (rows)
            o += sprintf(o, "('%s','", c->consumer);
        else
            *o++ = '\'';
        o += mysql_real_escape_string(c->my, o, m->id, m->id_len);
        *o++ = '\'';
        if (rows)
            *o++ = ')';
    }
    *o = '\0';
    return o;
}

/* --set: one attempt at a chunk, set-based; returns like dbsink_try_chunk. */
static int dbsink_try_set(dbsink_conn_t *c, const size_t *idx, int n, long *ok, long *dup,
                          unsigned char *is_dup)
{
    const dbsink_opts_t *o = c->o;
    int k = 0, err;
    char *p;

    *ok = *dup = 0;
    memset(is_dup, 0, (size_t)n);
    for (int i = 0; i < n; i++) {
        const dbsink_msg_t *m = &c->msgs[idx[i]];
        int rep = 0;
        for (int j = 0; j < k && !rep; j++) {
            const dbsink_msg_t *e = &c->msgs[idx[c->keep[j]]];
            rep = e->id_len == m->id_len && memcmp(e->id, m->id, m->id_len) == 0;
        }
        if (rep) {
            is_dup[i] = 1;
            (*dup)++;
        } else {
            c->keep[k++] = i;
        }
    }
    for (int tries = 0; k > 0; tries++) {
        p = c->sql +
            sprintf(c->sql, "INSERT INTO `%s` (consumer, msg_id) VALUES ", o->record_table);
        dbsink_id_list(c, p, idx, k, 1);
        if ((err = dbsink_query(c, c->sql)) == 0)
            break;
        if (err != ER_DUP_ENTRY || tries == 3)
            goto fail;
        /* Some ids were committed before: those are duplicates; insert the rest. */
        p = c->sql + sprintf(c->sql,
                             "SELECT msg_id FROM `%s` WHERE consumer = '%s' AND msg_id IN (",
                             o->record_table, c->consumer);
        strcpy(dbsink_id_list(c, p, idx, k, 0), ")");
        if ((err = dbsink_query(c, c->sql)) != 0)
            goto fail;
        MYSQL_RES *res = mysql_store_result(c->my);
        MYSQL_ROW row;
        if (res == NULL) {
            err = (int)mysql_errno(c->my);
            goto fail;
        }
        while ((row = mysql_fetch_row(res)) != NULL) {
            unsigned long *len = mysql_fetch_lengths(res);
            for (int j = 0; j < k; j++) {
                const dbsink_msg_t *m = &c->msgs[idx[c->keep[j]]];
                if (len[0] == m->id_len && memcmp(row[0], m->id, m->id_len) == 0) {
                    is_dup[c->keep[j]] = 1;
                    (*dup)++;
                    c->keep[j--] = c->keep[--k];
                    break;
                }
            }
        }
        mysql_free_result(res);
    }
    if (k > 0) {
        p = c->sql + sprintf(c->sql,
                             "UPDATE `%s` SET status = 2, pay_time = NOW(), "
                             "pay_count = pay_count + 1 WHERE id IN (",
                             o->table);
        for (int j = 0; j < k; j++)
            p += sprintf(p, "%s%lld", j ? "," : "", c->msgs[idx[c->keep[j]]].order_id);
        strcpy(p, ")");
        if ((err = dbsink_query(c, c->sql)) != 0)
            goto fail;
    }
    if ((err = dbsink_query(c, k > 0 ? "COMMIT" : "ROLLBACK")) != 0)
        goto fail;
    if (k > 0)
        c->commits++;
    *ok = k;
    return 0;
fail:
    if (err != ER_LOCK_DEADLOCK)
        fprintf(stderr, "dbsink[%d]: set-based chunk: error %d: %s\n", c->index, err,
                mysql_error(c->my));
    return err;
}

/*
 * One attempt at a chunk's transaction. 0 when committed or rolled back,
 * ER_LOCK_DEADLOCK (or 1305, savepoint lost) when it must be redone, another
 * MySQL error number when the run cannot go on (printed).
 */
static int dbsink_try_chunk(dbsink_conn_t *c, const size_t *idx, int n, long *ok, long *dup,
                            unsigned char *is_dup)
{
    char sql[64];
    int err, any_ok = 0;

    *ok = *dup = 0;
    memset(is_dup, 0, (size_t)n);
    for (int i = 0; i < n; i++) {
        if (n > 1 && c->o->savepoints) {
            snprintf(sql, sizeof(sql), "SAVEPOINT m%d", i);
            if ((err = dbsink_query(c, sql)) != 0)
                goto fail;
        }
        const dbsink_msg_t *m = &c->msgs[idx[i]];
        memcpy(c->id_buf, m->id, m->id_len);
        c->id_len = m->id_len;
        if (mysql_stmt_execute(c->record) != 0) {
            err = (int)mysql_stmt_errno(c->record);
            if (err == ER_DUP_ENTRY) {
                (*dup)++;
                is_dup[i] = 1;
                continue;
            }
            if (err != ER_LOCK_DEADLOCK)
                fprintf(stderr, "dbsink[%d]: record: %s\n", c->index, mysql_stmt_error(c->record));
            goto fail;
        }
        c->order_id = m->order_id;
        if (mysql_stmt_execute(c->update) != 0) {
            err = (int)mysql_stmt_errno(c->update);
            if (err != ER_LOCK_DEADLOCK)
                fprintf(stderr, "dbsink[%d]: update: %s\n", c->index, mysql_stmt_error(c->update));
            goto fail;
        }
        (*ok)++;
        any_ok = 1;
    }
    if ((err = dbsink_query(c, any_ok ? "COMMIT" : "ROLLBACK")) != 0)
        goto fail;
    if (any_ok)
        c->commits++;
    return 0;
fail:
    if (err != ER_LOCK_DEADLOCK && err != 1305)
        fprintf(stderr, "dbsink[%d]: error %d in a chunk\n", c->index, err);
    return err;
}

static int64_t dbsink_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Rate mode: when message i is offered. */
static int64_t dbsink_due_ns(const dbsink_opts_t *o, size_t i)
{
    return dbsink_t0_ns + (int64_t)((double)i * 1e9 / o->rate);
}

/*
 * Claim the next chunk into idx[0..return value). Without a rate or a
 * prefetch: the next BATCH messages in file order. With -f PREFETCH: like the
 * broker, top this connection's unacknowledged window up to PREFETCH from the
 * queue (the previous chunk was acked), then take up to BATCH from its front:
 * chunks that run at the same time lie about PREFETCH messages apart, as they
 * do in idemd. With a rate: wait until the next message is offered, then take
 * it and every other message already offered, up to BATCH (idemd's worker
 * with batch_wait_ms = 0). 0 when all are taken.
 */
static size_t dbsink_claim(dbsink_conn_t *c, size_t *idx)
{
    const dbsink_opts_t *o = c->o;
    size_t b = (size_t)o->batch, n = 0;

    if (o->rate <= 0 && o->prefetch <= 0) {
        size_t s = atomic_fetch_add(&dbsink_next, b);
        for (; n < b && s + n < c->n_msgs; n++)
            idx[n] = s + n;
        return n;
    }
    if (o->rate <= 0) {
        size_t cap = (size_t)o->prefetch;
        pthread_mutex_lock(&dbsink_deal);
        while (c->win_len < cap && dbsink_next < c->n_msgs)
            c->window[(c->win_head + c->win_len++) % cap] = dbsink_next++;
        pthread_mutex_unlock(&dbsink_deal);
        for (; n < b && c->win_len > 0; n++, c->win_len--) {
            idx[n] = c->window[c->win_head];
            c->win_head = (c->win_head + 1) % cap;
        }
        return n;
    }
    for (;;) {
        size_t s = atomic_load(&dbsink_next), end;
        if (s >= c->n_msgs)
            return 0;
        int64_t due = dbsink_due_ns(o, s);
        struct timespec ts = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        int64_t now = dbsink_now_ns();
        end = (size_t)((double)(now - dbsink_t0_ns) * o->rate / 1e9) + 1; /* offered so far */
        if (end > c->n_msgs)
            end = c->n_msgs;
        if (end > s + b)
            end = s + b;
        if (end <= s)
            end = s + 1;
        if (atomic_compare_exchange_strong(&dbsink_next, &s, end)) {
            for (; s + n < end; n++)
                idx[n] = s + n;
            return n;
        }
    }
}

static void *dbsink_worker(void *arg)
{
    dbsink_conn_t *c = arg;
    unsigned char *is_dup = malloc((size_t)c->o->batch);
    size_t *idx = malloc((size_t)c->o->batch * sizeof(*idx)), n;

    if (is_dup == NULL || idx == NULL) {
        free(is_dup);
        free(idx);
        c->failed = 1;
        return NULL;
    }
    /* Each connection takes the next chunk in file order when it is free, as the broker
     * hands the next deliveries to whichever consumer has acked. */
    while ((n = dbsink_claim(c, idx)) > 0) {
        long ok = 0, dup = 0;
        int err = 0;
        for (int attempt = 0; attempt < DBSINK_REDO_MAX; attempt++) {
            err = c->o->set ? dbsink_try_set(c, idx, (int)n, &ok, &dup, is_dup)
                            : dbsink_try_chunk(c, idx, (int)n, &ok, &dup, is_dup);
            if (err != ER_LOCK_DEADLOCK && err != 1305)
                break;
            c->redo++;
            (void)dbsink_query(c, "ROLLBACK");
        }
        if (err != 0) {
            c->failed = 1;
            break;
        }
        if (c->o->rate > 0) {
            int64_t now = dbsink_now_ns();
            for (size_t i = 0; i < n; i++)
                if (!is_dup[i])
                    dbsink_lat_us[idx[i]] = (now - dbsink_due_ns(c->o, idx[i])) / 1000;
        }
        c->ok += ok;
        c->duplicate += dup;
    }
    free(is_dup);
    free(idx);
    return NULL;
}

static int dbsink_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Rate mode: print the p50 and p99 of the measured latencies (exact, not bucketed). */
static void dbsink_print_latency(size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (dbsink_lat_us[i] >= 0)
            dbsink_lat_us[k++] = dbsink_lat_us[i];
    qsort(dbsink_lat_us, k, sizeof(*dbsink_lat_us), dbsink_cmp_i64);
    printf(" latency n=%zu p50_us=%lld p99_us=%lld", k,
           k ? (long long)dbsink_lat_us[(size_t)((double)k * 0.5)] : 0LL,
           k ? (long long)dbsink_lat_us[(size_t)((double)k * 0.99)] : 0LL);
}

static int dbsink_run(const dbsink_opts_t *o)
{
    dbsink_conn_t conns[DBSINK_MAX_CONNS];
    pthread_t th[DBSINK_MAX_CONNS];
    size_t n = 0;
    long ok = 0, dup = 0, commits = 0, redo = 0;
    int failed = 0;
    dbsink_msg_t *msgs = dbsink_load(o->file, &n);

    memset(conns, 0, sizeof(conns));
    if (o->rate > 0) {
        dbsink_lat_us = malloc(n * sizeof(*dbsink_lat_us));
        if (dbsink_lat_us == NULL)
            dbsink_die("out of memory");
        for (size_t i = 0; i < n; i++)
            dbsink_lat_us[i] = -1;
    }
    double t0 = dbsink_now(CLOCK_MONOTONIC);
    for (int i = 0; i < o->conns; i++) {
        conns[i].o = o;
        conns[i].msgs = msgs;
        conns[i].n_msgs = n;
        conns[i].index = i;
        if (o->prefetch > 0 &&
            (conns[i].window = malloc((size_t)o->prefetch * sizeof(size_t))) == NULL)
            dbsink_die("out of memory");
        if (o->set) {
            conns[i].sql_cap = (size_t)o->batch * (2 * DBSINK_ID_MAX + 300) + 512;
            conns[i].sql = malloc(conns[i].sql_cap);
            conns[i].keep = malloc((size_t)o->batch * sizeof(int));
            if (conns[i].sql == NULL || conns[i].keep == NULL)
                dbsink_die("out of memory");
        }
        if (dbsink_setup(&conns[i]) != 0)
            dbsink_die("connection %d: setup failed", i);
    }
    dbsink_t0_ns = dbsink_now_ns(); /* rate mode: offering starts once connected */
    for (int i = 0; i < o->conns; i++)
        if (pthread_create(&th[i], NULL, dbsink_worker, &conns[i]) != 0)
            dbsink_die("pthread_create failed");
    for (int i = 0; i < o->conns; i++) {
        pthread_join(th[i], NULL);
        ok += conns[i].ok;
        dup += conns[i].duplicate;
        commits += conns[i].commits;
        redo += conns[i].redo;
        failed |= conns[i].failed;
    }
    double secs = dbsink_now(CLOCK_MONOTONIC) - t0;
    for (int i = 0; i < o->conns; i++) {
        if (conns[i].record)
            mysql_stmt_close(conns[i].record);
        if (conns[i].update)
            mysql_stmt_close(conns[i].update);
        mysql_close(conns[i].my);
        free(conns[i].window);
        free(conns[i].sql);
        free(conns[i].keep);
    }
    free(msgs);
    printf("dbsink conns=%d batch=%d%s%s messages=%zu ok=%ld duplicate=%ld commits=%ld redo=%ld "
           "secs=%.3f rate=%.0f",
           o->conns, o->batch, o->batch > 1 && !o->savepoints && !o->set ? " (no savepoints)" : "",
           o->set ? " (set-based)" : "", n, ok, dup, commits, redo, secs,
           secs > 0 ? (double)(ok + dup) / secs : 0);
    if (o->rate > 0) {
        printf(" offered=%.0f/s", o->rate);
        dbsink_print_latency(n);
        free(dbsink_lat_us);
    }
    putchar('\n');
    return failed ? 1 : 0;
}

/* Run sql and copy the first column of its first row into buf ("NULL" if none). */
static void dbsink_scalar(MYSQL *my, const char *sql, char *buf, size_t len)
{
    if (mysql_query(my, sql) != 0)
        dbsink_die("'%s': %s", sql, mysql_error(my));
    MYSQL_RES *res = mysql_store_result(my);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    snprintf(buf, len, "%s", row && row[0] ? row[0] : "NULL");
    if (res)
        mysql_free_result(res);
}

static int dbsink_wait(const dbsink_opts_t *o)
{
    MYSQL *my = dbsink_connect(o, 1);
    double deadline = dbsink_now(CLOCK_MONOTONIC) + o->timeout_s;
    char last[128] = "(nothing)";
    long queries = 0;
    struct timespec pause = {o->interval_ms / 1000, (long)(o->interval_ms % 1000) * 1000000L};

    if (my == NULL)
        return 1;
    for (;;) {
        char pre[128] = "";
        if (o->pre_query) {
            dbsink_scalar(my, o->pre_query, pre, sizeof(pre));
            queries++;
        }
        if (o->pre_query == NULL || strcmp(pre, o->pre_expected) == 0) {
            dbsink_scalar(my, o->query, last, sizeof(last));
            queries++;
        }
        if (strcmp(last, o->expected) == 0) {
            printf("%.6f\n", dbsink_now(CLOCK_REALTIME));
            fprintf(stderr, "queries=%ld\n", queries);
            mysql_close(my);
            return 0;
        }
        if (dbsink_now(CLOCK_MONOTONIC) > deadline)
            break;
        nanosleep(&pause, NULL);
    }
    fprintf(stderr, "dbsink: after %d s '%s' reads '%s', expected '%s'\n", o->timeout_s, o->query,
            last, o->expected);
    mysql_close(my);
    return 1;
}

static void dbsink_usage(void) __attribute__((noreturn));

static void dbsink_usage(void)
{
    fputs("usage: dbsink run -S SOCK [-u USER] [-p PASSWORD] -D DB -f WORKLOAD [-b BATCH=1] "
          "[-c CONNS=2]\n"
          "                  [--consumer NAME] [--record-table T] [--table T] [--no-savepoints] "
          "[--set]\n"
          "                  [-F PREFETCH] [-r RATE]\n"
          "       dbsink wait -S SOCK [-u USER] [-p PASSWORD] -D DB -q QUERY -e EXPECTED "
          "[-Q PRE -E PRE_EXPECTED]\n"
          "                  [-t TIMEOUT_S] [-i INTERVAL_MS]\n",
          stderr);
    exit(64);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"consumer", required_argument, NULL, 1},
        {"record-table", required_argument, NULL, 2},
        {"table", required_argument, NULL, 3},
        {"no-savepoints", no_argument, NULL, 4},
        {"set", no_argument, NULL, 5},
        {NULL, 0, NULL, 0},
    };
    dbsink_opts_t o = {.user = "root",
                       .consumer = "bench.pay",
                       .record_table = "msg_id_record",
                       .table = "orders",
                       .batch = 1,
                       .savepoints = 1,
                       .conns = 2,
                       .timeout_s = 300,
                       .interval_ms = 50};
    int opt, rc;

    if (argc < 2)
        dbsink_usage();
    const char *cmd = argv[1];
    optind = 2;
    while ((opt = getopt_long(argc, argv, "S:u:p:D:f:b:c:r:F:q:e:Q:E:t:i:", longopts, NULL)) !=
           -1) {
        switch (opt) {
        case 'S':
            o.socket = optarg;
            break;
        case 'u':
            o.user = optarg;
            break;
        case 'p':
            o.password = optarg;
            break;
        case 'D':
            o.db = optarg;
            break;
        case 'f':
            o.file = optarg;
            break;
        case 'b':
            o.batch = atoi(optarg);
            break;
        case 'c':
            o.conns = atoi(optarg);
            break;
        case 'r':
            o.rate = atof(optarg);
            break;
        case 'F':
            o.prefetch = atoi(optarg);
            break;
        case 'q':
            o.query = optarg;
            break;
        case 'e':
            o.expected = optarg;
            break;
        case 'Q':
            o.pre_query = optarg;
            break;
        case 'E':
            o.pre_expected = optarg;
            break;
        case 't':
            o.timeout_s = atoi(optarg);
            break;
        case 'i':
            o.interval_ms = atoi(optarg);
            break;
        case 1:
            o.consumer = optarg;
            break;
        case 2:
            o.record_table = optarg;
            break;
        case 3:
            o.table = optarg;
            break;
        case 4:
            o.savepoints = 0;
            break;
        case 5:
            o.set = 1;
            break;
        default:
            dbsink_usage();
        }
    }
    if (o.socket == NULL || o.db == NULL || optind != argc || o.interval_ms < 1)
        dbsink_usage();
    if (mysql_library_init(0, NULL, NULL) != 0)
        dbsink_die("mysql_library_init failed");
    if (strcmp(cmd, "run") == 0) {
        if (o.file == NULL || o.batch < 1 || o.conns < 1 || o.conns > DBSINK_MAX_CONNS)
            dbsink_usage();
        rc = dbsink_run(&o);
    } else if (strcmp(cmd, "wait") == 0) {
        if (o.query == NULL || o.expected == NULL ||
            (o.pre_query == NULL) != (o.pre_expected == NULL))
            dbsink_usage();
        rc = dbsink_wait(&o);
    } else {
        dbsink_usage();
    }
    mysql_library_end();
    return rc;
}
