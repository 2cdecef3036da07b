/* idemctl.c: idemd's operator tool: status, id lookups, dead letters (list, replay, purge), record
 * purge. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <mysqld_error.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "db.h"
#include "delivery.h"
#include "log.h"
#include "mq.h"
#include "outbox.h"
#include "relay.h"

#ifndef IDEMCTL_VERSION
#define IDEMCTL_VERSION "unknown"
#endif

/* Exit codes a script can rely on (idemctl(8), EXIT STATUS). */
#define CTL_EXIT_OK 0
#define CTL_EXIT_NOMATCH 1 /* an id was not found, or nothing matched */
#define CTL_EXIT_USAGE 2   /* bad arguments or configuration; purge without --yes */
#define CTL_EXIT_CONNECT 3 /* cannot reach the broker or the database */
#define CTL_EXIT_PARTIAL 4 /* stopped part way: what was done is done, the rest is untouched */

#define CTL_CONFIRM_MS 30000
#define CTL_NACK_CHUNK 16 /* tags per requeueing nack; see ctl_dlq */
/* A letter returned this often (x-delivery-count) is near RabbitMQ 4's default delivery limit. */
#define CTL_RETURNS_WARN 10
#define CTL_DEFAULT_CONF "/etc/idemd/idemd.conf"
#define CTL_STATUS_TIMEOUT_MS 3000 /* to read the daemon's /status */
#define CTL_STATUS_MAX (1 << 20)   /* longest /status answer taken */
/* records purge keeps at least the longest retry delay plus this: see idemctl(8). */
#define CTL_PURGE_MARGIN_S 86400

/* key promote waits this long after key stage: two of the workers' key re-reads. */
#define CTL_KEY_SETTLE_S (2 * RELAY_KEY_REREAD_MS / 1000)
/* key retire waits the settle time, the longest retry delay and this. */
#define CTL_KEY_RETIRE_MARGIN_S 600

typedef enum ctl_mode { CTL_LIST, CTL_COUNT, CTL_REPLAY, CTL_PURGE } ctl_mode_t;

/* The command line, and what the command shares. */
typedef struct ctl {
    conf_t *conf;
    bool json;
    const char *consumer; /* --consumer or NULL */
    bool has_reason;
    const char *reason_src;
    regex_t reason;
    long limit; /* dlq list: 0 = all */
    const char **ids;
    int n_ids;
    bool all, yes, to_original;
    bool unverified;       /* dlq replay: letters whose idemd-sig does not verify too */
    bool allow_empty_body; /* dlq replay: letters whose body was dropped too */
    relay_keys_t keys;     /* dlq replay: the installation's relay keys (n = 0: unread) */
    const char *to_queue;
    long slow_ms;
    long long older_s; /* records purge */
    long batch;
    json_object *out; /* --json: the document printed at the end */
} ctl_t;

/* What idemctl reads off one dead letter; borrows nothing after ctl_letter_read. */
typedef struct ctl_letter {
    uint64_t tag;
    amqp_message_t msg;
    const conf_queue_t *q; /* the configured queue named by idemd-queue, or NULL */
    bool has_id;
    char id[DELIVERY_ID_MAX + 1];
    size_t id_len;
    long long attempts;
    bool has_exchange, has_routing_key;
    bool onward;          /* idemd-onward = 1: an onward message idemd could not deliver */
    bool body_dropped;    /* idemd-body-dropped: the body was not kept */
    bool verified;        /* idemd-sig verifies (ctl_letter_verify) */
    char unverified[300]; /* why not, when not */
    char reason[1024], first[64], last[64], queue[256], exchange[256], routing_key[256];
} ctl_letter_t;

/* The usage summary (also idemctl(8), SYNOPSIS). */
static void ctl_usage(FILE *out)
{
    fputs("usage: idemctl [-c FILE] [--json] [-v] COMMAND ...\n"
          "  status\n"
          "  lookup [--consumer C] ID...\n"
          "  dlq list QUEUE [--reason REGEX] [--limit N]\n"
          "  dlq replay QUEUE (--id ID... | --reason REGEX | --all) [--to-original | --to QUEUE]\n"
          "             [--consumer C] [--unverified] [--allow-empty-body]\n"
          "  dlq purge QUEUE [--reason REGEX] --yes\n"
          "  records purge --older-than DURATION (--consumer C | --yes) [--batch N]\n"
          "  outbox list [QUEUE] [--limit N]\n"
          "  key (status | stage | promote | retire)\n"
          "options: -c, --config FILE (default " CTL_DEFAULT_CONF "), --json, -v (more logs),\n"
          "         -h, --help, -V, --version\n"
          "exit: 0 ok, 1 not found / nothing matched, 2 usage, 3 cannot connect, 4 partial\n",
          out);
}

/* Parse "90", "90s", "15m", "12h", "30d", "2w" or sums like "1h30m" into seconds; -1 if bad. */
static long long ctl_duration(const char *s)
{
    long long total = 0;
    if (*s == '\0')
        return -1;
    while (*s) {
        char *end;
        errno = 0;
        long long n = strtoll(s, &end, 10);
        if (end == s || errno != 0 || n < 0)
            return -1;
        long long unit = 1;
        switch (*end) {
        case '\0':
            break;
        case 's':
            end++;
            break;
        case 'm':
            unit = 60, end++;
            break;
        case 'h':
            unit = 3600, end++;
            break;
        case 'd':
            unit = 86400, end++;
            break;
        case 'w':
            unit = 604800, end++;
            break;
        default:
            return -1;
        }
        if (n > (1LL << 40) / unit)
            return -1;
        total += n * unit;
        s = end;
    }
    return total;
}

/* Print bytes on one line for text output: tab, newline and backslash escaped, other
 * control bytes as \xNN. */
