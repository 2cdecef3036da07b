/* autoscale.c: the controller behind workers = "auto": add a worker while that raises throughput.
 */
#include "autoscale.h"

#include <stdio.h>
#include <string.h>

/*
 * The rule (docs/scaling.md): a queue whose workers are busy at least
 * AUTOSCALE_HOT of the time for AUTOSCALE_HOT_INTERVALS intervals has a
 * backlog, or soon will: add one worker. Once every worker consumes and
 * one more interval passed, compare the throughput with the one before:
 * if it did not grow by AUTOSCALE_MIN_GAIN while the workers are still
 * saturated, the database (or the handler's lock) is the limit, not the
 * workers: take the worker back and add none for AUTOSCALE_HOLD_MS; if it
 * did, and they are still saturated, add the next one at once (the
 * judgement interval is the evidence). Remove
 * one when the others could carry the load at most AUTOSCALE_COLD busy, for
 * AUTOSCALE_COLD_INTERVALS intervals in a row. Always within min..max.
 */

int autoscale_start_count(int min, int max)
{
    int n = AUTOSCALE_START > max ? max : AUTOSCALE_START;
    if (n < min)
        n = min;
    return n < 1 ? 1 : n;
}

void autoscale_init(autoscale_t *a, int min, int max)
{
    memset(a, 0, sizeof(*a));
    a->max = max < 1 ? 1 : max;
    a->min = min < 1 ? 1 : min > a->max ? a->max : min;
    a->target = autoscale_start_count(a->min, a->max);
}

void autoscale_set_max(autoscale_t *a, int max)
{
    a->max = max < 1 ? 1 : max;
    if (a->min > a->max)
        a->min = a->max;
}

/* Forget the streaks and any judgement pending (after a change of target). */
static void autoscale_reset(autoscale_t *a)
{
    a->hot = 0;
    a->cold = 0;
    a->hot_rate_sum = 0;
    a->probing = false;
    a->settle = 0;
}

autoscale_step_t autoscale_feed(autoscale_t *a, const autoscale_sample_t *s)
{
    if (a->target > a->max) {
        snprintf(a->why, sizeof(a->why), "%d workers is above the cap of %d: removing one",
                 a->target, a->max);
        a->target--;
        autoscale_reset(a);
        return AUTOSCALE_DOWN;
    }
    /* Workers still starting (or reconnecting): their interval says nothing yet. */
    if (s->consuming < a->target || s->dt_ms == 0) {
        a->hot = 0;
        a->cold = 0;
        a->hot_rate_sum = 0;
        return AUTOSCALE_KEEP;
    }
    uint64_t t = s->busy_us + s->idle_us;
    a->busy = t > 0 ? (double)s->busy_us / (double)t : 0.0;
    a->rate = (double)s->done * 1000.0 / (double)s->dt_ms;
    bool hot = a->busy >= AUTOSCALE_HOT;

    bool gained = false;
    if (a->probing) {
        /* The first interval with every worker consuming held part of a start. */
        if (a->settle > 0) {
            a->settle--;
            return AUTOSCALE_KEEP;
        }
        a->probing = false;
        gained = a->rate >= a->base_rate * (1.0 + AUTOSCALE_MIN_GAIN);
        if (hot && !gained && a->target > a->min) {
            snprintf(a->why, sizeof(a->why),
                     "worker %d did not raise throughput (%.0f -> %.0f msgs/s, less than +%.0f%%): "
                     "taking it back, no addition for %d s",
                     a->target, a->base_rate, a->rate, AUTOSCALE_MIN_GAIN * 100,
                     AUTOSCALE_HOLD_MS / 1000);
            a->target--;
            a->hold_until_ms = s->now_ms + AUTOSCALE_HOLD_MS;
            autoscale_reset(a);
            return AUTOSCALE_DOWN;
        }
    }
    if (hot) {
        a->cold = 0;
        a->hot++;
        a->hot_rate_sum += a->rate;
        if ((a->hot >= AUTOSCALE_HOT_INTERVALS || gained) && a->target < a->max &&
            s->now_ms >= a->hold_until_ms) {
            double base = a->hot_rate_sum / a->hot;
            snprintf(
                a->why, sizeof(a->why),
                "workers %.0f%% busy for %d interval(s) at %d worker(s), %.0f msgs/s%s: adding one",
                a->busy * 100, a->hot, a->target, base, gained ? " (the last one raised it)" : "");
            a->target++;
            autoscale_reset(a);
            a->probing = true;
            a->settle = 1;
            a->base_rate = base;
            return AUTOSCALE_UP;
        }
        return AUTOSCALE_KEEP;
    }
    a->hot = 0;
    a->hot_rate_sum = 0;
    /* Would the others, one fewer, stay at most AUTOSCALE_COLD busy? */
    if (a->target > a->min &&
        a->busy * s->consuming <= AUTOSCALE_COLD * (double)(s->consuming - 1)) {
        if (++a->cold >= AUTOSCALE_COLD_INTERVALS) {
            snprintf(
                a->why, sizeof(a->why),
                "workers %.0f%% busy for %d intervals at %d workers, %.0f msgs/s: removing one",
                a->busy * 100, a->cold, a->target, a->rate);
            a->target--;
            autoscale_reset(a);
            return AUTOSCALE_DOWN;
        }
    } else {
        a->cold = 0;
    }
    return AUTOSCALE_KEEP;
}
