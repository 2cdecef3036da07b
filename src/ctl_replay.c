/* ctl_replay.c: what dlq replay knows about dedup and the trail it leaves: the applied check,
 * idemd_replay rows, dlq history. */
#include <json-c/json.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "log.h"

#define CTL_HISTORY_DEFAULT 100 /* dlq history without --limit */

/* A string parameter of len bytes at p (NULL: SQL NULL); len must outlive the bind. */
static void ctl_bind(MYSQL_BIND *b, const void *p, unsigned long *len)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = (void *)p;
    b->buffer_length = *len;
    b->length = len;
    b->is_null_value = p == NULL;
    /* libmysqlclient reads only *is_null (NULL there: never null); libmariadb falls back to
     * is_null_value. Point it there for both. */
    b->is_null = &b->is_null_value;
}

/*
 * Prepare sql on db, bind params[0..n-1] and execute it. Returns the
 * statement (the caller closes it with mysql_stmt_close), or NULL with the
 * server's message logged, prefixed by what.
 */
static MYSQL_STMT *ctl_stmt_run(db_t *db, const char *sql, MYSQL_BIND *params, const char *what)
{
    MYSQL_STMT *st = mysql_stmt_init(db->my);
    if (st == NULL) {
        log_error("database: %s: out of memory", what);
        return NULL;
    }
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0 ||
        (params && mysql_stmt_bind_param(st, params) != 0) || mysql_stmt_execute(st) != 0) {
        log_error("database: %s: %s", what, mysql_stmt_error(st));
        mysql_stmt_close(st);
        return NULL;
    }
    return st;
}

int ctl_applied(db_t *db, const char *record_table, const char *consumer, const char *id,
                size_t len)
{
    char sql[256];
    MYSQL_BIND p[2];
    unsigned long lens[2] = {strlen(consumer), len};
    int rc = -1;

    snprintf(sql, sizeof(sql), "SELECT 1 FROM `%s` WHERE consumer = ? AND msg_id = ?",
             record_table);
    ctl_bind(&p[0], consumer, &lens[0]);
    ctl_bind(&p[1], id, &lens[1]);
    MYSQL_STMT *st = ctl_stmt_run(db, sql, p, "reading the dedup records");
    if (st == NULL)
        goto out;
    if (mysql_stmt_store_result(st) != 0) {
        log_error("database: reading the dedup records: %s", mysql_stmt_error(st));
        goto out;
    }
    rc = mysql_stmt_num_rows(st) > 0;
out:
    if (st)
        mysql_stmt_close(st);
    (void)mysql_query(db->my, "ROLLBACK");
    return rc;
}

int ctl_trail_ready(db_t *db)
{
    int rc = CTL_TRAIL_READY;
    if (mysql_query(db->my, "SELECT id, state, fingerprint FROM idemd_replay LIMIT 0") != 0) {
        unsigned e = mysql_errno(db->my);
        rc = e == ER_NO_SUCH_TABLE ? CTL_TRAIL_NONE : e == ER_BAD_FIELD_ERROR ? CTL_TRAIL_OLD : -1;
        if (rc < 0)
            log_error("database: reading table idemd_replay: %s", mysql_error(db->my));
    } else {
        MYSQL_RES *res = mysql_store_result(db->my);
        if (res)
            mysql_free_result(res);
    }
    (void)mysql_query(db->my, "ROLLBACK");
    return rc;
}

/* The login name of the real user id into buf ("uid N" when it has none). */
static void ctl_os_user(char *buf, size_t len)
{
    struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_name)
        snprintf(buf, len, "%s", pw->pw_name);
    else
        snprintf(buf, len, "uid %u", (unsigned)getuid());
}

