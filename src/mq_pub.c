/* mq_pub.c: the publishing side of an mq_t: confirm mode, publishes, confirms and returns. */
#include "mq.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "delivery.h"
#include "log.h"
#include "mq_int.h"

/* A queue name the broker reserves ("amq." prefix): nobody can declare it, so a probe sent
 * there is returned and stored nowhere. */
#define MQ_PROBE_QUEUE "amq.idemd.probe"

/*
 * Bounding a publish. rabbitmq-c writes a publish with no deadline, so a
 * broker that stops reading (a resource alarm blocks a publishing connection
 * that way) would hold us for ever. A one-shot timer's signal shuts the
 * socket down (shutdown() is async-signal-safe): the library's poll wakes up
 * and its write fails. One publisher per worker process, hence the statics.
 */
static volatile sig_atomic_t mq_abort_fd = -1;
static volatile sig_atomic_t mq_aborted;
static timer_t mq_abort_timer;
static bool mq_abort_ready;

static void mq_on_abort(int sig)
{
    int fd = mq_abort_fd;
    (void)sig;
    if (fd >= 0) {
        shutdown(fd, SHUT_RDWR);
        mq_aborted = 1;
    }
}

/* Set up the timer once per process; 0, or -1 (logged). */
static int mq_abort_init(void)
{
    struct sigaction sa;
    struct sigevent sev;

    if (mq_abort_ready)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = mq_on_abort;
    sa.sa_flags = SA_RESTART; /* a late signal must not fail an unrelated call with EINTR */
    sigemptyset(&sa.sa_mask);
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGRTMIN;
    if (sigaction(SIGRTMIN, &sa, NULL) != 0 ||
        timer_create(CLOCK_MONOTONIC, &sev, &mq_abort_timer) != 0) {
        log_error("cannot set up the publish timer: %s", strerror(errno));
        return -1;
    }
    mq_abort_ready = true;
    return 0;
}

/* Shut fd down unless mq_abort_disarm is called within ms. */
static void mq_abort_arm(int fd, int ms)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    mq_aborted = 0;
    mq_abort_fd = fd;
    timer_settime(mq_abort_timer, 0, &its, NULL);
}

/* Stop the timer; returns whether it fired. */
static bool mq_abort_disarm(void)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    timer_settime(mq_abort_timer, 0, &its, NULL);
    mq_abort_fd = -1;
    return mq_aborted != 0;
}

static int mq_probe(mq_t *mq);

int mq_open_publisher(const conf_broker_t *cfg, const char *owner, int start, mq_tick_fn tick,
                      void *arg, mq_t **out)
{
    amqp_rpc_reply_t r;
    mq_t *mq;

    if (mq_abort_init() != 0)
        return -1;
    /* The consumer's connection checked the version already: a refusal here is logged. */
    if (mq_connect_any(cfg, start, owner, "republisher", tick, arg, NULL, 0, out) != 0)
        return -1;
    mq = *out;
    amqp_confirm_select(mq->conn, MQ_CHANNEL);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        mq_fail(mq, "confirm.select", r);
        goto fail;
    }
    mq->confirms = true;
    if (mq_probe(mq) != 0)
        goto fail;
    return 0;
fail:
    mq_close(mq);
    *out = NULL;
    return -1;
}

bool mq_blocked(const mq_t *mq)
{
    return mq->blocked;
}

typedef enum mq_copy_state { MQ_COPY_PENDING, MQ_COPY_ACKED, MQ_COPY_REFUSED } mq_copy_state_t;

/* One publish of the round and what the broker said of it. */
typedef struct mq_copy {
    uint64_t seq;
    char *exchange;    /* owned */
    char *routing_key; /* owned */
    bool returned;     /* its basic.return came: its ack means "refused" */
    mq_copy_state_t state;
    char why[MQ_WHY_MAX]; /* refused: the broker's words */
} mq_copy_t;

void mq_round_begin(mq_t *mq)
{
    for (int i = 0; i < mq->round_n; i++) {
        free(mq->round[i].exchange);
        free(mq->round[i].routing_key);
    }
    mq->round_n = 0;
    mq->returning = false;
    mq->closed_why[0] = '\0';
}

int mq_publish(mq_t *mq, const char *routing_key, const amqp_basic_properties_t *props,
               amqp_bytes_t body)
{
    return mq_publish_to(mq, "", routing_key, props, body);
}

/*
 * props with header MQ_H_PUBLISH = seq added (one of the same name left
 * out) into *out, its table in tab (cap entries) or, when that is too
 * small, in *heap (the caller frees it). 0, or -1 when out of memory.
 */
