/* db_sql.c: the SQL idemd runs on its own tables: dedup records, attempts, the relay key, purges.
 */
#include "db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "db_int.h"
#include "delivery.h"
#include "log.h"
#include "copies.h"

int db_attempt_prepare(db_t *db)
{
    /* LAST_INSERT_ID(expr) hands back the new start count and the crash count in one number
     * (crashes in the high 32 bits) without a SELECT; attempts itself gets attempts + 1. */
    if (db->bump_stmt == NULL &&
        (db->bump_stmt = db_prepare_key_stmt(
             db, "INSERT INTO " DB_ATTEMPT_TABLE " (consumer, msg_id, attempts) VALUES (?, ?, 1) "
                 "ON DUPLICATE KEY UPDATE attempts = "
                 "LAST_INSERT_ID(attempts + 1 + (crashes << 32)) - (crashes << 32)")) == NULL)
        return -1;
    if (db->crash_stmt == NULL &&
        (db->crash_stmt = db_prepare_key_stmt(db, "INSERT INTO " DB_ATTEMPT_TABLE
                                                  " (consumer, msg_id, attempts, crashes) "
                                                  "VALUES (?, ?, 1, 1) ON DUPLICATE KEY UPDATE "
                                                  "crashes = LAST_INSERT_ID(crashes + 1)")) == NULL)
        return -1;
    if (db->start_stmt == NULL &&
        (db->start_stmt =
             db_prepare_key_stmt(db, "UPDATE " DB_ATTEMPT_TABLE " SET attempts = attempts + 1 "
                                     "WHERE consumer = ? AND msg_id = ?")) == NULL)
        return -1;
    return 0;
}

long long db_attempt_bump(db_t *db, const char *id, size_t len, long long *crashes)
{
    if (db_attempt_prepare(db) != 0 ||
        db_key_exec(db, db->bump_stmt, "counting an attempt of", id, len) != DB_OK)
        return -1;
    my_ulonglong n = mysql_stmt_insert_id(db->bump_stmt);
    if (db_commit(db) != DB_OK)
        return -1;
    *crashes = (long long)(n >> 32);
    n &= 0xffffffffu;
    return n == 0 ? 1 : (long long)n;
}

long long db_attempt_crash(db_t *db, const char *id, size_t len, bool add_start)
{
    if (db_attempt_prepare(db) != 0 ||
        db_key_exec(db, db->crash_stmt, "counting a crash of", id, len) != DB_OK)
        return -1;
    my_ulonglong n = mysql_stmt_insert_id(db->crash_stmt);
    /* A new row counts this start already; an old one gets it here when it was not counted
     * before the run (the message was not suspect then). */
    if (n != 0 && add_start &&
        db_key_exec(db, db->start_stmt, "counting an attempt of", id, len) != DB_OK)
        return -1;
    if (db_commit(db) != DB_OK)
        return -1;
    return n == 0 ? 1 : (long long)n;
}

int db_attempt_unstart(db_t *db, const char *id, size_t len)
{
    if (db->unstart_stmt == NULL &&
        (db->unstart_stmt =
             db_prepare_key_stmt(db, "UPDATE " DB_ATTEMPT_TABLE " SET attempts = attempts - 1 "
                                     "WHERE consumer = ? AND msg_id = ? AND attempts > 0")) == NULL)
        return -1;
    if (db_key_exec(db, db->unstart_stmt, "taking back a start of", id, len) != DB_OK)
        return -1;
    return db_commit(db) == DB_OK ? 0 : -1;
}

/*
 * Make the relay key unless a row is there already (INSERT IGNORE: the
 * first connection anywhere makes the key; the primary key, or Galera's
 * certification, picks one row). The server makes the bytes when it can
 * (RANDOM_BYTES: MySQL, MariaDB 10.10+), so that they are in no statement
 * (a server's general log expands bound parameters); else key[0..len-1] is
 * bound as a parameter. 0 or -1 (logged).
 */
