/* mq_declare.c: declaring idemd's queues (arguments, dead letters, delivery limits, bindings). */
#include "mq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mq_int.h"

/* Whether the broker closed the channel with reply code 406 and a text containing what. */
static bool mq_refused_for(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION || r.reply.id != AMQP_CHANNEL_CLOSE_METHOD)
        return false;
    const amqp_channel_close_t *m = r.reply.decoded;
    return m->reply_code == AMQP_PRECONDITION_FAILED &&
           memmem(m->reply_text.bytes, m->reply_text.len, what, strlen(what)) != NULL;
}

/*
 * After the broker closed MQ_CHANNEL (a refused RPC): answer with the
 * close-ok it waits for and open the channel again. 0, or -1 (logged).
 */
static int mq_channel_reopen(mq_t *mq)
{
    amqp_channel_close_ok_t ok;

    if (amqp_send_method(mq->conn, MQ_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) !=
        AMQP_STATUS_OK) {
        mq->broken = true;
        log_error("broker %s: cannot answer the channel's close", mq->where);
        return -1;
    }
    return mq_channel_restore(mq);
}

/* What mq_declare_args had to change for an existing queue (a bit mask). */
#define MQ_LEFT_LIMIT 1    /* the delivery limit arguments were left off (mq_limit_args) */
#define MQ_LEFT_DL 2       /* the dead-letter arguments were left off (mq_dead_letter_args) */
#define MQ_KEPT_STRATEGY 4 /* x-dead-letter-strategy was added back (mq_dlq_args) */

/*
 * queue.declare with arguments: args holds the fixed ones, then n_dl from
 * mq_dead_letter_args, then n_limit from mq_limit_args (last). A queue that
 * exists without one of those groups (declared by an older idemd) cannot get
 * it now: the broker refuses the declaration as inequivalent, naming the
 * argument, so the group it names is left off and the queue declared again
 * (the limit: logged with the remedy; dead letters: the caller warns).
 * strategy: args leave out the x-dead-letter-strategy that an older idemd
 * gave its dead letter queues; a queue that has it is declared again with
 * it (room for one more entry in args.entries). quorum: say how to move an
 * older classic queue. Returns the mask of what was changed (0: declared as
 * asked), or -1 (logged).
 */
static int mq_declare_args(mq_t *mq, const char *name, bool durable, bool quorum, amqp_table_t args,
                           int n_dl, int n_limit, bool strategy)
{
    char what[300];
    bool quiet = mq->quiet;
    amqp_rpc_reply_t r;
    int left = 0;

    for (;;) {
        amqp_queue_declare(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(name), 0, durable, 0, 0, args);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type == AMQP_RESPONSE_NORMAL)
            return left;
        bool limit = n_limit > 0 && mq_refused_for(r, "x-delivery-limit");
        bool dl = !limit && n_dl > 0 &&
                  (mq_refused_for(r, "x-dead-letter-") || mq_refused_for(r, "x-overflow"));
        bool strat = !limit && !dl && strategy && mq_refused_for(r, "x-dead-letter-strategy");
        if (!limit && !dl && !strat)
            break;
        mq->quiet = true; /* expected from an older deployment: said below or by the caller */
        snprintf(what, sizeof(what), "declaring queue '%s' %s", name,
                 limit   ? "with x-delivery-limit"
                 : strat ? "without x-dead-letter-strategy"
                         : "with its dead-letter arguments");
        mq_fail(mq, what, r);
        mq->quiet = quiet;
        if (mq_channel_reopen(mq) != 0)
            return -1;
        if (strat) {
            /* Before the limit group, which stays last. */
            amqp_table_entry_t *at = &args.entries[args.num_entries - n_limit];
            memmove(at + 1, at, (size_t)n_limit * sizeof(*at));
            mq_entry_str(at, "x-dead-letter-strategy", "at-least-once");
            args.num_entries++;
            strategy = false;
            left |= MQ_KEPT_STRATEGY;
            if (!mq->strategy_noted)
                log_info("queue '%s' exists with x-dead-letter-strategy at-least-once and no "
                         "dead-letter exchange (declared by an older idemd): declared as it is. "
                         "Harmless: a dead letter queue dead-letters nothing; RabbitMQ logs "
                         "\"Disabling dead-lettering for queue '%s' ...\" for it (4.3: every "
                         "few seconds). To be rid of that, empty it (idemctl dlq replay or purge) "
                         "and delete it: idemd declares it anew without the argument "
                         "(docs/rabbitmq.md, \"Dead letter queues\")",
                         name, name);
            mq->strategy_noted = true;
        } else if (limit) {
            log_warn("queue '%s' exists without x-delivery-limit (declared by an older idemd): "
                     "on RabbitMQ 4.x it keeps the broker's delivery limit (default 20), past "
                     "which a message returned that often is deleted or dead-lettered by the "
                     "broker; idemd cannot change an existing queue's arguments: apply a policy "
                     "with \"delivery-limit\": -1 to it (docs/rabbitmq.md, \"Delivery limits\")",
                     name);
            args.num_entries -= n_limit;
            n_limit = 0;
            left |= MQ_LEFT_LIMIT;
        } else {
            /* The limit group, if still there, moves down over the dead-letter one. */
            amqp_table_entry_t *dl_at = &args.entries[args.num_entries - n_limit - n_dl];
            memmove(dl_at, dl_at + n_dl, (size_t)n_limit * sizeof(*dl_at));
            args.num_entries -= n_dl;
            n_dl = 0;
            left |= MQ_LEFT_DL;
        }
    }
    snprintf(what, sizeof(what), "declaring queue '%s'", name);
    mq_fail(mq, what, r);
    if (quorum && mq_refused_for(r, ""))
        log_error(
            "queue '%s' exists with other arguments, e.g. as a classic queue from before "
            "declare.quorum = true: drain and delete it (docs/failures.md: \"Moving to quorum "
            "queues\")",
            name);
    return -1;
}

