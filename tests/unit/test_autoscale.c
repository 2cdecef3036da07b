/* test_autoscale.c: unit tests of the workers = "auto" controller (autoscale.c), driven by
 * scripted samples: a queue model says what n workers achieve, and the test checks the counts
 * the controller chooses, its bounds, the take-back of an addition that did not help and the
 * way down once idle.
 */
#include <stdio.h>
#include <string.h>

#include "autoscale.h"
#include "tap.h"

/*
 * A queue: `backlog` messages waiting plus `arrive` msgs/s; each worker does at most
 * `per_worker` msgs/s and all of them together at most `ceiling` (the database). One step is
 * one interval of AUTOSCALE_INTERVAL_MS with `n` workers consuming (all of them, unless
 * `starting`).
 */
typedef struct model {
    double backlog, arrive, per_worker, ceiling;
    uint64_t now_ms;
} model_t;

static autoscale_sample_t t_step(model_t *m, int n, int consuming)
{
    autoscale_sample_t s;
    double dt = AUTOSCALE_INTERVAL_MS / 1000.0;
    double cap = consuming * m->per_worker;
    if (cap > m->ceiling)
        cap = m->ceiling;
    double want = m->backlog + m->arrive * dt;
    double done = want < cap * dt ? want : cap * dt;
    m->backlog = want - done;
    double busy = cap > 0 ? done / (cap * dt) : 0; /* fraction of the workers' time */
    m->now_ms += AUTOSCALE_INTERVAL_MS;
    memset(&s, 0, sizeof(s));
    s.now_ms = m->now_ms;
    s.dt_ms = AUTOSCALE_INTERVAL_MS;
    s.consuming = consuming;
    s.done = (uint64_t)done;
    s.busy_us = (uint64_t)(busy * consuming * dt * 1e6);
    s.idle_us = (uint64_t)((1 - busy) * consuming * dt * 1e6);
    (void)n;
    return s;
}

/* Run steps intervals; returns the largest target seen. Workers start at once. */
static int t_run(autoscale_t *a, model_t *m, int steps, int *ups, int *downs)
{
    int most = a->target;
    for (int i = 0; i < steps; i++) {
        autoscale_sample_t s = t_step(m, a->target, a->target);
        autoscale_step_t st = autoscale_feed(a, &s);
        if (st == AUTOSCALE_UP && ups)
            (*ups)++;
        if (st == AUTOSCALE_DOWN && downs)
            (*downs)++;
        if (a->target > most)
            most = a->target;
    }
    return most;
}

