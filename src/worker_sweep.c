/* worker_sweep.c: a worker's outbox sweeper (a chore between batches): rows a dead worker left
 * behind, and the outbox's depth in the slot.
 */
#include "worker_int.h"
#include "clock.h"

#include "log.h"

#define WORKER_SWEEP_SLICES 20 /* outbox slices per sweep (500 rows, 16 MiB each) */

/* Publish what the outbox holds (outbox_depth) in the slot, for /status and metrics. */
static void worker_show_depth(worker_t *w, const outbox_depth_t *d)
{
    __atomic_store_n(&w->slot->outbox_rows, (int64_t)d->rows, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_retrying, (int64_t)d->retrying, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_exhausted, (int64_t)d->exhausted, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_oldest_us, (int64_t)(d->oldest_s * 1e6), __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_seen_ms, clock_mono_ms(), __ATOMIC_RELAXED);
}

/*
 * Before the sweeper takes its lease: count the consumer's outbox rows (one
 * read, its transaction rolled back) and show them. 1 when there are rows
 * to look at, 0 when none, -1 when the database failed.
 */
int worker_sweep_peek(void *arg)
{
    worker_t *w = arg;
    outbox_depth_t d;
    if (outbox_depth(w->outbox, &d) != 0)
        return db_classify(mysql_errno(w->db->my)) == DB_ERR_CONNECTION ? -1 : 1;
    worker_show_depth(w, &d);
    return d.rows > 0 ? 1 : 0;
}

/* The outbox sweeper (a chore, one runner at a time): rows a dead worker left behind. */
int worker_sweep(void *arg)
{
    worker_t *w = arg;
    const port_publish_t *pub = &w->pub_port;
    if (pub->ops->open(pub->ctx) != 0 || pub->ops->blocked(pub->ctx))
        return 0; /* no usable republishing connection: the next sweep tries again */
    int n = outbox_relay(w->outbox, &w->pub_port, &w->clock, NULL, NULL, -1, w->conf->outbox_grace,
                         WORKER_SWEEP_SLICES);
    if (n == -1)
        return -1;
    if (n == -2)
        pub->ops->close(pub->ctx); /* the next open declares our queues again */
    else if (n > 0)
        log_info("outbox: sweeper sent %d onward message(s) left behind", n);
    outbox_depth_t d;
    if (outbox_depth(w->outbox, &d) == 0)
        worker_show_depth(w, &d);
    return 0;
}
