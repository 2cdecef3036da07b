/* sim_outbox.c: the real outbox relay (outbox.c) wired to the simulated database's outbox rows and
 * the simulated publisher through its ops tables, as outbox_io.c wires it to MySQL and mq.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "relay.h"
#include "sim.h"

static outbox_t *ob;
static unsigned char key[RELAY_KEY_LEN]; /* signs the onward dead letters */

/* A row's id in the table: rows are numbered in the order of their message and place. */
static unsigned long long row_id(int id, int r)
{
    return (unsigned long long)id * SIM_ROWS + (unsigned long long)r + 1;
}

static void row_of(unsigned long long rid, int *id, int *r)
{
    *id = (int)((rid - 1) / SIM_ROWS);
    *r = (int)((rid - 1) % SIM_ROWS);
}

/* ---------- the outbox table (outbox_db_ops_t) ---------- */

/* The relay's open transaction: its DELETEs and UPDATEs, applied at COMMIT. */
static struct {
    unsigned long long del[SIM_MSGS * SIM_ROWS];
    int ndel;
    struct {
        unsigned long long id;
        long long wait_ms;
        char why[96];
    } upd[SIM_MSGS * SIM_ROWS];
    int nupd;
} tx;

/* Each row's columns as fetched: the pointers of outbox_msg_t point here. */
static struct {
    char msg_id[OUTBOX_ID_MAX + 1], src[16];
    unsigned char hdr[64];
    size_t hdr_len;
} cols[SIM_MSGS * SIM_ROWS];

/* Confirmed rows that stay (a lost DELETE): one more send of them is allowed. */
static void rows_may_resend(void)
{
    for (int id = 0; id < sim.o.n_msgs; id++)
        for (int r = 0; r < SIM_ROWS; r++)
            if (sim_db.row[id][r] && sim.truth[id].row_confirmed[r])
                sim.truth[id].row_may_resend[r] = true;
}

/* A statement failed with e: the server rolled the transaction back. 0, -1 or -2. */
static int stmt(const char *what, bool deadlock)
{
    unsigned e = sim_db_outbox_fault(what, deadlock);
    if (e == 0)
        return 0;
    tx.ndel = tx.nupd = 0;
    rows_may_resend();
    return e >= 2000 ? -1 : -2;
}

static int d_due(void *ctx, const char *const *src, const size_t *src_len, int k, int grace_s,
                 int limit, unsigned long long *ids, unsigned long long *sizes, int *got)
{
    int rc;
    (void)ctx;
    (void)grace_s; /* rows carry no creation time here: the sweeper takes every due row */
    *got = 0;
    if ((rc = stmt("outbox SELECT due rows", false)) != 0)
        return rc;
    for (int id = 0; id < sim.o.n_msgs; id++) {
        bool mine = k < 0;
        for (int j = 0; j < k && !mine; j++)
            mine = src_len[j] > 1 && atoi(src[j] + 1) == id;
        for (int r = 0; mine && r < SIM_ROWS && *got < limit; r++) {
            if (!sim_db.row[id][r] || sim_db.row_next_ms[id][r] > sim.now_ms)
                continue;
            ids[*got] = row_id(id, r);
            sizes[(*got)++] = 2 + 16;
        }
    }
    return 0;
}

