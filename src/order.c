/* order.c: per-key ordering (order_key): a message's key, and the blocked keys and their waiters
 * in the database (sql/012_idemd_order.sql, docs/ordering.md).
 */
#include "order.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery.h"
#include "json_body.h"
#include "log.h"

#define ORDER_SQL_MAX 2048 /* a statement: consumer, key and id as hex literals, and the text */

/* A json: key's path split at its dots into steps (names only, as json-c read it); n or -1. */
static int order_path(const char *path, json_body_seg_t *segs, int max)
{
    int n = 0;
    for (const char *p = path;; n++) {
        const char *dot = strchr(p, '.');
        if (n == max)
            return -1;
        segs[n] = (json_body_seg_t){p, dot ? (size_t)(dot - p) : strlen(p), -1, false};
        if (dot == NULL)
            return n + 1;
        p = dot + 1;
    }
}

/* The key from the value [s, s + n) of the body's field at path. 0, or -1 with why. */
static int order_json_value(const char *path, const char *s, size_t n, json_body_buf_t *buf,
                            char *key, size_t *len, char *why, size_t whylen)
{
    static const char *const kinds[] = {
        [JSON_BODY_NULL] = "null", [JSON_BODY_OBJECT] = "object", [JSON_BODY_ARRAY] = "array"};
    char err[200];
    json_body_kind_t kind = json_body_kind(s);

    switch (kind) {
    case JSON_BODY_STRING:
        if (json_body_string(s, n, buf, err, sizeof(err)) != 0) {
            snprintf(why, whylen, "field %s of the JSON body: %s", path, err);
            return -1;
        }
        s = buf->p ? buf->p : "";
        n = buf->len;
        break;
    case JSON_BODY_NUMBER: /* its text as written */
    case JSON_BODY_TRUE:
    case JSON_BODY_FALSE:
        break;
    default:
        snprintf(why, whylen, "field %s of the JSON body is %s, not a string, number or boolean",
                 path, kinds[kind]);
        return -1;
    }
    if (n == 0 || n > ORDER_KEY_MAX) {
        snprintf(why, whylen, "field %s of the JSON body is %zu bytes (1..%d)", path, n,
                 ORDER_KEY_MAX);
        return -1;
    }
    memcpy(key, s, n);
    key[n] = '\0';
    *len = n;
    return 0;
}

/* The key from the JSON body's field at path (dots between names), read by json_body.c. 0, or
 * -1 with why. */
static int order_json_key(const char *path, amqp_bytes_t body, char *key, size_t *len, char *why,
                          size_t whylen)
{
    json_body_seg_t segs[ORDER_KEY_MAX / 2 + 1];
    json_body_buf_t buf = {0};
    size_t start, end;
    int n = order_path(path, segs, (int)(sizeof(segs) / sizeof(segs[0]))), rc = -1;

    if (n < 0) {
        snprintf(why, whylen, "no field %s in the JSON body", path);
        return -1;
    }
    int r = json_body_find(body.bytes, body.len, segs, n, &start, &end, why, whylen);
    if (r == 0)
        snprintf(why, whylen, "no field %s in the JSON body", path);
    if (r <= 0)
        goto fail;
    rc = order_json_value(path, (const char *)body.bytes + start, end - start, &buf, key, len, why,
                          whylen);
fail:
    json_body_buf_free(&buf);
    return rc;
}

int order_key_of(const char *spec, const amqp_basic_properties_t *props, amqp_bytes_t body,
                 char *key, size_t *len, char *why, size_t whylen)
{
    char err[300];

    *len = 0;
    if (strncmp(spec, "header:", 7) == 0) {
        int rc = delivery_id(props, spec + 7, key, len, err, sizeof(err));
        if (rc != 0 || *len == 0) {
            /* delivery_id speaks of an id: here it is the key's header. */
            const char *e = rc != 0 ? err : "id is empty";
            const char *rest = strncmp(e, "no id header", 12) == 0 ? e + 12
                               : strncmp(e, "id ", 3) == 0         ? e + 2
                                                                   : NULL;
            snprintf(why, whylen, "no order key (order_key %s): %s%s: bad input, not handled", spec,
                     rest ? (rest == e + 12 ? "no header" : "the header's value") : "",
                     rest ? rest : e);
            return -1;
        }
        return 0;
    }
    if (order_json_key(spec + 5, body, key, len, err, sizeof(err)) != 0) {
        snprintf(why, whylen, "no order key (order_key %s): %s: bad input, not handled", spec, err);
        return -1;
    }
    return 0;
}

/* The key's WHERE clause (consumer and key as hex literals) at s; returns its end. */
static char *order_where(const db_t *db, char *s, const char *key, size_t klen)
{
    s += sprintf(s, " WHERE consumer = ");
    s = db_hex_literal(s, db->consumer, db->consumer_len);
    s += sprintf(s, " AND okey = ");
    return db_hex_literal(s, key, klen);
}

