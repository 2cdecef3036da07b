/* test_outbox.c: unit tests of the outbox: onward message ids, the header encoding, and the relay
 * driven through its ops tables by a scripted table and broker.
 */
#include <stdio.h>
#include <string.h>

#include "outbox.h"
#include "copies.h"
#include "tap.h"

/* ---------- a scripted outbox table and publishing channel ---------- */

#define F_ROWS 4
static struct {
    bool present[F_ROWS];
    unsigned attempts[F_ROWS];
    long long wait_ms[F_ROWS];
    char error[F_ROWS][128];
    int commits, rollbacks, fail_remove; /* fail_remove: the next remove fails with it */
    int vanish; /* row vanish-1 is deleted between the two reads of a slice (another relay) */
    char msg_id[F_ROWS][32];
    bool trace;                 /* rows carry a captured trace context */
    unsigned char own_hdr[128]; /* row 2's own headers (a handler's traceparent) */
    size_t own_len;
} T;

/* The broker's script: what each publish of a round gets ('a' ack, 'r' return, 'n' nack,
 * 'c' the channel closes from this one on, 'f' the publish fails at once with the channel
 * still usable). to[] says where each went. */
static struct {
    const char *script;
    int pos, n;
    char fate[16], to[16][32], why[16][64];
    bool open;
    int published, dead;
    char dead_error[300];
    char tp[16][64], ts[16][64], bg[16][64]; /* each publish's trace headers, "" when none */
    int n_tp[16];                            /* how many traceparent headers it had */
} B;

static int f_due(void *ctx, const char *const *src, const size_t *src_len, int k, int grace_s,
                 int limit, unsigned long long *ids, unsigned long long *sizes, int *got)
{
    (void)ctx, (void)src, (void)src_len, (void)k, (void)grace_s;
    *got = 0;
    for (int i = 0; i < F_ROWS && *got < limit; i++)
        if (T.present[i]) {
            ids[*got] = (unsigned long long)i + 1;
            sizes[(*got)++] = 2;
        }
    return 0;
}

static int f_fetch(void *ctx, const unsigned long long *ids, int n, outbox_msg_t *out, int *got)
{
    (void)ctx;
    *got = 0;
    if (T.vanish) {
        T.present[T.vanish - 1] = false;
        T.vanish = 0;
    }
    for (int i = 0; i < n; i++) {
        int r = (int)ids[i] - 1;
        if (!T.present[r])
            continue;
        outbox_msg_t *m = &out[(*got)++];
        memset(m, 0, sizeof(*m));
        snprintf(T.msg_id[r], sizeof(T.msg_id[r]), "svc:s%d:0", r);
        m->id = ids[i];
        m->msg_id = T.msg_id[r];
        m->msg_id_len = strlen(m->msg_id);
        m->exchange = "";
        m->routing_key = "down";
        m->routing_key_len = 4;
        m->source_id = "s";
        m->source_len = 1;
        m->body = "{}";
        m->body_len = 2;
        m->attempts = T.attempts[r];
        if (T.trace) {
            m->traceparent = "00-0af7651916cd43dd8448eb211c80319c-00000000000000aa-01";
            m->traceparent_len = 55;
            m->tracestate = "rojo=1";
            m->tracestate_len = 6;
            m->baggage = "k=v";
            m->baggage_len = 3;
        }
        if (r == 1 && T.own_len) {
            m->headers = T.own_hdr;
            m->headers_len = T.own_len;
        }
    }
    return 0;
}

static int f_remove(void *ctx, const unsigned long long *ids, int n)
{
    (void)ctx;
    if (T.fail_remove) {
        int rc = T.fail_remove;
        T.fail_remove = 0;
        return rc;
    }
    for (int i = 0; i < n; i++)
        T.present[ids[i] - 1] = false;
    return 0;
}

static int f_refuse(void *ctx, unsigned long long id, long long wait_ms, const char *why)
{
    (void)ctx;
    T.attempts[id - 1]++;
    T.wait_ms[id - 1] = wait_ms;
    snprintf(T.error[id - 1], sizeof(T.error[0]), "%s", why);
    return 0;
}

