/* ctl_key.c: idemctl's relay key commands: key status, stage, promote, retire. */
#include <errno.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ctl.h"
#include "log.h"

/* key promote waits this long after key stage: two of the workers' key re-reads. */
#define CTL_KEY_SETTLE_S (2 * COPIES_KEY_REREAD_MS / 1000)
/* key retire waits the settle time, the longest retry delay and this. */
#define CTL_KEY_RETIRE_MARGIN_S 600

/* ---------- relay keys ---------- */

/* One row of the key table as key commands see it. */
typedef struct ctl_key_row {
    bool present;
    unsigned long len;
    long long age_s; /* since its role began, by the database's clock */
    char since[32];
    unsigned char k[64];
} ctl_key_row_t;

/*
 * Read rows 1..3 of the key table into rows[1..3] (rows[0] unused), locked
 * FOR UPDATE when lock (the caller commits or rolls back). 0, or -1 (logged).
 */
static int ctl_key_read(db_t *db, bool lock, ctl_key_row_t *rows)
{
    const char *sql =
        lock ? "SELECT id, k, since, TIMESTAMPDIFF(SECOND, since, NOW()) FROM " DB_KEY_TABLE
               " WHERE id BETWEEN 1 AND 3 ORDER BY id FOR UPDATE"
             : "SELECT id, k, since, TIMESTAMPDIFF(SECOND, since, NOW()) FROM " DB_KEY_TABLE
               " WHERE id BETWEEN 1 AND 3 ORDER BY id";
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    unsigned long *lens;

    memset(rows, 0, 4 * sizeof(*rows));
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        log_error(
            "database: '%s': %s (apply sql/007_idemd_key.sql and sql/010_idemd_key_since.sql)", sql,
            mysql_error(db->my));
        return -1;
    }
    while ((row = mysql_fetch_row(res)) != NULL && (lens = mysql_fetch_lengths(res)) != NULL) {
        int id = row[0] ? atoi(row[0]) : 0;
        if (id < 1 || id > 3 || row[1] == NULL)
            continue;
        ctl_key_row_t *r = &rows[id];
        r->present = true;
        r->len = lens[1];
        memcpy(r->k, row[1], lens[1] < sizeof(r->k) ? lens[1] : sizeof(r->k));
        snprintf(r->since, sizeof(r->since), "%s", row[2] ? row[2] : "-");
        r->age_s = row[3] ? atoll(row[3]) : 0;
    }
    mysql_free_result(res);
    return 0;
}

/* A short fingerprint of a key (hex of the first 6 bytes of its SHA-256) into buf (13+ bytes). */
static void ctl_key_fingerprint(const ctl_key_row_t *r, char *buf, size_t len)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    size_t n = r->len < sizeof(r->k) ? r->len : sizeof(r->k);

    snprintf(buf, len, "-");
    if (EVP_Digest(r->k, n, md, &md_len, EVP_sha256(), NULL) != 1 || md_len < 6)
        return;
    for (int i = 0; i < 6 && (size_t)(2 * i + 2) < len; i++)
        snprintf(buf + 2 * i, len - 2 * (size_t)i, "%02x", md[i]);
}

/* Run sql (no result) in the current transaction. 0, or -1 (logged). */
static int ctl_key_exec(db_t *db, const char *sql, const char *what)
{
    if (mysql_query(db->my, sql) == 0)
        return 0;
    log_error("database: %s in table " DB_KEY_TABLE ": %s", what, mysql_error(db->my));
    return -1;
}

/*
 * Stage a new key as row 2 without its bytes ever being in a statement: the
 * server makes them (RANDOM_BYTES(32): MySQL, MariaDB 10.10+), so neither
 * the general log, the processlist nor performance_schema shows them. On a
 * server without RANDOM_BYTES (MariaDB 10.6-10.9, error 1305) the key is the
 * SHA-256 of 32 random bytes bound as a parameter and of the signing key:
 * a log that shows the parameter gives the key away only to whoever holds
 * the signing key too. 0, or -1 (logged).
 */
