/* test_guard.c: unit tests of the crash-loop guard (guard.c) through a fake database
 * (db_guard_ops_t): the counts, the crash limit with one worker and with several racing (at most
 * workers - 1 over, docs/lifecycle.md), and a requeue when the held list is full not being a
 * start.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"
#include "log.h"
#include "tap.h"

/* The fake idemd_attempt row of the one message these tests use, and the dedup table. */
typedef struct fake_db {
    long long starts, crashes;
    bool record;  /* a committed dedup record exists */
    bool fail;    /* every call fails */
    int calls;    /* calls so far */
    int unstarts; /* unstart calls */
} fake_db_t;

static int f_find_record(void *ctx, const char *id, size_t len, bool *found)
{
    fake_db_t *db = ctx;
    (void)id, (void)len;
    db->calls++;
    if (db->fail)
        return -1;
    *found = db->record;
    return 0;
}

static long long f_bump(void *ctx, const char *id, size_t len, long long *crashes)
{
    fake_db_t *db = ctx;
    (void)id, (void)len;
    db->calls++;
    if (db->fail)
        return -1;
    *crashes = db->crashes;
    return ++db->starts;
}

static long long f_crash(void *ctx, const char *id, size_t len, bool add_start)
{
    fake_db_t *db = ctx;
    (void)id, (void)len;
    db->calls++;
    if (db->fail)
        return -1;
    if (add_start)
        db->starts++;
    return ++db->crashes;
}

static int f_unstart(void *ctx, const char *id, size_t len)
{
    fake_db_t *db = ctx;
    (void)id, (void)len;
    db->calls++;
    db->unstarts++;
    if (db->fail)
        return -1;
    if (db->starts > 0)
        db->starts--;
    return 0;
}

static const db_guard_ops_t f_ops = {
    .find_record = f_find_record,
    .bump = f_bump,
    .crash = f_crash,
    .unstart = f_unstart,
};

static guard_t t_guard(fake_db_t *db, int max_attempts, int workers)
{
    return (guard_t){.ops = &f_ops,
                     .ctx = db,
                     .max_attempts = max_attempts,
                     .dedup_table = true,
                     .workers = workers};
}

/* A delivery of message "m-1" (redelivered when suspect), NEW in a batch. */
static void t_msg(life_msg_t *m, txn_msg_t *t, bool suspect)
{
    memset(m, 0, sizeof(*m));
    memset(t, 0, sizeof(*t));
    m->state = LIFE_BATCH;
    m->suspect = suspect;
    t->state = TXN_NEW;
    t->attempt = 1;
    snprintf(t->id, sizeof(t->id), "m-1");
    t->id_len = 3;
}

/* The note a worker that died in the handler on t leaves, with the signal that ended it. */
static guard_note_t t_note(const txn_msg_t *t, int sig)
{
    return (guard_note_t){.in_handler = true,
                          .counted = t->counted,
                          .id = t->id,
                          .id_len = t->id_len,
                          .consumer = "c",
                          .exit_signal = sig};
}

static void t_basics(void)
{
    fake_db_t db = {0};
    guard_t g = t_guard(&db, 3, 1);
    life_msg_t m;
    txn_msg_t t;

    t_msg(&m, &t, false);
    ok(guard_check(&g, &m, &t) == 0 && t.state == TXN_NEW && db.calls == 0,
       "a first delivery (not suspect) is left alone: no database call");

    t_msg(&m, &t, true);
    db.record = true;
    ok(guard_check(&g, &m, &t) == 0 && t.state == TXN_DUPLICATE, "a suspect with a record: "
                                                                 "DUPLICATE");
    is_int(db.starts, 0, "its start is not counted");
    db.record = false;

    t_msg(&m, &t, true);
    db.crashes = 2;
    ok(guard_check(&g, &m, &t) == 0 && t.state == TXN_NEW, "a suspect below the limit runs");
    ok(t.counted && db.starts == 1, "its start is counted first");
    is_int(t.attempt, 3, "its attempt is at least crashes + 1");

    t_msg(&m, &t, true);
    t.state = TXN_REJECT;
    db.calls = 0;
    ok(guard_check(&g, &m, &t) == 0 && db.calls == 0, "a suspect already rejected: no call");

    db = (fake_db_t){.fail = true};
    t_msg(&m, &t, true);
    is_int(guard_check(&g, &m, &t), -1, "find_record failing: -1");
    g.dedup_table = false;
    t_msg(&m, &t, true);
    is_int(guard_check(&g, &m, &t), -1, "bump failing: -1");
    ok(!t.counted && t.state == TXN_NEW, "and the message is not counted nor moved");
    guard_note_t note = t_note(&t, SIGSEGV);
    is_int(guard_count_crash(&g, &note, "c"), -1, "crash failing: -1");
}

