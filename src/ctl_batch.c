/* ctl_batch.c: dlq replay in batches: trail rows before the copies, paced publishes, confirms,
 * acks, progress and the final count. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_batch.h"
#include "delivery.h"
#include "clock.h"
#include "log.h"

#define CTL_CONFIRM_MS 30000
#define CTL_SHOW_NS 250000000LL /* the progress line at most this often */

/* Sleep ns, keeping both broker connections alive across long waits. */
static void ctl_nap(ctl_pass_t *p, int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    mq_keepalive(p->pub);
    mq_keepalive(p->rd);
}

/* See ctl_batch.h; p->b owns its entries until ctl_batch_close. */
int ctl_batch_open(const ctl_t *ctl, ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;
    double burst = (double)ctl->rate / 5;

    b->cap = ctl->batch > 0 ? ctl->batch : CTL_REPLAY_BATCH;
    if ((b->v = calloc((size_t)b->cap, sizeof(*b->v))) == NULL) {
        log_error("out of memory for a batch of %ld letters", b->cap);
        return -1;
    }
    b->start_ns = b->shown_ns = (int64_t)clock_mono_ns();
    ctl_pace_init(&b->pace, (double)ctl->rate, burst > (double)b->cap ? (double)b->cap : burst,
                  b->start_ns);
    b->tty = isatty(STDERR_FILENO) == 1;
    if (p->trail && ctl_trail_floor(p->db, &b->floor) != 0)
        return -1;
    return 0;
}

/* See ctl_batch.h; the slot is the batch's. */
ctl_letter_t *ctl_batch_slot(ctl_pass_t *p)
{
    ctl_entry_t *e = &p->b.v[p->b.n];
    memset(e, 0, sizeof(*e));
    e->index = -1;
    return &e->l;
}

/* See ctl_batch.h. */
int ctl_batch_add(ctl_pass_t *p, ctl_entry_kind_t kind, const char *exchange, const char *rk,
                  long long row)
{
    ctl_batch_t *b = &p->b;
    ctl_entry_t *e = &b->v[b->n];

    if (row && b->n_claimed == b->cap_claimed) {
        long cap = b->cap_claimed ? b->cap_claimed * 2 : 64;
        long long *v = realloc(b->claimed, (size_t)cap * sizeof(*v));
        if (v == NULL) {
            log_error("replay: out of memory for the trail rows taken");
            return -1;
        }
        b->claimed = v;
        b->cap_claimed = cap;
    }
    if (row)
        b->claimed[b->n_claimed++] = row;
    e->kind = kind;
    e->exchange = exchange;
    e->rk = rk;
    e->row = row;
    b->n++;
    return 0;
}

/* See ctl_batch.h. Few rows are ever claimed (letters an interrupted replay left). */
bool ctl_batch_claimed(const ctl_pass_t *p, long long id)
{
    for (long i = 0; i < p->b.n_claimed; i++)
        if (p->b.claimed[i] == id)
            return true;
    return false;
}

/* See ctl_batch.h. */
bool ctl_batch_full(const ctl_pass_t *p)
{
    return p->b.n >= p->b.cap;
}

/* The consumer l was taken for (NULL: none known); borrowed from ctl or l. */
static const char *ctl_batch_consumer(const ctl_t *ctl, const ctl_letter_t *l)
{
    return ctl->consumer                ? ctl->consumer
           : l->q                       ? l->q->consumer
           : l->verified && l->queue[0] ? l->queue
                                        : NULL;
}

/*
 * Step 1: a trail row "sending" for each letter to publish anew, in one
 * transaction, before any copy goes. 0, or -1 (logged, rolled back).
 */