static int mq_tag_props(const amqp_basic_properties_t *props, uint64_t seq, amqp_table_entry_t *tab,
                        int cap, amqp_table_entry_t **heap, amqp_basic_properties_t *out)
{
    int have = (props->_flags & AMQP_BASIC_HEADERS_FLAG) ? props->headers.num_entries : 0, n = 0;
    amqp_table_entry_t *e = tab;

    *out = *props;
    if (have + 1 > cap && (e = *heap = calloc((size_t)have + 1, sizeof(*e))) == NULL)
        return -1;
    for (int i = 0; i < have; i++) {
        amqp_bytes_t k = props->headers.entries[i].key;
        if (k.len == sizeof(MQ_H_PUBLISH) - 1 && memcmp(k.bytes, MQ_H_PUBLISH, k.len) == 0)
            continue;
        e[n++] = props->headers.entries[i];
    }
    e[n].key = amqp_cstring_bytes(MQ_H_PUBLISH);
    e[n].value.kind = AMQP_FIELD_KIND_I64;
    e[n].value.value.i64 = (int64_t)seq;
    out->_flags |= AMQP_BASIC_HEADERS_FLAG;
    out->headers.entries = e;
    out->headers.num_entries = n + 1;
    return 0;
}

int mq_publish_to(mq_t *mq, const char *exchange, const char *routing_key,
                  const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    amqp_table_entry_t tab[MQ_TAG_ENTRIES], *heap = NULL;
    amqp_basic_properties_t tagged;
    int rc = -1;

    if (mq->blocked || mq->broken || !mq->channel_open) {
        log_error("broker %s: not publishing to '%s': %s", mq->where, routing_key,
                  mq->blocked  ? "the broker blocks this connection (resource alarm)"
                  : mq->broken ? "the connection is broken"
                               : "the channel is closed");
        return -1;
    }
    if (mq->round_n == mq->round_cap) {
        int cap = mq->round_cap ? mq->round_cap * 2 : 16;
        mq_copy_t *r = realloc(mq->round, sizeof(*r) * (size_t)cap);
        if (r == NULL)
            return -1;
        mq->round = r;
        mq->round_cap = cap;
    }
    mq_copy_t *c = &mq->round[mq->round_n];
    c->exchange = strdup(exchange);
    c->routing_key = strdup(routing_key);
    if (c->exchange == NULL || c->routing_key == NULL ||
        mq_tag_props(props, mq->pub_seq + 1, tab, MQ_TAG_ENTRIES, &heap, &tagged) != 0) {
        log_error("broker %s: out of memory publishing to '%s'", mq->where, routing_key);
        goto fail;
    }
    mq_abort_arm(amqp_get_sockfd(mq->conn), MQ_SEND_MS);
    int st = amqp_basic_publish(mq->conn, MQ_CHANNEL, amqp_cstring_bytes(exchange),
                                amqp_cstring_bytes(routing_key), 1, 0, &tagged, body);
    bool aborted = mq_abort_disarm();
    mq_tick(mq);
    if (aborted)
        mq->broken = true; /* the socket is shut down even if the write got through */
    if (st != AMQP_STATUS_OK) {
        if (aborted)
            log_error("broker %s: publishing to '%s': the broker took no data for %d ms "
                      "(blocked by a resource alarm, or the network stalled): giving up",
                      mq->where, routing_key, MQ_SEND_MS);
        else
            log_error("broker %s: publishing to '%s' (exchange '%s'): %s", mq->where, routing_key,
                      exchange, amqp_error_string2(st));
        mq->broken = true;
        goto fail;
    }
    c->seq = ++mq->pub_seq;
    c->returned = false;
    c->state = MQ_COPY_PENDING;
    c->why[0] = '\0';
    rc = mq->round_n++;
    goto out;
fail:
    free(c->exchange);
    free(c->routing_key);
out:
    free(heap);
    return rc;
}

/* Settle the round's copies covered by a basic.ack or basic.nack. */
static void mq_settle(mq_t *mq, uint64_t tag, bool multiple, bool acked)
{
    for (int i = 0; i < mq->round_n; i++) {
        mq_copy_t *c = &mq->round[i];
        if (c->state != MQ_COPY_PENDING || (multiple ? c->seq > tag : c->seq != tag))
            continue;
        c->state = acked && !c->returned ? MQ_COPY_ACKED : MQ_COPY_REFUSED;
        if (!acked)
            snprintf(c->why, sizeof(c->why), "refused by the broker (basic.nack)");
        if (c->state == MQ_COPY_REFUSED && strcmp(c->routing_key, MQ_PROBE_QUEUE) != 0)
            log_error("broker %s: copy to exchange '%s' routing key '%s' refused: %s", mq->where,
                      c->exchange, c->routing_key, c->why);
    }
}