/* Which deaths the successor counts as the handler's crash. */
static void t_which_crashes(void)
{
    fake_db_t db = {0};
    guard_t g = t_guard(&db, 3, 1);
    life_msg_t m;
    txn_msg_t t;
    t_msg(&m, &t, false);

    static const int outside[] = {SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        guard_note_t note = t_note(&t, outside[i]);
        ok(guard_count_crash(&g, &note, "c") == 0 && db.crashes == 0 && db.calls == 0,
           "killed from outside by %s: not a crash", strsignal(outside[i]));
    }
    guard_note_t note = t_note(&t, SIGSEGV);
    ok(guard_count_crash(&g, &note, "other") == 0 && db.calls == 0,
       "another consumer's note: not counted here");
    note.in_handler = false;
    ok(guard_count_crash(&g, &note, "c") == 0 && db.calls == 0,
       "a worker that died outside the handler: nothing to count");
    static const int handler[] = {SIGSEGV, SIGABRT, SIGALRM, 0};
    for (size_t i = 0; i < sizeof(handler) / sizeof(handler[0]); i++) {
        db = (fake_db_t){0};
        note = t_note(&t, handler[i]);
        ok(guard_count_crash(&g, &note, "c") == 0 && db.crashes == 1 && db.starts == 1,
           "died by %s in the handler, start not counted: crash and start counted",
           handler[i] ? strsignal(handler[i]) : "exit");
    }
    db = (fake_db_t){0};
    t.counted = true;
    note = t_note(&t, SIGSEGV);
    ok(guard_count_crash(&g, &note, "c") == 0 && db.crashes == 1 && db.starts == 0,
       "start counted before the run: only the crash is added");
}

/*
 * One worker, a message that kills it every time, max_attempts 3: the
 * first delivery runs, then each redelivery after the successor counted
 * the crash. The handler runs exactly max_attempts times.
 */
static void t_limit_one_worker(void)
{
    fake_db_t db = {0};
    guard_t g = t_guard(&db, 3, 1);
    life_msg_t m;
    txn_msg_t t;
    int runs = 0;

    for (int delivery = 0; delivery < 10; delivery++) {
        t_msg(&m, &t, delivery > 0);
        if (guard_check(&g, &m, &t) != 0 || t.state != TXN_NEW)
            break;
        runs++; /* the handler runs and its worker dies by SIGSEGV ... */
        guard_note_t note = t_note(&t, SIGSEGV);
        if (guard_count_crash(&g, &note, "c") != 0) /* ... and its successor counts it */
            break;
    }
    is_int(runs, 3, "one worker: the handler ran exactly max_attempts (3) times");
    is_int(t.state, TXN_REJECT, "then the message is rejected without running");
    is_int(db.crashes, 3, "3 crashes counted");
    is_int(t.attempt, 3, "its attempt says 3 runs");
    ok_got(strstr(t.reason, "died in the handler 3 times") != NULL &&
               strstr(t.reason, "limit 3, at most 0 over with 1 workers") != NULL,
           t.reason, "the reason says 3 crashes, limit 3, 0 over with one worker");
}

/*
 * The race with two workers, max_attempts 2: A's run dies, and before A's
 * successor counts it the broker hands the message to B, whose guard
 * still sees 1 crash. The handler runs max_attempts + 1 times.
 */
static void t_limit_two_workers_race(void)
{
    fake_db_t db = {0};
    guard_t g = t_guard(&db, 2, 2);
    life_msg_t m;
    txn_msg_t ta, tb, tc;

    t_msg(&m, &ta, false);
    ok(guard_check(&g, &m, &ta) == 0 && ta.state == TXN_NEW, "first delivery runs on A");
    guard_note_t na = t_note(&ta, SIGSEGV);
    ok(guard_count_crash(&g, &na, "c") == 0 && db.crashes == 1, "A dies, A's successor counts 1");
    t_msg(&m, &ta, true);
    ok(guard_check(&g, &m, &ta) == 0 && ta.state == TXN_NEW, "redelivered to A: runs (1 < 2)");
    na = t_note(&ta, SIGSEGV); /* A dies; its successor has not counted yet */
    t_msg(&m, &tb, true);
    ok(guard_check(&g, &m, &tb) == 0 && tb.state == TXN_NEW,
       "redelivered to B before A's successor counts: runs (it still sees 1 crash)");
    guard_note_t nb = t_note(&tb, SIGSEGV);
    ok(guard_count_crash(&g, &na, "c") == 0 && guard_count_crash(&g, &nb, "c") == 0,
       "both successors count their crash");
    t_msg(&m, &tc, true);
    ok(guard_check(&g, &m, &tc) == 0 && tc.state == TXN_REJECT, "the next delivery is rejected");
    is_int(db.crashes, 3, "3 runs, 3 crashes: max_attempts (2) + workers - 1 (1)");
    ok_got(strstr(tc.reason, "died in the handler 3 times") != NULL &&
               strstr(tc.reason, "limit 2, at most 1 over with 2 workers") != NULL,
           tc.reason, "the reason states the limit and the bound");
}

/*
 * Every interleaving of deliveries and successors' counts with w workers:
 * the most runs of a message that kills its worker every time. A worker
 * whose predecessor's crash is not counted yet does not consume (its
 * successor counts before consuming); the message is in one place at a
 * time.
 */
typedef struct race {
    fake_db_t db;
    bool pending[4]; /* a slot whose worker died and whose successor has not counted yet */
    txn_msg_t note_t[4];
    bool first_done;
    int runs;
} race_t;

