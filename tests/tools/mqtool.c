/* mqtool.c: test publisher and queue inspector for idemd's tests and benchmarks (rabbitmq-c). */
#include "../../src/amqp_compat.h"
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MQ_CHANNEL 1
#define MQ_MAX_HEADERS 32
#define MQ_MAX_UNCONFIRMED 10000 /* publish window: stop and read confirms beyond this */
#define MQ_RATE_TICK_US 1000     /* --rate: at most one wake-up this often */
#define MQ_CONFIRM_TIMEOUT_S 120 /* give up waiting for the last confirms after this */

/* Exit codes. */
#define MQ_EXIT_OK 0
#define MQ_EXIT_FAIL 1
#define MQ_EXIT_NO_QUEUE 2
#define MQ_EXIT_USAGE 64

typedef struct mq_opts {
    const char *host;
    int port;
    const char *user;
    const char *password;
    const char *vhost;
    const char *exchange;
    const char *routing_key;
    const char *id_header;
    const char *confirmed_file;
    const char *dlq;
    const char *type;
    int quorum; /* declare: 1 --quorum, 2 --quorum-own */
    double rate;
    int timeout_s; /* -T: bound connect, RPCs and a publish's wait for the broker; 0 = none */
    long count;
    const char *args[4];
    int n_args;
} mq_opts_t;

/* One published message, indexed by publish sequence number - 1. */
typedef struct mq_pub {
    char *id; /* NULL when the line had no id ("-") */
    bool returned;
    bool done;
} mq_pub_t;

static void mq_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void mq_die(const char *fmt, ...)
{
    va_list ap;
    fputs("mqtool: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(MQ_EXIT_FAIL);
}

static void mq_usage(void)
{
    fputs(
        "usage: mqtool [-H host] [-P port] [-u user] [-p password] [-V vhost] [-T secs] COMMAND\n"
        "  -T secs: give up (exit 1) on a connect or a reply, or in publish when the broker sent\n"
        "           nothing for secs while confirms are due (a node cut off by a partition)\n"
        "  publish [-e EXCHANGE] -r ROUTING_KEY [--id-header NAME] [--confirmed-file F] [--rate "
        "N]\n"
        "          stdin lines: ID<TAB>BODY[<TAB>HEADER=VALUE...]  (ID \"-\": no id)\n"
        "  depth QUEUE                 prints READY CONSUMERS; exit 2 if no such queue\n"
        "  get QUEUE [-n N] [--id-header NAME]  get+ack, prints ID<TAB>BODY<TAB>k=v;k=v\n"
        "  declare QUEUE [--dlq NAME] [--quorum|--quorum-own]  durable queue (dead-lettering to\n"
        "          NAME via \"\"); a quorum queue as idemd declared it before it sent\n"
        "          x-delivery-limit: --quorum its main queue, --quorum-own its dead letter queue\n"
        "  exchange NAME [-t TYPE]     durable exchange (default type direct)\n"
        "  bind QUEUE EXCHANGE KEY\n"
        "  return QUEUE [-n N]         N times (default 1): basic.get every message, then give\n"
        "          each back with basic.reject (requeue), a return every RabbitMQ counts\n"
        "  purge QUEUE | delete QUEUE\n",
        stderr);
    exit(MQ_EXIT_USAGE);
}

static int64_t mq_now_us(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Describe an RPC reply; returns a static string (not thread-safe, fine for a tool). */
static const char *mq_reply_str(amqp_rpc_reply_t r)
{
    static char buf[512];
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return "ok";
    case AMQP_RESPONSE_NONE:
        return "missing RPC reply";
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        return amqp_error_string2(r.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, sizeof(buf), "connection closed: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, sizeof(buf), "channel closed: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
        } else {
            snprintf(buf, sizeof(buf), "unexpected server method 0x%08x", r.reply.id);
        }
        return buf;
    }
    return "unknown reply";
}

/* The server's reply code of a channel/connection close, or 0. */
static int mq_reply_code(amqp_rpc_reply_t r)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION)
        return 0;
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
        return ((amqp_channel_close_t *)r.reply.decoded)->reply_code;
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
        return ((amqp_connection_close_t *)r.reply.decoded)->reply_code;
    return 0;
}