static void ctl_put(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\t')
            fputs("\\t", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\\')
            fputs("\\\\", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
}

/* ctl_put of a C string. */
static void ctl_puts(FILE *f, const char *s)
{
    ctl_put(f, s, strlen(s));
}

/* An X'...' literal for bytes: safe for any consumer or id. Returns a malloc'd string or NULL. */
static char *ctl_hex(const char *s, size_t len)
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
static void ctl_json_str(json_object *o, const char *key, const char *s, size_t len)
{
    json_object_object_add(o, key, json_object_new_string_len(s, (int)len));
}

/* Print the --json document (ctl->out) and free it. */
static void ctl_json_flush(ctl_t *ctl)
{
    if (ctl->out == NULL)
        return;
    puts(json_object_to_json_string_ext(ctl->out, JSON_C_TO_STRING_PLAIN));
    json_object_put(ctl->out);
    ctl->out = NULL;
}

/* The distinct consumers of the configuration, or just --consumer. n is set; the array
 * borrows from ctl; free it. NULL when out of memory. */
static const char **ctl_consumers(const ctl_t *ctl, int *n)
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
static int ctl_db_open(const ctl_t *ctl, db_t **db)
{
    const char *consumer = ctl->consumer         ? ctl->consumer
                           : ctl->conf->n_queues ? ctl->conf->queues[0].consumer
                                                 : "";
    if (db_open(&ctl->conf->database, consumer, false, 0, NULL, 0, db) != 0) {
        fprintf(stderr, "idemctl: cannot connect to the database (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    return 0;
}

/*
 * Run a query that returns one row; the row's fields are copied into
 * vals[0..n-1] (bufsize bytes each; NULL becomes ""). Returns 1 for a row,
 * 0 for none, -1 on error (logged). The transaction is rolled back after.
 */
static int ctl_query_row(db_t *db, const char *sql, char (*vals)[64], int n)
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

/* ---------- lookup ---------- */

/* lookup: for each id, the record (consumer, time) and an attempts row if any. */
static int ctl_lookup(ctl_t *ctl, char **ids, int n_ids)
{
    db_t *db = NULL;
    int n_cons = 0, missing = 0, rc;
    const char **cons = ctl_consumers(ctl, &n_cons);
    json_object *arr = NULL;
    char sql[1200], vals[2][64];

    if (cons == NULL)
        return CTL_EXIT_PARTIAL;
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    if (ctl->json) {
        arr = json_object_new_array();
        ctl->out = json_object_new_object();
        json_object_object_add(ctl->out, "ids", arr);
    }
    for (int i = 0; i < n_ids; i++) {
        size_t id_len = strlen(ids[i]);
        bool found = false, printed = false;
        if (id_len == 0 || id_len > DELIVERY_ID_MAX) {
            fprintf(stderr, "idemctl: id '%s': ids are 1 to %d bytes\n", ids[i], DELIVERY_ID_MAX);
            rc = CTL_EXIT_USAGE;
            goto out;
        }
        char *hid = ctl_hex(ids[i], id_len);
        for (int c = 0; hid && c < n_cons; c++) {
            char *hc = ctl_hex(cons[c], strlen(cons[c]));
            if (hc == NULL)
                break;
            long long attempts = 0;
            char when[64] = "";
            snprintf(sql, sizeof(sql),
                     "SELECT DATE_FORMAT(create_time, '%%Y-%%m-%%d %%H:%%i:%%s.%%f') FROM `%s` "
                     "WHERE consumer = %s AND msg_id = %s",
                     ctl->conf->database.record_table, hc, hid);
            int got = ctl_query_row(db, sql, vals, 1);
            if (got == 1)
                snprintf(when, sizeof(when), "%.23s", vals[0]);
            int got_a = got < 0 ? -1 : 0;
            if (got >= 0) {
                snprintf(sql, sizeof(sql),
                         "SELECT attempts FROM " DB_ATTEMPT_TABLE
                         " WHERE consumer = %s AND msg_id = %s",
                         hc, hid);
                if ((got_a = ctl_query_row(db, sql, vals, 1)) == 1)
                    attempts = atoll(vals[0]);
            }
            free(hc);
            if (got < 0 || got_a < 0) {
                free(hid);
                rc = CTL_EXIT_PARTIAL;
                goto out;
            }
            /* One line per consumer that knows the id (a record or an attempts row); one
             * "not processed" line when none does (or for the one asked with --consumer). */
            if (got == 0 && got_a == 0 && !(ctl->consumer || (c == n_cons - 1 && !printed)))
                continue;
            found |= got == 1;
            printed = true;
            if (ctl->json) {
                json_object *o = json_object_new_object();
                ctl_json_str(o, "id", ids[i], id_len);
                json_object_object_add(o, "consumer", json_object_new_string(cons[c]));
                json_object_object_add(o, "processed", json_object_new_boolean(got == 1));
                json_object_object_add(o, "time", got == 1 ? json_object_new_string(when) : NULL);
                json_object_object_add(o, "attempts", json_object_new_int64(attempts));
                json_object_array_add(arr, o);
            } else {
                ctl_puts(stdout, ids[i]);
                printf("\t%s\t%s\t%s\tattempts=%lld\n", cons[c],
                       got == 1 ? "processed" : "not-processed", got == 1 ? when : "-", attempts);
            }
        }
        free(hid);
        if (!found)
            missing++;
    }
    rc = missing ? CTL_EXIT_NOMATCH : CTL_EXIT_OK;
out:
    ctl_json_flush(ctl);
    free(cons);
    db_close(db);
    return rc;
}

/* ---------- records purge ---------- */

/* Seconds s as a duration idemctl reads back ("1d1m", "90s"), into buf. */
static void ctl_format_duration(long long s, char *buf, size_t len)
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

/*
 * The shortest horizon records purge accepts for the consumers it would touch: the longest
 * retry delay of their queues (of every queue when --consumer names none of them), rounded up
 * to seconds, plus CTL_PURGE_MARGIN_S. That delay goes into *max_ms and its queue into
 * *longest (NULL when no queue has one).
 */
static long long ctl_purge_floor(const ctl_t *ctl, const char **longest, int *max_ms)
{
    bool any = false;
    *longest = NULL;
    *max_ms = 0;
    for (int pass = 0; pass < 2 && !any; pass++) {
        for (int i = 0; i < ctl->conf->n_queues; i++) {
            const conf_queue_t *q = &ctl->conf->queues[i];
            if (pass == 0 && ctl->consumer && strcmp(q->consumer, ctl->consumer) != 0)
                continue;
            any = true;
            for (int k = 0; k < q->n_retry_delays; k++) {
                if (q->retry_delays_ms[k] > *max_ms) {
                    *max_ms = q->retry_delays_ms[k];
                    *longest = q->name;
                }
            }
        }
    }
    return (*max_ms + 999LL) / 1000 + CTL_PURGE_MARGIN_S;
}

/*
 * Refuse a records purge that would delete records a message can still come back for, or
 * every consumer's without --yes. 0, or CTL_EXIT_USAGE (said on stderr).
 */
static int ctl_purge_check(const ctl_t *ctl, const char *const *cons, int n_cons)
{
    const char *longest = NULL;
    int max_ms = 0;
    long long floor_s = ctl_purge_floor(ctl, &longest, &max_ms);
    char want[64], got[64], margin[64];

    ctl_format_duration(floor_s, want, sizeof(want));
    ctl_format_duration(ctl->older_s, got, sizeof(got));
    ctl_format_duration(CTL_PURGE_MARGIN_S, margin, sizeof(margin));
    if (ctl->older_s < floor_s) {
        if (longest)
            fprintf(stderr,
                    "idemctl: records purge: --older-than %s is too short: keep records at least "
                    "%s (%lld s), the longest retry delay (%d ms, queue '%s') plus %s for "
                    "redeliveries and re-sends; a record deleted sooner lets its message apply "
                    "twice\n",
                    got, want, floor_s, max_ms, longest, margin);
        else
            fprintf(stderr,
                    "idemctl: records purge: --older-than %s is too short: keep records at least "
                    "%s (%lld s) for redeliveries and re-sends; a record deleted sooner lets its "
                    "message apply twice\n",
                    got, want, floor_s);
        return CTL_EXIT_USAGE;
    }
    if (ctl->consumer == NULL && !ctl->yes) {
        fprintf(stderr, "idemctl: records purge: this deletes the records of every consumer (");
        for (int c = 0; c < n_cons; c++)
            fprintf(stderr, "%s%s", c ? ", " : "", cons[c]);
        fprintf(stderr, "): add --yes, or name one with --consumer; nothing was deleted\n");
        return CTL_EXIT_USAGE;
    }
    return 0;
}

/* records purge: delete records older than --older-than, batch rows per committed DELETE. */
static int ctl_records_purge(ctl_t *ctl)
{
    db_t *db = NULL;
    int n_cons = 0, rc;
    const char **cons = ctl_consumers(ctl, &n_cons);
    long long deleted = 0;
    char sql[1200];

    if (cons == NULL)
        return CTL_EXIT_PARTIAL;
    if (ctl_purge_check(ctl, cons, n_cons) != 0) {
        free(cons);
        return CTL_EXIT_USAGE;
    }
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    for (int c = 0; c < n_cons; c++) {
        char *hc = ctl_hex(cons[c], strlen(cons[c]));
        if (hc == NULL) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        snprintf(sql, sizeof(sql),
                 "DELETE FROM `%s` WHERE consumer = %s AND create_time < NOW(3) - INTERVAL %lld "
                 "SECOND LIMIT %ld",
                 ctl->conf->database.record_table, hc, ctl->older_s, ctl->batch);
        free(hc);
        for (;;) {
            if (mysql_query(db->my, sql) != 0) {
                log_error("database: '%s': %s", sql, mysql_error(db->my));
                (void)db_rollback(db);
                rc = CTL_EXIT_PARTIAL;
                goto out;
            }
            long long n = (long long)mysql_affected_rows(db->my);
            if (db_commit(db) != DB_OK) {
                rc = CTL_EXIT_PARTIAL;
                goto out;
            }
            deleted += n;
            log_info("records purge: consumer %s: %lld deleted", cons[c], n);
            if (n < ctl->batch)
                break;
        }
    }
    rc = CTL_EXIT_OK;
out:
    if (ctl->json) {
        ctl->out = json_object_new_object();
        json_object_object_add(ctl->out, "deleted", json_object_new_int64(deleted));
        json_object_object_add(ctl->out, "complete", json_object_new_boolean(rc == CTL_EXIT_OK));
        ctl_json_flush(ctl);
    } else if (rc == CTL_EXIT_OK || deleted > 0) {
        printf("deleted %lld record%s older than %lld s\n", deleted, deleted == 1 ? "" : "s",
               ctl->older_s);
    }
    free(cons);
    db_close(db);
    return rc;
}

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

/* "UPDATE ... X'<hex of k>' ..." helper: the key's bytes as an X'' literal into buf. */
static void ctl_key_literal(const unsigned char *k, size_t n, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "X'");
    for (size_t i = 0; i < n && o + 3 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%02x", k[i]);
    snprintf(buf + o, len - o, "'");
}

/*
 * How long after a promotion the replaced key may be retired, in seconds:
 * the workers' re-read, the longest retry delay of the configuration (its
 * queue in *longest, the delay in *max_ms) and a margin.
 */
static long long ctl_key_retire_floor(const ctl_t *ctl, const char **longest, int *max_ms)
{
    (void)ctl_purge_floor(ctl, longest, max_ms);
    return CTL_KEY_SETTLE_S + (*max_ms + 999) / 1000 + CTL_KEY_RETIRE_MARGIN_S;
}

/*
 * key status / stage / promote / retire: change the relay key so that
 * every copy in flight keeps verifying (docs/security.md). Row 1 signs;
 * stage adds row 2 (accepted only); promote, once every worker has read it
 * (CTL_KEY_SETTLE_S), makes it row 1 and keeps the old one as row 3
 * (accepted only); retire deletes row 3 once no copy it signed can still
 * be in a delay queue. Returns CTL_EXIT_*.
 */
static int ctl_key(ctl_t *ctl, const char *sub)
{
    ctl_key_row_t rows[4];
    db_t *db = NULL;
    unsigned char fresh[RELAY_KEY_LEN];
    char sql[400], lit[2 * 64 + 4], fp[16], wait[64];
    int rc;

    if ((rc = ctl_db_open(ctl, &db)) != 0)
        return rc;
    rc = CTL_EXIT_PARTIAL;
    if (ctl_key_read(db, strcmp(sub, "status") != 0, rows) != 0)
        goto out;
    if (!strcmp(sub, "status")) {
        json_object *arr = ctl->json ? json_object_new_array() : NULL;
        static const char *roles[] = {"", "signing", "staged", "previous"};
        for (int id = 1; id <= 3; id++) {
            if (!rows[id].present)
                continue;
            ctl_key_fingerprint(&rows[id], fp, sizeof(fp));
            const char *bad = rows[id].len < RELAY_KEY_LEN ? "too short: refused" : "ok";
            if (arr) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "id", json_object_new_int(id));
                json_object_object_add(o, "role", json_object_new_string(roles[id]));
                json_object_object_add(o, "bytes", json_object_new_int64((int64_t)rows[id].len));
                json_object_object_add(o, "since", json_object_new_string(rows[id].since));
                json_object_object_add(o, "age_s", json_object_new_int64(rows[id].age_s));
                json_object_object_add(o, "fingerprint", json_object_new_string(fp));
                json_object_object_add(o, "usable", json_object_new_boolean(*bad == 'o'));
                json_object_array_add(arr, o);
            } else {
                printf("%d\t%s\t%lu bytes\t%s\t%s\t%s\n", id, roles[id], rows[id].len,
                       rows[id].since, fp, bad);
            }
        }
        if (arr) {
            ctl->out = json_object_new_object();
            json_object_object_add(ctl->out, "keys", arr);
        }
        rc = rows[1].present ? CTL_EXIT_OK : CTL_EXIT_NOMATCH;
        if (!rows[1].present)
            fprintf(stderr, "idemctl: no signing key (row 1): idemd makes it when it first "
                            "connects\n");
        goto out;
    }
    if (!rows[1].present) {
        fprintf(stderr,
                "idemctl: key %s: no signing key (row 1) yet: start idemd once, it makes "
                "one\n",
                sub);
        rc = CTL_EXIT_USAGE;
        goto out;
    }
    if (!strcmp(sub, "stage")) {
        if (rows[2].present || rows[3].present) {
            fprintf(stderr, "idemctl: key stage: %s; nothing was changed\n",
                    rows[2].present ? "a key is staged already (row 2): key promote it, or "
                                      "delete row 2 to abandon it"
                                    : "the key a promotion replaced (row 3) is still accepted: "
                                      "key retire it first");
            rc = CTL_EXIT_USAGE;
            goto out;
        }
        if (getrandom(fresh, sizeof(fresh), 0) != (ssize_t)sizeof(fresh)) {
            log_error("key stage: no random bytes: %s", strerror(errno));
            goto out;
        }
        ctl_key_literal(fresh, sizeof(fresh), lit, sizeof(lit));
        explicit_bzero(fresh, sizeof(fresh));
        snprintf(sql, sizeof(sql),
                 "INSERT INTO " DB_KEY_TABLE " (id, k, since) VALUES (2, %s, NOW())", lit);
        if (ctl_key_exec(db, sql, "staging the new key") != 0 || db_commit(db) != DB_OK)
            goto out;
        ctl_format_duration(CTL_KEY_SETTLE_S, wait, sizeof(wait));
        printf("staged a new relay key (row 2): accepted, not signing yet. Workers read the keys "
               "every %d s: run idemctl key promote in %s or later\n",
               RELAY_KEY_REREAD_MS / 1000, wait);
    } else if (!strcmp(sub, "promote")) {
        if (!rows[2].present || rows[3].present) {
            fprintf(stderr, "idemctl: key promote: %s; nothing was changed\n",
                    rows[3].present ? "the key a promotion replaced (row 3) is still accepted: "
                                      "key retire it first"
                                    : "no key is staged (row 2): key stage first");
            rc = rows[3].present ? CTL_EXIT_USAGE : CTL_EXIT_NOMATCH;
            goto out;
        }
        if (rows[2].len < RELAY_KEY_LEN) {
            fprintf(stderr,
                    "idemctl: key promote: the staged key (row 2) has %lu bytes, under "
                    "%d; delete it and key stage again\n",
                    rows[2].len, RELAY_KEY_LEN);
            rc = CTL_EXIT_USAGE;
            goto out;
        }
        if (rows[2].age_s < CTL_KEY_SETTLE_S) {
            ctl_format_duration(CTL_KEY_SETTLE_S - rows[2].age_s, wait, sizeof(wait));
            fprintf(stderr,
                    "idemctl: key promote: the key was staged %lld s ago; wait %s more, so that "
                    "every worker (they read the keys every %d s) accepts it before any signs "
                    "with it; nothing was changed\n",
                    rows[2].age_s, wait, RELAY_KEY_REREAD_MS / 1000);
            rc = CTL_EXIT_USAGE;
            goto out;
        }
        ctl_key_literal(rows[1].k, rows[1].len < 64 ? rows[1].len : 64, lit, sizeof(lit));
        snprintf(sql, sizeof(sql),
                 "INSERT INTO " DB_KEY_TABLE " (id, k, since) VALUES (3, %s, NOW())", lit);
        if (ctl_key_exec(db, sql, "keeping the old key as row 3") != 0)
            goto out;
        ctl_key_literal(rows[2].k, rows[2].len < 64 ? rows[2].len : 64, lit, sizeof(lit));
        snprintf(sql, sizeof(sql), "UPDATE " DB_KEY_TABLE " SET k = %s, since = NOW() WHERE id = 1",
                 lit);
        if (ctl_key_exec(db, sql, "promoting the staged key") != 0 ||
            ctl_key_exec(db, "DELETE FROM " DB_KEY_TABLE " WHERE id = 2", "removing row 2") != 0 ||
            db_commit(db) != DB_OK)
            goto out;
        const char *longest;
        int max_ms;
        ctl_format_duration(ctl_key_retire_floor(ctl, &longest, &max_ms), wait, sizeof(wait));
        printf("promoted the staged key: it signs now (row 1); the replaced key stays accepted "
               "(row 3). Run idemctl key retire in %s or later\n",
               wait);
    } else {
        if (!rows[3].present) {
            fprintf(stderr, "idemctl: key retire: no replaced key (row 3) to retire\n");
            rc = CTL_EXIT_NOMATCH;
            goto out;
        }
        const char *longest;
        int max_ms;
        long long floor_s = ctl_key_retire_floor(ctl, &longest, &max_ms);
        if (rows[3].age_s < floor_s) {
            ctl_format_duration(floor_s - rows[3].age_s, wait, sizeof(wait));
            fprintf(stderr,
                    "idemctl: key retire: the key was replaced %lld s ago; wait %s more: copies "
                    "it signed may still sit in a delay queue (longest retry delay %d ms%s%s) and "
                    "would count their attempts from 1 again; nothing was changed\n",
                    rows[3].age_s, wait, max_ms, longest ? ", queue " : "", longest ? longest : "");
            rc = CTL_EXIT_USAGE;
            goto out;
        }
        if (ctl_key_exec(db, "DELETE FROM " DB_KEY_TABLE " WHERE id = 3", "retiring row 3") != 0 ||
            db_commit(db) != DB_OK)
            goto out;
        printf("retired the replaced key (row 3). Dead letters it signed no longer verify: dlq "
               "replay refuses them unless --unverified\n");
    }
    rc = CTL_EXIT_OK;
out:
    if (rc != CTL_EXIT_OK)
        (void)db_rollback(db);
    explicit_bzero(rows, sizeof(rows));
    explicit_bzero(lit, sizeof(lit));
    explicit_bzero(sql, sizeof(sql));
    ctl_json_flush(ctl);
    db_close(db);
    return rc;
}

/* ---------- broker helpers ---------- */

/*
 * Passive queue.declare of name on mq's channel: *msgs and *consumers.
 * Returns 0, 1 when there is no such queue (the channel is opened again),
 * or -1 (logged).
 */
static int ctl_queue_peek(mq_t *mq, const char *name, unsigned *msgs, unsigned *consumers)
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

/* ---------- status ---------- */

/* Wait up to ms for fd to be ready for events; 1 ready, 0 timeout, -1 error. */
static int ctl_wait_fd(int fd, short events, int ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    int r;
    while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return r;
}

/*
 * GET /status from the daemon at metrics.listen (HTTP/1.0, the answer read
 * to its end), with the token of metrics.token_file when that is set. Returns the parsed document
 * (the caller puts it), or NULL with why written to err.
 */
static json_object *ctl_daemon_status(const conf_t *conf, char *err, size_t errlen)
{
    const struct sockaddr_storage *a = &conf->metrics.addr;
    socklen_t alen =
        a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    const char *tok = conf->metrics.token;
    char *buf = NULL, *req = NULL;
    size_t len = 0, cap = 0;
    json_object *doc = NULL;
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int reqlen = asprintf(&req, "GET /status HTTP/1.0\r\nHost: idemd\r\n%s%s%s\r\n",
                          tok ? "Authorization: Bearer " : "", tok ? tok : "", tok ? "\r\n" : "");

    if (reqlen < 0) {
        req = NULL;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto out;
    }
    if (connect(fd, (const struct sockaddr *)a, alen) != 0) {
        int e = errno, so = 0;
        socklen_t sl = sizeof(so);
        if (e != EINPROGRESS) {
            snprintf(err, errlen, "connect: %s", strerror(e));
            goto out;
        }
        if (ctl_wait_fd(fd, POLLOUT, CTL_STATUS_TIMEOUT_MS) <= 0) {
            snprintf(err, errlen, "connect: no answer in %d ms", CTL_STATUS_TIMEOUT_MS);
            goto out;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0 || so != 0) {
            snprintf(err, errlen, "connect: %s", strerror(so ? so : errno));
            goto out;
        }
    }
    if (send(fd, req, (size_t)reqlen, MSG_NOSIGNAL) != (ssize_t)reqlen) {
        snprintf(err, errlen, "send: %s", strerror(errno));
        goto out;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *more = cap + 8192 > CTL_STATUS_MAX ? NULL : realloc(buf, cap + 8192);
            if (more == NULL) {
                snprintf(err, errlen, "answer longer than %d bytes", CTL_STATUS_MAX);
                goto out;
            }
            buf = more;
            cap += 8192;
        }
        if (ctl_wait_fd(fd, POLLIN, CTL_STATUS_TIMEOUT_MS) <= 0) {
            snprintf(err, errlen, "no answer in %d ms", CTL_STATUS_TIMEOUT_MS);
            goto out;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) == 0 && strlen(buf) >= 12 && strncmp(buf + 9, "401", 3) == 0) {
        snprintf(err, errlen,
                 tok ? "answered 401: it wants another token than metrics.token_file holds "
                       "(changed without a reload of idemd?)"
                     : "answered 401: it wants a token, and metrics.token_file is not set here");
        goto out;
    }
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strlen(buf) < 12 || strncmp(buf + 9, "200", 3) != 0 ||
        body == NULL) {
        buf[strcspn(buf, "\r\n")] = '\0';
        snprintf(err, errlen, "answered '%.40s' (an idemd older than /status?)", buf);
        goto out;
    }
    doc = json_tokener_parse(body + 4);
    if (doc == NULL || !json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        doc = NULL;
        snprintf(err, errlen, "the answer is not a JSON object");
    }
out:
    if (fd >= 0)
        close(fd);
    if (req) {
        explicit_bzero(req, strlen(req));
        free(req);
    }
    free(buf);
    return doc;
}

