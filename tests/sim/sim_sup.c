/* sim_sup.c: the daemon's own supervisor step (sup_step.c, over sup_core.c and sup_auto.c) on fake
 * ports: a spawn that starts a simulated worker, a wait that reports the simulated deaths, the
 * simulated clock, and slots in plain memory (docs/simulation.md).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sim.h"
#include "sup.h"

/* One idemd instance: its supervisor, its slots, its configuration and the exits not reaped. */
typedef struct sim_inst {
    supervisor_t sup;
    worker_slot_t slots[SUP_MAX_SLOTS]; /* like the daemon's shared memory */
    conf_t conf;
    struct {
        pid_t pid;
        int status;
    } exits[SIM_SLOTS];
    int n_exits;
    long down_until; /* killed: started again at this step */
} sim_inst_t;

static sim_inst_t insts[2];
static bool alive[SIM_SLOTS];   /* the process of worker k runs (spawned, not dead) */
static int died_sig[SIM_SLOTS]; /* how it died, until the supervisor reaps it */
static pid_t next_pid;

/* Workers k of instance i: base .. base + per - 1. */
static int per_inst(void)
{
    return sim.o.workers / sim.o.instances;
}

static sim_inst_t *inst_of(int k)
{
    return &insts[sim_instance(k)];
}

static int entry_of(int k)
{
    return k - sim_instance(k) * per_inst();
}

static int worker_of(const sim_inst_t *in, const sup_worker_t *w)
{
    return (int)(in - insts) * per_inst() + (int)(w - in->sup.workers);
}

worker_slot_t *sim_sup_slot(int k)
{
    return &inst_of(k)->slots[entry_of(k)];
}

/* ---------- the process port ---------- */

/* Start worker w: its simulated process takes turns from the next step. */
static pid_t p_spawn(void *ctx, sup_worker_t *w)
{
    sim_inst_t *in = ctx;
    int j = (int)(w - in->sup.workers), k = worker_of(in, w);
    if (j >= per_inst()) {
        sim_log("supervisor: no simulated worker for entry %d", j);
        return -1;
    }
    alive[k] = true;
    __atomic_store_n(&w->slot->state, WORKER_STATE_CONSUMING, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->consumed, 1, __ATOMIC_RELAXED);
    /* A run that only counts a retiring predecessor's crash note drains after its first step. */
    sim.retiring[k] = sim.note_only[k] = w->slot->note_only != 0;
    sim.kill_in[k] = 0;
    if (sim.note_only[k]) {
        sim.retire_notes++;
        sim_log("supervisor: w%d started once more to count its crash note", k);
    }
    sim_started(k);
    return ++next_pid;
}

/* SIGTERM: the worker drains (step_drain); --bug retire_kill: a SIGKILL lands on a statement. */
static void p_signal(void *ctx, pid_t pid, int sig)
{
    sim_inst_t *in = ctx;
    for (int j = 0; j < per_inst(); j++) {
        sup_worker_t *w = &in->sup.workers[j];
        int k = worker_of(in, w);
        if (!w->used || w->pid != pid || !alive[k] || sig != SIGTERM)
            continue;
        sim_log("supervisor: SIGTERM to w%d: it drains", k);
        sim.retiring[k] = true;
        sim.retirements++;
        if (sim.bug.retire_kill)
            sim.kill_in[k] = 1 + (int)sim_rng_below(&sim.sched, 12);
    }
}

static pid_t p_wait(void *ctx, int *status)
{
    sim_inst_t *in = ctx;
    if (in->n_exits == 0)
        return 0;
    pid_t pid = in->exits[0].pid;
    *status = in->exits[0].status;
    memmove(&in->exits[0], &in->exits[1], sizeof(in->exits[0]) * (size_t)--in->n_exits);
    return pid;
}

static uint32_t p_draw(void *ctx, uint32_t n)
{
    (void)ctx;
    return (uint32_t)sim_rng_below(&sim.sched, n);
}

static const sup_proc_ops_t sim_proc_ops = {
    .spawn = p_spawn, .signal = p_signal, .wait = p_wait, .draw = p_draw};

/* ---------- the simulator's side ---------- */

/* Instance i starts (again): a new supervisor, new slots, its workers. */
static void inst_start(int i)
{
    sim_inst_t *in = &insts[i];
    memset(&in->sup, 0, sizeof(in->sup));
    memset(in->slots, 0, sizeof(in->slots));
    in->n_exits = 0;
    in->conf = (conf_t){.queues = &sim_q, .n_queues = 1, .shutdown_timeout = 5};
    in->sup.conf = &in->conf;
    in->sup.slots = in->slots;
    in->sup.log_level_override = -1;
    in->sup.ports =
        (sup_ports_t){.proc = &sim_proc_ops, .proc_ctx = in, .clock = {&sim_clock_ops, NULL}};
    sup_auto_start(&in->sup, &in->conf, &sim_q, false);
}