static int f_commit(void *ctx)
{
    (void)ctx;
    T.commits++;
    return 0;
}

static void f_rollback(void *ctx)
{
    (void)ctx;
    T.rollbacks++;
}

static bool f_legacy(void *ctx)
{
    (void)ctx;
    return false;
}

static int f_depth(void *ctx, unsigned max_attempts, outbox_depth_t *d)
{
    (void)ctx, (void)max_attempts;
    memset(d, 0, sizeof(*d));
    return 0;
}

static const db_outbox_ops_t fake_db = {f_due,      f_fetch,  f_remove, f_refuse, f_commit,
                                        f_rollback, f_legacy, f_depth,  NULL};

static void b_begin(void *ctx)
{
    (void)ctx;
    B.n = 0;
}

static int b_publish(void *ctx, const char *exchange, const char *routing_key,
                     const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    (void)ctx, (void)exchange, (void)body;
    if (!B.open || B.n >= 16)
        return -1;
    char f = B.script[B.pos] ? B.script[B.pos++] : 'a';
    if (f == 'f')
        return -1; /* fails here (out of memory, say); the channel stays usable */
    B.fate[B.n] = f;
    snprintf(B.to[B.n], sizeof(B.to[0]), "%s", routing_key);
    B.tp[B.n][0] = B.ts[B.n][0] = B.bg[B.n][0] = '\0';
    B.n_tp[B.n] = 0;
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        char *to = NULL;
        if (e->key.len == 11 && memcmp(e->key.bytes, "traceparent", 11) == 0)
            to = B.tp[B.n], B.n_tp[B.n]++;
        else if (e->key.len == 10 && memcmp(e->key.bytes, "tracestate", 10) == 0)
            to = B.ts[B.n];
        else if (e->key.len == 7 && memcmp(e->key.bytes, "baggage", 7) == 0)
            to = B.bg[B.n];
        if (to)
            snprintf(to, 64, "%.*s", (int)e->value.value.bytes.len,
                     (const char *)e->value.value.bytes.bytes);
    }
    B.published++;
    if (strcmp(routing_key, "down") != 0 && f == 'a') {
        B.dead++;
        for (int i = 0; i < props->headers.num_entries; i++)
            if (props->headers.entries[i].key.len == strlen(COPIES_H_ERROR) &&
                memcmp(props->headers.entries[i].key.bytes, COPIES_H_ERROR,
                       strlen(COPIES_H_ERROR)) == 0)
                snprintf(B.dead_error, sizeof(B.dead_error), "%.*s",
                         (int)props->headers.entries[i].value.value.bytes.len,
                         (const char *)props->headers.entries[i].value.value.bytes.bytes);
    }
    return B.n++;
}

static int b_wait(void *ctx, int timeout_ms)
{
    (void)ctx, (void)timeout_ms;
    int rc = 0;
    for (int i = 0; i < B.n; i++) {
        if (B.fate[i] == 'c')
            B.open = false;
        if (!B.open)
            B.fate[i] = 'c';
        rc |= B.fate[i] != 'a';
    }
    return rc ? -1 : 0;
}

static const char *b_why(void *ctx, int i)
{
    (void)ctx;
    switch (B.fate[i]) {
    case 'a':
        return NULL;
    case 'r':
        return "unroutable: returned by the broker: 312 NO_ROUTE";
    case 'n':
        return "refused by the broker (basic.nack)";
    default:
        return "channel closed by the broker: 406";
    }
}

static bool b_ok(void *ctx, int i)
{
    return b_why(ctx, i) == NULL;
}

static bool b_returned(void *ctx, int i)
{
    (void)ctx;
    return B.fate[i] == 'r';
}

static bool b_usable(void *ctx)
{
    (void)ctx;
    return B.open;
}

static bool b_broken(void *ctx)
{
    (void)ctx;
    return false;
}