static int mq_round_pending(const mq_t *mq)
{
    int n = 0;
    for (int i = 0; i < mq->round_n; i++)
        n += mq->round[i].state == MQ_COPY_PENDING;
    return n;
}

/*
 * The content header of a basic.return (props): mark the copy it answers.
 * Its MQ_H_PUBLISH header names the copy exactly; without it (a broker that
 * dropped it), the first pending copy of the same exchange and routing key,
 * as the broker returns in publishing order.
 */
static void mq_returned(mq_t *mq, const amqp_basic_properties_t *props)
{
    long long seq = props ? delivery_header_int(props, MQ_H_PUBLISH) : -1;
    mq_copy_t *hit = NULL;

    mq->returning = false;
    for (int i = 0; i < mq->round_n && hit == NULL; i++) {
        mq_copy_t *c = &mq->round[i];
        if (c->state != MQ_COPY_PENDING || c->returned)
            continue;
        if (seq >= 0 ? c->seq == (uint64_t)seq
                     : strcmp(c->exchange, mq->ret_exchange) == 0 &&
                           strcmp(c->routing_key, mq->ret_key) == 0)
            hit = c;
    }
    if (hit == NULL)
        return; /* a copy of an earlier round, given up already */
    hit->returned = true;
    snprintf(hit->why, sizeof(hit->why), "unroutable: returned by the broker: %d %s", mq->ret_code,
             mq->ret_text);
}

/*
 * Act on one frame that arrived on a publishing connection: confirms,
 * returns, connection.blocked / unblocked, close. 0, or -1 when the broker
 * closed the channel or the connection (logged).
 */
static int mq_pub_frame(mq_t *mq, const amqp_frame_t *f)
{
    if (f->frame_type == AMQP_FRAME_HEADER && mq->returning) {
        mq_returned(mq, f->payload.properties.decoded);
        return 0;
    }
    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0; /* the body of a basic.return */
    switch (f->payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = f->payload.method.decoded;
        mq_settle(mq, a->delivery_tag, a->multiple, true);
        return 0;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *n = f->payload.method.decoded;
        mq_settle(mq, n->delivery_tag, n->multiple, false);
        return 0;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        /* No tag on a return: its content header names the copy (mq_returned). */
        amqp_basic_return_t *m = f->payload.method.decoded;
        mq->returning = true;
        mq->ret_code = m->reply_code;
        snprintf(mq->ret_text, sizeof(mq->ret_text), "%.*s", (int)m->reply_text.len,
                 (char *)m->reply_text.bytes);
        snprintf(mq->ret_exchange, sizeof(mq->ret_exchange), "%.*s", (int)m->exchange.len,
                 (char *)m->exchange.bytes);
        snprintf(mq->ret_key, sizeof(mq->ret_key), "%.*s", (int)m->routing_key.len,
                 (char *)m->routing_key.bytes);
        return 0;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
        amqp_connection_blocked_t *m = f->payload.method.decoded;
        if (!mq->blocked)
            log_warn("broker %s: publishing connection blocked by the broker (%.*s): copies wait "
                     "in their queues until it unblocks",
                     mq->where, (int)m->reason.len, (char *)m->reason.bytes);
        mq->blocked = true;
        return 0;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        if (mq->blocked)
            log_info("broker %s: publishing connection unblocked", mq->where);
        mq->blocked = false;
        return 0;
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
        mq_closed_by_broker(mq, f, "publishing ");
        return -1;
    default:
        return 0;
    }
}