static int t_race_max(const guard_t *g0, race_t r, int w, bool *rejected_ok)
{
    guard_t g = *g0;
    g.ctx = &r.db;
    int best = r.runs;
    bool any = false;

    for (int i = 0; i < w; i++) {
        race_t n = r;
        guard_t gn = g;
        gn.ctx = &n.db;
        if (n.pending[i]) {
            guard_note_t note = t_note(&n.note_t[i], SIGSEGV);
            if (guard_count_crash(&gn, &note, "c") != 0)
                return -1000;
            n.pending[i] = false;
        } else {
            life_msg_t m;
            txn_msg_t t;
            t_msg(&m, &t, n.first_done);
            n.first_done = true;
            if (guard_check(&gn, &m, &t) != 0)
                return -1000;
            if (t.state == TXN_REJECT) {
                /* Rejected: the search ends here. Never before the handler ran
                 * max_attempts times. */
                *rejected_ok &= r.runs >= g.max_attempts;
                any = true;
                continue;
            }
            n.runs++;
            n.pending[i] = true; /* dies in the handler */
            n.note_t[i] = t;
        }
        any = true;
        int sub = t_race_max(g0, n, w, rejected_ok);
        if (sub > best)
            best = sub;
    }
    return any ? best : r.runs;
}

static void t_limit_bound(void)
{
    for (int w = 1; w <= 3; w++) {
        for (int max = 1; max <= 3; max++) {
            fake_db_t unused = {0};
            guard_t g = t_guard(&unused, max, w);
            race_t r = {0};
            bool rejected_ok = true;
            int most = t_race_max(&g, r, w, &rejected_ok);
            is_int(most, max + w - 1,
                   "%d worker(s), max_attempts %d: over every interleaving the handler runs at "
                   "most max_attempts + workers - 1 = %d times",
                   w, max, max + w - 1);
            ok(rejected_ok,
               "%d worker(s), max_attempts %d: never rejected before max_attempts runs", w, max);
        }
    }
}

/*
 * A suspect message whose handler finishes (RETRY) but whose copy finds the
 * held list full is requeued, again and again: guard_finished takes each
 * start back, so it is never dead-lettered as "started N times without
 * finishing". Without guard_finished it would be, after max_attempts +
 * GUARD_UNCONFIRMED requeues.
 */
static void t_requeue_not_a_start(void)
{
    fake_db_t db = {0};
    guard_t g = t_guard(&db, 3, 1);
    life_msg_t m;
    txn_msg_t t;
    int requeues = 0;
    bool rejected = false;

    for (int i = 0; i < 3 * (3 + GUARD_UNCONFIRMED); i++) {
        t_msg(&m, &t, true);
        if (guard_check(&g, &m, &t) != 0 || t.state != TXN_NEW) {
            rejected = true;
            break;
        }
        txn_move(&t, TXN_RETRY); /* the handler returned retry: its run finished */
        guard_finished(&g, &t);  /* held list full: requeued (settle.c) */
        requeues++;
    }
    ok(!rejected, "requeued %d times with a full held list: never rejected", requeues);
    is_int(db.starts, 0, "every finished start was taken back");
    is_int(db.unstarts, requeues, "one unstart per requeue");
    ok(!t.counted, "guard_finished clears counted");

    db = (fake_db_t){0};
    rejected = false;
    requeues = 0;
    for (int i = 0; i < 3 * (3 + GUARD_UNCONFIRMED); i++) {
        t_msg(&m, &t, true);
        if (guard_check(&g, &m, &t) != 0 || t.state != TXN_NEW) {
            rejected = true;
            break;
        }
        requeues++; /* the old way: the start stays counted */
    }
    ok(rejected && requeues == 3 + GUARD_UNCONFIRMED,
       "without guard_finished: rejected after %d requeues", requeues);
    ok_got(strstr(t.reason, "started 13 times without finishing") != NULL, t.reason,
           "as \"started 13 times without finishing\"");

    /* What guard_finished leaves alone. */
    db = (fake_db_t){0};
    t_msg(&m, &t, true);
    t.counted = true;
    txn_move(&t, TXN_RECORDED);
    txn_move(&t, TXN_HANDLED);
    txn_move(&t, TXN_COMMITTED);
    guard_finished(&g, &t);
    ok(t.counted && db.calls == 0, "a committed run: its attempts row goes with the COMMIT, no "
                                   "unstart");
    t_msg(&m, &t, true);
    txn_move(&t, TXN_RETRY);
    guard_finished(&g, &t);
    ok(db.calls == 0, "a run not counted: no unstart");
    t_msg(&m, &t, true);
    t.counted = true;
    txn_move(&t, TXN_REJECT);
    db.fail = true;
    guard_finished(&g, &t);
    ok(!t.counted && db.unstarts == 1, "unstart failing: logged, counted cleared all the same");
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    t_basics();
    t_which_crashes();
    t_limit_one_worker();
    t_limit_two_workers_race();
    t_limit_bound();
    t_requeue_not_a_start();
    return done();
}