/*
 * The consumer's rows in idemd_outbox into ob: all, retrying (refused, attempts
 * left), exhausted (daemon.outbox_max_attempts used up). 0; 1 when the table
 * (sql/005) or its attempts column (sql/009) is missing (rows only, or
 * nothing, is known: ob[] = -1 where unknown); -1 on another error (logged).
 */
static int ctl_outbox_counts(const ctl_t *ctl, db_t *db, const char *consumer, long long ob[3])
{
    char sql[800];
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    char *hc = ctl_hex(consumer, strlen(consumer));
    int rc = -1, max = ctl->conf->outbox_max_attempts;

    ob[0] = ob[1] = ob[2] = -1;
    if (hc == NULL)
        return -1;
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*), COALESCE(SUM(attempts > 0 AND attempts < %d), 0), "
             "COALESCE(SUM(attempts >= %d), 0) FROM " OUTBOX_TABLE " WHERE consumer = %s",
             max, max, hc);
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        unsigned e = mysql_errno(db->my);
        if (e == ER_NO_SUCH_TABLE || e == ER_BAD_FIELD_ERROR)
            rc = 1;
        else
            log_error("database: counting outbox rows: %s", mysql_error(db->my));
        goto out;
    }
    if ((row = mysql_fetch_row(res)) != NULL && row[0] && row[1] && row[2]) {
        ob[0] = atoll(row[0]);
        ob[1] = atoll(row[1]);
        ob[2] = atoll(row[2]);
    }
    rc = 0;