static int d_fetch(void *ctx, const unsigned long long *ids, int n, outbox_msg_t *out, int *got)
{
    int rc;
    (void)ctx;
    *got = 0;
    if ((rc = stmt("outbox SELECT rows", false)) != 0)
        return rc;
    for (int i = 0; i < n; i++) {
        int id, r;
        row_of(ids[i], &id, &r);
        if (!sim_db.row[id][r])
            continue; /* gone meanwhile */
        int c = (int)ids[i] - 1;
        outbox_msg_t *m = &out[(*got)++];
        memset(m, 0, sizeof(*m));
        snprintf(cols[c].src, sizeof(cols[c].src), "m%d", id);
        m->id = ids[i];
        m->source_id = cols[c].src;
        m->source_len = strlen(cols[c].src);
        m->msg_id = cols[c].msg_id;
        m->msg_id_len = outbox_msg_id("orders", m->source_id, m->source_len, (unsigned)r,
                                      cols[c].msg_id, sizeof(cols[c].msg_id));
        idemd_header_t h = {
            .key = "trace", .type = IDEMD_HEADER_STRING, .str = m->source_id, .len = m->source_len};
        if (outbox_encode_headers(&h, 1, cols[c].hdr, sizeof(cols[c].hdr), &cols[c].hdr_len) != 0)
            sim_violation("outbox: a header does not encode");
        m->headers = cols[c].hdr;
        m->headers_len = cols[c].hdr_len;
        m->exchange = "";
        m->routing_key = "downstream";
        m->routing_key_len = strlen(m->routing_key);
        m->content_type = "application/json";
        m->content_type_len = strlen(m->content_type);
        m->body = "{}";
        m->body_len = 2;
        m->attempts = sim_db.row_attempts[id][r];
        m->failed_s = sim_db.row_failed_s[id][r];
    }
    return 0;
}

static int d_remove(void *ctx, const unsigned long long *ids, int n)
{
    int rc;
    (void)ctx;
    if ((rc = stmt("outbox DELETE", true)) != 0)
        return rc;
    for (int i = 0; i < n && tx.ndel < SIM_MSGS * SIM_ROWS; i++)
        tx.del[tx.ndel++] = ids[i];
    return 0;
}

static int d_refuse(void *ctx, unsigned long long id, long long wait_ms, const char *why)
{
    int rc;
    (void)ctx;
    if ((rc = stmt("outbox UPDATE refused", true)) != 0)
        return rc;
    if (tx.nupd >= SIM_MSGS * SIM_ROWS) {
        sim_violation("outbox: more refusals than rows in one transaction");
        return -2;
    }
    tx.upd[tx.nupd].id = id;
    tx.upd[tx.nupd].wait_ms = wait_ms;
    snprintf(tx.upd[tx.nupd++].why, sizeof(tx.upd[0].why), "%s", why);
    return 0;
}

static int d_commit(void *ctx)
{
    int rc;
    (void)ctx;
    if ((rc = stmt("outbox COMMIT", true)) != 0)
        return rc;
    for (int i = 0; i < tx.ndel; i++) {
        int id, r;
        row_of(tx.del[i], &id, &r);
        sim_db.row[id][r] = false;
    }
    for (int i = 0; i < tx.nupd; i++) {
        int id, r;
        row_of(tx.upd[i].id, &id, &r);
        if (!sim_db.row[id][r])
            continue;
        sim_db.row_attempts[id][r]++;
        sim_db.row_next_ms[id][r] = sim.now_ms + (uint64_t)tx.upd[i].wait_ms;
        if (sim_db.row_failed_s[id][r] == 0)
            sim_db.row_failed_s[id][r] = (long long)((1700000000000ULL + sim.now_ms) / 1000);
        snprintf(sim_db.row_error[id][r], sizeof(sim_db.row_error[id][r]), "%s", tx.upd[i].why);
        sim_log("db: outbox row %d of m%d refused %u time(s), next try at %llu ms: %s", r, id,
                sim_db.row_attempts[id][r], (unsigned long long)sim_db.row_next_ms[id][r],
                sim_db.row_error[id][r]);
    }
    tx.ndel = tx.nupd = 0;
    return 0;
}

static void d_rollback(void *ctx)
{
    (void)ctx;
    tx.ndel = tx.nupd = 0;
    rows_may_resend();
}

static bool d_legacy(void *ctx)
{
    (void)ctx;
    return false;
}

static int d_depth(void *ctx, unsigned max_attempts, outbox_depth_t *d)
{
    (void)ctx;
    memset(d, 0, sizeof(*d));
    for (int id = 0; id < sim.o.n_msgs; id++)
        for (int r = 0; r < SIM_ROWS; r++)
            if (sim_db.row[id][r]) {
                d->rows++;
                d->retrying +=
                    sim_db.row_attempts[id][r] > 0 && sim_db.row_attempts[id][r] < max_attempts;
                d->exhausted += sim_db.row_attempts[id][r] >= max_attempts;
            }
    return 0;
}