int mq_wait_confirms(mq_t *mq, int timeout_ms)
{
    uint64_t deadline = mq_now_ms() + (uint64_t)timeout_ms, blocked_end = 0;
    struct timeval tv;
    amqp_frame_t f;
    int rc = 0;

    while (mq_round_pending(mq) > 0) {
        uint64_t now = mq_now_ms();
        /* Blocked, the broker reads nothing more: only confirms already under way come. */
        if (!mq->blocked)
            blocked_end = 0;
        else if (blocked_end == 0)
            blocked_end = now + MQ_BLOCKED_MS;
        uint64_t end = blocked_end && blocked_end < deadline ? blocked_end : deadline;
        if (now >= end) {
            log_error("broker %s: %d of %d copies not confirmed after %d ms%s: giving up on them",
                      mq->where, mq_round_pending(mq), mq->round_n,
                      (int)(now + (uint64_t)timeout_ms - deadline),
                      mq->blocked ? " (the broker blocks publishing: resource alarm)" : "");
            mq->broken = true; /* unconfirmed copies must not be taken in later */
            rc = -1;
            break;
        }
        uint64_t slice = end - now < MQ_SLICE_MS ? end - now : MQ_SLICE_MS;
        tv.tv_sec = 0;
        tv.tv_usec = (suseconds_t)slice * 1000;
        int st = amqp_simple_wait_frame_noblock(mq->conn, &f, &tv);
        mq_tick(mq);
        if (st == AMQP_STATUS_TIMEOUT)
            continue;
        if (st != AMQP_STATUS_OK) {
            log_error("broker %s: waiting for publisher confirms: %s", mq->where,
                      amqp_error_string2(st));
            mq->broken = true;
            rc = -1;
            break;
        }
        if ((rc = mq_pub_frame(mq, &f)) != 0)
            break;
    }
    for (int i = 0; i < mq->round_n; i++) {
        if (mq->round[i].state == MQ_COPY_PENDING) {
            mq->round[i].state = MQ_COPY_REFUSED;
            snprintf(mq->round[i].why, sizeof(mq->round[i].why), "not confirmed%s%s",
                     mq->closed_why[0] ? ": " : "", mq->closed_why);
        }
        if (mq->round[i].state != MQ_COPY_ACKED)
            rc = -1;
    }
    amqp_maybe_release_buffers(mq->conn);
    return rc;
}

int mq_service(mq_t *mq)
{
    struct timeval tv = {0, 0};
    amqp_frame_t f;

    if (mq->broken || !mq->channel_open)
        return -1;
    for (;;) {
        int st = amqp_simple_wait_frame_noblock(mq->conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT)
            break;
        if (st != AMQP_STATUS_OK) {
            log_warn("broker %s: publishing connection lost: %s", mq->where,
                     amqp_error_string2(st));
            mq->broken = true;
            return -1;
        }
        if (mq_pub_frame(mq, &f) != 0)
            return -1;
    }
    amqp_maybe_release_buffers(mq->conn);
    return 0;
}

/*
 * Publish one probe (transient, mandatory, to MQ_PROBE_QUEUE: returned, stored
 * nowhere) and wait for its confirm: a broker under a resource alarm blocks
 * the connection at its first publish and says so. 0 (see mq->blocked), or
 * -1 (logged).
 */
static int mq_probe(mq_t *mq)
{
    amqp_basic_properties_t props;
    memset(&props, 0, sizeof(props));
    mq_round_begin(mq);
    if (mq_publish(mq, MQ_PROBE_QUEUE, &props, amqp_empty_bytes) < 0)
        return -1;
    int rc = mq_wait_confirms(mq, MQ_RPC_MS); /* returned, so never 0 */
    mq_round_begin(mq);
    return rc == 0 || mq->broken || !mq->channel_open ? -1 : 0;
}

bool mq_round_ok(const mq_t *mq, int index)
{
    return index >= 0 && index < mq->round_n && mq->round[index].state == MQ_COPY_ACKED;
}

bool mq_channel_usable(const mq_t *mq)
{
    return mq->channel_open && !mq->broken;
}

const char *mq_round_why(const mq_t *mq, int index)
{
    if (index < 0 || index >= mq->round_n)
        return "not published";
    const mq_copy_t *c = &mq->round[index];
    return c->state == MQ_COPY_ACKED ? NULL : c->why[0] ? c->why : "not confirmed";
}

bool mq_round_returned(const mq_t *mq, int index)
{
    return index >= 0 && index < mq->round_n && mq->round[index].returned;
}

int mq_channel_restore(mq_t *mq)
{
    amqp_rpc_reply_t r;

    if (mq->broken)
        return -1;
    if (mq->channel_open)
        return 0;
    amqp_channel_open(mq->conn, MQ_CHANNEL);
    r = amqp_get_rpc_reply(mq->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return mq_fail(mq, "channel.open", r);
    mq->channel_open = true;
    if (mq->confirms) {
        /* A new channel: confirm mode again, and its publish sequence starts at 1. */
        amqp_confirm_select(mq->conn, MQ_CHANNEL);
        r = amqp_get_rpc_reply(mq->conn);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            return mq_fail(mq, "confirm.select", r);
        mq_round_begin(mq);
        mq->pub_seq = 0;
    }
    return 0;
}