static int ctl_batch_intent(const ctl_t *ctl, ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;

    if (!p->trail)
        return 0;
    for (long i = 0; i < b->n; i++) {
        ctl_entry_t *e = &b->v[i];
        const ctl_letter_t *l = &e->l;
        const char *consumer = ctl_batch_consumer(ctl, l);
        ctl_trail_t t = {.id = l->has_id ? l->id : NULL,
                         .id_len = l->id_len,
                         .source = p->queue,
                         .exchange = e->exchange,
                         .routing_key = e->rk,
                         .consumer = l->consumer ? l->consumer : consumer,
                         .signature = ctl_sig_names[l->sig],
                         .applied = l->applied,
                         .forced = l->applied > 0,
                         .stage = CTL_TRAIL_SENDING,
                         .fingerprint = l->fp};
        if (e->kind == CTL_ENTRY_SEND && ctl_trail_add(p->db, &t, &e->row) != 0)
            goto fail;
    }
    if (db_commit(p->db) != DB_OK)
        goto fail;
    return 0;
fail:
    (void)db_rollback(p->db);
    log_error("replay: the trail rows of %ld letters were not written; nothing of this batch "
              "was published, its letters stay",
              b->n);
    return -1;
}

/* Step 2: publish the copies of the batch, each when the pace lets it, then wait for the
 * confirms; sets each entry's ok. Returns how many copies were not confirmed. */
static long ctl_batch_publish(ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;
    long bad = 0;
    bool sent_any = false, broken = false;

    mq_round_begin(p->pub);
    for (long i = 0; i < b->n; i++) {
        ctl_entry_t *e = &b->v[i];
        const amqp_basic_properties_t *pp = &e->l.msg.properties;
        amqp_basic_properties_t props = *pp;
        amqp_table_entry_t *entries = NULL;
        int n = 0;

        if (e->kind == CTL_ENTRY_ACK) {
            e->ok = true;
            continue;
        }
        if (broken)
            continue;
        if (pp->_flags & AMQP_BASIC_HEADERS_FLAG) {
            if ((entries = calloc((size_t)pp->headers.num_entries + 1, sizeof(*entries))) == NULL) {
                log_error("replay: out of memory for a copy's headers");
                broken = true;
                continue;
            }
            for (int k = 0; k < pp->headers.num_entries; k++)
                if (!ctl_header_dropped(pp->headers.entries[k].key))
                    entries[n++] = pp->headers.entries[k];
            props.headers.entries = entries;
            props.headers.num_entries = n;
        }
        for (int64_t w; (w = ctl_pace_take(&b->pace, (int64_t)clock_mono_ns())) > 0;)
            ctl_nap(p, w);
        e->index = mq_publish_to(p->pub, e->exchange, e->rk, &props, e->l.msg.body);
        free(entries);
        broken = e->index < 0;
        sent_any |= e->index >= 0;
    }
    if (sent_any && mq_wait_confirms(p->pub, CTL_CONFIRM_MS) != 0)
        log_debug("replay: a copy of the batch was refused (each is named below)");
    for (long i = 0; i < b->n; i++) {
        ctl_entry_t *e = &b->v[i];
        char pid[96];
        if (e->kind == CTL_ENTRY_ACK)
            continue;
        e->ok = e->index >= 0 && mq_round_ok(p->pub, e->index);
        if (e->ok)
            continue;
        bad++;
        delivery_id_printable(e->l.has_id ? e->l.id : "-", e->l.has_id ? e->l.id_len : 1, pid,
                              sizeof(pid));
        log_error("replay: dead letter %s: the copy to exchange '%s' routing key '%s' was not "
                  "confirmed; the dead letter stays (%s)",
                  pid, e->exchange, e->rk,
                  e->index >= 0 && mq_round_why(p->pub, e->index) ? mq_round_why(p->pub, e->index)
                                                                  : "not sent");
    }
    return bad;
}

/*
 * Step 3, one transaction: each confirmed copy's attempts row cleared and
 * trail row "confirmed"; the row of a copy the broker returned (routed
 * nowhere: it went nowhere) deleted. Any other copy not confirmed keeps
 * its row "sending": a rerun sends it again, and the record absorbs a
 * second copy. 0, or -1 (logged, rolled back: the letters stay).
 */
