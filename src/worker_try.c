/* worker_try.c: idemctl try's worker: one message through a worker's own transaction ops
 * (step_try), rolled back at the end, with the handler's log lines and onward messages kept for the
 * report.
 */
#include "worker_try.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sqlh.h"
#include "worker_int.h"

/* The run under way: where the log tap and the outbox read-back write. */
static worker_try_out_t *worker_try_cur;

/* log_set_tap: keep every line logged while the transaction runs. */
static void worker_try_tap(void *ctx, log_level_t level, const char *text)
{
    worker_try_out_t *o = ctx;
    if (o->n_lines == o->cap_lines) {
        int cap = o->cap_lines ? 2 * o->cap_lines : 16;
        worker_try_line_t *l = realloc(o->lines, (size_t)cap * sizeof(*l));
        if (l == NULL)
            return; /* the line is lost, the run goes on */
        o->lines = l;
        o->cap_lines = cap;
    }
    o->lines[o->n_lines].level = level;
    snprintf(o->lines[o->n_lines].text, WORKER_TRY_TEXT, "%s", text);
    o->n_lines++;
}

/* Copy a result column (len bytes, may be NULL) into a NUL-terminated buffer, cut to fit. */
static void worker_try_col(const char *v, unsigned long len, char *out, size_t cap)
{
    size_t n = v == NULL ? 0 : len < cap - 1 ? len : cap - 1;
    if (n)
        memcpy(out, v, n);
    out[n] = '\0';
}

/* One outbox row (msg_id, exchange, routing_key, content_type, headers, LENGTH(body)) into p. */
static void worker_try_row(MYSQL_ROW row, const unsigned long *len, worker_try_pub_t *p)
{
    amqp_table_entry_t e[WORKER_TRY_HEADERS * 2];

    memset(p, 0, sizeof(*p));
    worker_try_col(row[0], len[0], p->msg_id, sizeof(p->msg_id));
    worker_try_col(row[1], len[1], p->exchange, sizeof(p->exchange));
    worker_try_col(row[2], len[2], p->routing_key, sizeof(p->routing_key));
    worker_try_col(row[3], len[3], p->content_type, sizeof(p->content_type));
    p->body_len = row[5] ? atoll(row[5]) : 0;
    int n = row[4] ? outbox_decode_headers((const unsigned char *)row[4], len[4], e,
                                           sizeof(e) / sizeof(e[0]))
                   : 0;
    for (int i = 0; i < n; i++) {
        if (p->n_headers == WORKER_TRY_HEADERS) {
            p->more_headers++;
            continue;
        }
        worker_try_col(e[i].key.bytes, e[i].key.len, p->headers[p->n_headers].key,
                       sizeof(p->headers[0].key));
        char *v = p->headers[p->n_headers].value;
        if (e[i].value.kind == AMQP_FIELD_KIND_I64)
            snprintf(v, WORKER_TRY_TEXT, "%lld", (long long)e[i].value.value.i64);
        else
            worker_try_col(e[i].value.value.bytes.bytes, e[i].value.value.bytes.len, v,
                           WORKER_TRY_TEXT);
        p->n_headers++;
    }
}

/*
 * txn_t.dry_peek: right before the rollback, read back the outbox rows the
 * handler wrote for this message in the open transaction.
 */
static void worker_try_peek(void *ctx)
{
    worker_t *w = ctx;
    worker_try_out_t *o = worker_try_cur;
    const txn_msg_t *t = &w->life.batch.t[0];
    size_t cl = strlen(w->q->consumer);
    char *sql = malloc(2 * (cl + t->id_len) + 256);
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;

    if (sql == NULL) {
        snprintf(o->peek_err, sizeof(o->peek_err), "out of memory");
        return;
    }
    char *s = sql + sprintf(sql, "SELECT msg_id, exchange, routing_key, content_type, headers, "
                                 "LENGTH(body) FROM idemd_outbox WHERE consumer = ");
    s = db_hex_literal(s, w->q->consumer, cl);
    s += sprintf(s, " AND source_id = ");
    s = db_hex_literal(s, t->id, t->id_len);
    sprintf(s, " ORDER BY id");
    if (mysql_query(w->db->my, sql) != 0 || (res = mysql_store_result(w->db->my)) == NULL) {
        snprintf(o->peek_err, sizeof(o->peek_err), "reading back table idemd_outbox: %s",
                 mysql_error(w->db->my));
        goto out;
    }
    while ((row = mysql_fetch_row(res)) != NULL) {
        if (o->n_pubs == o->cap_pubs) {
            int cap = o->cap_pubs ? 2 * o->cap_pubs : 4;
            worker_try_pub_t *p = realloc(o->pubs, (size_t)cap * sizeof(*p));
            if (p == NULL) {
                snprintf(o->peek_err, sizeof(o->peek_err), "out of memory");
                break;
            }
            o->pubs = p;
            o->cap_pubs = cap;
        }
        worker_try_row(row, mysql_fetch_lengths(res), &o->pubs[o->n_pubs++]);
    }
out:
    if (res)
        mysql_free_result(res);
    free(sql);
}