static int ctl_key_stage_row(db_t *db)
{
    static const char mix[] =
        "INSERT INTO " DB_KEY_TABLE " (id, k, since) SELECT 2, "
        "UNHEX(SHA2(CONCAT(?, k), 256)), NOW() FROM " DB_KEY_TABLE " WHERE id = 1";
    unsigned char fresh[COPIES_KEY_LEN];
    unsigned long flen = sizeof(fresh);
    MYSQL_BIND bind[1];
    MYSQL_STMT *stmt = NULL;
    int rc = -1;

    if (mysql_query(db->my, "INSERT INTO " DB_KEY_TABLE
                            " (id, k, since) VALUES (2, RANDOM_BYTES(32), NOW())") == 0)
        return 0;
    if (mysql_errno(db->my) != ER_SP_DOES_NOT_EXIST) {
        log_error("database: staging the new key in table " DB_KEY_TABLE ": %s",
                  mysql_error(db->my));
        return -1;
    }
    if (getrandom(fresh, sizeof(fresh), 0) != (ssize_t)sizeof(fresh)) {
        log_error("key stage: no random bytes: %s", strerror(errno));
        goto fail;
    }
    memset(bind, 0, sizeof(bind));
    bind[0].buffer_type = MYSQL_TYPE_BLOB;
    bind[0].buffer = fresh;
    bind[0].buffer_length = flen;
    bind[0].length = &flen;
    if ((stmt = mysql_stmt_init(db->my)) == NULL ||
        mysql_stmt_prepare(stmt, mix, sizeof(mix) - 1) != 0 ||
        mysql_stmt_bind_param(stmt, bind) != 0 || mysql_stmt_execute(stmt) != 0 ||
        mysql_stmt_affected_rows(stmt) != 1) {
        log_error("database: staging the new key in table " DB_KEY_TABLE ": %s",
                  stmt ? mysql_stmt_error(stmt) : mysql_error(db->my));
        goto fail;
    }
    rc = 0;
fail:
    explicit_bzero(fresh, sizeof(fresh));
    if (stmt)
        mysql_stmt_close(stmt);
    return rc;
}

/*
 * How long after a promotion the replaced key may be retired, in seconds:
 * the workers' re-read, the longest retry delay of the configuration (its
 * queue in *longest, the delay in *max_ms) and a margin. Every configured
 * queue counts, whatever --consumer says: the key is the installation's, and
 * a copy it signed may wait in any queue's delay tier.
 */
static long long ctl_key_retire_floor(const ctl_t *ctl, const char **longest, int *max_ms)
{
    *longest = NULL;
    *max_ms = 0;
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        const conf_queue_t *q = &ctl->conf->queues[i];
        for (int k = 0; k < q->n_retry_delays; k++) {
            if (q->retry_delays_ms[k] > *max_ms) {
                *max_ms = q->retry_delays_ms[k];
                *longest = q->name;
            }
        }
    }
    return CTL_KEY_SETTLE_S + (*max_ms + 999) / 1000 + CTL_KEY_RETIRE_MARGIN_S;
}

/* key status: each row of the key table, a line of text or an object of the --json document.
 * Returns CTL_EXIT_OK, or CTL_EXIT_NOMATCH without a signing key (said). */
static int ctl_key_status(ctl_t *ctl, const ctl_key_row_t *rows)
{
    static const char *roles[] = {"", "signing", "staged", "previous"};
    json_object *arr = ctl->json ? json_object_new_array() : NULL;
    char fp[16];

    for (int id = 1; id <= 3; id++) {
        if (!rows[id].present)
            continue;
        ctl_key_fingerprint(&rows[id], fp, sizeof(fp));
        const char *bad = rows[id].len < COPIES_KEY_LEN ? "too short: refused" : "ok";
        if (arr) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "id", json_object_new_int(id));
            json_object_object_add(o, "role", ctl_json_text(roles[id]));
            json_object_object_add(o, "bytes", json_object_new_int64((int64_t)rows[id].len));
            json_object_object_add(o, "since", ctl_json_text(rows[id].since));
            json_object_object_add(o, "age_s", json_object_new_int64(rows[id].age_s));
            json_object_object_add(o, "fingerprint", ctl_json_text(fp));
            json_object_object_add(o, "usable", json_object_new_boolean(*bad == 'o'));
            json_object_array_add(arr, o);
        } else {
            ctl_printf("%d\t%s\t%lu bytes\t%s\t%s\t%s\n", id, roles[id], rows[id].len,
                       rows[id].since, fp, bad);
        }
    }
    if (arr) {
        ctl->out = json_object_new_object();
        json_object_object_add(ctl->out, "keys", arr);
    }
    if (!rows[1].present)
        ctl_fprintf(stderr, "idemctl: no signing key (row 1): idemd makes it when it first "
                            "connects\n");
    return rows[1].present ? CTL_EXIT_OK : CTL_EXIT_NOMATCH;
}

