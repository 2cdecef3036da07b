/* ctl_batch.h: a dlq pass (ctl_dlq.c) and dlq replay's batches, paced, resumable and shown
 * (ctl_batch.c). */
#ifndef IDEMD_CTL_BATCH_H
#define IDEMD_CTL_BATCH_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "ctl.h"
#include "ctl_letter.h"
#include "ctl_pace.h"

#define CTL_REPLAY_BATCH 100 /* dlq replay without --batch: letters per broker round */

/* What becomes of a letter a replay takes. */
typedef enum ctl_entry_kind {
    CTL_ENTRY_SEND,  /* publish a copy; its trail row is written first */
    CTL_ENTRY_AGAIN, /* publish a copy over the row an interrupted pass left "sending" */
    CTL_ENTRY_ACK,   /* the trail says its copy went back: ack the dead letter, publish nothing */
} ctl_entry_kind_t;

/* One letter of a batch. */
typedef struct ctl_entry {
    ctl_letter_t l; /* owns l.msg until the batch is flushed */
    ctl_entry_kind_t kind;
    const char *exchange, *rk; /* the copy's route (borrowed from ctl or l) */
    long long row;             /* its trail row; 0: none */
    int index;                 /* its copy in the publishing round; -1: none */
    bool ok, acked;            /* its copy was confirmed (or need not be); it was acked */
} ctl_entry_t;

/* Why a letter a replay takes stays, for the plan (--dry-run) and the counts. */
typedef enum ctl_why {
    CTL_WHY_UNVERIFIED, /* its idemd-sig does not verify */
    CTL_WHY_BODY,       /* its body was dropped */
    CTL_WHY_APPLIED,    /* its id is recorded already (or was sent earlier in the pass) */
    CTL_WHY_ROUTE,      /* no route */
    CTL_WHY_UNSURE,     /* an interrupted pass may have sent it, and it has no id */
    CTL_WHY_N
} ctl_why_t;

#define CTL_PLAN_TARGETS 8 /* distinct routes the plan names; the rest are "elsewhere" */

/* What a --dry-run saw: letters by what would become of them, and their routes. */
typedef struct ctl_plan {
    long replay, ack, why[CTL_WHY_N];
    struct {
        char exchange[256], rk[256];
        long n;
    } to[CTL_PLAN_TARGETS];
    int n_to;
    long elsewhere;
} ctl_plan_t;

/* The batch being filled, the pacing and what the pass showed. */
typedef struct ctl_batch {
    ctl_entry_t *v; /* cap entries (ctl->batch) */
    long n, cap;
    ctl_pace_t pace;
    int64_t start_ns, shown_ns;
    bool tty, shown;    /* stderr is a terminal; a progress line is on it */
    long long floor;    /* trail rows up to this id were written before this pass */
    long long *claimed; /* rows of earlier replays this pass took, each for one letter */
    long n_claimed, cap_claimed;
    long sent, resumed, failed; /* copies published and acked; acked from the trail; failed */
} ctl_batch_t;

/* One pass of a dlq command over a queue: its connections, the tags it keeps, what it counted. */
typedef struct ctl_pass {
    const char *queue; /* borrowed */
    ctl_mode_t mode;
    mq_t *rd, *pub; /* the queue's reader; the replay's publisher (NULL otherwise) */
    db_t *db;       /* NULL when not needed, or a listing goes on without it */
    json_object *arr;
    unsigned depth; /* the messages the queue held at the start: the pass takes as many */
    uint64_t *kept; /* tags not acked, ascending */
    long n_kept;
    long scanned, matched, done, undecodable, refused;
    long long returns; /* the highest x-delivery-count seen */
    bool records_ok, trail;
    ctl_sent_set_t sent;
    ctl_batch_t b; /* dlq replay */
    ctl_plan_t plan;
} ctl_pass_t;

/* Start p's batches: ctl->batch entries, the pace (ctl->rate), whether stderr is a terminal,
 * the trail's floor. 0, or -1 (logged). */
int ctl_batch_open(const ctl_t *ctl, ctl_pass_t *p);

/* The entry the next letter is read into (p->b.v[p->b.n]), cleared. */
ctl_letter_t *ctl_batch_slot(ctl_pass_t *p);

/* Take the letter in ctl_batch_slot into the batch: what to do with it, its route and row (an
 * earlier replay's row is claimed for this pass). 0, or -1 (logged) when out of memory. */
int ctl_batch_add(ctl_pass_t *p, ctl_entry_kind_t kind, const char *exchange, const char *rk,
                  long long row);

/* Whether this pass took trail row id for a letter already. */
bool ctl_batch_claimed(const ctl_pass_t *p, long long id);

/* Whether the batch is full. */
bool ctl_batch_full(const ctl_pass_t *p);

/*
 * Replay the batch: trail rows "sending", copies published (paced) and
 * confirmed, attempts rows cleared and rows "confirmed", dead letters
 * acked and rows "acked". Acked letters count in p->done; the tags of the
 * others join p->kept. Every message is destroyed and the batch emptied.
 * Returns 0, or -1 (logged) when the pass must stop.
 */
int ctl_batch_flush(const ctl_t *ctl, ctl_pass_t *p);

/* The end of a replay: the progress line closed, the final count on stderr; frees the batch. */
void ctl_batch_close(const ctl_t *ctl, ctl_pass_t *p);

/* Count for the plan a letter that would be replayed to exchange / rk (kind: send or ack). */
void ctl_plan_go(ctl_plan_t *plan, ctl_entry_kind_t kind, const char *exchange, const char *rk);

/* The plan of a --dry-run: lines of text "plan: ..." on stdout, or object "plan" of o. */
void ctl_plan_print(const ctl_t *ctl, const ctl_pass_t *p, json_object *o);

#endif
