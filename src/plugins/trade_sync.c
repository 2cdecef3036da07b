/* trade_sync.c: handler plugin that applies order.paid {"orderId": N} messages to the trades table.
 */

/*
 * The downstream half of the seed's payment -> trade chain: order_pay sends
 * order.paid through idemd's outbox, and trade_sync applies it:
 *   INSERT INTO <table> (order_id, status, settle_count) VALUES (?, 'paid', 1)
 *   ON DUPLICATE KEY UPDATE status = 'paid', settle_count = settle_count + 1
 * The statement has no guard of its own on purpose: settle_count counts the
 * applications, so after a test it must be 1 for every order; idemd's
 * record table is what keeps a repeated order.paid from applying twice.
 * A body that is not {"orderId": <positive integer>}: REJECT. The body is
 * read by idemd's one JSON reader through host->body_value (ABI 1.6; init()
 * refuses an older host), so a body it refuses (a duplicate member name,
 * invalid UTF-8, ...) is rejected with its reason. orderId is the value's
 * text, so "7" pays as 7 does. MySQL errors: RETRY. Settings: table
 * (default "trades", [A-Za-z0-9_]{1,64}).
 */
#include <idemd/handler.h>

#include <errno.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRADE_SYNC_TABLE_MAX 64

typedef struct trade_sync_state {
    const idemd_host_t *host;
    MYSQL *db;
    MYSQL_STMT *apply;
    long long order_id;
} trade_sync_state_t;

static void trade_sync_fini(void *state)
{
    trade_sync_state_t *st = state;
    if (st == NULL)
        return;
    if (st->apply)
        mysql_stmt_close(st->apply);
    free(st);
}

static int trade_sync_init(const idemd_host_t *host, const idemd_settings_t *settings, MYSQL *db,
                           void **state, char *err, size_t errlen)
{
    const char *table = "trades";
    char sql[320];
    MYSQL_BIND b;
    trade_sync_state_t *st = NULL;

    *state = NULL;
    (void)host->setting_string(settings, "table", &table);
    size_t n = strlen(table);
    if (n == 0 || n > TRADE_SYNC_TABLE_MAX ||
        strspn(table, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n) {
        snprintf(err, errlen, "settings.table \"%s\" is not a plain table name", table);
        goto fail;
    }
    if (host->abi_minor < 6 || host->body_value == NULL) {
        snprintf(err, errlen,
                 "trade_sync needs an idemd with host ABI 1.6 (body_value); this one has 1.%u",
                 host->abi_minor);
        goto fail;
    }
    if ((st = calloc(1, sizeof(*st))) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    st->host = host;
    st->db = db;
    snprintf(sql, sizeof(sql),
             "INSERT INTO `%s` (order_id, status, settle_count) VALUES (?, 'paid', 1) ON "
             "DUPLICATE KEY UPDATE status = 'paid', settle_count = settle_count + 1",
             table);
    memset(&b, 0, sizeof(b));
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &st->order_id;
    if ((st->apply = mysql_stmt_init(db)) == NULL ||
        mysql_stmt_prepare(st->apply, sql, strlen(sql)) != 0 ||
        mysql_stmt_bind_param(st->apply, &b) != 0) {
        snprintf(err, errlen, "preparing '%s': %s", sql,
                 st->apply ? mysql_stmt_error(st->apply) : mysql_error(db));
        goto fail;
    }
    *state = st;
    return 0;
fail:
    trade_sync_fini(st);
    return -1;
}

/* The orderId of a body, or 0 with the reason in err. */
static long long trade_sync_parse(const idemd_host_t *host, const idemd_message_t *msg, char *err,
                                  size_t errlen)
{
    char v[32], *end;
    long long id = 0;
    int r = host->body_value(msg, "orderId", v, sizeof(v), err, errlen);

    if (r < 0)
        return 0; /* the reader's reason is in err */
    /* Canonical digits only: strtoll alone would take " 7", "+7" and "007". */
    if (r == 1 && v[0] >= '1' && v[0] <= '9' && strspn(v, "0123456789") == strlen(v)) {
        errno = 0;
        id = strtoll(v, &end, 10);
        if (errno != 0 || *end != '\0')
            id = 0;
    }
    if (id <= 0)
        snprintf(err, errlen, "body is not {\"orderId\": N} with a positive integer N");
    return id > 0 ? id : 0;
}

static idemd_result_t trade_sync_handle(void *state, MYSQL *db, const idemd_message_t *msg,
                                        char *err, size_t errlen)
{
    trade_sync_state_t *st = state;
    if (db != st->db) {
        snprintf(err, errlen, "handler state was prepared on another connection");
        return IDEMD_RESULT_RETRY;
    }
    if ((st->order_id = trade_sync_parse(st->host, msg, err, errlen)) == 0)
        return IDEMD_RESULT_REJECT;
    if (mysql_stmt_execute(st->apply) != 0) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_stmt_errno(st->apply),
                 mysql_stmt_error(st->apply));
        return IDEMD_RESULT_RETRY;
    }
    return IDEMD_RESULT_OK;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR, /* 1.6: body_value */
    .name = "trade_sync",
    .init = trade_sync_init,
    .handle = trade_sync_handle,
    .fini = trade_sync_fini,
};