int ctl_trail_add(db_t *db, const ctl_trail_t *t, long long *row)
{
    static const char sql[] =
        "INSERT INTO idemd_replay (os_user, sudo_user, db_user, host, letter_id, source_queue, "
        "target_exchange, target_routing_key, consumer, signature, applied, forced, state, "
        "fingerprint) VALUES (?, ?, CURRENT_USER(), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    char user[128], host[256], applied[2], forced[2];
    const char *sudo = getenv("SUDO_USER");
    MYSQL_BIND p[13];
    unsigned long l[13];

    ctl_os_user(user, sizeof(user));
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    if (sudo && strlen(sudo) > 127)
        sudo = NULL;
    snprintf(applied, sizeof(applied), "%d", t->applied > 0);
    snprintf(forced, sizeof(forced), "%d", t->forced);
    const void *v[13] = {
        user,        sudo,           host,          t->id,        t->source,
        t->exchange, t->routing_key, t->consumer,   t->signature, t->applied < 0 ? NULL : applied,
        forced,      t->stage,       t->fingerprint};
    for (int i = 0; i < 13; i++) {
        l[i] = i == 3 ? t->id_len : i == 12 ? CTL_FP_LEN : v[i] ? strlen(v[i]) : 0;
        ctl_bind(&p[i], v[i], &l[i]);
    }
    MYSQL_STMT *st = ctl_stmt_run(db, sql, p, "writing the replay trail (table idemd_replay)");
    if (st == NULL)
        return -1;
    *row = (long long)mysql_stmt_insert_id(st);
    mysql_stmt_close(st);
    return 0;
}

int ctl_trail_find(db_t *db, const unsigned char *fp, long long floor, ctl_trail_row_t *rows,
                   int max)
{
    static const char sql[] =
        "SELECT id, state FROM idemd_replay WHERE fingerprint = ? AND id <= ? ORDER BY id DESC "
        "LIMIT 16";
    MYSQL_BIND p[2];
    unsigned long lens[1] = {CTL_FP_LEN};
    long long fl = floor;
    int n = -1;

    ctl_bind(&p[0], fp, &lens[0]);
    /* The id bound as the integer it is: no string against an integer column. */
    memset(&p[1], 0, sizeof(p[1]));
    p[1].buffer_type = MYSQL_TYPE_LONGLONG;
    p[1].buffer = &fl;
    MYSQL_STMT *st = ctl_stmt_run(db, sql, p, "reading the replay trail (table idemd_replay)");
    if (st == NULL)
        goto out;
    long long id = 0;
    char state[17];
    unsigned long state_len = 0;
    MYSQL_BIND r[2];
    memset(r, 0, sizeof(r));
    r[0].buffer_type = MYSQL_TYPE_LONGLONG;
    r[0].buffer = &id;
    r[1].buffer_type = MYSQL_TYPE_STRING;
    r[1].buffer = state;
    r[1].buffer_length = sizeof(state) - 1;
    r[1].length = &state_len;
    if (mysql_stmt_bind_result(st, r) != 0 || mysql_stmt_store_result(st) != 0) {
        log_error("database: reading the replay trail: %s", mysql_stmt_error(st));
        goto out;
    }
    n = 0;
    while (n < max && mysql_stmt_fetch(st) == 0) {
        state[state_len < sizeof(state) ? state_len : sizeof(state) - 1] = '\0';
        rows[n].id = id;
        rows[n].sending = strcmp(state, CTL_TRAIL_SENDING) == 0;
        n++;
    }
out:
    if (st)
        mysql_stmt_close(st);
    (void)mysql_query(db->my, "ROLLBACK");
    return n;
}

int ctl_trail_floor(db_t *db, long long *floor)
{
    char v[1][64];
    int r = ctl_query_row(db, "SELECT COALESCE(MAX(id), 0) FROM idemd_replay", v, 1);
    (void)mysql_query(db->my, "ROLLBACK");
    if (r != 1)
        return -1;
    *floor = atoll(v[0]);
    return 0;
}

int ctl_trail_set(db_t *db, const long long *rows, long n, const char *state)
{
    size_t cap = 96 + (size_t)n * 22, off;
    char *sql;
    int rc = -1;

    if (n == 0)
        return 0;
    if ((sql = malloc(cap)) == NULL) {
        log_error("out of memory for the replay trail's update");
        return -1;
    }
    if (state)
        off =
            (size_t)snprintf(sql, cap, "UPDATE idemd_replay SET state = '%s' WHERE id IN (", state);
    else
        off = (size_t)snprintf(sql, cap, "DELETE FROM idemd_replay WHERE id IN (");
    for (long i = 0; i < n; i++)
        off += (size_t)snprintf(sql + off, cap - off, "%s%lld", i ? "," : "", rows[i]);
    snprintf(sql + off, cap - off, ")");
    if (mysql_query(db->my, sql) == 0)
        rc = 0;
    else
        log_error("database: %s the replay trail (table idemd_replay): %s",
                  state ? "updating" : "deleting from", mysql_error(db->my));
    free(sql);
    return rc;
}

