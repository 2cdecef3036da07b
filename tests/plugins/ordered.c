/* ordered.c: test handler for per-key ordering: records each effect's key and sequence number in
 * the order the effects were committed.
 */

/*
 * Each handled message runs
 *   INSERT INTO order_effects(queue, okey, seq, msg_id) VALUES (...)
 * inside idemd's transaction; order_effects.id (AUTO_INCREMENT) gives the
 * order in which the effects were made (tests/schema.sql). The key and the
 * sequence number come from the headers "okey" (string) and "seq" (string
 * or integer); a message without them records okey '' and seq -1.
 * Bodies: "retry-once" (or one starting with "retry-once") -> RETRY on the
 * first attempt, then as any other; "retry" -> RETRY every time; "reject"
 * -> REJECT; anything else -> OK. The effect is written first, so a RETRY
 * or REJECT always rolls back an effect.
 * settings.key_table (unset: none): first of all, the key's own row of that
 * table (okey, n) is written, INSERT ... ON DUPLICATE KEY UPDATE n = n + 1:
 * a business row per key, which every queue with this setting shares (two
 * ordered queues whose messages' keys are the same orders; tests/chaos/order_pair).
 * The effect's order_effects.pos is then that row's n after the increment: the
 * key's commit counter. Two transactions that write one row cannot both commit
 * from the same n (a row lock on one server or a Group Replication primary,
 * first-committer-wins certification on Galera), so pos orders a key's effects
 * by commit on every engine, where the AUTO_INCREMENT id does not on Galera
 * (each node hands out its own interleaved ids: wsrep_auto_increment_control).
 */
#include <idemd/handler.h>

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The header named key: its string (into buf) or integer as text. "" when absent. */
static const char *ordered_header(const idemd_message_t *msg, const char *key, char *buf,
                                  size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < msg->n_headers; i++) {
        const idemd_header_t *h = &msg->headers[i];
        if (strcmp(h->key, key) != 0)
            continue;
        if (h->type == IDEMD_HEADER_STRING)
            snprintf(buf, len, "%.*s", (int)h->len, h->str);
        else if (h->type == IDEMD_HEADER_INT)
            snprintf(buf, len, "%lld", (long long)h->i);
    }
    return buf;
}

static int ordered_body_starts(const idemd_message_t *msg, const char *word)
{
    size_t n = strlen(word);
    return msg->body_len >= n && memcmp(msg->body, word, n) == 0;
}

#define ORDERED_TABLE_MAX 64

/* state: the key table's name (settings.key_table), or NULL. */
static int ordered_init(const idemd_host_t *host, const idemd_settings_t *settings, MYSQL *db,
                        void **state, char *err, size_t errlen)
{
    const char *table = NULL;
    (void)db;

    *state = NULL;
    if (host->setting_string(settings, "key_table", &table) != 0 || table == NULL)
        return 0;
    size_t n = strlen(table);
    if (n == 0 || n > ORDERED_TABLE_MAX ||
        strspn(table, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n) {
        snprintf(err, errlen, "settings.key_table \"%s\" is not a plain table name", table);
        return -1;
    }
    if ((*state = strdup(table)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void ordered_fini(void *state)
{
    free(state);
}

static idemd_result_t ordered_handle(void *state, MYSQL *db, const idemd_message_t *msg, char *err,
                                     size_t errlen)
{
    char key[256], seq[32], ekey[520], eid[520], eq[600], sql[4096];

    ordered_header(msg, "okey", key, sizeof(key));
    ordered_header(msg, "seq", seq, sizeof(seq));
    mysql_real_escape_string(db, ekey, key, strlen(key));
    mysql_real_escape_string(db, eid, msg->msg_id, msg->msg_id_len);
    mysql_real_escape_string(db, eq, msg->queue, strlen(msg->queue));
    if (state != NULL) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO `%s`(okey, n) VALUES ('%s', 1) ON DUPLICATE KEY UPDATE n = n + 1",
                 (const char *)state, ekey);
        if (mysql_query(db, sql) != 0) {
            snprintf(err, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
            return IDEMD_RESULT_RETRY;
        }
    }
    long long nseq = seq[0] ? strtoll(seq, NULL, 10) : -1LL;
    if (state != NULL)
        snprintf(sql, sizeof(sql),
                 "INSERT INTO order_effects(queue, okey, seq, msg_id, pos) "
                 "SELECT '%s', '%s', %lld, '%s', n FROM `%s` WHERE okey = '%s'",
                 eq, ekey, nseq, eid, (const char *)state, ekey);
    else
        snprintf(sql, sizeof(sql),
                 "INSERT INTO order_effects(queue, okey, seq, msg_id) VALUES ('%s', '%s', %lld, "
                 "'%s')",
                 eq, ekey, nseq, eid);
    if (mysql_query(db, sql) != 0) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
        return IDEMD_RESULT_RETRY;
    }
    if (ordered_body_starts(msg, "retry-once") && msg->attempt == 1) {
        snprintf(err, errlen, "test: retry-once");
        return IDEMD_RESULT_RETRY;
    }
    if (msg->body_len == 5 && memcmp(msg->body, "retry", 5) == 0) {
        snprintf(err, errlen, "test: retry");
        return IDEMD_RESULT_RETRY;
    }
    if (ordered_body_starts(msg, "reject")) {
        snprintf(err, errlen, "test: reject");
        return IDEMD_RESULT_REJECT;
    }
    return IDEMD_RESULT_OK;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "ordered",
    .init = ordered_init,
    .fini = ordered_fini,
    .handle = ordered_handle,
};