/*
 * The arguments that keep the broker from deleting a message of a quorum
 * queue idemd declares, for every queue idemd declares or reads (the main
 * queue, delay tiers, dead letters). RabbitMQ 4.0+ gives a quorum queue
 * without x-delivery-limit a limit of 20 returns, past which a message is
 * dead-lettered, or deleted where the queue has no dead-letter exchange
 * (idemd's own queues have none): -1 turns it off. RabbitMQ 3.x has no
 * default limit, and takes -1 as a limit that every return passes (the
 * message is deleted at its first return): nothing there. Fills e[0..] and
 * returns how many (0 or 1). Keep every change of these lists here.
 */
static int mq_limit_args(const mq_t *mq, amqp_table_entry_t *e)
{
    if (mq->broker_major < 4)
        return 0;
    mq_entry_int(&e[0], "x-delivery-limit", -1);
    return 1;
}

/*
 * The arguments that make a delay tier a quorum queue whose dead-lettering
 * is at-least-once: the broker keeps an expired message until the target
 * confirmed it. That needs x-overflow = reject-publish; with drop-head it
 * silently falls back to at-most-once. Fills e[0..2]; returns 3.
 */
static size_t mq_quorum_args(amqp_table_entry_t *e)
{
    mq_entry_str(&e[0], "x-queue-type", "quorum");
    mq_entry_str(&e[1], "x-dead-letter-strategy", "at-least-once");
    mq_entry_str(&e[2], "x-overflow", "reject-publish");
    return 3;
}

/*
 * The arguments of a quorum dead letter queue. x-overflow = reject-publish:
 * should a policy give it a length limit, a new letter is refused (and its
 * original kept) instead of the oldest letter dropped. No dead-letter
 * exchange, so no x-dead-letter-strategy: without an exchange the strategy
 * does nothing, and RabbitMQ logs "Disabling dead-lettering ..." for the
 * queue (4.3: every few seconds). An older idemd sent the strategy, and a
 * queue's arguments cannot change: mq_declare_args adds it back for such a
 * queue. Fills e[0..1]; returns 2.
 */
static size_t mq_dlq_args(amqp_table_entry_t *e)
{
    mq_entry_str(&e[0], "x-queue-type", "quorum");
    mq_entry_str(&e[1], "x-overflow", "reject-publish");
    return 2;
}

/*
 * Whether queue name exists (a passive declaration): 1, 0 (the channel
 * open again), or -1 (logged).
 */
static int mq_exists(mq_t *mq, const char *name)
{
    amqp_queue_declare(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(name), 1, 0, 0, 0,
                       amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 1;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
        ((const amqp_channel_close_t *)r.reply.decoded)->reply_code == AMQP_NOT_FOUND) {
        mq->channel_open = false;
        return mq_channel_reopen(mq) == 0 ? 0 : -1;
    }
    char what[300];
    snprintf(what, sizeof(what), "looking up queue '%s'", name);
    mq_fail(mq, what, r);
    return -1;
}

/*
 * A quorum queue is to be declared by default (mq->keep_classic), and name
 * exists (mq_exists: a queue that does not exist is never declared classic
 * here): rc is how declaring it as a classic queue went, with mq->quiet
 * set, which quiet restores. 0: it is one (kept so, counted for the
 * caller's one warning), 1: it is not (the channel open again: declare it
 * as asked), or -1 (logged). RabbitMQ compares the arguments of a queue
 * declared again in its own order, so a classic queue refuses a quorum
 * declaration naming x-overflow or x-delivery-limit as often as
 * x-queue-type: trying the classic declaration is how to tell.
 */