/* step_hooks_t.order_keys: an ordered queue's keys as the worker finds them (NULL: unordered). */
static const int *worker_try_order_keys(void *ctx)
{
    worker_t *w = ctx;
    return w->ord.keys ? worker_order_keys(w) : NULL;
}

static const step_hooks_t worker_try_hooks = {.order_keys = worker_try_order_keys};

/* The log level in force, for the slot (worker_progress follows it). */
static int worker_try_level(void)
{
    return log_enabled(LOG_LEVEL_DEBUG)     ? LOG_LEVEL_DEBUG
           : log_enabled(LOG_LEVEL_INFO)    ? LOG_LEVEL_INFO
           : log_enabled(LOG_LEVEL_WARNING) ? LOG_LEVEL_WARNING
                                            : LOG_LEVEL_ERROR;
}

/* The worker's memory for a batch of one (as worker_alloc for batch_size 1). 0 or -1. */
static int worker_try_alloc(worker_t *w)
{
    if ((w->slot = calloc(1, sizeof(*w->slot))) == NULL || life_init(&w->life, 1, 1) != 0 ||
        (w->ids = calloc(1, sizeof(*w->ids))) == NULL ||
        (w->id_lens = calloc(1, sizeof(*w->id_lens))) == NULL)
        return -1;
    if (w->q->order_key && w->q->order_key[0]) {
        w->ord = (order_batch_t){.ops = &w->db_ops.order, .ctx = w, .q = w->q, .life = &w->life};
        if (order_batch_init(&w->ord, 1) != 0)
            return -1;
    }
    w->slot->log_level = worker_try_level();
    return 0;
}

/*
 * Connect to the database and start the handler on it as worker_connect_db
 * does, but once: no retries. 0 or WORKER_TRY_* with err set.
 */
static int worker_try_open(worker_t *w, char *err, size_t errlen)
{
    char refused[WORKER_ERROR_MAX] = "";

    int rc = db_open(&w->conf->database, w->q->consumer, w->q->dedup == CONF_DEDUP_TABLE, 0,
                     refused, sizeof(refused), &w->db);
    if (rc != 0) {
        snprintf(err, errlen, "cannot connect to the database%s%s",
                 refused[0] ? ": " : " (see above)", refused);
        return rc == DB_OPEN_REFUSED ? WORKER_TRY_CONFIG : WORKER_TRY_CONNECT;
    }
    rc = worker_db_start(w, false, err, errlen);
    if (rc != 0)
        return rc == WORKER_EXIT_TEMPFAIL ? WORKER_TRY_CONNECT : WORKER_TRY_CONFIG;
    return 0;
}

/* The message into the batch as batch_collect puts it there; its id into out. */
static void worker_try_accept(worker_t *w, const amqp_envelope_t *env, worker_try_out_t *out)
{
    life_msg_t *m = &w->life.batch.m[0];
    txn_msg_t *t = &w->life.batch.t[0];

    memset(m, 0, sizeof(*m));
    m->env = *env; /* borrowed: the life never destroys it (no release, no settling) */
    life_move(&w->life, &w->life.batch, 0, LIFE_BATCH);
    w->life.batch.n = 1;
    batch_accept(&w->bt, m, t);
    out->no_id = m->no_id;
    out->id_len = m->no_id ? 0 : t->id_len;
    memcpy(out->id, t->id, out->id_len);
    out->attempt = t->attempt;
    out->outcome = t->state;
    snprintf(out->reason, sizeof(out->reason), "%s", t->reason);
}