out:
    if (res)
        mysql_free_result(res);
    (void)mysql_rollback(db->my);
    free(hc);
    return rc;
}

/*
 * outbox list: the rows of QUEUE's consumer (or of every configured queue's)
 * in idemd_outbox, oldest first, at most --limit: id, consumer, message id,
 * exchange, routing key, attempts, state, seconds to the next try, age,
 * last error. CTL_EXIT_NOMATCH when there is none.
 */
static int ctl_outbox_list(ctl_t *ctl, const char *queue)
{
    db_t *db = NULL;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int rc, shown = 0, max = ctl->conf->outbox_max_attempts;
    size_t cap = 1024;
    char *sql = NULL, *p;
    long limit = ctl->limit > 0 ? ctl->limit : 1000;

    for (int i = 0; i < ctl->conf->n_queues; i++)
        cap += 2 * strlen(ctl->conf->queues[i].consumer) + 8;
    if ((sql = malloc(cap)) == NULL)
        return CTL_EXIT_PARTIAL;
    p = sql + sprintf(sql,
                      "SELECT id, consumer, msg_id, exchange, routing_key, attempts, "
                      "COALESCE(GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(3), next_at), 0), 0), "
                      "TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)), COALESCE(last_error, '') "
                      "FROM " OUTBOX_TABLE " WHERE consumer IN (");
    int n = 0;
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        const conf_queue_t *q = &ctl->conf->queues[i];
        if (queue && strcmp(q->name, queue) != 0)
            continue;
        char *hc = ctl_hex(q->consumer, strlen(q->consumer));
        if (hc == NULL) {
            free(sql);
            return CTL_EXIT_PARTIAL;
        }
        p += sprintf(p, "%s%s", n++ ? ", " : "", hc);
        free(hc);
    }
    if (n == 0) {
        fprintf(stderr, "idemctl: queue '%s' is not in %s\n", queue, ctl->conf->path);
        free(sql);
        return CTL_EXIT_NOMATCH;
    }
    sprintf(p, ") ORDER BY id LIMIT %ld", limit);
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        fprintf(stderr, "idemctl: reading %s: %s%s\n", OUTBOX_TABLE, mysql_error(db->my),
                mysql_errno(db->my) == ER_BAD_FIELD_ERROR
                    ? " (apply sql/009_idemd_outbox_attempts.sql)"
                    : "");
        rc = CTL_EXIT_PARTIAL;
        goto out;
    }
    if (ctl->json)
        ctl->out = json_object_new_array();
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(res);
        long long attempts = atoll(row[5]);
        const char *state = attempts == 0 ? "waiting" : attempts < max ? "retrying" : "exhausted";
        double next_s = (double)atoll(row[6]) / 1e6, age_s = (double)atoll(row[7]) / 1e6;
        shown++;
        if (ctl->json) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "row", json_object_new_int64(atoll(row[0])));
            ctl_json_str(o, "consumer", row[1], len[1]);
            ctl_json_str(o, "msg_id", row[2], len[2]);
            ctl_json_str(o, "exchange", row[3], len[3]);
            ctl_json_str(o, "routing_key", row[4], len[4]);
            json_object_object_add(o, "attempts", json_object_new_int64(attempts));
            json_object_object_add(o, "state", json_object_new_string(state));
            json_object_object_add(o, "next_try_in_seconds", json_object_new_double(next_s));
            json_object_object_add(o, "age_seconds", json_object_new_double(age_s));
            ctl_json_str(o, "last_error", row[8], len[8]);
            json_object_array_add(ctl->out, o);
            continue;
        }
        printf("%s\t", row[0]);
        ctl_put(stdout, row[1], len[1]);
        fputc('\t', stdout);
        ctl_put(stdout, row[2], len[2]);
        fputc('\t', stdout);
        ctl_put(stdout, row[3], len[3]);
        fputc('\t', stdout);
        ctl_put(stdout, row[4], len[4]);
        printf("\tattempts=%lld\t%s\tnext_in=%.1fs\tage=%.1fs\t", attempts, state, next_s, age_s);
        ctl_put(stdout, row[8], len[8]);
        fputc('\n', stdout);
    }
    rc = shown > 0 ? CTL_EXIT_OK : CTL_EXIT_NOMATCH;
out:
    ctl_json_flush(ctl);
    if (res)
        mysql_free_result(res);
    if (db)
        (void)mysql_rollback(db->my);
    db_close(db);
    free(sql);
    return rc;
}

/* The queue named name in the daemon's status document, or NULL. */
static json_object *ctl_daemon_queue(json_object *doc, const char *name)
{
    json_object *qs;
    if (doc == NULL || !json_object_object_get_ex(doc, "queues", &qs))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(qs); i++) {
        json_object *q = json_object_array_get_idx(qs, i), *n;
        if (json_object_object_get_ex(q, "queue", &n) &&
            strcmp(json_object_get_string(n), name) == 0)
            return q;
    }
    return NULL;
}

/* Integer member key of o, or -1. */
static long long ctl_json_ll(json_object *o, const char *key)
{
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : -1;
}

/*
 * status: per configured queue, from the broker (passive declares) and the
 * database: consumers attached (one per running worker), ready messages,
 * dead letters, messages waiting in delay queues, records committed in the
 * last minute, attempts rows; and from the daemon (GET /status at
 * metrics.listen, when set): its workers consuming, restarts and the last
 * error or warning about the queue's workers. A daemon that cannot be read
 * makes the exit code CTL_EXIT_PARTIAL after everything else is shown.
 */