static int mq_classic_kept(mq_t *mq, const char *name, int rc, bool quiet)
{
    mq->quiet = quiet;
    if (rc == 0) {
        char quoted[300];
        size_t at = strlen(mq->kept_classic);
        snprintf(quoted, sizeof(quoted), "'%s'", name);
        if (strstr(mq->kept_classic, quoted) == NULL) { /* mq_declare and the worker: twice */
            if (at + strlen(quoted) + 6 < sizeof(mq->kept_classic))
                snprintf(mq->kept_classic + at, sizeof(mq->kept_classic) - at, "%s%s",
                         at ? ", " : "", quoted);
            else if (!strstr(mq->kept_classic, "..."))
                snprintf(mq->kept_classic + at, sizeof(mq->kept_classic) - at, ", ...");
            mq->n_kept_classic++;
        }
        log_debug("queue '%s' exists as a classic queue: declared as one", name);
        return 0;
    }
    return mq_channel_usable(mq) || mq_channel_reopen(mq) == 0 ? 1 : -1;
}

int mq_declare_plain(mq_t *mq, const char *name, bool durable, bool quorum)
{
    amqp_table_entry_t e[4]; /* mq_dlq_args, the limit, and room for the strategy */
    amqp_table_t args = {0, e};
    int n_limit = 0, k;
    if (quorum && mq->keep_classic && (k = mq_exists(mq, name)) != 0) {
        bool quiet = mq->quiet;
        mq->quiet = true;
        if (k < 0 ||
            (k = mq_classic_kept(mq, name, mq_declare_plain(mq, name, durable, false), quiet)) <= 0)
            return k;
    }
    if (quorum) {
        args.num_entries = (int)mq_dlq_args(e);
        n_limit = mq_limit_args(mq, &e[args.num_entries]);
        args.num_entries += n_limit;
    }
    return mq_declare_args(mq, name, durable, quorum, args, 0, n_limit, quorum) < 0 ? -1 : 0;
}

int mq_declare_delay(mq_t *mq, const char *name, int ttl_ms, const char *target, bool durable,
                     bool quorum)
{
    amqp_table_entry_t e[7];
    int n_limit = 0, k;
    if (quorum && mq->keep_classic && (k = mq_exists(mq, name)) != 0) {
        bool quiet = mq->quiet;
        mq->quiet = true;
        if (k < 0 ||
            (k = mq_classic_kept(
                 mq, name, mq_declare_delay(mq, name, ttl_ms, target, durable, false), quiet)) <= 0)
            return k;
    }
    mq_entry_int(&e[0], "x-message-ttl", ttl_ms);
    e[0].value.kind = AMQP_FIELD_KIND_I32; /* as first declared: the broker compares types */
    e[0].value.value.i32 = ttl_ms;
    mq_entry_str(&e[1], "x-dead-letter-exchange", "");
    mq_entry_str(&e[2], "x-dead-letter-routing-key", target);
    amqp_table_t args = {3, e};
    if (quorum) {
        args.num_entries += (int)mq_quorum_args(&e[3]);
        n_limit = mq_limit_args(mq, &e[args.num_entries]);
        args.num_entries += n_limit;
    }
    return mq_declare_args(mq, name, durable, quorum, args, 0, n_limit, false) < 0 ? -1 : 0;
}

/* The value of q's declare argument key, or NULL when absent. */
static const conf_arg_t *mq_conf_arg(const conf_queue_t *q, const char *key)
{
    for (int i = 0; i < q->n_args; i++)
        if (strcmp(q->args[i].key, key) == 0)
            return &q->args[i];
    return NULL;
}

/*
 * The arguments that make q's queue dead-letter what it rejects into q's dead
 * letter queue, appended at e (room for 4): x-dead-letter-exchange "" and
 * x-dead-letter-routing-key. On a quorum queue also x-dead-letter-strategy
 * at-least-once, which needs x-overflow reject-publish (a no-op without a
 * length limit; conf.c allows no other overflow with one): the broker keeps a
 * rejected message until the dead letter queue confirmed it. None when q has
 * no dead letter queue or its declare.arguments name a dead-letter exchange
 * (theirs is used as is). quorum: q's queue is declared as a quorum queue.
 * Returns how many.
 */