static int b_restore(void *ctx)
{
    (void)ctx;
    B.open = true;
    B.n = 0;
    return 0;
}

static uint64_t b_zero(void *ctx)
{
    (void)ctx;
    return 0;
}

static uint64_t b_wall(void *ctx)
{
    (void)ctx;
    return 1700000000000ULL;
}

static const port_publish_ops_t fake_mq_ops = {.round_begin = b_begin,
                                               .publish = b_publish,
                                               .wait_confirms = b_wait,
                                               .round_ok = b_ok,
                                               .round_returned = b_returned,
                                               .round_why = b_why,
                                               .usable = b_usable,
                                               .broken = b_broken,
                                               .restore = b_restore,
                                               .max_message = b_zero};
static const port_clock_ops_t fake_clock_ops = {.wall_ms = b_wall};
static const port_publish_t fake_mq = {&fake_mq_ops, NULL};
static const port_clock_t fake_clock = {&fake_clock_ops, NULL};

static void fake_reset(int rows, const char *script)
{
    memset(&T, 0, sizeof(T));
    memset(&B, 0, sizeof(B));
    for (int i = 0; i < rows; i++)
        T.present[i] = true;
    B.script = script;
    B.open = true;
}

static void test_relay(void)
{
    static const unsigned char key[COPIES_KEY_LEN] = {1};
    outbox_t *o = outbox_new_ops(&fake_db, NULL);
    outbox_policy_t pol = {
        .queue = "orders", .dlq = "orders.dlq", .max_attempts = 2, .backoff_ms = 100, .key = key};
    outbox_set_policy(o, &pol);

    /* Three rows; the broker returns the second: only it stays, counted, with its backoff. */
    fake_reset(3, "ara");
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 2, "relay: 2 of 3 sent");
    ok(!T.present[0] && T.present[1] && !T.present[2], "the confirmed rows are deleted");
    ok(T.attempts[1] == 1 && T.wait_ms[1] == 100 && strstr(T.error[1], "NO_ROUTE"),
       "the returned row: 1 attempt, backoff 100 ms, its reason (%s)", T.error[1]);
    is_int(T.commits, 1, "one COMMIT for the slice");

    /* Refused again (a nack): its second refusal is max_attempts: dead-lettered, then deleted. */
    B.script = "na";
    B.pos = 0;
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 0, "relay: none sent");
    ok(!T.present[1] && B.dead == 1 && strcmp(B.to[0], "orders.dlq") == 0,
       "refused max_attempts times: dead-lettered to orders.dlq and deleted");
    ok(strstr(B.dead_error, "not delivered after 2 attempts") != NULL,
       "the dead letter says why: %s", B.dead_error);

    /* The dead letter is not confirmed: the row stays, counted, for the next try. */
    fake_reset(1, "rn");
    T.attempts[0] = 1;
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 0, "relay: none sent");
    ok(T.present[0] && T.attempts[0] == 2 && B.dead == 0,
       "a dead letter the broker refused: the row stays");

    /* The channel closes under the second of three: the unconfirmed rows go one at a time. */
    fake_reset(3, "acaaa");
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 3,
           "channel closed in a round: every row sent after all");
    ok(!T.present[0] && !T.present[1] && !T.present[2], "all deleted");
    is_int(B.published, 5, "3 in the round, then the 2 unconfirmed alone");

    /* The DELETE fails (lost connection): the relay rolls back and says so; rows stay. */
    fake_reset(2, "aa");
    T.fail_remove = -1;
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), -1,
           "a lost connection at the DELETE: -1");
    ok(T.present[0] && T.present[1] && T.rollbacks == 1, "rows stay, the transaction rolled back");

    /* The first row goes between the two reads (another worker's relay sent it); of the two
     * left the broker returns the first: that one stays, counted; the other is deleted. */
    fake_reset(3, "ra");
    T.vanish = 1;
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 1), 1,
           "a row gone between the reads: the 2 left sent, 1 confirmed");
    ok(T.present[1] && T.attempts[1] == 1 && !T.present[2],
       "the returned row stays with its attempt, the confirmed one is deleted (row 2 %s, "
       "attempts %u; row 3 %s)",
       T.present[1] ? "kept" : "DELETED", T.attempts[1], T.present[2] ? "kept" : "deleted");

    /* The second publish of three fails at once (the channel still usable): the round stops
     * there; the first is confirmed and deleted, the two unsent stay. */
    fake_reset(3, "af");
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 1), 1,
           "a publish that fails stops the round: 1 sent");
    ok(!T.present[0] && T.present[1] && T.present[2],
       "the rows after it stay, unsent (row 2 %s, row 3 %s)", T.present[1] ? "kept" : "DELETED",
       T.present[2] ? "kept" : "DELETED");

    /* No dead letter queue: a row used up stays and is tried again later. */
    pol.dlq = NULL;
    outbox_set_policy(o, &pol);
    fake_reset(1, "r");
    T.attempts[0] = 5;
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 0, "relay: none sent");
    ok(T.present[0] && T.attempts[0] == 6 && B.dead == 0 && T.wait_ms[0] == 3200,
       "without a dead letter queue the row stays (backoff doubled per refusal: %lld ms)",
       T.wait_ms[0]);
    outbox_close(o);
}