/* key stage: add row 2, accepted but not signing, and commit. Returns CTL_EXIT_OK, or the exit
 * status (said or logged; the caller rolls back). */
static int ctl_key_stage(db_t *db, const ctl_key_row_t *rows)
{
    char wait[64];

    if (rows[2].present || rows[3].present) {
        ctl_fprintf(stderr, "idemctl: key stage: %s; nothing was changed\n",
                    rows[2].present ? "a key is staged already (row 2): key promote it, or "
                                      "delete row 2 to abandon it"
                                    : "the key a promotion replaced (row 3) is still accepted: "
                                      "key retire it first");
        return CTL_EXIT_USAGE;
    }
    if (ctl_key_stage_row(db) != 0 || db_commit(db) != DB_OK)
        return CTL_EXIT_PARTIAL;
    ctl_format_duration(CTL_KEY_SETTLE_S, wait, sizeof(wait));
    ctl_printf("staged a new relay key (row 2): accepted, not signing yet. Workers read the keys "
               "every %d s: run idemctl key promote in %s or later\n",
               COPIES_KEY_REREAD_MS / 1000, wait);
    return CTL_EXIT_OK;
}

/* key promote: once every worker has read the staged key, make it row 1 and keep the old one
 * as row 3, and commit. Returns CTL_EXIT_OK, or the exit status (said or logged; the caller
 * rolls back). */
static int ctl_key_promote(ctl_t *ctl, db_t *db, const ctl_key_row_t *rows)
{
    const char *longest;
    int max_ms;
    char wait[64];

    if (!rows[2].present || rows[3].present) {
        ctl_fprintf(stderr, "idemctl: key promote: %s; nothing was changed\n",
                    rows[3].present ? "the key a promotion replaced (row 3) is still accepted: "
                                      "key retire it first"
                                    : "no key is staged (row 2): key stage first");
        return rows[3].present ? CTL_EXIT_USAGE : CTL_EXIT_NOMATCH;
    }
    if (rows[2].len < COPIES_KEY_LEN) {
        ctl_fprintf(stderr,
                    "idemctl: key promote: the staged key (row 2) has %lu bytes, under "
                    "%d; delete it and key stage again\n",
                    rows[2].len, COPIES_KEY_LEN);
        return CTL_EXIT_USAGE;
    }
    if (rows[2].age_s < CTL_KEY_SETTLE_S) {
        ctl_format_duration(CTL_KEY_SETTLE_S - rows[2].age_s, wait, sizeof(wait));
        ctl_fprintf(stderr,
                    "idemctl: key promote: the key was staged %lld s ago; wait %s more, so that "
                    "every worker (they read the keys every %d s) accepts it before any signs "
                    "with it; nothing was changed\n",
                    rows[2].age_s, wait, COPIES_KEY_REREAD_MS / 1000);
        return CTL_EXIT_USAGE;
    }
    /* The rows change ids; the keys' bytes never travel in a statement. */
    if (ctl_key_exec(db, "UPDATE " DB_KEY_TABLE " SET id = 3, since = NOW() WHERE id = 1",
                     "keeping the old key as row 3") != 0 ||
        ctl_key_exec(db, "UPDATE " DB_KEY_TABLE " SET id = 1, since = NOW() WHERE id = 2",
                     "promoting the staged key") != 0 ||
        db_commit(db) != DB_OK)
        return CTL_EXIT_PARTIAL;
    ctl_format_duration(ctl_key_retire_floor(ctl, &longest, &max_ms), wait, sizeof(wait));
    ctl_printf("promoted the staged key: it signs now (row 1); the replaced key stays accepted "
               "(row 3). Run idemctl key retire in %s or later\n",
               wait);
    return CTL_EXIT_OK;
}