static int ctl_batch_confirmed(const ctl_t *ctl, ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;
    long long *ok = calloc((size_t)b->n + 1, sizeof(*ok)),
              *gone = calloc((size_t)b->n + 1, sizeof(*gone));
    long n_ok = 0, n_gone = 0;
    int rc = -1;

    if (ok == NULL || gone == NULL) {
        log_error("replay: out of memory for the trail rows of a batch");
        goto out;
    }
    for (long i = 0; i < b->n; i++) {
        ctl_entry_t *e = &b->v[i];
        const char *consumer = ctl_batch_consumer(ctl, &e->l);
        bool clear = consumer && e->l.has_id && !e->l.onward; /* onward: no attempts row */
        if (e->kind == CTL_ENTRY_ACK)
            continue;
        if (!e->ok) {
            if (e->row && e->index >= 0 && mq_round_returned(p->pub, e->index))
                gone[n_gone++] = e->row;
            continue;
        }
        if (e->row)
            ok[n_ok++] = e->row;
        if (clear && (db_set_consumer(p->db, consumer) != 0 ||
                      db_attempt_clear(p->db, e->l.id, e->l.id_len) < 0))
            goto fail;
    }
    if (ctl_trail_set(p->db, ok, n_ok, CTL_TRAIL_CONFIRMED) != 0 ||
        ctl_trail_set(p->db, gone, n_gone, NULL) != 0 || db_commit(p->db) != DB_OK)
        goto fail;
    rc = 0;
    goto out;
fail:
    (void)db_rollback(p->db);
    log_error("replay: %ld copies were confirmed, but their attempts rows were not cleared or "
              "their trail rows not updated; their dead letters stay (a rerun sends them again: "
              "the record absorbs a second copy)",
              n_ok);
out:
    free(ok);
    free(gone);
    return rc;
}

/* Test knob (--slow-ms): name each confirmed copy, then wait before the acks, for kill -9. */
static void ctl_batch_slow(const ctl_t *ctl, ctl_pass_t *p)
{
    if (ctl->slow_ms <= 0)
        return;
    for (long i = 0; i < p->b.n; i++) {
        const ctl_entry_t *e = &p->b.v[i];
        char pid[96];
        if (!e->ok || e->kind == CTL_ENTRY_ACK)
            continue;
        delivery_id_printable(e->l.has_id ? e->l.id : "-", e->l.has_id ? e->l.id_len : 1, pid,
                              sizeof(pid));
        ctl_fprintf(stderr, "idemctl: replayed %s, acking in %ld ms\n", pid, ctl->slow_ms);
    }
    ctl_nap(p, ctl->slow_ms * 1000000LL);
}

/*
 * Step 4: ack the dead letters whose copies went back, make sure the
 * broker has the acks (a passive declare on the same channel comes back
 * after them), then set their rows "acked". 0, or -1 (logged).
 */
static int ctl_batch_ack(const ctl_t *ctl, ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;
    long long *rows = calloc((size_t)b->n + 1, sizeof(*rows));
    long n = 0;
    unsigned depth, consumers;
    int rc = -1;

    if (rows == NULL) {
        log_error("replay: out of memory for the trail rows of a batch");
        return -1;
    }
    /* With nothing unacked below them (no letter kept so far), the leading run of letters
     * whose copies went back is acked at once (multiple): one settlement for the queue, not
     * one each. A quorum queue can drop settlements still under way when the channel closes
     * (seen on RabbitMQ 3.10): those letters would come back, their rows saying 'acked', and
     * a rerun acks them from the trail; ctl_dlq.c's barrier waits for them at the end. */
    long run = 0;
    while (p->n_kept == 0 && run < b->n && b->v[run].ok)
        run++;
    if (run > 0 && mq_ack(p->rd, b->v[run - 1].l.tag, true) != 0)
        goto out;
    for (long i = 0; i < b->n; i++) {
        ctl_entry_t *e = &b->v[i];
        if (!e->ok)
            continue;
        if (i >= run && mq_ack(p->rd, e->l.tag, false) != 0)
            goto out;
        e->acked = true;
        if (e->row)
            rows[n++] = e->row;
        if (e->kind == CTL_ENTRY_ACK)
            b->resumed++;
        else
            b->sent++;
        if (e->kind != CTL_ENTRY_ACK && e->l.applied > 0) {
            char pid[96];
            delivery_id_printable(e->l.has_id ? e->l.id : "-", e->l.has_id ? e->l.id_len : 1, pid,
                                  sizeof(pid));
            ctl_fprintf(stderr,
                        "idemctl: FORCED: dead letter %s was already applied; replayed anyway "
                        "(--force)\n",
                        pid);
        }
    }
    if (n > 0 && ctl_queue_peek(p->rd, p->queue, &depth, &consumers) != 0)
        goto out;
    if (ctl_trail_set(p->db, rows, n, CTL_TRAIL_ACKED) != 0 ||
        (n > 0 && db_commit(p->db) != DB_OK)) {
        (void)db_rollback(p->db);
        log_error("replay: %ld dead letters were acked, but their trail rows still say "
                  "'confirmed' (harmless: either way a rerun acks the very same letter without a "
                  "second copy)",
                  n);
        goto out;
    }
    (void)ctl;
    rc = 0;
out:
    free(rows);
    return rc;
}