/* The trace context captured into a row goes out as headers; a handler's own header wins. */
static void test_relay_trace(void)
{
    static const unsigned char key[COPIES_KEY_LEN] = {1};
    outbox_t *o = outbox_new_ops(&fake_db, NULL);
    outbox_policy_t pol = {
        .queue = "orders", .dlq = "orders.dlq", .max_attempts = 1, .backoff_ms = 100, .key = key};
    static const char own[] = "00-11111111111111111111111111111111-2222222222222222-00";
    idemd_header_t h = {"traceparent", IDEMD_HEADER_STRING, own, strlen(own), 0};

    outbox_set_policy(o, &pol);
    fake_reset(2, "aa");
    T.trace = true;
    ok(outbox_encode_headers(&h, 1, T.own_hdr, sizeof(T.own_hdr), &T.own_len) == 0,
       "a handler's own traceparent encoded");
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 2, "relay: both sent");
    ok(strcmp(B.tp[0], "00-0af7651916cd43dd8448eb211c80319c-00000000000000aa-01") == 0 &&
           strcmp(B.ts[0], "rojo=1") == 0 && strcmp(B.bg[0], "k=v") == 0 && B.n_tp[0] == 1,
       "the row's captured traceparent, tracestate and baggage are sent (%s)", B.tp[0]);
    ok(strcmp(B.tp[1], own) == 0 && B.n_tp[1] == 1,
       "a handler's own traceparent wins, once (%s, %d)", B.tp[1], B.n_tp[1]);

    /* Refused and out of attempts: the dead letter keeps the context. */
    fake_reset(1, "ra");
    T.trace = true;
    is_int(outbox_relay(o, &fake_mq, &fake_clock, NULL, NULL, -1, 0, 10), 0, "relay: none sent");
    /* the dead letter went in a round of its own: B's index 0 */
    ok(B.dead == 1 &&
           strcmp(B.tp[0], "00-0af7651916cd43dd8448eb211c80319c-00000000000000aa-01") == 0 &&
           strcmp(B.ts[0], "rojo=1") == 0 && strcmp(B.bg[0], "k=v") == 0,
       "the dead letter of an onward message keeps its trace context");
    outbox_close(o);
}

