/* ctl_dlq.c: idemctl's dead letter commands: dlq list, count, replay and purge. */
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "ctl_batch.h"
#include "ctl_letter.h"
#include "delivery.h"
#include "log.h"

#define CTL_NACK_CHUNK 16 /* tags per requeueing nack; see ctl_requeue */
/* A letter returned this often (x-delivery-count) is near RabbitMQ 4's default delivery limit. */
#define CTL_RETURNS_WARN 10

/* ---------- dead letters ---------- */

/*
 * dlq replay --dry-run: what would happen to l, as a line of text (id,
 * signature, applied, action, exchange, routing key, why) or an object of
 * arr. Returns 0 for "replay" and "ack" (the letter would go), 1 otherwise.
 */
static int ctl_dry(const ctl_t *ctl, const ctl_letter_t *l, const char *action,
                   const char *exchange, const char *rk, const char *why, json_object *arr)
{
    if (ctl->json) {
        json_object *o = json_object_new_object();
        ctl_letter_json_id(o, l);
        ctl_letter_json_checks(o, l);
        json_object_object_add(o, "action", ctl_json_text(action));
        json_object_object_add(o, "exchange", exchange ? ctl_json_text(exchange) : NULL);
        json_object_object_add(o, "routing_key", rk ? ctl_json_text(rk) : NULL);
        json_object_object_add(o, "why", why ? ctl_json_text(why) : NULL);
        json_object_array_add(arr, o);
    } else {
        ctl_letter_put_id(l);
        ctl_printf("\t%s\t%s\t%s\t", ctl_sig_names[l->sig], ctl_applied_name(l->applied), action);
        ctl_puts(stdout, exchange ? exchange : "-");
        ctl_printf("\t");
        ctl_puts(stdout, rk ? rk : "-");
        ctl_printf("\t");
        ctl_puts(stdout, why ? why : "-");
        ctl_printf("\n");
    }
    return strcmp(action, "replay") == 0 || strcmp(action, "ack") == 0 ? 0 : 1;
}

/*
 * Where a replay of l goes, into *exchange and *rk (borrowed from ctl or
 * l): --to QUEUE; --to-original: its original route; a verified onward
 * message: its intended route; a verified letter: the queue that
 * dead-lettered it (idemd-queue), only it; any other (--unverified): the
 * work queue the dead letter queue belongs to (l->home), whatever its
 * headers say. Returns 0, 1 when an unverified letter has no home (why
 * set), or -1 when a verified one carries no route (logged).
 */
static int ctl_replay_route(const ctl_t *ctl, const ctl_letter_t *l, const char *dlq,
                            const char *pid, const char **exchange, const char **rk, char *why,
                            size_t len)
{
    *exchange = "";
    if (ctl->to_queue) {
        *rk = ctl->to_queue;
    } else if ((ctl->to_original || (l->verified && l->onward)) && l->has_exchange &&
               l->exchange[0]) {
        /* A verified onward message goes where it was meant to go; --to-original sends a
         * letter back through its original exchange, to every queue bound there. */
        *exchange = l->exchange;
        *rk = l->routing_key;
    } else if ((ctl->to_original || (l->verified && l->onward)) && l->has_routing_key &&
               l->routing_key[0]) {
        *rk = l->routing_key; /* published through the default exchange: the queue's name */
    } else if (!l->verified && !ctl->to_original) {
        if (l->home == NULL) {
            snprintf(why, len,
                     "it is not verified, and %.255s is the dead_letter_queue of no configured "
                     "queue (or of several, and it names none of them), so idemctl does not "
                     "know its work queue: --to QUEUE says where it goes",
                     dlq);
            return 1;
        }
        *rk = l->home->name; /* its headers are not believed: the queue this one belongs to */
    } else if (!l->onward && l->queue[0]) {
        *rk = l->queue; /* the queue that dead-lettered it, only it */
    } else {
        log_error("replay: dead letter %s carries no %s (%s, %s, %s): use --to QUEUE", pid,
                  l->onward ? "intended route" : "queue", COPIES_H_QUEUE, COPIES_H_EXCHANGE,
                  COPIES_H_ROUTING_KEY);
        return -1;
    }
    return 0;
}