static void mq_check(amqp_connection_state_t c, const char *what)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        mq_die("%s: %s", what, mq_reply_str(r));
}

/* Connect, log in and open channel 1. Dies on failure. */
static amqp_connection_state_t mq_connect(const mq_opts_t *o)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (!s)
        mq_die("cannot create socket");
    struct timeval tv = {o->timeout_s, 0};
    int rc = amqp_socket_open_noblock(s, o->host, o->port, o->timeout_s > 0 ? &tv : NULL);
    if (rc != AMQP_STATUS_OK)
        mq_die("connect %s:%d: %s", o->host, o->port, amqp_error_string2(rc));
    if (o->timeout_s > 0 && (amqp_set_handshake_timeout(c, &tv) != AMQP_STATUS_OK ||
                             amqp_set_rpc_timeout(c, &tv) != AMQP_STATUS_OK))
        mq_die("cannot set the RPC timeouts");
    amqp_rpc_reply_t r =
        amqp_login(c, o->vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, o->user, o->password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        mq_die("login %s:%d: %s", o->host, o->port, mq_reply_str(r));
    amqp_channel_open(c, MQ_CHANNEL);
    mq_check(c, "channel.open");
    return c;
}

static void mq_disconnect(amqp_connection_state_t c)
{
    amqp_channel_close(c, MQ_CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

/* ---------- publish ---------- */

typedef struct mq_pubstate {
    amqp_connection_state_t conn;
    mq_pub_t *pubs;
    size_t n_pubs, cap_pubs;
    uint64_t next_unconfirmed; /* lowest seq not yet confirmed */
    uint64_t confirmed, nacked, returned;
    FILE *confirmed_out;
    int64_t timeout_us; /* -T, 0 = none */
    int64_t
        last_rx_us; /* mono time of the last frame, or of the first publish since none was due */
} mq_pubstate_t;

/* With -T: die when confirms are due and the broker has sent nothing for that long. */
static void mq_pub_check_stall(const mq_pubstate_t *st)
{
    if (st->timeout_us <= 0 || st->next_unconfirmed > st->n_pubs)
        return;
    if (mq_now_us(CLOCK_MONOTONIC) - st->last_rx_us > st->timeout_us)
        mq_die("nothing from the broker for %" PRId64 " s with %" PRIu64 " unconfirmed",
               st->timeout_us / 1000000, (uint64_t)st->n_pubs - st->next_unconfirmed + 1);
}

static void mq_pub_settle(mq_pubstate_t *st, uint64_t seq, bool ack)
{
    if (seq == 0 || seq > st->n_pubs)
        mq_die("confirm for unknown sequence number %" PRIu64, seq);
    mq_pub_t *p = &st->pubs[seq - 1];
    if (p->done)
        return;
    p->done = true;
    if (!ack) {
        st->nacked++;
        fprintf(stderr, "mqtool: nacked: %s\n", p->id ? p->id : "-");
    } else if (p->returned) {
        st->returned++;
        fprintf(stderr, "mqtool: returned (unroutable): %s\n", p->id ? p->id : "-");
    } else {
        st->confirmed++;
        if (st->confirmed_out)
            fprintf(st->confirmed_out, "%s\n", p->id ? p->id : "-");
    }
}

/* Apply a basic.ack/basic.nack for tag (and all below it when multiple). */
static void mq_pub_confirm(mq_pubstate_t *st, uint64_t tag, bool multiple, bool ack)
{
    if (multiple) {
        for (uint64_t s = st->next_unconfirmed; s <= tag; s++)
            mq_pub_settle(st, s, ack);
    } else {
        mq_pub_settle(st, tag, ack);
    }
    while (st->next_unconfirmed <= st->n_pubs && st->pubs[st->next_unconfirmed - 1].done)
        st->next_unconfirmed++;
}

/* Find the publish sequence number in a returned message's headers. */
static uint64_t mq_returned_seq(const amqp_message_t *m)
{
    if (!(m->properties._flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    const amqp_table_t *t = &m->properties.headers;
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == 13 && memcmp(e->key.bytes, "idemd-pub-seq", 13) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_I64)
            return (uint64_t)e->value.value.i64;
    }
    return 0;
}

/*
 * Read and dispatch one incoming frame, waiting at most tv (NULL: forever).
 * Returns 0 when a frame was handled, 1 on timeout. Dies on errors.
 */
static int mq_pub_poll(mq_pubstate_t *st, struct timeval *tv)
{
    amqp_frame_t f;
    struct timeval step = {1, 0};
    int rc;
    /* With -T, wait in steps of at most 1 s and check for a stalled broker between them. */
    for (;;) {
        struct timeval *wait = tv;
        if (st->timeout_us > 0 && (!tv || tv->tv_sec >= 1))
            wait = &step;
        rc = amqp_simple_wait_frame_noblock(st->conn, &f, wait);
        if (rc != AMQP_STATUS_TIMEOUT || wait == tv)
            break;
        mq_pub_check_stall(st);
        if (tv)
            return 1; /* the caller waits again with what is left */
    }
    if (rc == AMQP_STATUS_TIMEOUT)
        return 1;
    if (rc != AMQP_STATUS_OK)
        mq_die("reading confirms: %s", amqp_error_string2(rc));
    st->last_rx_us = mq_now_us(CLOCK_MONOTONIC);
    if (f.frame_type != AMQP_FRAME_METHOD)
        return 0; /* stray content frame: ignore */
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *m = f.payload.method.decoded;
        mq_pub_confirm(st, m->delivery_tag, m->multiple, true);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *m = f.payload.method.decoded;
        mq_pub_confirm(st, m->delivery_tag, m->multiple, false);
        break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        /* The return precedes the ack of the same message; its body follows. */
        amqp_basic_return_t *m = f.payload.method.decoded;
        int code = m->reply_code;
        amqp_message_t msg;
        amqp_rpc_reply_t r = amqp_read_message(st->conn, f.channel, &msg, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            mq_die("reading returned message: %s", mq_reply_str(r));
        uint64_t seq = mq_returned_seq(&msg);
        amqp_destroy_message(&msg);
        if (seq == 0 || seq > st->n_pubs)
            mq_die("basic.return (%d) without a known idemd-pub-seq", code);
        st->pubs[seq - 1].returned = true;
        break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_t *m = f.payload.method.decoded;
        mq_die("channel closed by broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
               (char *)m->reply_text.bytes);
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_connection_close_t *m = f.payload.method.decoded;
        mq_die("connection closed by broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
               (char *)m->reply_text.bytes);
    }
    default:
        break; /* connection.blocked/unblocked and the like */
    }
    amqp_maybe_release_buffers(st->conn);
    return 0;
}

/* Read every frame that is already available without blocking. */
static void mq_pub_drain(mq_pubstate_t *st)
{
    for (;;) {
        struct timeval tv = {0, 0};
        if (mq_pub_poll(st, &tv) != 0)
            return;
    }
}

/*
 * Wait (reading confirms) until mono-clock time until_us. The wait is a
 * ppoll(2) on the socket with a nanosecond timeout: rabbitmq-c's own waits
 * count in milliseconds, and a wait shorter than one spun.
 */
static void mq_pub_sleep_until(mq_pubstate_t *st, int64_t until_us)
{
    struct pollfd pfd = {.fd = amqp_get_sockfd(st->conn), .events = POLLIN};
    for (;;) {
        struct timeval zero = {0, 0};
        if (amqp_data_in_buffer(st->conn) || amqp_frames_enqueued(st->conn)) {
            (void)mq_pub_poll(st, &zero);
            continue;
        }
        int64_t left = until_us - mq_now_us(CLOCK_MONOTONIC);
        if (left <= 0)
            return;
        struct timespec ts = {left / 1000000, (left % 1000000) * 1000};
        if (ppoll(&pfd, 1, &ts, NULL) > 0)
            (void)mq_pub_poll(st, &zero);
        else
            mq_pub_check_stall(st);
    }
}

/*
 * With -T: wait until the socket takes more data, so that a broker cut off
 * by a partition (the send buffer full) is noticed instead of blocking.
 */
static void mq_pub_wait_writable(mq_pubstate_t *st)
{
    struct pollfd pfd = {.fd = amqp_get_sockfd(st->conn), .events = POLLOUT};
    if (st->timeout_us <= 0)
        return;
    while (poll(&pfd, 1, 1000) == 0)
        mq_pub_check_stall(st);
}

/* Split a line at tabs in place; returns the number of fields (at most max). */
static int mq_split_tabs(char *line, char **fields, int max)
{
    int n = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    return n;
}

static int mq_cmd_publish(const mq_opts_t *o)
{
    if (!o->routing_key)
        mq_usage();
    mq_pubstate_t st = {0};
    st.next_unconfirmed = 1;
    if (o->confirmed_file) {
        st.confirmed_out = fopen(o->confirmed_file, "w");
        if (!st.confirmed_out)
            mq_die("%s: %s", o->confirmed_file, strerror(errno));
    }
    st.timeout_us = (int64_t)o->timeout_s * 1000000;
    st.conn = mq_connect(o);
    amqp_confirm_select(st.conn, MQ_CHANNEL);
    mq_check(st.conn, "confirm.select");

    amqp_bytes_t exchange = amqp_cstring_bytes(o->exchange ? o->exchange : "");
    amqp_bytes_t rkey = amqp_cstring_bytes(o->routing_key);
    int64_t t0 = mq_now_us(CLOCK_MONOTONIC), next_wake = 0;
    char *line = NULL;
    size_t linecap = 0;
    ssize_t len;
    while ((len = getline(&line, &linecap, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        char *fields[2 + MQ_MAX_HEADERS];
        int nf = mq_split_tabs(line, fields, 2 + MQ_MAX_HEADERS);
        const char *id = strcmp(fields[0], "-") == 0 ? NULL : fields[0];
        const char *body = nf > 1 ? fields[1] : "";
        if (id && !o->id_header && strlen(id) > 255)
            mq_die("line %zu: id of %zu bytes does not fit the message_id property (255 at most); "
                   "use --id-header",
                   st.n_pubs + 1, strlen(id));

        if (st.n_pubs == st.cap_pubs) {
            st.cap_pubs = st.cap_pubs ? st.cap_pubs * 2 : 1024;
            st.pubs = realloc(st.pubs, st.cap_pubs * sizeof(*st.pubs));
            if (!st.pubs)
                mq_die("out of memory");
        }
        uint64_t seq = st.n_pubs + 1;
        mq_pub_t *p = &st.pubs[st.n_pubs++];
        p->id = id ? strdup(id) : NULL;
        p->returned = p->done = false;

        /* At a rate: each message at its time on an absolute schedule, but at most one
         * wake-up per MQ_RATE_TICK_US (a message is then up to that late; its idemd-pub-us
         * is when it is sent), so that 10,000/s costs 1,000 wake-ups, not 10,000. */
        if (o->rate > 0) {
            int64_t due = t0 + (int64_t)((double)(seq - 1) * 1e6 / o->rate);
            if (due > mq_now_us(CLOCK_MONOTONIC)) {
                int64_t wake = due > next_wake ? due : next_wake;
                mq_pub_sleep_until(&st, wake);
                next_wake = wake + MQ_RATE_TICK_US;
            }
        }
        while (seq - st.next_unconfirmed >= MQ_MAX_UNCONFIRMED)
            mq_pub_poll(&st, NULL);
        if (st.next_unconfirmed == seq) /* nothing was due: the broker owed us nothing */
            st.last_rx_us = mq_now_us(CLOCK_MONOTONIC);
        mq_pub_wait_writable(&st);

        amqp_table_entry_t h[MQ_MAX_HEADERS + 3];
        int nh = 0;
        h[nh].key = amqp_cstring_bytes("idemd-pub-us");
        h[nh].value.kind = AMQP_FIELD_KIND_I64;
        h[nh++].value.value.i64 = mq_now_us(CLOCK_REALTIME);
        h[nh].key = amqp_cstring_bytes("idemd-pub-seq");
        h[nh].value.kind = AMQP_FIELD_KIND_I64;
        h[nh++].value.value.i64 = (int64_t)seq;
        if (id && o->id_header) {
            h[nh].key = amqp_cstring_bytes(o->id_header);
            h[nh].value.kind = AMQP_FIELD_KIND_UTF8;
            h[nh++].value.value.bytes = amqp_cstring_bytes(id);
        }
        for (int i = 2; i < nf; i++) {
            char *eq = strchr(fields[i], '=');
            if (!eq || eq == fields[i])
                mq_die("line %" PRIu64 ": header field \"%s\" is not NAME=VALUE", seq, fields[i]);
            *eq = '\0';
            h[nh].key = amqp_cstring_bytes(fields[i]);
            h[nh].value.kind = AMQP_FIELD_KIND_UTF8;
            h[nh++].value.value.bytes = amqp_cstring_bytes(eq + 1);
        }

        amqp_basic_properties_t props;
        memset(&props, 0, sizeof(props));
        props._flags =
            AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
        props.content_type = amqp_cstring_bytes(body[0] == '{' ? "application/json" : "text/plain");
        props.headers.num_entries = nh;
        props.headers.entries = h;
        if (id && !o->id_header) {
            props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
            props.message_id = amqp_cstring_bytes(id);
        }
        int rc = amqp_basic_publish(st.conn, MQ_CHANNEL, exchange, rkey, 1, 0, &props,
                                    amqp_cstring_bytes(body));
        if (rc != AMQP_STATUS_OK)
            mq_die("publish #%" PRIu64 ": %s", seq, amqp_error_string2(rc));
        if (seq % 64 == 0)
            mq_pub_drain(&st);
    }
    free(line);

    int64_t deadline = mq_now_us(CLOCK_MONOTONIC) + (int64_t)MQ_CONFIRM_TIMEOUT_S * 1000000;
    while (st.next_unconfirmed <= st.n_pubs) {
        int64_t left = deadline - mq_now_us(CLOCK_MONOTONIC);
        if (left <= 0)
            mq_die("timed out waiting for %" PRIu64 " confirms",
                   (uint64_t)st.n_pubs - st.confirmed - st.nacked - st.returned);
        struct timeval tv = {left / 1000000, left % 1000000};
        mq_pub_poll(&st, &tv);
    }
    mq_disconnect(st.conn);
    if (st.confirmed_out && fclose(st.confirmed_out) != 0)
        mq_die("%s: %s", o->confirmed_file, strerror(errno));
    printf("published %zu confirmed %" PRIu64 "\n", st.n_pubs, st.confirmed);
    if (st.nacked || st.returned)
        fprintf(stderr, "mqtool: %" PRIu64 " nacked, %" PRIu64 " returned\n", st.nacked,
                st.returned);
    for (size_t i = 0; i < st.n_pubs; i++)
        free(st.pubs[i].id);
    free(st.pubs);
    return st.nacked || st.returned ? MQ_EXIT_FAIL : MQ_EXIT_OK;
}

/* ---------- queue commands ---------- */

static int mq_cmd_depth(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(c, MQ_CHANNEL, amqp_cstring_bytes(o->args[0]),
                                                     1, 0, 0, 0, amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL || !ok) {
        if (mq_reply_code(r) == AMQP_NOT_FOUND) {
            fprintf(stderr, "mqtool: no queue %s\n", o->args[0]);
            amqp_connection_close(c, AMQP_REPLY_SUCCESS);
            amqp_destroy_connection(c);
            return MQ_EXIT_NO_QUEUE;
        }
        mq_die("queue.declare %s: %s", o->args[0], mq_reply_str(r));
    }
    printf("%u %u\n", ok->message_count, ok->consumer_count);
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

/* Print bytes with \t, \n, \r and backslash escaped so a record stays on one line. */
static void mq_put_escaped(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < len; i++) {
        switch (p[i]) {
        case '\t':
            fputs("\\t", stdout);
            break;
        case '\n':
            fputs("\\n", stdout);
            break;
        case '\r':
            fputs("\\r", stdout);
            break;
        case '\\':
            fputs("\\\\", stdout);
            break;
        default:
            putchar(p[i]);
        }
    }
}

static void mq_put_field(const amqp_field_value_t *v)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        mq_put_escaped(v->value.bytes.bytes, v->value.bytes.len);
        break;
    case AMQP_FIELD_KIND_I8:
        printf("%d", v->value.i8);
        break;
    case AMQP_FIELD_KIND_U8:
        printf("%u", v->value.u8);
        break;
    case AMQP_FIELD_KIND_I16:
        printf("%d", v->value.i16);
        break;
    case AMQP_FIELD_KIND_U16:
        printf("%u", v->value.u16);
        break;
    case AMQP_FIELD_KIND_I32:
        printf("%" PRId32, v->value.i32);
        break;
    case AMQP_FIELD_KIND_U32:
        printf("%" PRIu32, v->value.u32);
        break;
    case AMQP_FIELD_KIND_I64:
        printf("%" PRId64, v->value.i64);
        break;
    case AMQP_FIELD_KIND_U64:
        printf("%" PRIu64, v->value.u64);
        break;
    case AMQP_FIELD_KIND_TIMESTAMP:
        printf("%" PRIu64, v->value.u64);
        break;
    case AMQP_FIELD_KIND_BOOLEAN:
        fputs(v->value.boolean ? "true" : "false", stdout);
        break;
    case AMQP_FIELD_KIND_TABLE:
        fputs("table", stdout);
        break;
    case AMQP_FIELD_KIND_ARRAY:
        fputs("array", stdout);
        break;
    case AMQP_FIELD_KIND_F32:
    case AMQP_FIELD_KIND_F64:
        fputs("float", stdout);
        break;
    case AMQP_FIELD_KIND_DECIMAL:
        fputs("decimal", stdout);
        break;
    case AMQP_FIELD_KIND_VOID:
        fputs("void", stdout);
        break;
    default:
        fputs("unknown", stdout);
        break;
    }
}

static const amqp_field_value_t *mq_header(const amqp_message_t *m, const char *name)
{
    if (!(m->properties._flags & AMQP_BASIC_HEADERS_FLAG))
        return NULL;
    size_t nlen = strlen(name);
    for (int i = 0; i < m->properties.headers.num_entries; i++) {
        const amqp_table_entry_t *e = &m->properties.headers.entries[i];
        if (e->key.len == nlen && memcmp(e->key.bytes, name, nlen) == 0)
            return &e->value;
    }
    return NULL;
}

static int mq_cmd_get(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_bytes_t q = amqp_cstring_bytes(o->args[0]);
    long got = 0;
    while (o->count < 0 || got < o->count) {
        amqp_rpc_reply_t r = amqp_basic_get(c, MQ_CHANNEL, q, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            if (mq_reply_code(r) == AMQP_NOT_FOUND) {
                fprintf(stderr, "mqtool: no queue %s\n", o->args[0]);
                return MQ_EXIT_NO_QUEUE;
            }
            mq_die("basic.get %s: %s", o->args[0], mq_reply_str(r));
        }
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
            break;
        amqp_basic_get_ok_t *ok = r.reply.decoded;
        uint64_t tag = ok->delivery_tag;
        amqp_message_t m;
        r = amqp_read_message(c, MQ_CHANNEL, &m, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            mq_die("reading message: %s", mq_reply_str(r));
        const amqp_field_value_t *idh = o->id_header ? mq_header(&m, o->id_header) : NULL;
        if (idh)
            mq_put_field(idh);
        else if (!o->id_header && (m.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG))
            mq_put_escaped(m.properties.message_id.bytes, m.properties.message_id.len);
        else
            putchar('-');
        putchar('\t');
        mq_put_escaped(m.body.bytes, m.body.len);
        putchar('\t');
        if (m.properties._flags & AMQP_BASIC_HEADERS_FLAG) {
            for (int i = 0; i < m.properties.headers.num_entries; i++) {
                const amqp_table_entry_t *e = &m.properties.headers.entries[i];
                if (i)
                    putchar(';');
                mq_put_escaped(e->key.bytes, e->key.len);
                putchar('=');
                mq_put_field(&e->value);
            }
        }
        putchar('\n');
        amqp_destroy_message(&m);
        if (amqp_basic_ack(c, MQ_CHANNEL, tag, 0) != AMQP_STATUS_OK)
            mq_die("basic.ack failed");
        got++;
        amqp_maybe_release_buffers(c);
    }
    fflush(stdout);
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

static int mq_cmd_declare(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_table_entry_t e[5];
    amqp_table_t args = {0, e};
    if (o->dlq) {
        amqp_queue_declare(c, MQ_CHANNEL, amqp_cstring_bytes(o->dlq), 0, 1, 0, 0, amqp_empty_table);
        mq_check(c, "queue.declare (dead-letter queue)");
        e[0].key = amqp_cstring_bytes("x-dead-letter-exchange");
        e[0].value.kind = AMQP_FIELD_KIND_UTF8;
        e[0].value.value.bytes = amqp_cstring_bytes("");
        e[1].key = amqp_cstring_bytes("x-dead-letter-routing-key");
        e[1].value.kind = AMQP_FIELD_KIND_UTF8;
        e[1].value.value.bytes = amqp_cstring_bytes(o->dlq);
        args.num_entries = 2;
    }
    if (o->quorum) {
        static const char *const kv[][2] = {{"x-queue-type", "quorum"},
                                            {"x-dead-letter-strategy", "at-least-once"},
                                            {"x-overflow", "reject-publish"}};
        for (int k = 0; k < (o->quorum > 1 ? 3 : 1); k++) {
            amqp_table_entry_t *q = &e[args.num_entries++];
            q->key = amqp_cstring_bytes(kv[k][0]);
            q->value.kind = AMQP_FIELD_KIND_UTF8;
            q->value.value.bytes = amqp_cstring_bytes(kv[k][1]);
        }
    }
    amqp_queue_declare(c, MQ_CHANNEL, amqp_cstring_bytes(o->args[0]), 0, 1, 0, 0, args);
    mq_check(c, "queue.declare");
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

static int mq_cmd_exchange(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_exchange_declare(c, MQ_CHANNEL, amqp_cstring_bytes(o->args[0]),
                          amqp_cstring_bytes(o->type ? o->type : "direct"), 0, 1, 0, 0,
                          amqp_empty_table);
    mq_check(c, "exchange.declare");
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

static int mq_cmd_bind(const mq_opts_t *o)
{
    if (o->n_args != 3)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_queue_bind(c, MQ_CHANNEL, amqp_cstring_bytes(o->args[0]), amqp_cstring_bytes(o->args[1]),
                    amqp_cstring_bytes(o->args[2]), amqp_empty_table);
    mq_check(c, "queue.bind");
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

/* QUEUE's ready count by a passive queue.declare; exits on failure. */
static uint32_t mq_ready(amqp_connection_state_t c, amqp_bytes_t q)
{
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(c, MQ_CHANNEL, q, 1, 0, 0, 0, amqp_empty_table);
    mq_check(c, "queue.declare (passive)");
    return ok ? ok->message_count : 0;
}

/*
 * return QUEUE [-n N]: N passes, each taking every message of QUEUE with
 * basic.get (not acked) and then giving each back with basic.reject
 * (requeue). RabbitMQ counts such a return in a quorum queue's
 * x-delivery-count on every version; from 4.3 it does not count a
 * requeueing basic.nack (what idemctl sends). Before the next pass, waits
 * (up to 10 s) until the queue shows them all back.
 */
static int mq_cmd_return(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_bytes_t q = amqp_cstring_bytes(o->args[0]);
    long passes = o->count < 0 ? 1 : o->count;
    uint32_t n = 0;
    for (long p = 0; p < passes; p++) {
        n = mq_ready(c, q);
        uint64_t *tags = calloc((size_t)n + 1, sizeof(*tags));
        uint32_t got = 0;
        if (tags == NULL)
            mq_die("out of memory");
        while (got < n) {
            amqp_rpc_reply_t r = amqp_basic_get(c, MQ_CHANNEL, q, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL)
                mq_die("basic.get %s: %s", o->args[0], mq_reply_str(r));
            if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
                break;
            tags[got++] = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
            amqp_message_t m;
            r = amqp_read_message(c, MQ_CHANNEL, &m, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL)
                mq_die("reading message: %s", mq_reply_str(r));
            amqp_destroy_message(&m);
            amqp_maybe_release_buffers(c);
        }
        for (uint32_t i = 0; i < got; i++)
            if (amqp_basic_reject(c, MQ_CHANNEL, tags[i], 1) != AMQP_STATUS_OK)
                mq_die("basic.reject failed");
        free(tags);
        int64_t until = mq_now_us(CLOCK_MONOTONIC) + 10 * 1000000;
        while (mq_ready(c, q) < got) {
            if (mq_now_us(CLOCK_MONOTONIC) > until)
                mq_die("%s: the %u returned messages are not back after 10 s", o->args[0], got);
            struct timespec ts = {0, 5000000L};
            nanosleep(&ts, NULL);
        }
        n = got;
    }
    printf("returned %u %ld times\n", n, passes);
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

static int mq_cmd_purge(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_queue_purge_ok_t *ok = amqp_queue_purge(c, MQ_CHANNEL, amqp_cstring_bytes(o->args[0]));
    mq_check(c, "queue.purge");
    printf("purged %u\n", ok ? ok->message_count : 0);
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

static int mq_cmd_delete(const mq_opts_t *o)
{
    if (o->n_args != 1)
        mq_usage();
    amqp_connection_state_t c = mq_connect(o);
    amqp_queue_delete(c, MQ_CHANNEL, amqp_cstring_bytes(o->args[0]), 0, 0);
    mq_check(c, "queue.delete");
    mq_disconnect(c);
    return MQ_EXIT_OK;
}

static const char *mq_need_arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "mqtool: %s needs a value\n", argv[*i]);
        mq_usage();
    }
    return argv[++*i];
}

int main(int argc, char **argv)
{
    mq_opts_t o = {.host = "127.0.0.1",
                   .port = 5672,
                   .user = "guest",
                   .password = "guest",
                   .vhost = "/",
                   .count = -1};
    const char *cmd = NULL;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-H"))
            o.host = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "-P"))
            o.port = atoi(mq_need_arg(argc, argv, &i));
        else if (!strcmp(a, "-u"))
            o.user = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "-p"))
            o.password = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "-V"))
            o.vhost = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "-T"))
            o.timeout_s = atoi(mq_need_arg(argc, argv, &i));
        else if (!strcmp(a, "-e"))
            o.exchange = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "-r"))
            o.routing_key = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "-n"))
            o.count = atol(mq_need_arg(argc, argv, &i));
        else if (!strcmp(a, "-t"))
            o.type = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "--id-header"))
            o.id_header = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "--confirmed-file"))
            o.confirmed_file = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "--rate"))
            o.rate = atof(mq_need_arg(argc, argv, &i));
        else if (!strcmp(a, "--dlq"))
            o.dlq = mq_need_arg(argc, argv, &i);
        else if (!strcmp(a, "--quorum"))
            o.quorum = 1;
        else if (!strcmp(a, "--quorum-own"))
            o.quorum = 2;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            mq_usage();
        else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "mqtool: unknown option %s\n", a);
            mq_usage();
        } else if (!cmd)
            cmd = a;
        else if (o.n_args < 4)
            o.args[o.n_args++] = a;
        else
            mq_usage();
    }
    if (!cmd)
        mq_usage();
    if (!strcmp(cmd, "publish"))
        return mq_cmd_publish(&o);
    if (!strcmp(cmd, "depth"))
        return mq_cmd_depth(&o);
    if (!strcmp(cmd, "get"))
        return mq_cmd_get(&o);
    if (!strcmp(cmd, "declare"))
        return mq_cmd_declare(&o);
    if (!strcmp(cmd, "exchange"))
        return mq_cmd_exchange(&o);
    if (!strcmp(cmd, "bind"))
        return mq_cmd_bind(&o);
    if (!strcmp(cmd, "return"))
        return mq_cmd_return(&o);
    if (!strcmp(cmd, "purge"))
        return mq_cmd_purge(&o);
    if (!strcmp(cmd, "delete"))
        return mq_cmd_delete(&o);
    fprintf(stderr, "mqtool: unknown command %s\n", cmd);
    mq_usage();
}
