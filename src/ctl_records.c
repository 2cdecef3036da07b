/* ctl_records.c: idemctl's commands on records: lookup and records purge. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "delivery.h"
#include "log.h"

/* records purge keeps at least the longest retry delay plus this: see idemctl(8). */
#define CTL_PURGE_MARGIN_S 86400

/* ---------- lookup ---------- */

/* lookup: for each id, the record (consumer, time) and an attempts row if any. */
int ctl_lookup(ctl_t *ctl, char **ids, int n_ids)
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
            ctl_fprintf(stderr, "idemctl: id '%s': ids are 1 to %d bytes\n", ids[i],
                        DELIVERY_ID_MAX);
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
                json_object_object_add(o, "consumer", ctl_json_text(cons[c]));
                json_object_object_add(o, "processed", json_object_new_boolean(got == 1));
                json_object_object_add(o, "time", got == 1 ? ctl_json_text(when) : NULL);
                json_object_object_add(o, "attempts", json_object_new_int64(attempts));
                json_object_array_add(arr, o);
            } else {
                ctl_puts(stdout, ids[i]);
                ctl_printf("\t%s\t%s\t%s\tattempts=%lld\n", cons[c],
                           got == 1 ? "processed" : "not-processed", got == 1 ? when : "-",
                           attempts);
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

/*
 * The shortest horizon records purge accepts for the consumers it would touch: the longest
 * retry delay of their queues (of every queue when --consumer names none of them), rounded up
 * to seconds, plus CTL_PURGE_MARGIN_S. That delay goes into *max_ms and its queue into
 * *longest (NULL when no queue has one).
 */
long long ctl_purge_floor(const ctl_t *ctl, const char **longest, int *max_ms)
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
            ctl_fprintf(
                stderr,
                "idemctl: records purge: --older-than %s is too short: keep records at least "
                "%s (%lld s), the longest retry delay (%d ms, queue '%s') plus %s for "
                "redeliveries and re-sends; a record deleted sooner lets its message apply "
                "twice\n",
                got, want, floor_s, max_ms, longest, margin);
        else
            ctl_fprintf(
                stderr,
                "idemctl: records purge: --older-than %s is too short: keep records at least "
                "%s (%lld s) for redeliveries and re-sends; a record deleted sooner lets its "
                "message apply twice\n",
                got, want, floor_s);
        return CTL_EXIT_USAGE;
    }
    if (ctl->consumer == NULL && !ctl->yes) {
        ctl_fprintf(stderr, "idemctl: records purge: this deletes the records of every consumer (");
        for (int c = 0; c < n_cons; c++)
            ctl_fprintf(stderr, "%s%s", c ? ", " : "", cons[c]);
        ctl_fprintf(stderr, "): add --yes, or name one with --consumer; nothing was deleted\n");
        return CTL_EXIT_USAGE;
    }
    return 0;
}

/* records purge: delete records older than --older-than, batch rows per committed DELETE. */
int ctl_records_purge(ctl_t *ctl)
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
        ctl_printf("deleted %lld record%s older than %lld s\n", deleted, deleted == 1 ? "" : "s",
                   ctl->older_s);
    }
    free(cons);
    db_close(db);
    return rc;
}