static int ctl_status(ctl_t *ctl)
{
    mq_t *mq = NULL;
    db_t *db = NULL;
    int rc = CTL_EXIT_OK;
    char sql[1200], vals[2][64], name[512], derr[256] = "";
    json_object *daemon = NULL;
    const char *dstate = "not configured";

    if (ctl->conf->metrics.listen) {
        daemon = ctl_daemon_status(ctl->conf, derr, sizeof(derr));
        dstate = daemon ? "ok" : "unreachable";
        if (daemon == NULL)
            fprintf(stderr, "idemctl: the daemon at %s did not answer GET /status: %s\n",
                    ctl->conf->metrics.listen, derr);
    } else {
        fprintf(stderr,
                "idemctl: metrics.listen is not set in %s: the daemon's workers and last "
                "errors are not shown\n",
                ctl->conf->path);
    }

    if (mq_open(&ctl->conf->broker, "idemctl", 0, NULL, 0, &mq) != 0) {
        fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    if (ctl->json)
        ctl->out = json_object_new_array();
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        const conf_queue_t *q = &ctl->conf->queues[i];
        unsigned ready = 0, consumers = 0, dl = 0, delayed = 0, m, c;
        int st = ctl_queue_peek(mq, q->name, &ready, &consumers);
        if (st < 0) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        bool present = st == 0;
        if (q->dead_letter_queue && ctl_queue_peek(mq, q->dead_letter_queue, &dl, &c) < 0) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        for (int t = 0; t < q->n_retry_delays; t++) {
            snprintf(name, sizeof(name), "%s.retry.%d", q->name, q->retry_delays_ms[t]);
            st = ctl_queue_peek(mq, name, &m, &c);
            if (st < 0) {
                rc = CTL_EXIT_PARTIAL;
                goto out;
            }
            delayed += st == 0 ? m : 0;
        }
        char *hc = ctl_hex(q->consumer, strlen(q->consumer));
        long long recent = 0, attempts = 0;
        if (hc == NULL) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM `%s` WHERE create_time >= NOW(3) - INTERVAL 60 SECOND AND "
                 "consumer = %s",
                 ctl->conf->database.record_table, hc);
        int got = ctl_query_row(db, sql, vals, 1);
        if (got == 1)
            recent = atoll(vals[0]);
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM " DB_ATTEMPT_TABLE " WHERE consumer = %s",
                 hc);
        free(hc);
        if (got < 0 || (got = ctl_query_row(db, sql, vals, 1)) < 0) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        attempts = got == 1 ? atoll(vals[0]) : 0;
        long long ob[3];
        int obs = ctl_outbox_counts(ctl, db, q->consumer, ob);
        if (obs < 0) {
            rc = CTL_EXIT_PARTIAL;
            goto out;
        }
        json_object *dq = ctl_daemon_queue(daemon, q->name), *derror = NULL, *dr = NULL, *v;
        if (dq && json_object_object_get_ex(dq, "last_error", &v) && v)
            derror = v;
        if (dq)
            json_object_object_get_ex(dq, "restarts", &dr);
        long long up = ctl_json_ll(dq, "consuming");
        if (ctl->json) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "queue", json_object_new_string(q->name));
            json_object_object_add(o, "consumer", json_object_new_string(q->consumer));
            json_object_object_add(o, "present", json_object_new_boolean(present));
            json_object_object_add(o, "workers_configured", json_object_new_int(q->workers));
            json_object_object_add(o, "consumers", json_object_new_int64(consumers));
            json_object_object_add(o, "ready", json_object_new_int64(ready));
            json_object_object_add(
                o, "dead_letter_queue",
                q->dead_letter_queue ? json_object_new_string(q->dead_letter_queue) : NULL);
            json_object_object_add(o, "dead_letters", json_object_new_int64(dl));
            json_object_object_add(o, "delayed", json_object_new_int64(delayed));
            json_object_object_add(o, "records_last_60s", json_object_new_int64(recent));
            json_object_object_add(o, "rate_per_s", json_object_new_double(recent / 60.0));
            json_object_object_add(o, "attempt_rows", json_object_new_int64(attempts));
            if (obs == 0) {
                json_object *oo = json_object_new_object();
                json_object_object_add(oo, "rows", json_object_new_int64(ob[0]));
                json_object_object_add(oo, "retrying", json_object_new_int64(ob[1]));
                json_object_object_add(oo, "exhausted", json_object_new_int64(ob[2]));
                json_object_object_add(o, "outbox", oo);
            } else {
                json_object_object_add(o, "outbox", NULL);
            }
            json_object_object_add(o, "daemon", json_object_new_string(dstate));
            json_object_object_add(o, "workers_up", up >= 0 ? json_object_new_int64(up) : NULL);
            json_object_object_add(o, "restarts", dr ? json_object_get(dr) : NULL);
            json_object_object_add(o, "last_error", derror ? json_object_get(derror) : NULL);
            json_object_array_add(ctl->out, o);
        } else {
            char upbuf[32] = "?", rsbuf[32] = "?", errbuf[600] = "none", obbuf[80] = "-";
            if (obs == 0)
                snprintf(obbuf, sizeof(obbuf), "%lld/%lld/%lld", ob[0], ob[1], ob[2]);
            json_object *t, *age;
            if (up >= 0)
                snprintf(upbuf, sizeof(upbuf), "%lld/%d", up, q->workers);
            if (dr) {
                long long sum = 0;
                json_object_object_foreach(dr, kind, count)
                {
                    (void)kind;
                    sum += json_object_get_int64(count);
                }
                snprintf(rsbuf, sizeof(rsbuf), "%lld", sum);
            }
            if (derror && json_object_object_get_ex(derror, "text", &t) &&
                json_object_object_get_ex(derror, "age_seconds", &age))
                snprintf(errbuf, sizeof(errbuf), "%.0fs ago: %s", json_object_get_double(age),
                         json_object_get_string(t));
            printf("%s\t%s\tconsumers=%u/%d\tready=%u\tdead_letters=%u\tdelayed=%u\t"
                   "records_60s=%lld\trate=%.2f/s\tattempt_rows=%lld\toutbox=%s\tworkers_up=%s\t"
                   "restarts=%s\tlast_error=%s\n",
                   q->name, present ? "present" : "absent", consumers, q->workers, ready, dl,
                   delayed, recent, recent / 60.0, attempts, obbuf, upbuf, rsbuf, errbuf);
        }
    }
    if (ctl->conf->metrics.listen && daemon == NULL)
        rc = CTL_EXIT_PARTIAL;
out:
    ctl_json_flush(ctl);
    json_object_put(daemon);
    db_close(db);
    mq_close(mq);
    return rc;
}

/* ---------- dead letters ---------- */

/* A header of props as text (strings as they are, integers in decimal); false if absent. */
static bool ctl_header(const amqp_basic_properties_t *p, const char *name, char *buf, size_t len)
{
    size_t n = strlen(name);
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return false;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len != n || memcmp(e->key.bytes, name, n) != 0)
            continue;
        const amqp_field_value_t *v = &e->value;
        switch (v->kind) {
        case AMQP_FIELD_KIND_UTF8:
        case AMQP_FIELD_KIND_BYTES:
            snprintf(buf, len, "%.*s", (int)v->value.bytes.len, (const char *)v->value.bytes.bytes);
            return true;
        case AMQP_FIELD_KIND_I64:
            snprintf(buf, len, "%lld", (long long)v->value.i64);
            return true;
        case AMQP_FIELD_KIND_I32:
            snprintf(buf, len, "%d", (int)v->value.i32);
            return true;
        case AMQP_FIELD_KIND_U32:
            snprintf(buf, len, "%u", (unsigned)v->value.u32);
            return true;
        default:
            snprintf(buf, len, "?");
            return true;
        }
    }
    return false;
}

/* Fill l's fields from its message (l->msg read already). */
static void ctl_letter_fields(const ctl_t *ctl, ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    char num[32], err[128];

    l->q = NULL;
    l->queue[0] = '\0';
    if (ctl_header(p, RELAY_H_QUEUE, l->queue, sizeof(l->queue)))
        for (int i = 0; i < ctl->conf->n_queues && !l->q; i++)
            if (strcmp(ctl->conf->queues[i].name, l->queue) == 0)
                l->q = &ctl->conf->queues[i];
    /* A dead onward message's id is its message_id property, whatever its source queue uses. */
    l->onward = delivery_header_int(p, RELAY_H_ONWARD) == 1;
    l->id_len = 0;
    l->has_id = delivery_id(p, l->q && !l->onward ? l->q->id_header : NULL, l->id, &l->id_len, err,
                            sizeof(err)) == 0;
    if (!ctl_header(p, RELAY_H_ERROR, l->reason, sizeof(l->reason)))
        l->reason[0] = '\0';
    if (!ctl_header(p, RELAY_H_FIRST_FAILURE, l->first, sizeof(l->first)))
        l->first[0] = '\0';
    if (!ctl_header(p, RELAY_H_LAST_FAILURE, l->last, sizeof(l->last)))
        l->last[0] = '\0';
    l->attempts = ctl_header(p, RELAY_H_ATTEMPTS, num, sizeof(num)) ? atoll(num) : 0;
    l->has_exchange = ctl_header(p, RELAY_H_EXCHANGE, l->exchange, sizeof(l->exchange));
    if (!l->has_exchange)
        l->exchange[0] = '\0';
    l->has_routing_key = ctl_header(p, RELAY_H_ROUTING_KEY, l->routing_key, sizeof(l->routing_key));
    if (!l->has_routing_key)
        l->routing_key[0] = '\0';
    l->body_dropped = ctl_header(p, RELAY_H_BODY_DROPPED, num, sizeof(num));
    l->verified = false;
    l->unverified[0] = '\0';
}

/*
 * Whether l's idemd headers (queue, id, attempts, first failure, original
 * route) were signed by idemd under one of ctl->keys: sets l->verified, or
 * l->unverified to why not. A letter of a queue idemd dead-lettered is
 * bound to that queue (idemd-queue) and its id (the queue's id_header, or
 * the message_id property when the queue is not configured here); a dead
 * onward message (idemd-onward) to "onward:" and its source queue, and the
 * message_id property.
 */