int main(void)
{
    char a[OUTBOX_ID_MAX + 1], b[OUTBOX_ID_MAX + 1], big[300];
    size_t la, lb;

    la = outbox_msg_id("orders", "pay-1", 5, 0, a, sizeof(a));
    ok(la == strlen("orders:pay-1:0") && strcmp(a, "orders:pay-1:0") == 0,
       "a printable source id gives a readable onward id");
    lb = outbox_msg_id("orders", "pay-1", 5, 0, b, sizeof(b));
    ok(la == lb && memcmp(a, b, la) == 0, "the same source and index give the same id");
    outbox_msg_id("orders", "pay-1", 5, 1, b, sizeof(b));
    ok(strcmp(a, b) != 0, "another index gives another id");
    outbox_msg_id("orders", "pay 1", 5, 0, a, sizeof(a));
    ok(strncmp(a, "idemd-ob-", 9) == 0, "an id with a space is hashed");
    outbox_msg_id("ab", "c\x01", 2, 0, a, sizeof(a));
    outbox_msg_id("a", "bc\x01", 3, 0, b, sizeof(b));
    ok(strcmp(a, b) != 0, "consumer and source id are kept apart in the hash");
    outbox_msg_id("svc", "a:1", 3, 0, a, sizeof(a));
    outbox_msg_id("svc:a", "1", 1, 0, b, sizeof(b));
    ok(strcmp(a, b) != 0, "consumer 'svc' + source 'a:1' and 'svc:a' + '1' differ");
    ok(strcmp(a, "svc:a:1:0") == 0 && strcmp(b, "svc%3Aa:1:0") == 0,
       "a ':' in the consumer is escaped, one in the source id is not");
    outbox_msg_id("svc%3Aa", "1", 1, 0, a, sizeof(a));
    ok(strcmp(a, "svc%253Aa:1:0") == 0 && strcmp(a, b) != 0,
       "a '%%' in the consumer is escaped too, so an escaped-looking name stays apart");
    outbox_msg_id("a", "b:1", 3, 2, a, sizeof(a));
    outbox_msg_id("a:b", "1", 1, 2, b, sizeof(b));
    ok(strcmp(a, b) != 0, "the same holds for every index");
    memset(big, ':', 120);
    big[120] = '\0';
    la = outbox_msg_id(big, "s", 1, 0, a, sizeof(a));
    ok(la <= OUTBOX_ID_MAX && strncmp(a, "idemd-ob-", 9) == 0,
       "a consumer too long once escaped is hashed");
    memset(big, 'x', sizeof(big));
    la = outbox_msg_id("orders", big, 255, 7, a, sizeof(a));
    ok(la <= OUTBOX_ID_MAX && strncmp(a, "idemd-ob-", 9) == 0,
       "a long source id is hashed to fit 255 bytes");

    idemd_header_t h[3] = {
        {.key = "trace", .type = IDEMD_HEADER_STRING, .str = "a\0b", .len = 3},
        {.key = "n", .type = IDEMD_HEADER_INT, .i = -42},
        {.key = "empty", .type = IDEMD_HEADER_STRING, .str = "", .len = 0},
    };
    unsigned char buf[256];
    size_t len = 0;
    amqp_table_entry_t e[4];
    ok(outbox_encode_headers(h, 3, buf, sizeof(buf), &len) == 0 && len > 0,
       "string and integer headers encode");
    int n = outbox_decode_headers(buf, len, e, 4);
    ok(n == 3 && e[0].key.len == 5 && memcmp(e[0].key.bytes, "trace", 5) == 0 &&
           e[0].value.kind == AMQP_FIELD_KIND_UTF8 && e[0].value.value.bytes.len == 3 &&
           memcmp(e[0].value.value.bytes.bytes, "a\0b", 3) == 0 &&
           e[1].value.kind == AMQP_FIELD_KIND_I64 && e[1].value.value.i64 == -42 &&
           e[2].value.value.bytes.len == 0,
       "they decode to the same entries (binary-safe values, negative integers)");
    ok(outbox_decode_headers(buf, len - 1, e, 4) == -1, "a truncated encoding is refused");
    ok(outbox_decode_headers(buf, len, e, 2) == -1, "more entries than room is refused");
    idemd_header_t other = {.key = "f", .type = IDEMD_HEADER_OTHER};
    ok(outbox_encode_headers(&other, 1, buf, sizeof(buf), &len) == -1,
       "a header of another type is refused");
    ok(outbox_encode_headers(h, 3, buf, 8, &len) == -1, "too little room is refused");

    test_relay();
    test_relay_trace();
    return done();
}