static void inst_free(int i)
{
    supervisor_t *s = &insts[i].sup;
    for (int q = 0; q < s->n_qstats; q++)
        free(s->qstats[q].name);
    free(s->qstats);
    s->qstats = NULL;
    s->n_qstats = 0;
}

void sim_sup_begin(void)
{
    next_pid = 100;
    memset(alive, 0, sizeof(alive));
    memset(died_sig, 0, sizeof(died_sig));
    for (int i = 0; i < sim.o.instances; i++) {
        insts[i].down_until = 0;
        inst_start(i);
    }
}

void sim_sup_end(void)
{
    for (int i = 0; i < sim.o.instances; i++)
        inst_free(i);
}

/* The supervisors' turn: each instance's sup_step (an instance killed comes back when due). */
void sim_sup_step(void)
{
    for (int i = 0; i < sim.o.instances; i++) {
        if (insts[i].down_until) {
            if (insts[i].down_until > sim.steps)
                continue;
            insts[i].down_until = 0;
            sim_log("instance %d started again", i);
            inst_start(i);
        }
        sup_step(&insts[i].sup);
    }
}

bool sim_sup_used(int k)
{
    sim_inst_t *in = inst_of(k);
    return !in->down_until && in->sup.workers[entry_of(k)].used;
}

bool sim_sup_alive(int k)
{
    return alive[k];
}

bool sim_sup_retiring(int k)
{
    return sim_sup_used(k) && inst_of(k)->sup.workers[entry_of(k)].retiring;
}

/* Worker k's process ended (status as waitpid's): the supervisor reaps it at its next step. */
void sim_sup_exit(int k, int sig, int code)
{
    sim_inst_t *in = inst_of(k);
    sup_worker_t *w = &in->sup.workers[entry_of(k)];
    alive[k] = false;
    died_sig[k] = sig;
    __atomic_store_n(&w->slot->state, WORKER_STATE_STOPPING, __ATOMIC_RELAXED);
    if (in->n_exits < SIM_SLOTS && w->pid) {
        in->exits[in->n_exits].pid = w->pid;
        in->exits[in->n_exits].status = sig ? sig : (code & 0xff) << 8;
        in->n_exits++;
    }
}

/* The signal that ended the worker whose crash note is in k's slot, as its successor will see it.
 */
int sim_sup_note_signal(int k)
{
    const sup_worker_t *w = &inst_of(k)->sup.workers[entry_of(k)];
    return w->used && w->pid && !alive[k] ? died_sig[k] : sim_sup_slot(k)->exit_signal;
}

/* Instance i killed as a whole (kill -9 of its supervisor): no exits to reap, slots gone. */
void sim_sup_kill(int i, long until_step)
{
    for (int j = 0; j < per_inst(); j++)
        alive[i * per_inst() + j] = false;
    inst_free(i);
    insts[i].down_until = until_step;
}

/* The earliest time a supervisor has something to do (0: nothing): a restart, the autoscaler. */
uint64_t sim_sup_next_ms(void)
{
    uint64_t t = 0;
    for (int i = 0; i < sim.o.instances; i++) {
        const supervisor_t *s = &insts[i].sup;
        for (int j = 0; !insts[i].down_until && j < per_inst(); j++) {
            const sup_worker_t *w = &s->workers[j];
            if (w->used && !w->pid && !(w->retiring && !w->note_only) &&
                (t == 0 || w->restart_at_ms < t))
                t = w->restart_at_ms;
        }
        if (sim.o.autoscale && (t == 0 || s->auto_at_ms + AUTOSCALE_INTERVAL_MS < t))
            t = s->auto_at_ms + AUTOSCALE_INTERVAL_MS;
    }
    return t;
}

/* Whether every worker entry is settled: none retiring, none waiting to (re)start. */
bool sim_sup_settled(void)
{
    for (int k = 0; k < sim.o.workers; k++)
        if (sim_sup_used(k) && (!alive[k] || sim_sup_retiring(k)))
            return false;
    return true;
}

/* Current workers (not retiring) of instance 0, for the autoscaler's bounds. */
int sim_sup_live(void)
{
    int n = 0;
    for (int k = 0; k < per_inst(); k++)
        n += sim_sup_used(k) && !sim_sup_retiring(k);
    return n;
}

/* Worker k spent ms busy or idle (the slot's spans, as worker_time keeps them). */
void sim_sup_time(int k, bool busy, uint64_t ms)
{
    worker_slot_t *sl = sim_sup_slot(k);
    *(busy ? &sl->busy_us : &sl->idle_us) += ms * 1000;
}

/* A reload that changed the queue (sup_reload): its workers drain, new ones wait for them. */
void sim_sup_reload(void)
{
    supervisor_t *s = &insts[0].sup;
    sim_log("reload: the queue changed: its workers drain, new ones wait for them");
    sim.reloads++;
    for (int j = 0; j < SUP_MAX_SLOTS; j++)
        if (s->workers[j].used && !s->workers[j].retiring)
            sup_retire_worker(s, &s->workers[j]);
    sup_auto_start(s, &insts[0].conf, &sim_q, true);
}
