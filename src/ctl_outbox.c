/* ctl_outbox.c: idemctl's outbox commands: outbox list, and the counts status shows. */
#include <json-c/json.h>
#include <mysqld_error.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "log.h"
#include "outbox.h"

/*
 * The consumer's rows in idemd_outbox into ob: all, retrying (refused, attempts
 * left), exhausted (daemon.outbox_max_attempts used up). 0; 1 when the table
 * (sql/005) or its attempts column (sql/009) is missing (rows only, or
 * nothing, is known: ob[] = -1 where unknown); -1 on another error (logged).
 */
int ctl_outbox_counts(const ctl_t *ctl, db_t *db, const char *consumer, long long ob[3])
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
int ctl_outbox_list(ctl_t *ctl, const char *queue)
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
        ctl_fprintf(stderr, "idemctl: queue '%s' is not in %s\n", queue, ctl->conf->path);
        free(sql);
        return CTL_EXIT_NOMATCH;
    }
    sprintf(p, ") ORDER BY id LIMIT %ld", limit);
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        ctl_fprintf(stderr, "idemctl: reading %s: %s%s\n", OUTBOX_TABLE, mysql_error(db->my),
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
            json_object_object_add(o, "state", ctl_json_text(state));
            json_object_object_add(o, "next_try_in_seconds", json_object_new_double(next_s));
            json_object_object_add(o, "age_seconds", json_object_new_double(age_s));
            ctl_json_str(o, "last_error", row[8], len[8]);
            json_object_array_add(ctl->out, o);
            continue;
        }
        ctl_printf("%s\t", row[0]);
        ctl_put(stdout, row[1], len[1]);
        ctl_printf("\t");
        ctl_put(stdout, row[2], len[2]);
        ctl_printf("\t");
        ctl_put(stdout, row[3], len[3]);
        ctl_printf("\t");
        ctl_put(stdout, row[4], len[4]);
        ctl_printf("\tattempts=%lld\t%s\tnext_in=%.1fs\tage=%.1fs\t", attempts, state, next_s,
                   age_s);
        ctl_put(stdout, row[8], len[8]);
        ctl_printf("\n");
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
