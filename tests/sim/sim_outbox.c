/* sim_outbox.c: the real outbox relay (outbox.c) wired to the simulated database's outbox rows
 * (db_outbox_ops_t, as outbox_io.c wires it to MySQL), and the sweeper between steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "copies.h"
#include "sim.h"

static outbox_t *ob;
static unsigned char key[COPIES_KEY_LEN]; /* signs the onward dead letters */

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

/* ---------- the outbox table (db_outbox_ops_t) ---------- */

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
    return db_classify(e) == DB_ERR_CONNECTION ? -1 : -2; /* as outbox_io.c */
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

const db_outbox_ops_t sim_outbox_db = {
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

/* ---------- the relay ---------- */

void sim_outbox_begin(void)
{
    memset(&tx, 0, sizeof(tx));
    for (int i = 0; i < COPIES_KEY_LEN; i++)
        key[i] = (unsigned char)(sim.seed >> (i % 8));
    if (ob == NULL && (ob = outbox_new_ops(&sim_db_ops.outbox, NULL)) == NULL) {
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

outbox_t *sim_outbox(void)
{
    return ob;
}

/* The sweeper (worker_sweep, a chore between steps): every due row, when rows wait. */
void sim_relay(void)
{
    static const port_publish_t pub = {&sim_publish_ops, NULL};
    static const port_clock_t clock_port = {&sim_clock_ops, NULL};
    bool any = false;
    for (int id = 0; id < sim.o.n_msgs && !any; id++)
        for (int r = 0; r < SIM_ROWS && !any; r++)
            any = sim_db.row[id][r];
    if (!any)
        return;
    /* As worker_sweep: a lost database ends the worker (it reconnects); a failed round closes
     * the publishing connection. */
    int n = outbox_relay(ob, &pub, &clock_port, NULL, NULL, -1, 0, 20);
    if (n == -1)
        sim_die(0, "database lost in the outbox sweeper");
    if (n == -2)
        sim_pub_close();
}