/* Compare two delivery tags, for qsort. */
static int ctl_tag_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The progress line on a terminal, rewritten in place; at most every CTL_SHOW_NS unless last. */
static void ctl_batch_show(ctl_pass_t *p, bool last)
{
    ctl_batch_t *b = &p->b;
    int64_t now = (int64_t)clock_mono_ns();
    char line[128];

    if (!b->tty || (!last && now - b->shown_ns < CTL_SHOW_NS))
        return;
    b->shown_ns = now;
    ctl_pace_line(b->sent + b->resumed, p->scanned, (long)p->depth, now - b->start_ns, line,
                  sizeof(line));
    ctl_fprintf(stderr, "\r%s        ", line);
    b->shown = true;
}

/* See ctl_batch.h. */
int ctl_batch_flush(const ctl_t *ctl, ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;
    long bad = 0;
    int rc = -1;

    if (b->n == 0)
        return 0;
    if (ctl_batch_intent(ctl, p) != 0)
        goto out;
    bad = ctl_batch_publish(p);
    b->failed += bad;
    if (ctl_batch_confirmed(ctl, p) != 0)
        goto out;
    ctl_batch_slow(ctl, p);
    if (ctl_batch_ack(ctl, p) != 0)
        goto out;
    rc = bad > 0 ? -1 : 0; /* a copy not confirmed stops the pass, as one failure does */
out:
    for (long i = 0; i < b->n; i++) {
        ctl_entry_t *e = &b->v[i];
        if (e->acked)
            p->done++;
        else
            p->kept[p->n_kept++] = e->l.tag;
        amqp_destroy_message(&e->l.msg);
    }
    qsort(p->kept, (size_t)p->n_kept, sizeof(*p->kept), ctl_tag_cmp);
    b->n = 0;
    ctl_batch_show(p, false);
    return rc;
}

/* See ctl_batch.h. */
void ctl_batch_close(const ctl_t *ctl, ctl_pass_t *p)
{
    ctl_batch_t *b = &p->b;

    if (b->v == NULL)
        return;
    for (long i = 0; i < b->n; i++) /* letters taken into a batch never flushed */
        amqp_destroy_message(&b->v[i].l.msg);
    free(b->v);
    free(b->claimed);
    b->v = NULL;
    b->claimed = NULL;
    if (ctl->dry_run)
        return;
    if (b->shown) {
        ctl_batch_show(p, true);
        ctl_fprintf(stderr, "\n");
    }
    if (b->resumed > 0)
        ctl_fprintf(stderr,
                    "replayed %ld, skipped %ld, failed %ld, already back %ld (acked from the "
                    "trail: their copies went back before an interruption)\n",
                    b->sent, p->refused, b->failed, b->resumed);
    else
        ctl_fprintf(stderr, "replayed %ld, skipped %ld, failed %ld\n", b->sent, p->refused,
                    b->failed);
}

/* ---------- the plan (--dry-run) ---------- */

/* See ctl_batch.h; the routes are copied. */
void ctl_plan_go(ctl_plan_t *plan, ctl_entry_kind_t kind, const char *exchange, const char *rk)
{
    if (kind == CTL_ENTRY_ACK) {
        plan->ack++;
        return;
    }
    plan->replay++;
    for (int i = 0; i < plan->n_to; i++)
        if (strcmp(plan->to[i].exchange, exchange) == 0 && strcmp(plan->to[i].rk, rk) == 0) {
            plan->to[i].n++;
            return;
        }
    if (plan->n_to == CTL_PLAN_TARGETS) {
        plan->elsewhere++;
        return;
    }
    snprintf(plan->to[plan->n_to].exchange, sizeof(plan->to[0].exchange), "%s", exchange);
    snprintf(plan->to[plan->n_to].rk, sizeof(plan->to[0].rk), "%s", rk);
    plan->to[plan->n_to++].n = 1;
}