static int db_copies_key_offer(db_t *db, unsigned char *key, size_t len)
{
    static const char sql[] = "INSERT IGNORE INTO " DB_KEY_TABLE " (id, k) VALUES (1, ?)";
    MYSQL_BIND bind[1];
    unsigned long klen = (unsigned long)len;
    MYSQL_STMT *stmt = NULL;
    char qe[600];
    int rc = -1;

    if (mysql_query(db->my, "INSERT IGNORE INTO " DB_KEY_TABLE
                            " (id, k) VALUES (1, RANDOM_BYTES(32))") == 0)
        return 0;
    if (mysql_errno(db->my) != ER_SP_DOES_NOT_EXIST) { /* 1305: MariaDB before 10.10 */
        db->last_errno = mysql_errno(db->my);
        log_error("database: making the relay key in " DB_KEY_TABLE ": error %u: %s",
                  db->last_errno, log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
        return -1;
    }
    stmt = mysql_stmt_init(db->my);
    memset(bind, 0, sizeof(bind));
    bind[0].buffer_type = MYSQL_TYPE_BLOB;
    bind[0].buffer = key;
    bind[0].buffer_length = klen;
    bind[0].length = &klen;
    if (stmt == NULL || mysql_stmt_prepare(stmt, sql, sizeof(sql) - 1) != 0 ||
        mysql_stmt_bind_param(stmt, bind) != 0 || mysql_stmt_execute(stmt) != 0) {
        db->last_errno = stmt ? mysql_stmt_errno(stmt) : mysql_errno(db->my);
        log_error(
            "database: '%s': error %u: %s", sql, db->last_errno,
            log_quote_str(stmt ? mysql_stmt_error(stmt) : mysql_error(db->my), qe, sizeof(qe)));
        goto fail;
    }
    rc = 0;
fail:
    if (stmt)
        mysql_stmt_close(stmt);
    return rc;
}

int db_copies_keys(db_t *db, bool create, copies_keys_t *keys)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    unsigned long *lens;
    unsigned char fresh[COPIES_KEY_LEN];
    int rc = -1;

    keys->n = 0;
    /* Our candidate key, made here: the server's RANDOM_BYTES() exists only from MariaDB 10.10. */
    if (create && getrandom(fresh, sizeof(fresh), 0) != (ssize_t)sizeof(fresh)) {
        log_error("database: no random bytes for the relay key: %s", strerror(errno));
        goto fail;
    }
    if (create && (db_copies_key_offer(db, fresh, sizeof(fresh)) != 0 || db_commit(db) != DB_OK))
        goto fail;
    _Static_assert(COPIES_KEYS_MAX == 3, "the query below reads rows 1..COPIES_KEYS_MAX");
    if (mysql_query(db->my, "SELECT id, k FROM " DB_KEY_TABLE
                            " WHERE id BETWEEN 1 AND 3 ORDER BY id") != 0 ||
        (res = mysql_store_result(db->my)) == NULL) {
        log_error("database: reading the relay key from " DB_KEY_TABLE ": error %u: %s",
                  mysql_errno(db->my), mysql_error(db->my));
        goto fail;
    }
    while ((row = mysql_fetch_row(res)) != NULL && (lens = mysql_fetch_lengths(res)) != NULL) {
        int id = row[0] ? atoi(row[0]) : 0;
        if (row[1] == NULL || lens[1] < COPIES_KEY_LEN) {
            log_error("database: table " DB_KEY_TABLE " row id %d holds a key of %lu bytes; a "
                      "key needs %d random bytes and a shorter one is refused: delete that row "
                      "(DELETE FROM " DB_KEY_TABLE " WHERE id = %d)%s",
                      id, row[1] ? lens[1] : 0UL, COPIES_KEY_LEN, id,
                      id == 1 ? ": idemd then makes a new 32-byte key (copies in flight count "
                                "their attempts from 1 again)"
                              : ", then idemctl key stage makes a new one");
            goto fail;
        }
        if (id == 1 && keys->n == 0) {
            memcpy(keys->k[0], row[1], COPIES_KEY_LEN);
            keys->n = 1;
        } else if (id > 1 && keys->n >= 1 && keys->n < COPIES_KEYS_MAX) {
            memcpy(keys->k[keys->n++], row[1], COPIES_KEY_LEN);
        }
    }
    if (keys->n == 0 && !create) {
        /* A fresh install: no worker has connected yet, so no copy was signed either. */
        log_debug("database: table " DB_KEY_TABLE " holds no signing key yet (idemd makes it "
                  "when a worker first connects)");
        rc = 1;
        goto fail;
    }
    if (keys->n == 0) {
        log_error("database: table " DB_KEY_TABLE " holds no signing key (row id 1)");
        goto fail;
    }
    rc = 0;
fail:
    if (rc != 0) {
        explicit_bzero(keys, sizeof(*keys));
        keys->n = 0;
    }
    explicit_bzero(fresh, sizeof(fresh));
    mysql_free_result(res);
    if (db_commit(db) != DB_OK) /* end the read's transaction (autocommit is off) */
        rc = -1;
    return rc;
}