/* Run sql; with res, store its result there. 0, or the error number (logged). */
static unsigned order_query(db_t *db, const char *sql, MYSQL_RES **res)
{
    if (mysql_real_query(db->my, sql, strlen(sql)) == 0 &&
        (res == NULL || (*res = mysql_store_result(db->my)) != NULL))
        return 0;
    unsigned err = mysql_errno(db->my);
    char qe[600];
    db->last_errno = err;
    log_warn("order: database error %u: %s", err,
             log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
    return err ? err : CR_UNKNOWN_ERROR;
}

/*
 * Lock the key's block row and read it: *found, and the head's id in head
 * (ORDER_KEY_MAX + 1 bytes) and *hlen. 0, or the error number.
 */
static unsigned order_head(db_t *db, const char *key, size_t klen, bool *found, char *head,
                           size_t *hlen)
{
    char sql[ORDER_SQL_MAX], *s = sql;
    MYSQL_RES *res = NULL;
    unsigned err;

    s += sprintf(s, "SELECT head_id FROM idemd_order_block");
    s = order_where(db, s, key, klen);
    sprintf(s, " FOR UPDATE");
    if ((err = order_query(db, sql, &res)) != 0)
        return err;
    MYSQL_ROW row = mysql_fetch_row(res);
    unsigned long *lens = row ? mysql_fetch_lengths(res) : NULL;
    *found = row != NULL && lens != NULL;
    *hlen = 0;
    if (*found) {
        *hlen = lens[0] <= ORDER_KEY_MAX ? lens[0] : ORDER_KEY_MAX;
        memcpy(head, row[0], *hlen);
    }
    mysql_free_result(res);
    return 0;
}

unsigned order_blocked(db_t *db, const char *const *keys, const size_t *lens, int n, bool *blocked)
{
    size_t need = 256 + 2 * (size_t)db->consumer_len;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    unsigned err = 0;
    char *sql, *s;

    for (int j = 0; j < n; j++) {
        blocked[j] = false;
        need += 2 * lens[j] + 8;
    }
    if (n == 0)
        return 0;
    if ((sql = malloc(need)) == NULL) {
        log_error("order: out of memory");
        return CR_OUT_OF_MEMORY;
    }
    s = sql + sprintf(sql, "SELECT okey FROM idemd_order_block WHERE consumer = ");
    s = db_hex_literal(s, db->consumer, db->consumer_len);
    s += sprintf(s, " AND okey IN (");
    for (int j = 0; j < n; j++) {
        if (j)
            *s++ = ',';
        s = db_hex_literal(s, keys[j], lens[j]);
    }
    sprintf(s, ") FOR UPDATE");
    if ((err = order_query(db, sql, &res)) == 0) {
        while ((row = mysql_fetch_row(res)) != NULL) {
            unsigned long *l = mysql_fetch_lengths(res);
            for (int j = 0; l && j < n; j++)
                if (l[0] == lens[j] && memcmp(row[0], keys[j], lens[j]) == 0)
                    blocked[j] = true;
        }
        mysql_free_result(res);
    }
    free(sql);
    return err;
}

unsigned order_check(db_t *db, const char *key, size_t klen, const char *id, size_t idlen,
                     order_place_t *place)
{
    char head[ORDER_KEY_MAX + 1];
    size_t hlen;
    bool found;
    unsigned err = order_head(db, key, klen, &found, head, &hlen);

    if (err)
        return err;
    if (!found)
        *place = ORDER_FREE;
    else
        *place = hlen == idlen && memcmp(head, id, idlen) == 0 ? ORDER_HEAD : ORDER_WAIT;
    return 0;
}

unsigned order_wait(db_t *db, const char *key, size_t klen, const char *id, size_t idlen)
{
    char sql[ORDER_SQL_MAX], *s = sql;

    s += sprintf(s, "INSERT IGNORE INTO idemd_order_waiter (consumer, okey, msg_id) VALUES (");
    s = db_hex_literal(s, db->consumer, db->consumer_len);
    *s++ = ',';
    s = db_hex_literal(s, key, klen);
    *s++ = ',';
    s = db_hex_literal(s, id, idlen);
    sprintf(s, ")");
    return order_query(db, sql, NULL);
}

/* Make id the key's head (held or not), inserting the block row when there is none. */
static unsigned order_set_head(db_t *db, const char *key, size_t klen, const char *id, size_t idlen,
                               bool held, bool exists)
{
    char sql[ORDER_SQL_MAX], *s = sql;

    if (exists) {
        s += sprintf(
            s, "UPDATE idemd_order_block SET held = %d, since = NOW(3), head_id = ", held ? 1 : 0);
        s = db_hex_literal(s, id, idlen);
        order_where(db, s, key, klen);
        return order_query(db, sql, NULL);
    }
    s += sprintf(s, "INSERT INTO idemd_order_block (consumer, okey, head_id, held) VALUES (");
    s = db_hex_literal(s, db->consumer, db->consumer_len);
    *s++ = ',';
    s = db_hex_literal(s, key, klen);
    *s++ = ',';
    s = db_hex_literal(s, id, idlen);
    sprintf(s, ", %d)", held ? 1 : 0);
    return order_query(db, sql, NULL);
}

unsigned order_block(db_t *db, const char *key, size_t klen, const char *id, size_t idlen)
{
    char head[ORDER_KEY_MAX + 1];
    size_t hlen;
    bool found;
    unsigned err = order_head(db, key, klen, &found, head, &hlen);

    if (err)
        return err;
    if (!found)
        return order_set_head(db, key, klen, id, idlen, false, false);
    if (hlen == idlen && memcmp(head, id, idlen) == 0)
        return order_set_head(db, key, klen, id, idlen, false, true);
    return order_wait(db, key, klen, id, idlen);
}

/* Delete id's waiter row of the key, if any. */
static unsigned order_unwait(db_t *db, const char *key, size_t klen, const char *id, size_t idlen)
{
    char sql[ORDER_SQL_MAX], *s = sql;

    s += sprintf(s, "DELETE FROM idemd_order_waiter");
    s = order_where(db, s, key, klen);
    s += sprintf(s, " AND msg_id = ");
    db_hex_literal(s, id, idlen);
    return order_query(db, sql, NULL);
}

/* The block row is locked: its first waiter becomes the head, or the row goes. */
static unsigned order_pop(db_t *db, const char *key, size_t klen)
{
    char sql[ORDER_SQL_MAX], *s = sql, next[ORDER_KEY_MAX + 1];
    MYSQL_RES *res = NULL;
    unsigned err;
    unsigned long long seq = 0;
    size_t nlen = 0;

    s += sprintf(s, "SELECT seq, msg_id FROM idemd_order_waiter");
    s = order_where(db, s, key, klen);
    sprintf(s, " ORDER BY seq LIMIT 1 FOR UPDATE");
    if ((err = order_query(db, sql, &res)) != 0)
        return err;
    MYSQL_ROW row = mysql_fetch_row(res);
    unsigned long *lens = row ? mysql_fetch_lengths(res) : NULL;
    if (row && lens) {
        seq = strtoull(row[0], NULL, 10);
        nlen = lens[1] <= ORDER_KEY_MAX ? lens[1] : ORDER_KEY_MAX;
        memcpy(next, row[1], nlen);
    }
    mysql_free_result(res);
    if (nlen == 0) {
        s = sql + sprintf(sql, "DELETE FROM idemd_order_block");
        order_where(db, s, key, klen);
        return order_query(db, sql, NULL);
    }
    if ((err = order_set_head(db, key, klen, next, nlen, false, true)) != 0)
        return err;
    snprintf(sql, sizeof(sql), "DELETE FROM idemd_order_waiter WHERE seq = %llu", seq);
    return order_query(db, sql, NULL);
}

unsigned order_done(db_t *db, const char *key, size_t klen, const char *id, size_t idlen, bool hold)
{
    char head[ORDER_KEY_MAX + 1];
    size_t hlen;
    bool found;
    unsigned err = order_head(db, key, klen, &found, head, &hlen);

    if (err)
        return err;
    bool is_head = found && hlen == idlen && memcmp(head, id, idlen) == 0;
    if (hold && (!found || is_head))
        return order_set_head(db, key, klen, id, idlen, true, found);
    if (is_head)
        return order_pop(db, key, klen);
    return found ? order_unwait(db, key, klen, id, idlen) : 0;
}

unsigned order_skip_head(db_t *db, const char *key, size_t klen, bool *found)
{
    char head[ORDER_KEY_MAX + 1];
    size_t hlen;
    unsigned err = order_head(db, key, klen, found, head, &hlen);

    if (err || !*found)
        return err;
    return order_pop(db, key, klen);
}

int order_tables(db_t *db)
{
    MYSQL_RES *res = NULL;
    int rc = 0;
    static const char *const q[] = {
        "SELECT okey, head_id, held, since FROM idemd_order_block LIMIT 0",
        "SELECT seq, okey, msg_id, since FROM idemd_order_waiter LIMIT 0",
    };

    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]) && rc == 0; i++) {
        rc = order_query(db, q[i], &res) == 0 ? 0 : -1;
        if (res)
            mysql_free_result(res);
        res = NULL;
    }
    if (db_commit(db) != DB_OK)
        rc = -1;
    return rc;
}