/* One row of dlq history as a line of text (columns in idemctl(8)) or a JSON object. */
static void ctl_history_row(const ctl_t *ctl, MYSQL_ROW row, const unsigned long *len,
                            json_object *arr)
{
    static const char *names[] = {
        "time",         "os_user",         "sudo_user",          "db_user",  "host",      "id",
        "source_queue", "target_exchange", "target_routing_key", "consumer", "signature", "applied",
        "forced"};
    if (ctl->json) {
        json_object *o = json_object_new_object();
        for (int i = 0; i < 11; i++) {
            if (row[i])
                ctl_json_str(o, names[i], row[i], len[i]);
            else
                json_object_object_add(o, names[i], NULL);
        }
        json_object_object_add(o, "applied",
                               row[11] ? json_object_new_boolean(atoi(row[11]) != 0) : NULL);
        json_object_object_add(o, "forced", json_object_new_boolean(atoi(row[12]) != 0));
        json_object_array_add(arr, o);
        return;
    }
    for (int i = 0; i < 11; i++) {
        if (i == 2) /* the operator: os_user, or os_user(sudo_user) */
            continue;
        if (i > 0)
            ctl_printf("\t");
        if (i == 1) {
            ctl_put(stdout, row[1], len[1]);
            if (row[2]) {
                ctl_printf("(");
                ctl_put(stdout, row[2], len[2]);
                ctl_printf(")");
            }
        } else if (i == 7 && row[i] && len[i] == 0) {
            ctl_printf("\"\""); /* the default exchange */
        } else if (row[i]) {
            ctl_put(stdout, row[i], len[i]);
        } else {
            ctl_printf("-");
        }
    }
    ctl_printf("\t%s\t%s\n",
               !row[11]        ? "unknown"
               : atoi(row[11]) ? "applied"
                               : "not-applied",
               atoi(row[12]) ? "forced" : "-");
}

int ctl_dlq_history(ctl_t *ctl, const char *queue)
{
    db_t *db = NULL;
    MYSQL_RES *res = NULL;
    json_object *arr = NULL;
    char sql[1024];
    long n = 0;
    int rc;

    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    char *hq = queue ? ctl_hex(queue, strlen(queue)) : NULL;
    if (queue && hq == NULL) {
        rc = CTL_EXIT_PARTIAL;
        goto out;
    }
    snprintf(sql, sizeof(sql),
             "SELECT DATE_FORMAT(replayed_at, '%%Y-%%m-%%d %%H:%%i:%%s.%%f'), os_user, sudo_user, "
             "db_user, host, letter_id, source_queue, target_exchange, target_routing_key, "
             "consumer, signature, applied, forced FROM idemd_replay %s%s ORDER BY id DESC "
             "LIMIT %ld",
             hq ? "WHERE source_queue = " : "", hq ? hq : "",
             ctl->limit > 0 ? ctl->limit : CTL_HISTORY_DEFAULT);
    free(hq);
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        ctl_fprintf(stderr,
                    "idemctl: dlq history: reading table idemd_replay: %s (apply "
                    "sql/013_idemd_replay.sql)\n",
                    mysql_error(db->my));
        rc = CTL_EXIT_PARTIAL;
        goto out;
    }
    if (ctl->json) {
        arr = json_object_new_array();
        ctl->out = json_object_new_object();
        json_object_object_add(ctl->out, "replays", arr);
    }
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(res);
        char when[32];
        snprintf(when, sizeof(when), "%.23s", row[0] ? row[0] : "");
        row[0] = when;
        len[0] = strlen(when);
        ctl_history_row(ctl, row, len, arr);
        n++;
    }
    rc = n > 0 ? CTL_EXIT_OK : CTL_EXIT_NOMATCH;
out:
    if (res)
        mysql_free_result(res);
    ctl_json_flush(ctl);
    db_close(db);
    return rc;
}
