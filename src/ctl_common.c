/* ctl_common.c: the helpers idemctl's commands share: database and queue access, hex and JSON,
 * durations. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "log.h"

/* An X'...' literal for bytes: safe for any consumer or id. Returns a malloc'd string or NULL. */
char *ctl_hex(const char *s, size_t len)
{
    char *out = malloc(len * 2 + 4);
    if (out == NULL)
        return NULL;
    char *p = out;
    *p++ = 'X';
    *p++ = '\'';
    for (size_t i = 0; i < len; i++)
        p += sprintf(p, "%02x", (unsigned char)s[i]);
    *p++ = '\'';
    *p = '\0';
    return out;
}

/* Add a string member to a JSON object (bytes, may hold anything json-c can escape). */
void ctl_json_str(json_object *o, const char *key, const char *s, size_t len)
{
    json_object_object_add(o, key, ctl_json_bytes(s, len));
}

/* The distinct consumers of the configuration, or just --consumer. n is set; the array
 * borrows from ctl; free it. NULL when out of memory. */
const char **ctl_consumers(const ctl_t *ctl, int *n)
{
    const char **c = calloc((size_t)ctl->conf->n_queues + 1, sizeof(*c));
    *n = 0;
    if (c == NULL)
        return NULL;
    if (ctl->consumer) {
        c[(*n)++] = ctl->consumer;
        return c;
    }
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        const char *name = ctl->conf->queues[i].consumer;
        bool dup = false;
        for (int j = 0; j < *n; j++)
            dup |= strcmp(c[j], name) == 0;
        if (!dup)
            c[(*n)++] = name;
    }
    return c;
}

/* Open the database as the first configured consumer. 0 or CTL_EXIT_CONNECT (logged). */
int ctl_db_open(const ctl_t *ctl, db_t **db)
{
    const char *consumer = ctl->consumer         ? ctl->consumer
                           : ctl->conf->n_queues ? ctl->conf->queues[0].consumer
                                                 : "";
    if (db_open(&ctl->conf->database, consumer, false, 0, NULL, 0, db) != 0) {
        ctl_fprintf(stderr, "idemctl: cannot connect to the database (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    return 0;
}

/*
 * Run a query that returns one row; the row's fields are copied into
 * vals[0..n-1] (bufsize bytes each; NULL becomes ""). Returns 1 for a row,
 * 0 for none, -1 on error (logged). The transaction is rolled back after.
 */
int ctl_query_row(db_t *db, const char *sql, char (*vals)[64], int n)
{
    MYSQL_RES *res = NULL;
    int rc = -1;
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        log_error("database: '%s': %s", sql, mysql_error(db->my));
        goto out;
    }
    MYSQL_ROW row = mysql_fetch_row(res);
    rc = row != NULL;
    for (int i = 0; row && i < n && i < (int)mysql_num_fields(res); i++)
        snprintf(vals[i], 64, "%s", row[i] ? row[i] : "");
out:
    if (res)
        mysql_free_result(res);
    (void)mysql_query(db->my, "ROLLBACK");
    return rc;
}

/* Seconds s as a duration idemctl reads back ("1d1m", "90s"), into buf. */
void ctl_format_duration(long long s, char *buf, size_t len)
{
    static const struct {
        long long unit;
        char c;
    } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]) && n < len; u++) {
        long long k = s / units[u].unit;
        s %= units[u].unit;
        if (k > 0 || (units[u].unit == 1 && n == 0))
            n += (size_t)snprintf(buf + n, len - n, "%lld%c", k, units[u].c);
    }
}

/* ---------- broker helpers ---------- */

/*
 * Passive queue.declare of name on mq's channel: *msgs and *consumers.
 * Returns 0, 1 when there is no such queue (the channel is opened again),
 * or -1 (logged).
 */
int ctl_queue_peek(mq_t *mq, const char *name, unsigned *msgs, unsigned *consumers)
{
    char why[400];
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(name),
                                                     1, 0, 0, 0, amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL && ok) {
        *msgs = ok->message_count;
        *consumers = ok->consumer_count;
        return 0;
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
        ((amqp_channel_close_t *)r.reply.decoded)->reply_code == AMQP_NOT_FOUND) {
        amqp_channel_close_ok_t cok;
        amqp_send_method(mq->conn, MQ_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &cok);
        amqp_channel_open(mq->conn, MQ_CHANNEL);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type == AMQP_RESPONSE_NORMAL)
            return 1;
    }
    log_error("broker %s: queue %s: %s", mq->where, name, mq_reply_text(r, why, sizeof(why)));
    return -1;
}

/* ---------- command line ---------- */