static void ctl_letter_verify(const ctl_t *ctl, ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    char oq[300], sig[RELAY_SIG_HEX + 8];
    const char *bound = l->onward ? relay_onward_queue(l->queue, oq, sizeof(oq)) : l->queue;
    unsigned attempts;

    if (ctl->keys.n == 0)
        snprintf(l->unverified, sizeof(l->unverified), "the relay keys could not be read");
    else if (!l->queue[0])
        snprintf(l->unverified, sizeof(l->unverified), "it has no %s header", RELAY_H_QUEUE);
    else if (!ctl_header(p, RELAY_H_SIG, sig, sizeof(sig)))
        snprintf(l->unverified, sizeof(l->unverified),
                 "it has no %s: idemd did not dead-letter it (published into the queue?)",
                 RELAY_H_SIG);
    else if (!l->has_id || bound == NULL)
        snprintf(l->unverified, sizeof(l->unverified), "it has no message id to check %s against",
                 RELAY_H_SIG);
    else if (!relay_trusted(p, &ctl->keys, bound, l->id, l->id_len, &attempts))
        snprintf(l->unverified, sizeof(l->unverified),
                 "%s does not verify under the %d key(s) in table " DB_KEY_TABLE
                 " for queue '%.100s'%s: forged or changed headers, or a retired key",
                 RELAY_H_SIG, ctl->keys.n, l->queue,
                 l->onward || l->q ? "" : " (not in this configuration: id taken from message_id)");
    else
        l->verified = true;
}

/* Whether the command's selection (--reason, --id) takes l. */
static bool ctl_selected(const ctl_t *ctl, const ctl_letter_t *l)
{
    if (ctl->has_reason && regexec(&ctl->reason, l->reason, 0, NULL, 0) != 0)
        return false;
    if (ctl->n_ids > 0) {
        bool hit = false;
        for (int i = 0; i < ctl->n_ids && !hit; i++)
            hit = l->has_id && strlen(ctl->ids[i]) == l->id_len &&
                  memcmp(ctl->ids[i], l->id, l->id_len) == 0;
        return hit;
    }
    return true;
}

/* One dead letter for dlq list: a line of text, or an object of the --json document. */
static void ctl_letter_print(const ctl_t *ctl, const ctl_letter_t *l, json_object *arr)
{
    if (ctl->json) {
        json_object *o = json_object_new_object();
        if (l->has_id)
            ctl_json_str(o, "id", l->id, l->id_len);
        else
            json_object_object_add(o, "id", NULL);
        ctl_json_str(o, "reason", l->reason, strlen(l->reason));
        json_object_object_add(o, "attempts", json_object_new_int64(l->attempts));
        json_object_object_add(o, "first_failure", json_object_new_string(l->first));
        json_object_object_add(o, "last_failure", json_object_new_string(l->last));
        json_object_object_add(o, "original_exchange",
                               l->has_exchange ? json_object_new_string(l->exchange) : NULL);
        json_object_object_add(o, "original_routing_key",
                               l->has_routing_key ? json_object_new_string(l->routing_key) : NULL);
        json_object_object_add(o, "queue", json_object_new_string(l->queue));
        json_object_array_add(arr, o);
        return;
    }
    if (l->has_id)
        ctl_put(stdout, l->id, l->id_len);
    else
        fputc('-', stdout);
    printf("\t%lld\t%s\t%s\t", l->attempts, l->first[0] ? l->first : "-",
           l->last[0] ? l->last : "-");
    ctl_puts(stdout, l->has_exchange ? l->exchange : "-");
    fputc('\t', stdout);
    ctl_puts(stdout, l->has_routing_key ? l->routing_key : "-");
    fputc('\t', stdout);
    ctl_puts(stdout, l->queue[0] ? l->queue : "-");
    fputc('\t', stdout);
    ctl_puts(stdout, l->reason);
    fputc('\n', stdout);
}

/*
 * Headers a replayed copy must not carry: idemd's failure headers and the
 * broker's. idemd-body-dropped stays, so that whoever gets the empty body
 * knows why.
 */
static bool ctl_header_dropped(amqp_bytes_t key)
{
    size_t bd = strlen(RELAY_H_BODY_DROPPED);
    if (key.len == bd && memcmp(key.bytes, RELAY_H_BODY_DROPPED, bd) == 0)
        return false;
    static const char *prefixes[] = {"idemd-", "x-death", "x-first-death-", "x-last-death-",
                                     "x-delivery-count"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (key.len >= n && memcmp(key.bytes, prefixes[i], n) == 0)
            return true;
    }
    return false;
}

/*
 * Replay one dead letter: publish a copy (confirmed, mandatory) to its
 * route (ctl_replay_route), clear its attempts row, then ack it on rd. A
 * letter whose signature does not verify (without --unverified) or whose
 * body was dropped (without --allow-empty-body) is refused: said on stderr,
 * one line, and kept. Returns 0 when replayed, 1 when refused, or -1
 * (logged) when the letter stays in the queue unacked and the pass stops.
 */