/* When the id's record was committed (create_time) into out->recorded_at; "" if not read. */
static void worker_try_record_time(worker_t *w, const txn_msg_t *t, worker_try_out_t *out)
{
    size_t cl = strlen(w->q->consumer);
    char *sql = malloc(2 * (cl + t->id_len) + 256);
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;

    if (sql == NULL)
        return;
    char *s = sql + sprintf(sql,
                            "SELECT DATE_FORMAT(create_time, '%%Y-%%m-%%d %%H:%%i:%%s') FROM `%s` "
                            "WHERE consumer = ",
                            w->db->record_table);
    s = db_hex_literal(s, w->q->consumer, cl);
    s += sprintf(s, " AND msg_id = ");
    db_hex_literal(s, t->id, t->id_len);
    if (mysql_query(w->db->my, sql) == 0 && (res = mysql_store_result(w->db->my)) != NULL &&
        (row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
        snprintf(out->recorded_at, sizeof(out->recorded_at), "%s", row[0]);
    if (res)
        mysql_free_result(res);
    free(sql);
}

/*
 * Whether the message's id has a committed record, then the transaction as
 * step_try runs it (rolled back). 0 or WORKER_TRY_LOST with err set.
 */
static int worker_try_txn(worker_t *w, bool force, worker_try_out_t *out, char *err, size_t errlen)
{
    txn_msg_t *t = &w->life.batch.t[0];
    bool record = w->q->dedup == CONF_DEDUP_TABLE && !out->no_id;
    bool found = false;
    const char *id = t->id;
    size_t len = t->id_len;
    txn_t tx;

    out->recorded = -1;
    if (record) {
        if (db_find_records(w->db, &id, &len, 1, &found) != DB_OK) {
            snprintf(err, errlen, "looking up the record: %s", mysql_error(w->db->my));
            return WORKER_TRY_LOST;
        }
        out->recorded = found;
        snprintf(out->record_table, sizeof(out->record_table), "%s", w->db->record_table);
        snprintf(out->consumer, sizeof(out->consumer), "%s", w->q->consumer);
        if (found)
            worker_try_record_time(w, t, out);
        (void)db_rollback(w->db);
    }
    if (found && !force) {
        txn_move(t, TXN_DUPLICATE); /* what the worker's record INSERT would find */
        out->outcome = t->state;
        return 0;
    }
    out->recorded_skip = found;
    worker_txn_wire(w, &worker_try_hooks);
    w->step.record = record;
    w->step.batch = false; /* one message, through handle() */
    w->step.limit_ms = 0;  /* never cut short */
    worker_try_cur = out;
    log_set_tap(worker_try_tap, out);
    txn_status_t st = step_try(&w->step, record && !found, worker_try_peek, &tx);
    log_set_tap(NULL, NULL);
    worker_try_cur = NULL;
    out->ran = true;
    out->redos = tx.redos;
    out->outcome = t->state;
    snprintf(out->reason, sizeof(out->reason), "%s", t->reason);
    out->tried_end = tx.refused > 0;
    if (tx.ended) {
        snprintf(err, errlen,
                 "%s: this server could not refuse it (docs/failures.md), so what the handler "
                 "did before it IS COMMITTED, with the message's record: reconcile it by hand",
                 tx.ended_why);
        return WORKER_TRY_ENDED;
    }
    if (st != TXN_DONE) {
        snprintf(err, errlen,
                 "the database connection failed during the dry run (%s): nothing "
                 "was committed",
                 tx.lost_why[0] ? tx.lost_why : "see above");
        return WORKER_TRY_LOST;
    }
    return 0;
}

int worker_try(const conf_t *conf, const conf_queue_t *q, const amqp_envelope_t *env, bool force,
               worker_try_out_t *out, char *err, size_t errlen)
{
    worker_t *w = calloc(1, sizeof(*w));
    plugin_t *plugin = NULL;
    char why[512];
    int rc = WORKER_TRY_CONFIG;

    memset(out, 0, sizeof(*out));
    out->recorded = -1;
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return WORKER_TRY_CONFIG;
    }
    w->conf = conf;
    w->q = q;
    snprintf(w->name, sizeof(w->name), "%s#try", q->name);
    if (sqlh_is(q)) {
        w->h = sqlh_handler(); /* built in: no file to load */
    } else if (plugin_load(q->handler, &plugin, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "queue '%s': %s", q->name, why);
        goto out;
    } else {
        w->h = plugin->handler;
    }
    snprintf(out->handler, sizeof(out->handler), "%s", w->h->name);
    plugin_set_publisher(worker_publish, w);
    if (worker_try_alloc(w) != 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    worker_wire(w); /* the ports exist; step_try uses only the clock */
    w->bt.batch_max = 1;
    w->rng.s = clock_mono_us(); /* onward messages' span ids: need only differ */
    w->bt.rng = &w->rng;
    if ((rc = worker_try_open(w, err, errlen)) != 0)
        goto out;
    worker_try_accept(w, env, out);
    if (out->outcome == TXN_NEW)
        rc = worker_try_txn(w, force, out, err, errlen);
out:
    plugin_set_publisher(NULL, NULL);
    if (w->state_live && w->h->fini)
        w->h->fini(w->state);
    if (w->db)
        (void)db_rollback(w->db);
    db_close(w->db);
    outbox_close(w->outbox);
    life_free(&w->life);
    free(w->ids);
    free(w->id_lens);
    free(w->hx.one.trace_text);
    order_batch_free(&w->ord);
    free(w->slot);
    explicit_bzero(&w->copies_keys, sizeof(w->copies_keys));
    free(w);
    plugin_free(plugin);
    return rc;
}

void worker_try_out_free(worker_try_out_t *out)
{
    free(out->lines);
    free(out->pubs);
    out->lines = NULL;
    out->pubs = NULL;
    out->n_lines = out->cap_lines = out->n_pubs = out->cap_pubs = 0;
}