static const char *const ctl_why_names[CTL_WHY_N] = {
    "not verified", "body dropped", "already applied", "no route", "may have gone back, no id"};
static const char *const ctl_why_keys[CTL_WHY_N] = {"unverified", "body_dropped", "applied",
                                                    "no_route", "unsure"};

/* How long the plan's letters take at ctl->rate, in seconds (-1: unpaced). */
static long long ctl_plan_secs(const ctl_t *ctl, const ctl_plan_t *plan)
{
    return ctl->rate > 0 ? (plan->replay + ctl->rate - 1) / ctl->rate : -1;
}

/* The plan as object "plan" of o (--json). */
static void ctl_plan_json(const ctl_t *ctl, const ctl_pass_t *p, json_object *o)
{
    const ctl_plan_t *plan = &p->plan;
    json_object *j = json_object_new_object(), *to = json_object_new_array(),
                *stay = json_object_new_object();

    json_object_object_add(j, "replay", json_object_new_int64(plan->replay));
    json_object_object_add(j, "ack_only", json_object_new_int64(plan->ack));
    for (int i = 0; i < plan->n_to; i++) {
        json_object *t = json_object_new_object();
        json_object_object_add(t, "exchange", ctl_json_text(plan->to[i].exchange));
        json_object_object_add(t, "routing_key", ctl_json_text(plan->to[i].rk));
        json_object_object_add(t, "letters", json_object_new_int64(plan->to[i].n));
        json_object_array_add(to, t);
    }
    json_object_object_add(j, "targets", to);
    json_object_object_add(j, "elsewhere", json_object_new_int64(plan->elsewhere));
    for (int i = 0; i < CTL_WHY_N; i++)
        json_object_object_add(stay, ctl_why_keys[i], json_object_new_int64(plan->why[i]));
    json_object_object_add(j, "stay", stay);
    json_object_object_add(j, "rate", ctl->rate > 0 ? json_object_new_int64(ctl->rate) : NULL);
    json_object_object_add(j, "batch", json_object_new_int64(p->b.cap));
    long long secs = ctl_plan_secs(ctl, plan);
    json_object_object_add(j, "seconds", secs >= 0 ? json_object_new_int64(secs) : NULL);
    json_object_object_add(o, "plan", j);
}

/* See ctl_batch.h. */
void ctl_plan_print(const ctl_t *ctl, const ctl_pass_t *p, json_object *o)
{
    const ctl_plan_t *plan = &p->plan;
    long stay = 0;
    char eta[32];

    if (ctl->json) {
        ctl_plan_json(ctl, p, o);
        return;
    }
    ctl_printf("plan: %ld letters of %s go back", plan->replay, p->queue);
    for (int i = 0; i < plan->n_to; i++) {
        ctl_printf("%s %ld to exchange '", i ? "," : ":", plan->to[i].n);
        ctl_puts(stdout, plan->to[i].exchange);
        ctl_printf("' routing key '");
        ctl_puts(stdout, plan->to[i].rk);
        ctl_printf("'");
    }
    if (plan->elsewhere > 0)
        ctl_printf(", %ld elsewhere", plan->elsewhere);
    ctl_printf("\n");
    if (plan->ack > 0)
        ctl_printf("plan: %ld only acked: the trail says their copies went back before a replay "
                   "was cut short\n",
                   plan->ack);
    for (int i = 0; i < CTL_WHY_N; i++)
        stay += plan->why[i];
    if (stay > 0) {
        ctl_printf("plan: %ld stay", stay);
        for (int i = 0, k = 0; i < CTL_WHY_N; i++)
            if (plan->why[i] > 0)
                ctl_printf("%s %ld %s", k++ ? "," : ":", plan->why[i], ctl_why_names[i]);
        ctl_printf("\n");
    }
    long long secs = ctl_plan_secs(ctl, plan);
    ctl_pace_eta(secs, eta, sizeof(eta));
    if (secs >= 0)
        ctl_printf("plan: at %ld/s in batches of %ld: about %s\n", ctl->rate, p->b.cap, eta);
    else
        ctl_printf("plan: unpaced (no --rate) in batches of %ld\n", p->b.cap);
}