static int mq_dead_letter_args(const conf_queue_t *q, bool quorum, amqp_table_entry_t *e)
{
    int n = 0;
    if (q->dead_letter_queue == NULL || mq_conf_arg(q, "x-dead-letter-exchange"))
        return 0;
    mq_entry_str(&e[n++], "x-dead-letter-exchange", "");
    mq_entry_str(&e[n++], "x-dead-letter-routing-key", q->dead_letter_queue);
    if (quorum && !mq_conf_arg(q, "x-dead-letter-strategy")) {
        const conf_arg_t *ov = mq_conf_arg(q, "x-overflow");
        if (ov == NULL)
            mq_entry_str(&e[n++], "x-overflow", "reject-publish");
        if (ov == NULL || (!ov->is_int && strcmp(ov->sval, "reject-publish") == 0))
            mq_entry_str(&e[n++], "x-dead-letter-strategy", "at-least-once");
    }
    return n;
}

/*
 * Declare q's queue (quorum or classic, as quorum says) and its bindings;
 * see mq_declare. 0 or -1 (logged).
 */
static int mq_declare_queue(mq_t *mq, const conf_queue_t *q, bool quorum)
{
    /* Room for x-queue-type, x-single-active-consumer, 4 dead-letter and 1 limit arguments
     * beside the configured ones. */
    amqp_table_entry_t *e = calloc((size_t)q->n_args + 7, sizeof(*e));
    amqp_table_t args = {0, e};
    amqp_rpc_reply_t r;
    char what[300];
    int rc = -1, n_dl, n_limit = 0, left;
    bool own_limit = false;

    if (e == NULL)
        return -1;
    if (quorum) {
        mq_entry_str(&e[args.num_entries++], "x-queue-type", "quorum");
    }
    if (q->single_active_consumer) {
        amqp_table_entry_t *sac = &e[args.num_entries++];
        sac->key = amqp_cstring_bytes("x-single-active-consumer");
        sac->value.kind = AMQP_FIELD_KIND_BOOLEAN;
        sac->value.value.boolean = 1;
    }
    for (int i = 0; i < q->n_args; i++) {
        own_limit |= strcmp(q->args[i].key, "x-delivery-limit") == 0;
        if (q->args[i].is_int)
            mq_entry_int(&e[args.num_entries++], q->args[i].key, q->args[i].ival);
        else
            mq_entry_str(&e[args.num_entries++], q->args[i].key, q->args[i].sval);
    }
    /* The dead-letter arguments, then the limit ones: each left off an older queue. */
    n_dl = mq_dead_letter_args(q, quorum, &e[args.num_entries]);
    args.num_entries += n_dl;
    if (quorum && !own_limit) {
        n_limit = mq_limit_args(mq, &e[args.num_entries]);
        args.num_entries += n_limit;
    }
    left = mq_declare_args(mq, q->name, q->durable, quorum, args, n_dl, n_limit, false);
    if (left < 0) {
        if (q->single_active_consumer)
            log_error("queue '%s' has declare.single_active_consumer = true: if the broker "
                      "refused x-single-active-consumer as inequivalent, the queue exists without "
                      "it, and RabbitMQ cannot change a queue's arguments: consume a new queue, "
                      "or drain and delete this one (docs/ordering.md)",
                      q->name);
        goto fail;
    }
    mq->limit_unsure = (left & MQ_LEFT_LIMIT) || own_limit;
    mq->dead_letter_fallback = (left & MQ_LEFT_DL) != 0;
    mq->dead_letters =
        mq_conf_arg(q, "x-dead-letter-exchange") != NULL || (n_dl > 0 && !mq->dead_letter_fallback);
    for (int i = 0; i < q->n_bindings; i++) {
        amqp_queue_bind(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(q->name),
                        amqp_cstring_bytes(q->bindings[i].exchange),
                        amqp_cstring_bytes(q->bindings[i].routing_key), amqp_empty_table);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            snprintf(what, sizeof(what), "binding queue '%s' to exchange '%s' key '%s'", q->name,
                     q->bindings[i].exchange, q->bindings[i].routing_key);
            mq_fail(mq, what, r);
            goto fail;
        }
    }
    rc = 0;
fail:
    free(e);
    return rc;
}

int mq_declare(mq_t *mq, const conf_queue_t *q)
{
    if (q->dead_letter_queue &&
        mq_declare_plain(mq, q->dead_letter_queue, q->durable, q->quorum) != 0)
        return -1;
    int k;
    if (q->quorum && mq->keep_classic && (k = mq_exists(mq, q->name)) != 0) {
        bool quiet = mq->quiet;
        mq->quiet = true;
        if (k < 0 || (k = mq_classic_kept(mq, q->name, mq_declare_queue(mq, q, false), quiet)) <= 0)
            return k;
    }
    return mq_declare_queue(mq, q, q->quorum);
}
