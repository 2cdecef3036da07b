/* life.c: a delivery's life in a worker: the one mover (life_move) and its lists. */
#include "life.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const char *const life_names[LIFE_N_STATES] = {
    "free",   "batch",   "deferred", "ack",  "nack",    "copy",     "copying",
    "copied", "refused", "held",     "gone", "settled", "requeued", "released",
};

/* The transitions life_move allows: life_next[from] has bit to set. */
#define LIFE_BIT(s) (1u << (s))
static const unsigned life_next[LIFE_N_STATES] = {
    [LIFE_FREE] = LIFE_BIT(LIFE_BATCH),
    [LIFE_BATCH] = LIFE_BIT(LIFE_DEFERRED) | LIFE_BIT(LIFE_ACK) | LIFE_BIT(LIFE_NACK) |
                   LIFE_BIT(LIFE_COPY) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_DEFERRED] = LIFE_BIT(LIFE_BATCH) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_ACK] = LIFE_BIT(LIFE_SETTLED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_NACK] = LIFE_BIT(LIFE_SETTLED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_COPY] = LIFE_BIT(LIFE_COPYING) | LIFE_BIT(LIFE_REFUSED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_COPYING] = LIFE_BIT(LIFE_COPIED) | LIFE_BIT(LIFE_REFUSED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_COPIED] = LIFE_BIT(LIFE_SETTLED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_REFUSED] = LIFE_BIT(LIFE_HELD) | LIFE_BIT(LIFE_REQUEUED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_HELD] = LIFE_BIT(LIFE_COPYING) | LIFE_BIT(LIFE_REFUSED) | LIFE_BIT(LIFE_RELEASED),
    [LIFE_GONE] = LIFE_BIT(LIFE_FREE),
    [LIFE_SETTLED] = LIFE_BIT(LIFE_FREE),
    [LIFE_REQUEUED] = LIFE_BIT(LIFE_FREE),
    [LIFE_RELEASED] = LIFE_BIT(LIFE_FREE),
};

const char *life_state_name(life_state_t s)
{
    return (unsigned)s < LIFE_N_STATES ? life_names[s] : "?";
}

bool life_unsettled(life_state_t s)
{
    return s != LIFE_FREE && s != LIFE_GONE && s != LIFE_SETTLED && s != LIFE_REQUEUED &&
           s != LIFE_RELEASED;
}

int life_init(life_t *l, int batch_cap, int held_cap)
{
    memset(l, 0, sizeof(*l));
    if (batch_cap < 1 || held_cap < 1)
        return -1;
    /* One more batch entry: the carry slot. */
    l->batch.m = calloc((size_t)batch_cap + 1, sizeof(*l->batch.m));
    l->batch.t = calloc((size_t)batch_cap + 1, sizeof(*l->batch.t));
    l->batch.cap = batch_cap;
    l->held.m = calloc((size_t)held_cap, sizeof(*l->held.m));
    l->held.t = calloc((size_t)held_cap, sizeof(*l->held.t));
    l->held.cap = held_cap;
    if (!l->batch.m || !l->batch.t || !l->held.m || !l->held.t) {
        life_free(l);
        return -1;
    }
    return 0;
}

void life_free(life_t *l)
{
    free(l->batch.m);
    free(l->batch.t);
    free(l->held.m);
    free(l->held.t);
    memset(l, 0, sizeof(*l));
}

bool life_move(life_t *l, life_list_t *list, int i, life_state_t to)
{
    life_msg_t *m = &list->m[i];
    life_state_t from = m->state;

    if ((unsigned)from >= LIFE_N_STATES || (unsigned)to >= LIFE_N_STATES ||
        !(life_next[from] & LIFE_BIT(to))) {
        log_error("life: no transition %s -> %s", life_state_name(from), life_state_name(to));
        abort();
    }
    if (to == LIFE_HELD && list == &l->batch) {
        /* Into the held list: the copy owns the envelope from now on. */
        if (l->held.n >= l->held.cap)
            return false;
        int k = l->held.n++;
        l->held.m[k] = *m;
        l->held.t[k] = list->t[i];
        l->held.m[k].state = LIFE_HELD;
        l->held.m[k].copy_index = -1;
        m->state = LIFE_GONE;
        l->moves[LIFE_HELD]++;
        l->moves[LIFE_GONE]++;
        return true;
    }
    if (to == LIFE_HELD && list != &l->held) {
        log_error("life: only a batch entry enters the held list");
        abort();
    }
    if (to != LIFE_COPYING)
        m->copy_index = -1;
    m->state = to;
    l->moves[to]++;
    return true;
}

void life_place(life_list_t *list, int from, int to)
{
    if (from == to)
        return;
    list->m[to] = list->m[from];
    list->t[to] = list->t[from];
    memset(&list->m[from], 0, sizeof(list->m[from]));
    list->m[from].state = LIFE_FREE;
}

void life_prune(life_t *l)
{
    int k = 0;
    for (int i = 0; i < l->held.n; i++) {
        life_msg_t *m = &l->held.m[i];
        if (m->state == LIFE_SETTLED || m->state == LIFE_RELEASED) {
            amqp_destroy_envelope(&m->env);
            life_move(l, &l->held, i, LIFE_FREE);
            continue;
        }
        life_place(&l->held, i, k++);
    }
    l->held.n = k;
}

/* Clear slot i of list: released first when unsettled, its envelope destroyed, the slot FREE. */
static void life_clear_slot(life_t *l, life_list_t *list, int i)
{
    life_msg_t *m = &list->m[i];
    if (m->state == LIFE_FREE)
        return;
    if (m->state != LIFE_GONE) {
        if (life_unsettled(m->state))
            life_move(l, list, i, LIFE_RELEASED);
        amqp_destroy_envelope(&m->env);
    }
    life_move(l, list, i, LIFE_FREE);
}

void life_release(life_t *l)
{
    for (int i = 0; i < l->batch.n; i++)
        life_clear_slot(l, &l->batch, i);
    life_clear_slot(l, &l->batch, l->batch.cap); /* the carry */
    l->batch.n = 0;
    for (int i = 0; i < l->held.n; i++)
        life_clear_slot(l, &l->held, i);
    l->held.n = 0;
}