int main(void)
{
    autoscale_t a;
    model_t m;
    int ups = 0, downs = 0;

    /* Workers scale well (a handler bound by round trips): it grows to the cap and no further. */
    autoscale_init(&a, 1, 6);
    ok(a.target == AUTOSCALE_START, "starts at AUTOSCALE_START (got %d)", a.target);
    ok(autoscale_start_count(1, 1) == 1, "a cap of 1 starts 1");
    ok(autoscale_start_count(3, 8) == 3, "workers_min above AUTOSCALE_START starts workers_min");
    m = (model_t){.backlog = 1e9, .per_worker = 1000, .ceiling = 1e9};
    int most = t_run(&a, &m, 60, &ups, &downs);
    ok(a.target == 6 && most == 6, "a backlog that scales: up to the cap 6 (got %d, most %d)",
       a.target, most);
    ok(downs == 0, "nothing taken back while each worker adds throughput (%d)", downs);

    /* The backlog drains, then a trickle: down to workers_min, one at a time. */
    m.backlog = 0;
    m.arrive = 100;
    downs = 0;
    t_run(&a, &m, 100, NULL, &downs);
    ok(a.target == 1 && downs == 5, "idle: back to 1, one worker at a time (target %d, %d downs)",
       a.target, downs);

    /* A database that does 2,500 msgs/s whatever the count: the third worker is taken back
     * (the second still helps: 1000 -> 2000), and none is added during the hold. */
    autoscale_init(&a, 1, 16);
    m = (model_t){.backlog = 1e9, .per_worker = 1000, .ceiling = 2500};
    ups = downs = 0;
    most = t_run(&a, &m, 30, &ups, &downs);
    ok(most <= 4, "a ceiling of 2,500 msgs/s: never above 4 workers (most %d)", most);
    ok(downs >= 1, "an addition that did not help is taken back (%d)", downs);
    ok(a.target == 3, "it settles where the gain stopped: 3 workers (2,500 msgs/s) (got %d)",
       a.target);
    ok(strstr(a.why, "did not raise throughput") != NULL, "the reason says why: %s", a.why);
    int before = ups;
    ok(a.hold_until_ms > m.now_ms, "a hold is set");
    while (m.now_ms + AUTOSCALE_INTERVAL_MS < a.hold_until_ms)
        t_run(&a, &m, 1, &ups, NULL);
    ok(ups == before, "no addition during the hold (%d more)", ups - before);
    t_run(&a, &m, 20, &ups, NULL);
    ok(ups > before, "tries again after the hold");
    ok(a.target <= 4, "and stays near the ceiling (%d)", a.target);

    /* A load one worker carries (60% busy): no addition. */
    autoscale_init(&a, 1, 8);
    a.target = 1; /* the supervisor's count: one running */
    m = (model_t){.arrive = 600, .per_worker = 1000, .ceiling = 1e9};
    ups = 0;
    t_run(&a, &m, 50, &ups, NULL);
    ok(ups == 0 && a.target == 1, "60%% busy: stays at 1 (ups %d)", ups);

    /* Three workers at 40% each: one fewer would be 60% each: kept. */
    autoscale_init(&a, 3, 8);
    m = (model_t){.arrive = 1200, .per_worker = 1000, .ceiling = 1e9};
    downs = 0;
    t_run(&a, &m, 50, NULL, &downs);
    ok(downs == 0 && a.target == 3, "3 at 40%%: kept (the others would pass 50%%) (%d)", a.target);
    /* Never below workers_min even when idle. */
    m.arrive = 0;
    t_run(&a, &m, 50, NULL, NULL);
    ok(a.target == 3, "idle: never below workers_min 3 (got %d)", a.target);

    /* Workers still starting: no decision on their intervals. */
    autoscale_init(&a, 1, 8);
    a.target = 1;
    m = (model_t){.backlog = 1e9, .per_worker = 1000, .ceiling = 1e9};
    autoscale_step_t st = AUTOSCALE_KEEP;
    for (int i = 0; i < 3 && st == AUTOSCALE_KEEP; i++) {
        autoscale_sample_t s = t_step(&m, 1, 1);
        st = autoscale_feed(&a, &s);
    }
    ok(st == AUTOSCALE_UP && a.target == 2, "saturated: one added (target %d)", a.target);
    int judged = 0;
    for (int i = 0; i < 10; i++) {
        autoscale_sample_t s = t_step(&m, 2, 1); /* the new one never consumes */
        judged += autoscale_feed(&a, &s) != AUTOSCALE_KEEP;
    }
    ok(judged == 0 && a.target == 2, "while a worker starts: nothing decided (%d)", judged);

    /* A busy fraction with no samples (0/0, e.g. all in a long batch) is no reason to remove. */
    autoscale_init(&a, 1, 8);
    a.target = 2;
    autoscale_sample_t none = {.now_ms = 1000, .dt_ms = 1000, .consuming = 2};
    for (int i = 0; i < 3; i++)
        (void)autoscale_feed(&a, &none);
    ok(a.target == 2, "three 0/0 intervals: nobody removed yet (target %d)", a.target);

    /* The cap lowered (connection budget, reload): brought down one per interval. */
    autoscale_init(&a, 1, 8);
    m = (model_t){.backlog = 1e9, .per_worker = 1000, .ceiling = 1e9};
    t_run(&a, &m, 60, NULL, NULL);
    ok(a.target == 8, "at the cap 8 (got %d)", a.target);
    autoscale_set_max(&a, 3);
    downs = 0;
    most = t_run(&a, &m, 5, NULL, &downs);
    ok(a.target == 3 && downs == 5, "cap lowered to 3: down one per interval (target %d, %d)",
       a.target, downs);
    t_run(&a, &m, 30, NULL, NULL);
    ok(a.target == 3, "and no higher than the new cap under load (%d)", a.target);

    /* min above max is clamped. */
    autoscale_init(&a, 9, 4);
    ok(a.min == 4 && a.target == 4, "workers_min above the cap: clamped to it (%d)", a.target);
    return done();
}