db_status_t db_attempt_clear(db_t *db, const char *id, size_t len)
{
    if (db->clear_stmt == NULL &&
        (db->clear_stmt = db_prepare_key_stmt(db, "DELETE FROM " DB_ATTEMPT_TABLE
                                                  " WHERE consumer = ? AND msg_id = ?")) == NULL)
        return DB_ERR_OTHER;
    return db_key_exec(db, db->clear_stmt, "clearing attempts of", id, len);
}

db_status_t db_record(db_t *db, const char *id, size_t len)
{
    return db_key_exec(db, db->record_stmt, "recording", id, len);
}

char *db_hex_literal(char *s, const void *b, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    *s++ = 'X';
    *s++ = '\'';
    for (size_t i = 0; i < len; i++) {
        *s++ = hex[((const unsigned char *)b)[i] >> 4];
        *s++ = hex[((const unsigned char *)b)[i] & 15];
    }
    *s++ = '\'';
    *s = '\0';
    return s;
}

/*
 * Start db->sql with head, then the ids as rows (head ends in "VALUES ":
 * "(consumer, X'..')") or as a list of hex literals, joined by ", ", then
 * tail; the consumer is written where head holds "%C". The ids go in the
 * order ord gives (NULL: as given). 0, or -1 when out of memory (logged).
 */
static int db_key_list(db_t *db, const char *head, const char *const *ids, const size_t *lens,
                       const int *ord, int k, const char *tail)
{
    size_t need = strlen(head) + strlen(tail) + 2 * sizeof(db->consumer) + 64;
    bool rows = strstr(head, "VALUES") != NULL;
    for (int j = 0; j < k; j++)
        need += 2 * lens[j] + 2 * db->consumer_len + 32;
    if (need > db->sql_size) {
        char *p = realloc(db->sql, need);
        if (p == NULL) {
            log_error("database: out of memory for a statement of %zu bytes", need);
            return -1;
        }
        db->sql = p;
        db->sql_size = need;
    }
    char *o = db->sql;
    char esc[2 * sizeof(db->consumer) + 1];
    mysql_real_escape_string(db->my, esc, db->consumer, db->consumer_len);
    for (const char *h = head; *h; h++) {
        if (h[0] == '%' && h[1] == 'C') {
            o += sprintf(o, "%s", esc);
            h++;
        } else {
            *o++ = *h;
        }
    }
    for (int j = 0; j < k; j++) {
        int i = ord ? ord[j] : j;
        o += rows ? sprintf(o, "%s('%s', ", j ? ", " : "", esc) : sprintf(o, "%s", j ? ", " : "");
        o = db_hex_literal(o, ids[i], lens[i]);
        if (rows)
            *o++ = ')';
    }
    strcpy(o, tail);
    return 0;
}

/* The ids of db_record_many, for qsort_r: byte order, a prefix first. */
typedef struct {
    const char *const *ids;
    const size_t *lens;
} db_keys_t;