static const outbox_db_ops_t sim_outbox_db = {
    .due = d_due,
    .fetch = d_fetch,
    .remove = d_remove,
    .refuse = d_refuse,
    .commit = d_commit,
    .rollback = d_rollback,
    .legacy = d_legacy,
    .depth = d_depth,
    .close = NULL,
};

/* ---------- the publishing channel (outbox_mq_ops_t) ---------- */

/* The round's copies: which row each is, and whether it is that row's dead letter. */
static struct {
    int id, row;
    bool dead;
} sent[SIM_ROUND];
static int n_sent;

static void p_round_begin(void *ctx)
{
    (void)ctx;
    sim_pub_begin();
    n_sent = 0;
}

/* The value of header k in props, or an empty string. */
static amqp_bytes_t header(const amqp_basic_properties_t *props, const char *k)
{
    for (int i = 0; (props->_flags & AMQP_BASIC_HEADERS_FLAG) && i < props->headers.num_entries;
         i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == strlen(k) && memcmp(e->key.bytes, k, e->key.len) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_UTF8)
            return e->value.value.bytes;
    }
    return amqp_empty_bytes;
}

static int p_publish(void *ctx, const char *exchange, const char *routing_key,
                     const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    sim_bmsg_t c;
    int id = -1, r = -1;
    (void)ctx;
    (void)exchange;
    (void)body;
    memset(&c, 0, sizeof(c)); /* no properties kept: sim_pub_publish takes the death chance */
    if (sscanf((const char *)props->message_id.bytes, "orders:m%d:%d", &id, &r) != 2 || id < 0 ||
        id >= sim.o.n_msgs || r < 0 || r >= SIM_ROWS) {
        sim_violation("outbox: an onward message with an unknown id");
        return -1;
    }
    sim_truth_t *tr = &sim.truth[id];
    c.id = id;
    c.row = r;
    bool dead = strcmp(routing_key, "downstream") != 0;
    if (dead) {
        /* Invariant 3: only a row refused max_attempts times is dead-lettered, with its reason,
         * to the source queue's dead letter queue. */
        amqp_bytes_t why = header(props, RELAY_H_ERROR);
        if (!sim.o.has_dlq || strcmp(routing_key, "orders.dlq") != 0)
            sim_violation("outbox row %d of m%d dead-lettered to '%s'", r, id, routing_key);
        if (sim_db.row_attempts[id][r] + 1 < (unsigned)sim.o.ob_max_attempts)
            sim_violation("outbox row %d of m%d dead-lettered after %u refusals (max %d)", r, id,
                          sim_db.row_attempts[id][r] + 1, sim.o.ob_max_attempts);
        if (why.len == 0)
            sim_violation("outbox row %d of m%d dead-lettered without a reason", r, id);
        snprintf(c.reason, sizeof(c.reason), "%.*s", (int)(why.len < 150 ? why.len : 150),
                 (const char *)why.bytes);
    } else {
        /* Invariant 3: a confirmed row goes again only when its DELETE was lost. */
        if (tr->row_confirmed[r]) {
            if (!tr->row_may_resend[r])
                sim_violation("outbox row %d of m%d re-sent after the broker confirmed it", r, id);
            tr->row_may_resend[r] = false;
            tr->row_confirmed[r] = false; /* until this send is confirmed */
            tr->row_resends[r]++;
        }
        tr->row_sends[r]++;
    }
    int idx = sim_pub_publish(dead ? SQ_DLQ : SQ_DOWN, &c);
    if (idx >= 0 && idx < SIM_ROUND) {
        while (n_sent <= idx)
            sent[n_sent++].row = -1;
        sent[idx].id = id;
        sent[idx].row = r;
        sent[idx].dead = dead;
    }
    return idx;
}

static int p_wait(void *ctx, int timeout_ms)
{
    (void)ctx;
    (void)timeout_ms;
    int rc = sim_pub_wait();
    for (int i = 0; i < n_sent; i++) {
        if (sent[i].row < 0 || !sim_pub_ok(i))
            continue;
        sim_truth_t *tr = &sim.truth[sent[i].id];
        if (sent[i].dead) {
            tr->row_dead[sent[i].row]++;
        } else {
            tr->row_confirmed[sent[i].row] = true;
            tr->row_delivered[sent[i].row] = true;
        }
    }
    return rc;
}