static int ctl_replay_one(const ctl_t *ctl, mq_t *rd, mq_t *pub, db_t *db, const ctl_letter_t *l)
{
    const amqp_basic_properties_t *p = &l->msg.properties;
    amqp_basic_properties_t props = *p;
    amqp_table_entry_t *entries = NULL;
    const char *exchange = "", *rk;
    char pid[96];
    int n = 0, rc = -1;

    delivery_id_printable(l->has_id ? l->id : "-", l->has_id ? l->id_len : 1, pid, sizeof(pid));
    if (!l->verified && !ctl->unverified) {
        fprintf(stderr,
                "idemctl: NOT REPLAYED: dead letter %s (queue '%s'): %s. It stays in the dead "
                "letter queue; check it, then --unverified replays it anyway\n",
                pid, l->queue[0] ? l->queue : "-", l->unverified);
        return 1;
    }
    if (!l->verified)
        fprintf(
            stderr,
            "idemctl: WARNING: replaying dead letter %s (queue '%s') unverified (--unverified): "
            "%s\n",
            pid, l->queue[0] ? l->queue : "-", l->unverified);
    if (l->body_dropped && !ctl->allow_empty_body) {
        fprintf(stderr,
                "idemctl: NOT REPLAYED: dead letter %s (queue '%s'): its body was dropped (%s); "
                "the copy would be empty. It stays; --allow-empty-body replays it with the "
                "header kept\n",
                pid, l->queue[0] ? l->queue : "-", RELAY_H_BODY_DROPPED);
        return 1;
    }
    if (ctl->to_queue) {
        rk = ctl->to_queue;
    } else if ((ctl->to_original || l->onward) && l->has_exchange && l->exchange[0]) {
        /* An onward message goes where it was meant to go; --to-original sends a letter
         * back through its original exchange, to every queue bound there. */
        exchange = l->exchange;
        rk = l->routing_key;
    } else if ((ctl->to_original || l->onward) && l->has_routing_key && l->routing_key[0]) {
        rk = l->routing_key; /* published through the default exchange: the queue's name */
    } else if (!l->onward && l->queue[0]) {
        rk = l->queue; /* the queue that dead-lettered it, only it */
    } else {
        log_error("replay: dead letter %s carries no %s (%s, %s, %s): use --to QUEUE", pid,
                  l->onward ? "intended route" : "queue", RELAY_H_QUEUE, RELAY_H_EXCHANGE,
                  RELAY_H_ROUTING_KEY);
        goto out;
    }
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        entries = calloc((size_t)p->headers.num_entries + 1, sizeof(*entries));
        if (entries == NULL)
            goto out;
        for (int i = 0; i < p->headers.num_entries; i++)
            if (!ctl_header_dropped(p->headers.entries[i].key))
                entries[n++] = p->headers.entries[i];
        props.headers.entries = entries;
        props.headers.num_entries = n;
    }
    mq_round_begin(pub);
    if (mq_publish_to(pub, exchange, rk, &props, l->msg.body) < 0 ||
        mq_wait_confirms(pub, CTL_CONFIRM_MS) != 0) {
        log_error("replay: dead letter %s: the copy to exchange '%s' routing key '%s' was not "
                  "confirmed; the dead letter stays",
                  pid, exchange, rk);
        goto out;
    }
    if (l->has_id && !l->onward) { /* an onward message has no attempts row */
        const char *consumer = ctl->consumer ? ctl->consumer
                               : l->q        ? l->q->consumer
                               : l->queue[0] ? l->queue
                                             : NULL;
        if (consumer && (db_set_consumer(db, consumer) != 0 ||
                         db_attempt_clear(db, l->id, l->id_len) < 0 || db_commit(db) != DB_OK)) {
            (void)db_rollback(db);
            log_error("replay: dead letter %s: published, but its attempts row was not cleared; "
                      "the dead letter stays (a second replay is absorbed by the record)",
                      pid);
            goto out;
        }
    }
    log_info("replay: %s published to exchange '%s' routing key '%s'", pid, exchange, rk);
    if (ctl->slow_ms > 0) {
        /* Test knob: a window between the confirmed copy and the ack for kill -9. */
        fprintf(stderr, "idemctl: replayed %s, acking in %ld ms\n", pid, ctl->slow_ms);
        struct timespec ts = {ctl->slow_ms / 1000, (ctl->slow_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (mq_ack(rd, l->tag, false) != 0)
        goto out;
    rc = 0;
out:
    free(entries);
    return rc;
}

/*
 * Requeue the kept deliveries tags[0..n-1] (ascending) in their order.
 * Closing the channel would requeue them too, but a quorum queue (3.10)
 * then returns them out of order; and it reorders returns that pile up
 * past 32 in its client on the broker side. So: basic.nack (multiple,
 * requeue) CTL_NACK_CHUNK tags at a time, and before the next chunk wait
 * (up to 5 s, then go on) until the queue's ready count shows this one
 * back. Logs failures; the channel's close requeues what is left.
 */
static void ctl_requeue(mq_t *rd, const char *queue, const uint64_t *tags, long n)
{
    unsigned base = 0, ready = 0, consumers;
    long back = 0;

    if (ctl_queue_peek(rd, queue, &base, &consumers) != 0)
        return;
    for (long i = 0; i < n; i++) {
        if ((i + 1) % CTL_NACK_CHUNK != 0 && i != n - 1)
            continue;
        if (amqp_basic_nack(rd->conn, MQ_CHANNEL, tags[i], 1, 1) != AMQP_STATUS_OK) {
            log_warn("broker %s: nack of the kept messages failed; closing the channel "
                     "requeues them",
                     rd->where);
            return;
        }
        back = i + 1;
        for (int waited = 0; waited < 1000; waited++) {
            if (ctl_queue_peek(rd, queue, &ready, &consumers) != 0)
                return;
            if ((long)ready >= (long)base + back)
                break;
            struct timespec ts = {0, 5000000L};
            nanosleep(&ts, NULL);
        }
    }
}

/*
 * dlq list / replay / purge (and the count that purge without --yes
 * prints): take the queue's messages one by one with basic.get, without
 * acking, as many as it held at the start. Selected ones are printed
 * (list, kept), replayed or purged (acked); every message not acked is
 * requeued at the end in its order (ctl_requeue). A classic queue puts
 * them back at their positions; a quorum queue (3.10) appends returned
 * messages behind the rest, so the pass always takes the whole queue.
 * Dead letters that arrive during a pass end up ahead of the returned
 * ones on a quorum queue.
 */
static int ctl_dlq(ctl_t *ctl, const char *queue, ctl_mode_t mode)
{
    static const char *verbs[] = {"listed", "matched", "replayed", "purged"};
    mq_t *rd = NULL, *pub = NULL;
    db_t *db = NULL;
    json_object *arr = NULL;
    unsigned depth = 0, consumers = 0;
    uint64_t *kept = NULL; /* tags not acked, ascending */
    long n_kept = 0;
    long scanned = 0, matched = 0, done = 0, undecodable = 0, refused = 0;
    long long returns = 0; /* the highest x-delivery-count seen */
    int rc = CTL_EXIT_OK;
    char why[400];

    if (mq_open(&ctl->conf->broker, "idemctl", 0, NULL, 0, &rd) != 0) {
        fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    int st = ctl_queue_peek(rd, queue, &depth, &consumers);
    if (st != 0) {
        if (st > 0)
            fprintf(stderr, "idemctl: no queue %s\n", queue);
        rc = st > 0 ? CTL_EXIT_NOMATCH : CTL_EXIT_PARTIAL;
        goto out;
    }
    if (consumers > 0)
        log_warn("queue %s has %u consumer(s): they may take messages during this pass, and the "
                 "order seen here is not the queue's",
                 queue, consumers);
    if (mode == CTL_REPLAY) {
        if (mq_open_publisher(&ctl->conf->broker, "idemctl", 0, NULL, NULL, &pub) != 0) {
            fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
            rc = CTL_EXIT_CONNECT;
            goto out;
        }
        if ((rc = ctl_db_open(ctl, &db)) != 0)
            goto out;
        if (db_relay_keys(db, false, &ctl->keys) != 0) {
            if (!ctl->unverified) {
                fprintf(stderr,
                        "idemctl: dlq replay: cannot read the relay keys from table " DB_KEY_TABLE
                        " (see above), so no dead letter's %s can be checked; nothing was "
                        "replayed. --unverified replays without checking\n",
                        RELAY_H_SIG);
                rc = CTL_EXIT_CONNECT;
                goto out;
            }
            fprintf(stderr, "idemctl: WARNING: cannot read the relay keys from table " DB_KEY_TABLE
                            ": every letter is replayed unverified (--unverified)\n");
        }
    }
    if (ctl->json && mode == CTL_LIST)
        arr = json_object_new_array();
    if ((kept = calloc((size_t)depth + 1, sizeof(*kept))) == NULL) {
        log_error("out of memory for %u delivery tags", depth);
        rc = CTL_EXIT_PARTIAL;
        goto out;
    }
    while (scanned < (long)depth) {
        ctl_letter_t l;
        amqp_rpc_reply_t r = amqp_basic_get(rd->conn, MQ_CHANNEL, amqp_cstring_bytes(queue), 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            log_error("broker %s: basic.get %s: %s", rd->where, queue,
                      mq_reply_text(r, why, sizeof(why)));
            rc = CTL_EXIT_PARTIAL;
            break;
        }
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
            break;
        l.tag = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
        r = amqp_read_message(rd->conn, MQ_CHANNEL, &l.msg, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_BAD_AMQP_DATA) {
            /* rabbitmq-c 0.14+ refuses headers nested deeper than 100 levels, and its input
             * stays stuck on that frame: nothing more can be read on this connection. The
             * letter is not acked, so it returns to the queue when the connection closes. */
            rd->deaf = true;
            undecodable++;
            fprintf(stderr,
                    "idemctl: dead letter %ld of %u in %s cannot be decoded by this "
                    "librabbitmq (%s): its headers nest deeper than it reads (100 levels). It "
                    "stays in the queue; the pass stops here, and the %ld letter(s) behind it "
                    "were not read. A client that decodes it (librabbitmq 0.11, or another "
                    "library) can move it\n",
                    scanned + 1, depth, queue, amqp_version(), (long)depth - scanned - 1);
            rc = CTL_EXIT_PARTIAL;
            break;
        }
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            log_error("broker %s: reading a message of %s: %s", rd->where, queue,
                      mq_reply_text(r, why, sizeof(why)));
            rc = CTL_EXIT_PARTIAL;
            break;
        }
        scanned++;
        long long dc = delivery_header_int(&l.msg.properties, "x-delivery-count");
        if (dc > returns)
            returns = dc;
        ctl_letter_fields(ctl, &l);
        bool acked = false, stop = false;
        /* Past --limit the pass still takes every message: a quorum queue puts returned
         * messages behind the ones never taken, so only a whole pass keeps the order. */
        bool wanted = !(mode == CTL_LIST && ctl->limit > 0 && matched >= ctl->limit);
        if (wanted && ctl_selected(ctl, &l)) {
            matched++;
            switch (mode) {
            case CTL_LIST:
                ctl_letter_print(ctl, &l, arr);
                break;
            case CTL_COUNT:
                break;
            case CTL_PURGE:
                acked = mq_ack(rd, l.tag, false) == 0;
                stop = !acked;
                break;
            case CTL_REPLAY: {
                ctl_letter_verify(ctl, &l);
                int r1 = ctl_replay_one(ctl, rd, pub, db, &l);
                acked = r1 == 0;
                refused += r1 == 1;
                stop = r1 < 0;
                break;
            }
            }
            done += acked;
        }
        if (!acked)
            kept[n_kept++] = l.tag;
        amqp_destroy_message(&l.msg);
        amqp_maybe_release_buffers(rd->conn);
        if (stop) {
            rc = CTL_EXIT_PARTIAL;
            break;
        }
    }
    if (n_kept > 0 && rd->channel_open && !rd->deaf)
        ctl_requeue(rd, queue, kept, n_kept);
    /* idemd declares its quorum queues without a delivery limit; one from an older idemd
     * keeps RabbitMQ 4's, and on 4.0-4.2 every pass counts a return for each letter. */
    if (returns >= CTL_RETURNS_WARN)
        log_warn("queue %s: a letter was returned %lld times (x-delivery-count; RabbitMQ "
                 "4.0-4.2 count each pass): harmless where the queue has no delivery limit (as "
                 "idemd declares it), but one from an older idemd keeps RabbitMQ 4's limit of 20, "
                 "which deletes it: apply a policy with \"delivery-limit\": -1 "
                 "(docs/rabbitmq.md, \"Delivery limits\")",
                 queue, returns);
    if (rc == CTL_EXIT_OK && matched == 0)
        rc = CTL_EXIT_NOMATCH;
    if (rc == CTL_EXIT_OK && refused > 0)
        rc = CTL_EXIT_PARTIAL; /* done what could be; the refused ones stay */
    if (ctl->json) {
        ctl->out = json_object_new_object();
        json_object_object_add(ctl->out, "queue", json_object_new_string(queue));
        json_object_object_add(ctl->out, "scanned", json_object_new_int64(scanned));
        json_object_object_add(ctl->out, "matched", json_object_new_int64(matched));
        json_object_object_add(ctl->out, "undecodable", json_object_new_int64(undecodable));
        if (mode == CTL_REPLAY || mode == CTL_PURGE)
            json_object_object_add(ctl->out, verbs[mode], json_object_new_int64(done));
        if (mode == CTL_REPLAY)
            json_object_object_add(ctl->out, "refused", json_object_new_int64(refused));
        json_object_object_add(ctl->out, "complete",
                               json_object_new_boolean(rc != CTL_EXIT_PARTIAL));
        if (arr)
            json_object_object_add(ctl->out, "letters", arr);
        arr = NULL;
    } else if (mode == CTL_REPLAY && refused > 0) {
        printf("%s %ld of %ld dead letters in %s (%ld matched, %ld refused and kept: see above)\n",
               verbs[mode], done, scanned, queue, matched, refused);
    } else if (mode == CTL_REPLAY || mode == CTL_PURGE) {
        printf("%s %ld of %ld dead letters in %s (%ld matched)\n", verbs[mode], done, scanned,
               queue, matched);
    } else if (mode == CTL_COUNT) {
        printf("would purge %ld of %ld dead letters in %s; nothing was purged: add --yes\n",
               matched, scanned, queue);
    }
    if (mode == CTL_COUNT && rc != CTL_EXIT_PARTIAL && rc != CTL_EXIT_CONNECT)
        rc = CTL_EXIT_USAGE;
out:
    free(kept);
    json_object_put(arr);
    ctl_json_flush(ctl);
    db_close(db);
    mq_close(pub);
    mq_close(rd);
    explicit_bzero(&ctl->keys, sizeof(ctl->keys));
    return rc;
}

/* ---------- command line ---------- */

/* A usage error: print fmt (one %s: arg) and the usage; returns CTL_EXIT_USAGE. */
static int ctl_bad(const char *fmt, const char *arg)
{
    fputs("idemctl: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    ctl_usage(stderr);
    return CTL_EXIT_USAGE;
}

/* A positive number for --limit, --batch, --slow-ms; -1 when bad. */
static long ctl_number(const char *s)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    return (errno || end == s || *end || n < 0) ? -1 : n;
}

/* Parse the command line, load the configuration, run one command; exit codes CTL_EXIT_*. */
int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"consumer", required_argument, NULL, 'C'},
        {"reason", required_argument, NULL, 'r'},
        {"limit", required_argument, NULL, 'n'},
        {"id", required_argument, NULL, 'i'},
        {"all", no_argument, NULL, 'a'},
        {"to-original", no_argument, NULL, 'o'},
        {"to", required_argument, NULL, 't'},
        {"yes", no_argument, NULL, 'y'},
        {"older-than", required_argument, NULL, 'O'},
        {"batch", required_argument, NULL, 'b'},
        {"slow-ms", required_argument, NULL, 'S'},
        {"unverified", no_argument, NULL, 'U'},
        {"allow-empty-body", no_argument, NULL, 'E'},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ctl_t ctl = {.batch = 1000, .older_s = -1};
    const char *path = CTL_DEFAULT_CONF, *older = NULL;
    char err[1024];
    int verbose = 0, o, rc = CTL_EXIT_USAGE;
    bool have_id = false;

    ctl.ids = calloc((size_t)argc + 1, sizeof(*ctl.ids));
    if (ctl.ids == NULL)
        return CTL_EXIT_PARTIAL;
    while ((o = getopt_long(argc, argv, "c:vVh", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            path = optarg;
            break;
        case 'j':
            ctl.json = true;
            break;
        case 'C':
            ctl.consumer = optarg;
            break;
        case 'r':
            if (ctl.has_reason)
                return ctl_bad("--reason given twice%s", "");
            if ((o = regcomp(&ctl.reason, optarg, REG_EXTENDED | REG_NOSUB)) != 0) {
                regerror(o, &ctl.reason, err, sizeof(err));
                fprintf(stderr, "idemctl: --reason '%s': %s\n", optarg, err);
                return CTL_EXIT_USAGE;
            }
            ctl.has_reason = true;
            ctl.reason_src = optarg;
            break;
        case 'n':
            if ((ctl.limit = ctl_number(optarg)) < 0)
                return ctl_bad("--limit '%s': expected a number", optarg);
            break;
        case 'i':
            ctl.ids[ctl.n_ids++] = optarg;
            have_id = true;
            break;
        case 'a':
            ctl.all = true;
            break;
        case 'o':
            ctl.to_original = true;
            break;
        case 't':
            ctl.to_queue = optarg;
            break;
        case 'y':
            ctl.yes = true;
            break;
        case 'U':
            ctl.unverified = true;
            break;
        case 'E':
            ctl.allow_empty_body = true;
            break;
        case 'O':
            older = optarg;
            if ((ctl.older_s = ctl_duration(optarg)) < 0)
                return ctl_bad("--older-than '%s': expected a duration like 30d, 12h, 1h30m, 90s",
                               optarg);
            break;
        case 'b':
            if ((ctl.batch = ctl_number(optarg)) <= 0)
                return ctl_bad("--batch '%s': expected a number above 0", optarg);
            break;
        case 'S':
            if ((ctl.slow_ms = ctl_number(optarg)) < 0)
                return ctl_bad("--slow-ms '%s': expected a number", optarg);
            break;
        case 'v':
            verbose++;
            break;
        case 'V':
            printf("idemctl %s\n", IDEMCTL_VERSION);
            return CTL_EXIT_OK;
        case 'h':
            ctl_usage(stdout);
            return CTL_EXIT_OK;
        default:
            ctl_usage(stderr);
            return CTL_EXIT_USAGE;
        }
    }
    char **args = argv + optind;
    int n_args = argc - optind;
    if (n_args < 1)
        return ctl_bad("no command%s", "");
    const char *cmd = args[0], *sub = n_args > 1 ? args[1] : "";
    bool is_dlq = strcmp(cmd, "dlq") == 0;
    if (strcmp(cmd, "status") == 0) {
        if (n_args != 1)
            return ctl_bad("status takes no arguments%s", "");
    } else if (strcmp(cmd, "lookup") == 0) {
        if (n_args < 2)
            return ctl_bad("lookup: which ids?%s", "");
    } else if (is_dlq && (!strcmp(sub, "list") || !strcmp(sub, "purge"))) {
        if (n_args != 3)
            return ctl_bad("dlq %s: one QUEUE expected", sub);
        if (have_id || ctl.all || ctl.to_queue || ctl.to_original || ctl.unverified ||
            ctl.allow_empty_body)
            return ctl_bad("dlq %s takes --reason only to select", sub);
    } else if (is_dlq && !strcmp(sub, "replay")) {
        if (n_args < 3 || (n_args > 3 && !have_id))
            return ctl_bad("dlq replay: one QUEUE expected%s", "");
        for (int i = 3; i < n_args; i++) /* --id a b c: the rest are ids too */
            ctl.ids[ctl.n_ids++] = args[i];
        if (ctl.all == (have_id || ctl.has_reason))
            return ctl_bad("dlq replay: choose --id ID..., --reason REGEX, or --all%s", "");
        if (ctl.to_queue && ctl.to_original)
            return ctl_bad("dlq replay: --to and --to-original exclude each other%s", "");
        if (ctl.to_queue && strcmp(ctl.to_queue, args[2]) == 0)
            return ctl_bad("dlq replay: --to %s is the dead letter queue itself", ctl.to_queue);
    } else if (!strcmp(cmd, "outbox") && !strcmp(sub, "list")) {
        if (n_args > 3)
            return ctl_bad("outbox list: at most one QUEUE%s", "");
    } else if (!strcmp(cmd, "key")) {
        if (n_args != 2 || (strcmp(sub, "status") && strcmp(sub, "stage") &&
                            strcmp(sub, "promote") && strcmp(sub, "retire")))
            return ctl_bad("key: status, stage, promote or retire%s", "");
    } else if (!strcmp(cmd, "records") && !strcmp(sub, "purge")) {
        if (n_args != 2)
            return ctl_bad("records purge takes no arguments%s", "");
        if (older == NULL)
            return ctl_bad("records purge: --older-than DURATION is required%s", "");
    } else {
        return ctl_bad("unknown command '%s'", cmd);
    }

    log_set_target(LOG_TARGET_STDERR);
    log_set_context("idemctl");
    log_set_level(verbose >= 2   ? LOG_LEVEL_DEBUG
                  : verbose == 1 ? LOG_LEVEL_INFO
                                 : LOG_LEVEL_WARNING);
    if (conf_load(path, &ctl.conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "idemctl: %s\n", err);
        return CTL_EXIT_USAGE;
    }
    if (!strcmp(cmd, "status"))
        rc = ctl_status(&ctl);
    else if (!strcmp(cmd, "lookup"))
        rc = ctl_lookup(&ctl, args + 1, n_args - 1);
    else if (!strcmp(cmd, "records"))
        rc = ctl_records_purge(&ctl);
    else if (!strcmp(cmd, "outbox"))
        rc = ctl_outbox_list(&ctl, n_args > 2 ? args[2] : NULL);
    else if (!strcmp(cmd, "key"))
        rc = ctl_key(&ctl, sub);
    else if (!strcmp(sub, "list"))
        rc = ctl_dlq(&ctl, args[2], CTL_LIST);
    else if (!strcmp(sub, "replay"))
        rc = ctl_dlq(&ctl, args[2], CTL_REPLAY);
    else
        rc = ctl_dlq(&ctl, args[2], ctl.yes ? CTL_PURGE : CTL_COUNT);
    conf_free(ctl.conf);
    if (ctl.has_reason)
        regfree(&ctl.reason);
    free(ctl.ids);
    return rc;
}