static int db_key_cmp(const void *a, const void *b, void *arg)
{
    const db_keys_t *ks = arg;
    int i = *(const int *)a, j = *(const int *)b;
    size_t n = ks->lens[i] < ks->lens[j] ? ks->lens[i] : ks->lens[j];
    int c = memcmp(ks->ids[i], ks->ids[j], n);
    if (c != 0)
        return c;
    return ks->lens[i] < ks->lens[j] ? -1 : ks->lens[i] > ks->lens[j];
}

/*
 * The order to insert ids[0..k-1] in, into db->ord: sorted, so that two batches that share ids
 * (a message and its copy in two workers' batches) lock them in the same order and one waits
 * for the other instead of both being rolled back as a deadlock. 0, or -1 when out of memory
 * (logged).
 */
static int db_key_order(db_t *db, const char *const *ids, const size_t *lens, int k)
{
    if (k > db->ord_size) {
        int *p = realloc(db->ord, (size_t)k * sizeof(*p));
        if (p == NULL) {
            log_error("database: out of memory ordering %d ids", k);
            return -1;
        }
        db->ord = p;
        db->ord_size = k;
    }
    for (int j = 0; j < k; j++)
        db->ord[j] = j;
    db_keys_t ks = {ids, lens};
    qsort_r(db->ord, (size_t)k, sizeof(*db->ord), db_key_cmp, &ks);
    return 0;
}

db_status_t db_record_many(db_t *db, const char *const *ids, const size_t *lens, int k)
{
    char head[128];
    snprintf(head, sizeof(head), "INSERT INTO `%s` (consumer, msg_id) VALUES ", db->record_table);
    if (db_key_order(db, ids, lens, k) != 0 ||
        db_key_list(db, head, ids, lens, db->ord, k, "") != 0)
        return DB_ERR_OTHER;
    if (mysql_real_query(db->my, db->sql, strlen(db->sql)) == 0)
        return DB_OK;
    db->last_errno = mysql_errno(db->my);
    db_status_t st = db_classify(db->last_errno);
    if (st != DB_DUPLICATE)
        log_error("database: recording %d ids: error %u: %s", k, db->last_errno,
                  mysql_error(db->my));
    return st;
}

db_status_t db_find_records(db_t *db, const char *const *ids, const size_t *lens, int k,
                            bool *found)
{
    char head[160];
    MYSQL_RES *res;
    MYSQL_ROW row;
    snprintf(head, sizeof(head), "SELECT msg_id FROM `%s` WHERE consumer = '%%C' AND msg_id IN (",
             db->record_table);
    if (db_key_list(db, head, ids, lens, NULL, k, ")") != 0)
        return DB_ERR_OTHER;
    if (mysql_real_query(db->my, db->sql, strlen(db->sql)) != 0 ||
        (res = mysql_store_result(db->my)) == NULL) {
        db->last_errno = mysql_errno(db->my);
        log_error("database: looking up %d records: error %u: %s", k, db->last_errno,
                  mysql_error(db->my));
        return db_classify(db->last_errno);
    }
    for (int j = 0; j < k; j++)
        found[j] = false;
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(res);
        for (int j = 0; j < k; j++)
            if (len && len[0] == lens[j] && memcmp(row[0], ids[j], lens[j]) == 0)
                found[j] = true;
    }
    mysql_free_result(res);
    return DB_OK;
}

long long db_purge(db_t *db, const char *table, const char *time_col, int days, int limit)
{
    char esc[2 * sizeof(db->consumer) + 1], sql[640];
    mysql_real_escape_string(db->my, esc, db->consumer, db->consumer_len);
    snprintf(sql, sizeof(sql),
             "DELETE FROM `%s` WHERE consumer = '%s' AND `%s` < NOW(3) - INTERVAL %d DAY LIMIT %d",
             table, esc, time_col, days, limit);
    if (db_exec(db, sql) != DB_OK) {
        (void)db_rollback(db);
        return -1;
    }
    long long n = (long long)mysql_affected_rows(db->my);
    if (db_commit(db) != DB_OK)
        return -1;
    return n;
}