/*
 * Letter l (printable id pid) is not replayed, for reason code: why. With
 * --dry-run the plan counts it and ctl_dry says it ("skip" for a letter
 * already applied, else "refuse"); without, one line on stderr: "NOT
 * REPLAYED" (or "SKIPPED"), why, then what follows (after) the words "It
 * stays". Returns 1.
 */
static int ctl_letter_stays(const ctl_t *ctl, ctl_pass_t *p, const ctl_letter_t *l, ctl_why_t code,
                            const char *pid, const char *why, const char *after)
{
    bool skip = code == CTL_WHY_APPLIED;

    if (ctl->dry_run) {
        p->plan.why[code]++;
        return ctl_dry(ctl, l, skip ? "skip" : "refuse", NULL, NULL, why, p->arr);
    }
    ctl_fprintf(stderr, "idemctl: %s: dead letter %s (queue '%s'): %s. It stays%s\n",
                skip ? "SKIPPED" : "NOT REPLAYED", pid, l->queue[0] ? l->queue : "-", why, after);
    return 1;
}

/*
 * The trail row an earlier replay left for the very letter l (same
 * fingerprint, written before this pass, not taken by another letter of
 * this pass) into *row (0: none) and whether it still says "sending". 0,
 * or -1 (logged).
 */
static int ctl_replay_trail_row(ctl_pass_t *p, ctl_letter_t *l, long long *row, bool *sending)
{
    ctl_trail_row_t rows[16];
    int n;

    *row = 0;
    *sending = false;
    if (!p->trail)
        return 0;
    if (ctl_letter_fingerprint(l) != 0 ||
        (n = ctl_trail_find(p->db, l->fp, p->b.floor, rows, 16)) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (!ctl_batch_claimed(p, rows[i].id)) {
            *row = rows[i].id;
            *sending = rows[i].sending;
            break;
        }
    return 0;
}

/*
 * Decide the replay of one dead letter l (read, verified, placed, its
 * applied known) and, without --dry-run, take it into the batch
 * (ctl_batch_add; ctl_batch_flush publishes, confirms and acks): a copy to
 * its route (ctl_replay_route); or, when the trail says an interrupted
 * replay sent its copy (confirmed, even acked if the broker lost the ack;
 * or being sent, and its id recorded since), only its ack. A letter whose signature does not verify
 * (without
 * --unverified), whose body was dropped (without --allow-empty-body),
 * whose id is already applied (without --force), that has no route, or
 * that an interrupted replay may have sent though it has no id the record
 * could absorb a second copy by (without --force) is refused: said on
 * stderr, one line, and kept. With --dry-run nothing is done: ctl_dry says
 * what would be (into p->arr with --json) and the plan counts it. Returns
 * 0 when taken (or it would be), 1 when refused, or -1 (logged) when the
 * letter stays in the queue unacked and the pass stops.
 */
static int ctl_replay_one(const ctl_t *ctl, ctl_pass_t *p, ctl_letter_t *l)
{
    const char *exchange = "", *rk;
    char pid[96], why[600];
    long long row;
    bool sending;

    delivery_id_printable(l->has_id ? l->id : "-", l->has_id ? l->id_len : 1, pid, sizeof(pid));
    if (!l->verified && !ctl->unverified) {
        return ctl_letter_stays(ctl, p, l, CTL_WHY_UNVERIFIED, pid, l->unverified,
                                " in the dead letter queue; check it, then --unverified replays "
                                "it anyway");
    }
    if (!l->verified && !ctl->dry_run)
        ctl_fprintf(
            stderr,
            "idemctl: WARNING: replaying dead letter %s (queue '%s') unverified (--unverified): "
            "%s\n",
            pid, l->queue[0] ? l->queue : "-", l->unverified);
    if (l->body_dropped && !ctl->allow_empty_body) {
        return ctl_letter_stays(ctl, p, l, CTL_WHY_BODY, pid,
                                "its body was dropped (" COPIES_H_BODY_DROPPED
                                "); the copy would be empty",
                                "; --allow-empty-body replays it with the header kept");
    }
    if (ctl_replay_trail_row(p, l, &row, &sending) != 0)
        return -1;
    if (row && (!sending || l->applied > 0)) {
        /* Its copy went back (confirmed) but the letter is here: the pass was cut short before
         * its ack, or the ack was lost (a quorum queue's channel closed with acks it had not
         * passed on yet). A second copy would be one too many. */
        if (ctl->dry_run) {
            ctl_plan_go(&p->plan, CTL_ENTRY_ACK, "", "");
            return ctl_dry(ctl, l, "ack", NULL, NULL,
                           "the trail says its copy went back (confirmed) and the letter was "
                           "not acked: only the dead letter is acked",
                           p->arr);
        }
        return ctl_batch_add(p, CTL_ENTRY_ACK, "", "", row);
    }
    if (row && !l->has_id && !ctl->force) {
        snprintf(why, sizeof(why),
                 "an interrupted replay may have sent its copy already (its trail row says "
                 "'sending'), and it has no id by which the record could absorb a second copy");
        return ctl_letter_stays(ctl, p, l, CTL_WHY_UNSURE, pid, why,
                                "; check its work queue, then --force replays it anyway");
    }
    if (l->applied > 0 && !ctl->force) {
        if (l->applied > 1)
            snprintf(why, sizeof(why),
                     "a letter of the same id for consumer '%.128s' was replayed earlier in this "
                     "pass: a second copy would be acked as a duplicate and change nothing",
                     l->consumer);
        else
            snprintf(why, sizeof(why),
                     "its id is already recorded for consumer '%.128s' in table %s: a replay "
                     "would be acked as a duplicate and change nothing",
                     l->consumer, ctl->conf->database.record_table);
        return ctl_letter_stays(ctl, p, l, CTL_WHY_APPLIED, pid, why,
                                "; --force replays it anyway");
    }
    int route = ctl_replay_route(ctl, l, p->queue, pid, &exchange, &rk, why, sizeof(why));
    if (route < 0)
        return -1;
    if (route > 0) {
        return ctl_letter_stays(ctl, p, l, CTL_WHY_ROUTE, pid, why, "");
    }
    if (ctl->dry_run) {
        ctl_plan_go(&p->plan, CTL_ENTRY_SEND, exchange, rk);
        return ctl_dry(ctl, l, "replay", exchange, rk,
                       l->applied > 0 ? "already applied: --force replays it" : NULL, p->arr);
    }
    return ctl_batch_add(p, row ? CTL_ENTRY_AGAIN : CTL_ENTRY_SEND, exchange, rk, row);
}

/*
 * Requeue the kept deliveries tags[0..n-1] (ascending) in their order.
 * Closing the channel would requeue them too, but a quorum queue (3.10)
 * then returns them out of order; and it reorders returns that pile up
 * past 32 in its client on the broker side. So: basic.nack (multiple,
 * requeue) CTL_NACK_CHUNK tags at a time, and before the next chunk wait
 * (up to 5 s, then go on) until the queue's ready count shows this one
 * back. Logs failures; the channel's close requeues what is left.
 *
 * Never basic.reject: from RabbitMQ 4.3 a quorum queue's x-delivery-count,
 * which its delivery limit compares, counts a reject (and a closed channel
 * or lost connection) but not a requeueing nack. A listing is no failure of
 * the letters: with nack, a queue that keeps a limit (an older idemd's)
 * loses none however often it is listed there; 3.x-4.2 count both alike.
 */
void ctl_requeue(mq_t *rd, const char *queue, const uint64_t *tags, long n)
{
    unsigned base = 0, ready = 0, consumers;
    long back = 0;

    if (ctl_queue_peek(rd, queue, &base, &consumers) != 0)
        return;
    for (long i = 0; i < n; i++) {
        if ((i + 1) % CTL_NACK_CHUNK != 0 && i != n - 1)
            continue;
        if (amqp_basic_nack(rd->conn, MQ_CHANNEL, tags[i], 1, 1) != AMQP_STATUS_OK) {
            log_warn("broker %s: nack of the kept messages failed; closing the channel "
                     "requeues them",
                     rd->where);
            return;
        }
        back = i + 1;
        for (int waited = 0; waited < 1000; waited++) {
            if (ctl_queue_peek(rd, queue, &ready, &consumers) != 0)
                return;
            if ((long)ready >= (long)base + back)
                break;
            struct timespec ts = {0, 5000000L};
            nanosleep(&ts, NULL);
        }
    }
}

/*
 * dlq list / replay / purge (and the count that purge without --yes
 * prints): take the queue's messages one by one with basic.get, without
 * acking, as many as it held at the start. Selected ones are printed
 * (list, kept), replayed or purged (acked); every message not acked is
 * requeued at the end in its order (ctl_requeue). A classic queue puts
 * them back at their positions, and so does a quorum queue from RabbitMQ
 * 4.3; before, a quorum queue (3.10) appends returned messages behind the
 * rest, so the pass always takes the whole queue. Dead letters that arrive
 * during a pass then end up ahead of the returned ones.
 */

/*
 * dlq list (and a selection by signature): open the database for the
 * signatures and the dedup records into p->db. A listing goes on without
 * it (said on stderr), a selection by signature does not. Returns
 * CTL_EXIT_OK or the exit status (said why).
 */
static int ctl_dlq_open_list(ctl_t *ctl, ctl_pass_t *p)
{
    int rc = ctl_db_open(ctl, &p->db);
    if (rc != 0 && ctl->verified_only)
        return rc;
    if (rc != 0)
        ctl_fprintf(stderr, "idemctl: WARNING: listing without the database: signatures show as "
                            "unchecked, applied as unknown\n");
    else if ((rc = db_copies_keys(p->db, false, &ctl->keys)) != 0 && ctl->verified_only) {
        ctl_fprintf(stderr, "idemctl: --verified-only: %s, so no dead letter's %s can be checked\n",
                    rc > 0 ? "no relay key has been made yet (no worker has connected)"
                           : "cannot read the relay keys from table " DB_KEY_TABLE " (see above)",
                    COPIES_H_SIG);
        return CTL_EXIT_CONNECT;
    }
    return CTL_EXIT_OK;
}

/*
 * dlq replay: open the publisher (not for --dry-run) into p->pub and the
 * database into p->db, find whether a trail can be written (p->trail) and
 * read the relay keys. Refuses, unless --force / --unverified say
 * otherwise, a replay without a trail or without keys. Returns
 * CTL_EXIT_OK or the exit status (said why).
 */
static int ctl_dlq_open_replay(ctl_t *ctl, ctl_pass_t *p)
{
    int rc;

    if (!ctl->dry_run &&
        mq_open_publisher(&ctl->conf->broker, "idemctl", 0, NULL, NULL, &p->pub) != 0) {
        ctl_fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    if ((rc = ctl_db_open(ctl, &p->db)) != 0)
        return rc;
    int ready = ctl_trail_ready(p->db);
    p->trail = ready == CTL_TRAIL_READY;
    if (ready == CTL_TRAIL_OLD && !ctl->force) {
        ctl_fprintf(stderr,
                    "idemctl: dlq replay: table idemd_replay has no columns state and "
                    "fingerprint, so a replay cut short could not go on where it stopped; %s. "
                    "Apply sql/014_idemd_replay_resume.sql, or --force replays without a trail\n",
                    ctl->dry_run ? "a replay without --dry-run would be refused"
                                 : "nothing was replayed");
        if (!ctl->dry_run)
            return CTL_EXIT_CONNECT;
    } else if (ready != CTL_TRAIL_READY && !ctl->force) {
        ctl_fprintf(stderr,
                    "idemctl: dlq replay: %s table idemd_replay, so a replay would leave no "
                    "trail; %s. Apply sql/013_idemd_replay.sql, or --force replays without a "
                    "trail\n",
                    ready == CTL_TRAIL_NONE ? "there is no" : "cannot read (see above)",
                    ctl->dry_run ? "a replay without --dry-run would be refused"
                                 : "nothing was replayed");
        if (!ctl->dry_run)
            return CTL_EXIT_CONNECT;
    } else if (ready != CTL_TRAIL_READY) {
        ctl_fprintf(stderr, "idemctl: WARNING: replaying without a trail (--force): no table "
                            "idemd_replay with its columns state and fingerprint (apply "
                            "sql/013_idemd_replay.sql and sql/014_idemd_replay_resume.sql)\n");
    }
    if (ctl_batch_open(ctl, p) != 0)
        return CTL_EXIT_PARTIAL;
    int kr = db_copies_keys(p->db, false, &ctl->keys);
    if (kr != 0) {
        if (!ctl->unverified) {
            ctl_fprintf(stderr,
                        "idemctl: dlq replay: %s, so no dead letter's %s can be checked; nothing "
                        "was replayed. --unverified replays without checking\n",
                        kr > 0 ? "no relay key has been made yet (no worker has connected)"
                               : "cannot read the relay keys from table " DB_KEY_TABLE
                                 " (see above)",
                        COPIES_H_SIG);
            return CTL_EXIT_CONNECT;
        }
        ctl_fprintf(stderr, "idemctl: WARNING: cannot read the relay keys from table " DB_KEY_TABLE
                            ": every letter is replayed unverified (--unverified)\n");
    }
    return CTL_EXIT_OK;
}

/*
 * Take the next message of p->queue with basic.get, without acking, into
 * l (l->tag, l->msg: the caller destroys the message), and count it
 * (p->scanned, p->returns). Returns 1 when a letter was taken, 0 when the
 * queue is empty, or -1 when it cannot be read (logged or said on stderr;
 * the pass stops).
 */
static int ctl_dlq_take(ctl_pass_t *p, ctl_letter_t *l)
{
    mq_t *rd = p->rd;
    char why[400];

    amqp_rpc_reply_t r = amqp_basic_get(rd->conn, MQ_CHANNEL, amqp_cstring_bytes(p->queue), 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        log_error("broker %s: basic.get %s: %s", rd->where, p->queue,
                  mq_reply_text(r, why, sizeof(why)));
        return -1;
    }
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
        return 0;
    l->tag = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
    r = amqp_read_message(rd->conn, MQ_CHANNEL, &l->msg, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_BAD_AMQP_DATA) {
        /* rabbitmq-c 0.14+ refuses headers nested deeper than 100 levels, and its input
         * stays stuck on that frame: nothing more can be read on this connection. The
         * letter is not acked, so it returns to the queue when the connection closes. */
        rd->deaf = true;
        p->undecodable++;
        ctl_fprintf(stderr,
                    "idemctl: dead letter %ld of %u in %s cannot be decoded by this "
                    "librabbitmq (%s): its headers nest deeper than it reads (100 levels). It "
                    "stays in the queue; the pass stops here, and the %ld letter(s) behind it "
                    "were not read. A client that decodes it (librabbitmq 0.11, or another "
                    "library) can move it\n",
                    p->scanned + 1, p->depth, p->queue, amqp_version(),
                    (long)p->depth - p->scanned - 1);
        return -1;
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        log_error("broker %s: reading a message of %s: %s", rd->where, p->queue,
                  mq_reply_text(r, why, sizeof(why)));
        return -1;
    }
    p->scanned++;
    long long dc = delivery_header_int(&l->msg.properties, "x-delivery-count");
    if (dc > p->returns)
        p->returns = dc;
    return 1;
}

/*
 * After the last acks of a replay, one more basic.get on the reading
 * channel, so that the acks are in before it closes: a quorum queue
 * answers it after the settlements the channel sent before (it applies
 * them in order), where a closing channel may drop settlements still
 * under way, and those letters would come back. A letter it takes (one
 * that arrived during the pass) is kept: requeued in order with the rest.
 */
static void ctl_dlq_barrier(ctl_pass_t *p)
{
    amqp_message_t m;
    amqp_rpc_reply_t r = amqp_basic_get(p->rd->conn, MQ_CHANNEL, amqp_cstring_bytes(p->queue), 0);

    if (r.reply_type != AMQP_RESPONSE_NORMAL || r.reply.id != AMQP_BASIC_GET_OK_METHOD)
        return;
    p->kept[p->n_kept++] = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
    r = amqp_read_message(p->rd->conn, MQ_CHANNEL, &m, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        p->rd->deaf = true; /* not read: closing the connection requeues it */
        return;
    }
    amqp_destroy_message(&m);
}

/* What ctl_dlq_act did with a letter. */
#define CTL_ACT_KEPT 0  /* not acked: it is requeued at the end */
#define CTL_ACT_ACKED 1 /* acked (purged) */
#define CTL_ACT_TAKEN 2 /* taken into the replay's batch, which now owns it */

/*
 * Do the command's work on the letter l the pass took (read, verified and
 * placed): print it, count it, ack it (purge) or replay it. Returns
 * CTL_ACT_*; sets *stop when the pass must stop there.
 */
static int ctl_dlq_act(ctl_t *ctl, ctl_pass_t *p, ctl_letter_t *l, bool *stop)
{
    int act = CTL_ACT_KEPT;

    *stop = false;
    /* Past --limit the pass still takes every message: a quorum queue puts returned
     * messages behind the ones never taken, so only a whole pass keeps the order. */
    bool wanted = !(p->mode == CTL_LIST && ctl->limit > 0 && p->matched >= ctl->limit);
    if (!wanted || !ctl_selected(ctl, l))
        return CTL_ACT_KEPT;
    p->matched++;
    switch (p->mode) {
    case CTL_LIST:
        ctl_letter_applied(ctl, p->db, &p->records_ok, NULL, l);
        ctl_letter_print(ctl, l, p->arr);
        break;
    case CTL_COUNT:
        break;
    case CTL_PURGE:
        act = mq_ack(p->rd, l->tag, false) == 0 ? CTL_ACT_ACKED : CTL_ACT_KEPT;
        p->done += act == CTL_ACT_ACKED;
        *stop = act != CTL_ACT_ACKED;
        break;
    case CTL_REPLAY: {
        ctl_letter_applied(ctl, p->db, &p->records_ok, &p->sent, l);
        int r1 = ctl_replay_one(ctl, p, l);
        act = r1 == 0 && !ctl->dry_run ? CTL_ACT_TAKEN : CTL_ACT_KEPT;
        p->done += r1 == 0 && ctl->dry_run;
        p->refused += r1 == 1;
        /* Out of memory for the ids sent: stop before one could go twice. */
        *stop = r1 < 0 || (r1 == 0 && ctl_sent_add(&p->sent, l) != 0);
        break;
    }
    }
    return act;
}

/*
 * The end of a pass: warn about letters returned often, then say what the
 * pass did (a line of text, or the --json document into ctl->out). Takes
 * the pass's exit status so far; returns the command's.
 */
static int ctl_dlq_report(ctl_t *ctl, ctl_pass_t *p, int rc)
{
    static const char *verbs[] = {"listed", "matched", "replayed", "purged"};
    ctl_mode_t mode = p->mode;

    /*
     * idemd declares its quorum queues without a delivery limit; one from an
     * older idemd keeps RabbitMQ 4's. The warning reads the broker's own count,
     * the one a limit compares, not how often idemctl took a letter: up to 4.2
     * each pass adds one for every letter, from 4.3 none (ctl_requeue), and
     * there only lost connections and rejects by other clients raise it.
     */
    if (p->returns >= CTL_RETURNS_WARN)
        log_warn("queue %s: a letter was returned %lld times (x-delivery-count, which a "
                 "delivery limit compares; up to RabbitMQ 4.2 each idemctl pass adds one, from "
                 "4.3 only lost connections and rejects do): harmless where the queue has no "
                 "delivery limit (as idemd declares it), but one from an older idemd keeps "
                 "RabbitMQ 4's limit of 20, which deletes it: apply a policy with "
                 "\"delivery-limit\": -1 (docs/rabbitmq.md, \"Delivery limits\")",
                 p->queue, p->returns);
    if (rc == CTL_EXIT_OK && p->matched == 0)
        rc = CTL_EXIT_NOMATCH;
    if (rc == CTL_EXIT_OK && p->refused > 0 && !ctl->dry_run)
        rc = CTL_EXIT_PARTIAL; /* done what could be; the refused ones stay */
    if (ctl->json) {
        ctl->out = json_object_new_object();
        json_object_object_add(ctl->out, "queue", ctl_json_text(p->queue));
        json_object_object_add(ctl->out, "scanned", json_object_new_int64(p->scanned));
        json_object_object_add(ctl->out, "matched", json_object_new_int64(p->matched));
        json_object_object_add(ctl->out, "undecodable", json_object_new_int64(p->undecodable));
        if ((mode == CTL_REPLAY && !ctl->dry_run) || mode == CTL_PURGE)
            json_object_object_add(ctl->out, verbs[mode], json_object_new_int64(p->done));
        if (mode == CTL_REPLAY && ctl->dry_run)
            json_object_object_add(ctl->out, "would_replay", json_object_new_int64(p->done));
        if (mode == CTL_REPLAY)
            json_object_object_add(ctl->out, "refused", json_object_new_int64(p->refused));
        if (mode == CTL_REPLAY && !ctl->dry_run) {
            json_object_object_add(ctl->out, "failed", json_object_new_int64(p->b.failed));
            json_object_object_add(ctl->out, "already_back", json_object_new_int64(p->b.resumed));
        }
        if (mode == CTL_REPLAY && ctl->dry_run)
            ctl_plan_print(ctl, p, ctl->out);
        json_object_object_add(ctl->out, "complete",
                               json_object_new_boolean(rc != CTL_EXIT_PARTIAL));
        if (p->arr)
            json_object_object_add(ctl->out, "letters", p->arr);
        p->arr = NULL;
    } else if (mode == CTL_REPLAY && ctl->dry_run) {
        ctl_printf("would replay %ld of %ld dead letters in %s (%ld matched, %ld refused or "
                   "skipped); nothing was replayed (--dry-run)\n",
                   p->done, p->scanned, p->queue, p->matched, p->refused);
        ctl_plan_print(ctl, p, NULL);
    } else if (mode == CTL_REPLAY && p->refused > 0) {
        ctl_printf(
            "%s %ld of %ld dead letters in %s (%ld matched, %ld refused and kept: see above)\n",
            verbs[mode], p->done, p->scanned, p->queue, p->matched, p->refused);
    } else if (mode == CTL_REPLAY || mode == CTL_PURGE) {
        ctl_printf("%s %ld of %ld dead letters in %s (%ld matched)\n", verbs[mode], p->done,
                   p->scanned, p->queue, p->matched);
    } else if (mode == CTL_COUNT) {
        ctl_printf("would purge %ld of %ld dead letters in %s; nothing was purged: add --yes\n",
                   p->matched, p->scanned, p->queue);
    }
    if (mode == CTL_COUNT && rc != CTL_EXIT_PARTIAL && rc != CTL_EXIT_CONNECT)
        rc = CTL_EXIT_USAGE;
    return rc;
}

/*
 * dlq list / replay / purge (and the count that purge without --yes
 * prints): take the queue's messages one by one with basic.get, without
 * acking, as many as it held at the start. Selected ones are printed
 * (list, kept), replayed or purged (acked); every message not acked is
 * requeued at the end in its order (ctl_requeue). A classic queue puts
 * them back at their positions, and so does a quorum queue from RabbitMQ
 * 4.3; before, a quorum queue (3.10) appends returned messages behind the
 * rest, so the pass always takes the whole queue. Dead letters that arrive
 * during a pass then end up ahead of the returned ones.
 */
/*
 * Whether queue is one of the configuration's work queues (not a dead letter queue): then say
 * which dead letter queue was meant, and that a work queue's messages are not taken this way.
 */
static bool ctl_dlq_is_work_queue(const ctl_t *ctl, const char *queue)
{
    for (int i = 0; i < ctl->conf->n_queues; i++) {
        const conf_queue_t *q = &ctl->conf->queues[i];
        if (strcmp(q->name, queue) != 0)
            continue;
        if (q->dead_letter_queue)
            ctl_fprintf(stderr,
                        "idemctl: %s is a work queue in %s, not a dead letter queue: its dead "
                        "letters are in %s (idemctl dlq list %s)\n",
                        queue, ctl->conf->path, q->dead_letter_queue, q->dead_letter_queue);
        else
            ctl_fprintf(stderr,
                        "idemctl: %s is a work queue in %s, not a dead letter queue, and it has "
                        "none (dead_letter_queue = \"\")\n",
                        queue, ctl->conf->path);
        return true;
    }
    return false;
}

int ctl_dlq(ctl_t *ctl, const char *queue, ctl_mode_t mode)
{
    ctl_pass_t p = {.queue = queue, .mode = mode, .records_ok = true};
    unsigned consumers = 0;
    int rc = CTL_EXIT_OK;

    /* Its messages would be taken from its workers, and none is a dead letter. */
    if (ctl_dlq_is_work_queue(ctl, queue))
        return CTL_EXIT_USAGE;

    if (mq_open(&ctl->conf->broker, "idemctl", 0, NULL, 0, &p.rd) != 0) {
        ctl_fprintf(stderr, "idemctl: cannot connect to the broker (see above)\n");
        return CTL_EXIT_CONNECT;
    }
    int st = ctl_queue_peek(p.rd, queue, &p.depth, &consumers);
    if (st != 0) {
        if (st > 0)
            ctl_fprintf(stderr, "idemctl: no queue %s\n", queue);
        rc = st > 0 ? CTL_EXIT_NOMATCH : CTL_EXIT_PARTIAL;
        goto out;
    }
    if (consumers > 0)
        log_warn("queue %s has %u consumer(s): they may take messages during this pass, and the "
                 "order seen here is not the queue's",
                 queue, consumers);
    if ((mode == CTL_LIST || (ctl->verified_only && mode != CTL_REPLAY)) &&
        (rc = ctl_dlq_open_list(ctl, &p)) != CTL_EXIT_OK)
        goto out;
    if (mode == CTL_REPLAY && (rc = ctl_dlq_open_replay(ctl, &p)) != CTL_EXIT_OK)
        goto out;
    if (ctl->json && (mode == CTL_LIST || (mode == CTL_REPLAY && ctl->dry_run)))
        p.arr = json_object_new_array();
    if ((p.kept = calloc((size_t)p.depth + 1, sizeof(*p.kept))) == NULL) {
        log_error("out of memory for %u delivery tags", p.depth);
        rc = CTL_EXIT_PARTIAL;
        goto out;
    }
    bool batched = mode == CTL_REPLAY && !ctl->dry_run;
    while (p.scanned < (long)p.depth) {
        ctl_letter_t one, *l = batched ? ctl_batch_slot(&p) : &one;
        bool stop;
        int took = ctl_dlq_take(&p, l);
        if (took <= 0) {
            rc = took < 0 ? CTL_EXIT_PARTIAL : rc;
            break;
        }
        ctl_letter_fields(ctl, l);
        ctl_letter_verify(ctl, l);
        ctl_letter_place(ctl, queue, l);
        int act = ctl_dlq_act(ctl, &p, l, &stop);
        if (act == CTL_ACT_KEPT)
            p.kept[p.n_kept++] = l->tag;
        if (act != CTL_ACT_TAKEN)
            amqp_destroy_message(&l->msg);
        amqp_maybe_release_buffers(p.rd->conn);
        if (batched && (stop || ctl_batch_full(&p)) && ctl_batch_flush(ctl, &p) != 0)
            stop = true;
        if (stop) {
            rc = CTL_EXIT_PARTIAL;
            break;
        }
    }
    if (batched && p.b.n > 0 && ctl_batch_flush(ctl, &p) != 0)
        rc = CTL_EXIT_PARTIAL;
    if (batched && p.done > 0 && p.rd->channel_open && !p.rd->deaf)
        ctl_dlq_barrier(&p);
    if (p.n_kept > 0 && p.rd->channel_open && !p.rd->deaf)
        ctl_requeue(p.rd, queue, p.kept, p.n_kept);
    if (mode == CTL_REPLAY)
        ctl_batch_close(ctl, &p);
    rc = ctl_dlq_report(ctl, &p, rc);
out:
    ctl_batch_close(ctl, &p);
    free(p.kept);
    free(p.sent.v);
    json_object_put(p.arr);
    ctl_json_flush(ctl);
    db_close(p.db);
    mq_close(p.pub);
    mq_close(p.rd);
    explicit_bzero(&ctl->keys, sizeof(ctl->keys));
    return rc;
}
