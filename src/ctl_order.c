/* ctl_order.c: idemctl's order commands: list the blocked keys of ordered queues, release one. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "log.h"
#include "order.h"

/* The configured queue named name, or NULL (said on stderr). */
static const conf_queue_t *ctl_order_queue(const ctl_t *ctl, const char *name)
{
    for (int i = 0; i < ctl->conf->n_queues; i++)
        if (strcmp(ctl->conf->queues[i].name, name) == 0)
            return &ctl->conf->queues[i];
    ctl_fprintf(stderr, "idemctl: queue '%s' is not in %s\n", name, ctl->conf->path);
    return NULL;
}

/*
 * order list [QUEUE]: the blocked keys of QUEUE's consumer (or of every
 * consumer): consumer, key, head message id, state (waiting: its head waits
 * for a retry; held: its head was dead-lettered with order_dead_letter =
 * "hold"), waiters, age in seconds. CTL_EXIT_NOMATCH when none is blocked.
 */
static int ctl_order_list(ctl_t *ctl, const char *queue)
{
    db_t *db = NULL;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    char sql[1200], *hc = NULL;
    int rc, shown = 0;
    const conf_queue_t *q = queue ? ctl_order_queue(ctl, queue) : NULL;

    if (queue && q == NULL)
        return CTL_EXIT_NOMATCH;
    if (q && (hc = ctl_hex(q->consumer, strlen(q->consumer))) == NULL)
        return CTL_EXIT_PARTIAL;
    snprintf(sql, sizeof(sql),
             "SELECT b.consumer, b.okey, b.head_id, b.held, (SELECT COUNT(*) FROM "
             "idemd_order_waiter w WHERE w.consumer = b.consumer AND w.okey = b.okey), "
             "TIMESTAMPDIFF(MICROSECOND, b.since, NOW(3)) FROM idemd_order_block b %s%s "
             "ORDER BY b.since LIMIT %ld",
             hc ? "WHERE b.consumer = " : "", hc ? hc : "", ctl->limit > 0 ? ctl->limit : 1000);
    free(hc);
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        goto out;
    if (mysql_query(db->my, sql) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        ctl_fprintf(stderr,
                    "idemctl: reading idemd_order_block: %s (apply sql/012_idemd_order.sql)\n",
                    mysql_error(db->my));
        rc = CTL_EXIT_PARTIAL;
        goto out;
    }
    if (ctl->json)
        ctl->out = json_object_new_array();
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(res);
        const char *state = atoi(row[3]) ? "held" : "waiting";
        double age_s = (double)atoll(row[5]) / 1e6;
        shown++;
        if (ctl->json) {
            json_object *o = json_object_new_object();
            ctl_json_str(o, "consumer", row[0], len[0]);
            ctl_json_str(o, "key", row[1], len[1]);
            ctl_json_str(o, "head", row[2], len[2]);
            json_object_object_add(o, "state", ctl_json_text(state));
            json_object_object_add(o, "waiters", json_object_new_int64(atoll(row[4])));
            json_object_object_add(o, "age_seconds", json_object_new_double(age_s));
            json_object_array_add(ctl->out, o);
            continue;
        }
        for (int k = 0; k < 3; k++) {
            ctl_put(stdout, row[k], len[k]);
            ctl_printf("\t");
        }
        ctl_printf("%s\t%s\t%.1f\n", state, row[4], age_s);
    }
    if (ctl->json)
        ctl_json_flush(ctl);
    rc = shown ? CTL_EXIT_OK : CTL_EXIT_NOMATCH;
out:
    if (res)
        mysql_free_result(res);
    if (db)
        (void)mysql_rollback(db->my);
    db_close(db);
    return rc;
}

/*
 * order release QUEUE KEY: the key's first waiter becomes its head (none:
 * the key is free), whatever the head was, committed. CTL_EXIT_NOMATCH when
 * the key is not blocked.
 */
static int ctl_order_release(ctl_t *ctl, const char *queue, const char *key)
{
    db_t *db = NULL;
    bool found = false;
    int rc;
    const conf_queue_t *q = ctl_order_queue(ctl, queue);

    if (q == NULL)
        return CTL_EXIT_NOMATCH;
    if (strlen(key) == 0 || strlen(key) > ORDER_KEY_MAX) {
        ctl_fprintf(stderr, "idemctl: order release: a key is 1..%d bytes\n", ORDER_KEY_MAX);
        return CTL_EXIT_USAGE;
    }
    if ((rc = ctl_db_open(ctl, &db)) != 0)
        return rc;
    if (db_set_consumer(db, q->consumer) != 0 ||
        order_skip_head(db, key, strlen(key), &found) != 0 || db_commit(db) != DB_OK) {
        ctl_fprintf(stderr, "idemctl: order release: the database refused (apply "
                            "sql/012_idemd_order.sql?)\n");
        (void)mysql_rollback(db->my);
        rc = CTL_EXIT_PARTIAL;
    } else if (!found) {
        ctl_fprintf(stderr, "idemctl: key '%s' of queue '%s' is not blocked\n", key, queue);
        rc = CTL_EXIT_NOMATCH;
    } else {
        ctl_printf("released key '%s' of queue '%s'\n", key, queue);
        rc = CTL_EXIT_OK;
    }
    db_close(db);
    return rc;
}

int ctl_order(ctl_t *ctl, const char *sub, char **args, int n_args)
{
    if (strcmp(sub, "list") == 0)
        return ctl_order_list(ctl, n_args > 0 ? args[0] : NULL);
    return ctl_order_release(ctl, args[0], args[1]);
}