/* key retire: delete row 3 once no copy it signed can still be in a delay queue, and commit.
 * Returns CTL_EXIT_OK, or the exit status (said or logged; the caller rolls back). */
static int ctl_key_retire(ctl_t *ctl, db_t *db, const ctl_key_row_t *rows)
{
    const char *longest;
    int max_ms;
    char wait[64];

    if (!rows[3].present) {
        ctl_fprintf(stderr, "idemctl: key retire: no replaced key (row 3) to retire\n");
        return CTL_EXIT_NOMATCH;
    }
    long long floor_s = ctl_key_retire_floor(ctl, &longest, &max_ms);
    if (rows[3].age_s < floor_s) {
        ctl_format_duration(floor_s - rows[3].age_s, wait, sizeof(wait));
        ctl_fprintf(stderr,
                    "idemctl: key retire: the key was replaced %lld s ago; wait %s more: copies "
                    "it signed may still sit in a delay queue (longest retry delay %d ms%s%s) and "
                    "would count their attempts from 1 again; nothing was changed\n",
                    rows[3].age_s, wait, max_ms, longest ? ", queue " : "", longest ? longest : "");
        return CTL_EXIT_USAGE;
    }
    if (ctl_key_exec(db, "DELETE FROM " DB_KEY_TABLE " WHERE id = 3", "retiring row 3") != 0 ||
        db_commit(db) != DB_OK)
        return CTL_EXIT_PARTIAL;
    ctl_printf("retired the replaced key (row 3). Dead letters it signed no longer verify: dlq "
               "replay refuses them unless --unverified\n");
    return CTL_EXIT_OK;
}

/*
 * key status / stage / promote / retire: change the relay key so that
 * every copy in flight keeps verifying (docs/security.md). Row 1 signs;
 * stage adds row 2 (accepted only); promote, once every worker has read it
 * (CTL_KEY_SETTLE_S), makes it row 1 and keeps the old one as row 3
 * (accepted only); retire deletes row 3 once no copy it signed can still
 * be in a delay queue. Returns CTL_EXIT_*.
 */
int ctl_key(ctl_t *ctl, const char *sub)
{
    ctl_key_row_t rows[4];
    db_t *db = NULL;
    int rc;

    if (ctl->consumer && (!strcmp(sub, "promote") || !strcmp(sub, "retire")))
        ctl_fprintf(
            stderr,
            "idemctl: key %s: --consumer %s does not narrow it: the key signs the copies of "
            "every queue, so the wait counts the longest retry delay of every configured "
            "queue\n",
            sub, ctl->consumer);
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        return rc;
    rc = CTL_EXIT_PARTIAL;
    if (ctl_key_read(db, strcmp(sub, "status") != 0, rows) != 0)
        goto out;
    if (!strcmp(sub, "status")) {
        rc = ctl_key_status(ctl, rows);
    } else if (!rows[1].present) {
        ctl_fprintf(stderr,
                    "idemctl: key %s: no signing key (row 1) yet: start idemd once, it makes "
                    "one\n",
                    sub);
        rc = CTL_EXIT_USAGE;
    } else if (!strcmp(sub, "stage")) {
        rc = ctl_key_stage(db, rows);
    } else if (!strcmp(sub, "promote")) {
        rc = ctl_key_promote(ctl, db, rows);
    } else {
        rc = ctl_key_retire(ctl, db, rows);
    }
out:
    if (rc != CTL_EXIT_OK)
        (void)db_rollback(db);
    explicit_bzero(rows, sizeof(rows));
    ctl_json_flush(ctl);
    db_close(db);
    return rc;
}
