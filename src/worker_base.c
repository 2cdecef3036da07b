/* worker_base.c: what a worker's files share: the stop flag, the clock, progress and counters in
 * the slot, what was lost, pausing, giving up the deliveries (under worker.c, worker_conn.c,
 * worker_ops.c and worker_txn.c).
 */
#include "worker_int.h"
#include "clock.h"

#include <time.h>

volatile sig_atomic_t worker_stop;

/* Show progress, and follow a log level changed by a reload (the supervisor's slot field). */
void worker_progress(worker_t *w)
{
    __atomic_store_n(&w->slot->progress_ms, clock_mono_ms(), __ATOMIC_RELAXED);
    log_set_level((log_level_t)__atomic_load_n(&w->slot->log_level, __ATOMIC_RELAXED));
}

void worker_set_state(worker_t *w, worker_state_t st)
{
    __atomic_store_n(&w->slot->state, (int)st, __ATOMIC_RELAXED);
    if (st == WORKER_STATE_CONSUMING)
        __atomic_store_n(&w->slot->consumed, 1, __ATOMIC_RELAXED);
    worker_progress(w);
}

void worker_count(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

void worker_stage(worker_t *w, metrics_stage_t stage, uint64_t us)
{
    metrics_observe_stage(&w->slot->c, stage, us);
    __atomic_add_fetch(&w->slot->stage_lat[stage][metrics_lat_bucket(us)], 1, __ATOMIC_RELAXED);
}

void worker_stage_since(worker_t *w, metrics_stage_t stage, uint64_t t0)
{
    uint64_t now = clock_mono_us();
    worker_stage(w, stage, now > t0 ? now - t0 : 0);
}

/*
 * The worker exits because it lost the broker or the database: say which
 * (the supervisor counts the restart by it; the next run counts its
 * reconnect). Returns WORKER_EXIT_TEMPFAIL.
 */
int worker_lose(worker_t *w, worker_lost_t what)
{
    __atomic_store_n(&w->slot->lost, (int)what, __ATOMIC_RELAXED);
    return WORKER_EXIT_TEMPFAIL;
}

/* Connected to what; counts a reconnect when the slot says the last run lost it. */
void worker_connected(worker_t *w, worker_lost_t what)
{
    if (__atomic_load_n(&w->slot->lost, __ATOMIC_RELAXED) != (int)what)
        return;
    worker_count(what == WORKER_LOST_BROKER ? &w->slot->c.n_mq_reconnects
                                            : &w->slot->c.n_db_reconnects);
    __atomic_store_n(&w->slot->lost, WORKER_LOST_NONE, __ATOMIC_RELAXED);
}

/* Sleep up to ms, waking early on stop; keeps showing progress while it waits. */
void worker_pause(worker_t *w, int ms)
{
    while (ms > 0 && !worker_stop) {
        int step = ms > 200 ? 200 : ms;
        struct timespec ts = {0, (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
        worker_progress(w);
    }
}

/* Give up the batch, the carried delivery and the held list: unacked, the broker requeues them. */
void worker_give_back(worker_t *w)
{
    life_release(&w->life);
    w->bt.has_carry = false;
}