static bool p_ok(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_ok(i);
}

static bool p_returned(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_returned(i);
}

static const char *p_why(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_why(i);
}

static bool p_usable(void *ctx)
{
    (void)ctx;
    return sim_mq.pub_open;
}

static bool p_broken(void *ctx)
{
    (void)ctx;
    return false; /* a lost connection is a death of the worker here */
}

static int p_restore(void *ctx)
{
    (void)ctx;
    sim_maybe_die("channel.open (outbox)");
    sim_mq.pub_open = true;
    sim_mq.pub_seq = 0;
    return 0;
}

static uint64_t p_max_message(void *ctx)
{
    (void)ctx;
    return 0;
}

static uint64_t p_wall(void *ctx)
{
    (void)ctx;
    return 1700000000000ULL + sim.now_ms;
}

static const outbox_mq_ops_t sim_outbox_mq = {
    .round_begin = p_round_begin,
    .publish = p_publish,
    .wait_confirms = p_wait,
    .round_ok = p_ok,
    .round_returned = p_returned,
    .round_why = p_why,
    .usable = p_usable,
    .broken = p_broken,
    .restore = p_restore,
    .max_message = p_max_message,
    .wall_ms = p_wall,
};

/* ---------- the relay ---------- */

void sim_outbox_begin(void)
{
    memset(&tx, 0, sizeof(tx));
    for (int i = 0; i < RELAY_KEY_LEN; i++)
        key[i] = (unsigned char)(sim.seed >> (i % 8));
    if (ob == NULL && (ob = outbox_new_ops(&sim_outbox_db, NULL)) == NULL) {
        fprintf(stderr, "sim: out of memory\n");
        abort();
    }
    outbox_policy_t pol = {.queue = "orders",
                           .dlq = sim.o.has_dlq ? "orders.dlq" : NULL,
                           .max_attempts = (unsigned)sim.o.ob_max_attempts,
                           .backoff_ms = sim.o.ob_backoff_ms,
                           .key = key};
    outbox_set_policy(ob, &pol);
}

void sim_outbox_end(void)
{
    outbox_close(ob);
    ob = NULL;
}

uint64_t sim_outbox_next_ms(void)
{
    uint64_t t = 0;
    for (int id = 0; id < sim.o.n_msgs; id++)
        for (int r = 0; r < SIM_ROWS; r++)
            if (sim_db.row[id][r] && sim_db.row_next_ms[id][r] > sim.now_ms &&
                (t == 0 || sim_db.row_next_ms[id][r] < t))
                t = sim_db.row_next_ms[id][r];
    return t;
}

void sim_relay_sources(const int *ids, int k)
{
    char names[SIM_BATCH + 1][16];
    const char *src[SIM_BATCH + 1];
    size_t len[SIM_BATCH + 1];
    /* As worker.c: the relay runs after a COMMIT that wrote outbox rows; the sweeper (a chore
     * on a timer) only finds work when rows wait, so it runs here only then. */
    bool any = false;
    for (int j = 0; j < k && !any; j++)
        any = sim.truth[ids[j]].rows > 0;
    for (int id = 0; id < sim.o.n_msgs && k < 0 && !any; id++)
        for (int r = 0; r < SIM_ROWS && !any; r++)
            any = sim_db.row[id][r];
    if (!any)
        return;
    if (k > SIM_BATCH + 1)
        k = -1;
    for (int j = 0; j < k; j++) {
        snprintf(names[j], sizeof(names[j]), "m%d", ids[j]);
        src[j] = names[j];
        len[j] = strlen(names[j]);
    }
    if (k == 0)
        return;
    /* As worker_relay and worker_sweep: a lost database ends the worker (it reconnects); a failed
     * round closes the publishing connection. */
    int n = outbox_relay_ops(ob, &sim_outbox_mq, NULL, src, len, k, 0, 1000);
    if (n == -1)
        sim_die(0, "database lost in the outbox relay");
    if (n == -2)
        sim_pub_close();
}

void sim_relay(void)
{
    sim_relay_sources(NULL, -1);
}
