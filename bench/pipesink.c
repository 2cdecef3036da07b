/* pipesink.c: the fair baseline of idemd's latency runs: consume -> one transaction per batch ->
 * ack. */
/*
 * pipesink [-H host] [-P port] -q QUEUE -n TOTAL -S SOCK -D DB [-c CONSUMERS] [-f PREFETCH]
 *          [-b BATCH] [-w BATCH_WAIT_MS] [-i IDLE_MS] [-L]
 *   pipesink's consumers (one AMQP connection each, basic.qos prefetch, a batch
 *   collected the way idemd's worker does: the first delivery waits, the rest
 *   only what arrives within -w ms, at most -b), each with its own database
 *   connection (autocommit off, READ COMMITTED), and between collect and ack
 *   one transaction per batch with the set-based statements of idemd's batch
 *   handler, no more:
 *     INSERT IGNORE INTO msg_id_record (consumer, msg_id) VALUES (..), ...
 *     UPDATE orders SET status = 2, pay_time = NOW(), pay_count = pay_count + 1
 *       WHERE id IN (...)                    (orderId from the body {"orderId": N})
 *     COMMIT
 *   then one multiple-ack. It takes no dedup decision (a duplicate pays
 *   again): a floor for the pipeline's latency, not a consumer. Prints
 *     pipesink consumers=C prefetch=P batch=B received=N commits=X redo=R secs=S rate=M
 *   (redo: batches redone after a deadlock or lock wait timeout, as idemd redoes them)
 *   and with -L "latency n=K p50_us=P p99_us=Q": publish (idemd-pub-us) to
 *   ack, exact quantiles.
 */
#include "../src/amqp_compat.h"
#include <mysql.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIPESINK_CHANNEL 1
#define PIPESINK_MAX_CONSUMERS 64

typedef struct pipesink_opts {
    const char *host;
    int port;
    const char *user;
    const char *password;
    const char *vhost;
    const char *queue;
    long total;
    int consumers;
    int prefetch;
    int batch;
    int batch_wait_ms;
    int idle_ms; /* give up after this long without a delivery */
    int latency; /* record publish-to-ack latency of messages with idemd-pub-us */
    const char *socket, *db;
} pipesink_opts_t;

typedef struct pipesink_consumer {
    const pipesink_opts_t *o;
    int index;
    long received; /* by this consumer */
    long commits;
    long redo; /* batches redone after a deadlock or a lock wait timeout */
    int failed;
    int64_t *lat; /* publish-to-ack latencies in microseconds (with -L) */
    size_t n_lat, cap_lat;
} pipesink_consumer_t;

static atomic_long pipesink_taken; /* deliveries taken by all consumers */

static void pipesink_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void pipesink_die(const char *fmt, ...)
{
    va_list ap;
    fputs("pipesink: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static double pipesink_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t pipesink_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* 0 if the last RPC succeeded; else prints what failed and returns -1. */
static int pipesink_check(amqp_connection_state_t c, int index, const char *what)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        fprintf(stderr, "pipesink[%d]: %s: %s\n", index, what, amqp_error_string2(r.library_error));
    else
        fprintf(stderr,
                "pipesink[%d]: %s: server closed the channel or connection (method 0x%08x)\n",
                index, what, r.reply.id);
    return -1;
}

static int64_t pipesink_now_us_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The int64 header idemd-pub-us (publisher's CLOCK_REALTIME, set by mqtool), or -1. */
static int64_t pipesink_pub_us(const amqp_basic_properties_t *p)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return -1;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len == 12 && memcmp(e->key.bytes, "idemd-pub-us", 12) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_I64)
            return e->value.value.i64;
    }
    return -1;
}

/* One batch's two statements, built as its deliveries come. */
typedef struct pipesink_sql {
    MYSQL *my;
    char *ins, *upd;
    size_t ins_len, upd_len, cap;
    int n;
} pipesink_sql_t;

static void pipesink_sql_reset(pipesink_sql_t *q)
{
    q->ins_len = (size_t)snprintf(q->ins, q->cap,
                                  "INSERT IGNORE INTO msg_id_record (consumer, msg_id) VALUES ");
    q->upd_len = (size_t)snprintf(q->upd, q->cap,
                                  "UPDATE orders SET status = 2, pay_time = NOW(), pay_count = "
                                  "pay_count + 1 WHERE id IN (");
    q->n = 0;
}

/* Add a delivery's id and orderId (from its body {"orderId": N}) to the batch's statements. */
static void pipesink_sql_add(pipesink_sql_t *q, const amqp_envelope_t *env)
{
    const amqp_bytes_t *id = &env->message.properties.message_id;
    const amqp_bytes_t *body = &env->message.body;
    char num[32];
    size_t k = 0;
    const char *b = body->bytes, *colon = body->len ? memchr(b, ':', body->len) : NULL;
    for (size_t i = colon ? (size_t)(colon - b) : body->len; i < body->len && k < 20; i++)
        if (b[i] >= '0' && b[i] <= '9')
            num[k++] = b[i];
    num[k] = '\0';
    if (k == 0 || id->len > 255 || q->ins_len + 2 * id->len + 64 > q->cap ||
        q->upd_len + 32 > q->cap)
        return; /* not a bench message, or the batch is too big: left out */
    q->ins_len += (size_t)snprintf(q->ins + q->ins_len, q->cap - q->ins_len, "%s('bench.pipe', '",
                                   q->n ? ", " : "");
    q->ins_len += mysql_real_escape_string(q->my, q->ins + q->ins_len, id->bytes, id->len);
    q->ins_len += (size_t)snprintf(q->ins + q->ins_len, q->cap - q->ins_len, "')");
    q->upd_len +=
        (size_t)snprintf(q->upd + q->upd_len, q->cap - q->upd_len, "%s%s", q->n ? ", " : "", num);
    q->n++;
}

/* The batch's transaction: the two statements and COMMIT, redone after a deadlock or a lock
 * wait timeout (consumers whose batches hold the same ids, a duplicate's, in another order) as
 * idemd redoes a batch; *redo counts those. 0, or -1 (printed). */
static int pipesink_sql_run(pipesink_sql_t *q, int index, long *redo)
{
    int rc = -1;
    if (q->n > 0) {
        q->upd[q->upd_len++] = ')';
        q->upd[q->upd_len] = '\0';
        for (int tries = 0;; tries++) {
            if (mysql_real_query(q->my, q->ins, q->ins_len) == 0 &&
                mysql_real_query(q->my, q->upd, q->upd_len) == 0 && mysql_commit(q->my) == 0)
                break;
            unsigned err = mysql_errno(q->my);
            if ((err != 1213 && err != 1205) || tries >= 100) { /* deadlock, lock wait timeout */
                fprintf(stderr, "pipesink[%d]: %s\n", index, mysql_error(q->my));
                goto fail;
            }
            if (mysql_rollback(q->my) != 0) {
                fprintf(stderr, "pipesink[%d]: rollback: %s\n", index, mysql_error(q->my));
                goto fail;
            }
            (*redo)++;
        }
    }
    rc = 0;
fail:
    pipesink_sql_reset(q);
    return rc;
}

/* A database connection for one consumer (autocommit off), or NULL (printed). */
static MYSQL *pipesink_db(const pipesink_opts_t *o, int index)
{
    MYSQL *my = mysql_init(NULL);
    if (my == NULL) {
        fprintf(stderr, "pipesink[%d]: mysql_init failed (out of memory)\n", index);
        return NULL;
    }
    mysql_options(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(my, MYSQL_INIT_COMMAND, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    if (mysql_real_connect(my, NULL, "root", NULL, o->db, 0, o->socket, 0) == NULL ||
        mysql_autocommit(my, 0) != 0) {
        fprintf(stderr, "pipesink[%d]: connect %s: %s\n", index, o->socket, mysql_error(my));
        mysql_close(my);
        return NULL;
    }
    return my;
}

/*
 * Wait up to tv for one delivery. 1: got one (tag in *tag, its idemd-pub-us
 * or -1 in *pub_us), 0: timed out, -1: the connection failed. Non-delivery
 * frames are read and ignored.
 */
static int pipesink_next(amqp_connection_state_t c, struct timeval *tv, uint64_t *tag,
                         int64_t *pub_us, pipesink_sql_t *q)
{
    amqp_envelope_t env;
    amqp_maybe_release_buffers(c);
    amqp_rpc_reply_t r = amqp_consume_message(c, &env, tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        *tag = env.delivery_tag;
        *pub_us = pipesink_pub_us(&env.message.properties);
        pipesink_sql_add(q, &env);
        amqp_destroy_envelope(&env);
        return 1;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
        return 0;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
        amqp_frame_t f;
        if (amqp_simple_wait_frame(c, &f) != AMQP_STATUS_OK) {
            fprintf(stderr, "pipesink: the connection failed\n");
            return -1;
        }
        if (f.frame_type == AMQP_FRAME_METHOD &&
            (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
             f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
             f.payload.method.id == AMQP_BASIC_CANCEL_METHOD)) {
            fprintf(stderr, "pipesink: the broker %s\n",
                    f.payload.method.id == AMQP_BASIC_CANCEL_METHOD ? "cancelled the consumer"
                                                                    : "closed the channel");
            return -1;
        }
        return 0;
    }
    fprintf(stderr, "pipesink: reading a delivery failed\n");
    return -1;
}

/* Record the latencies of the n messages just acked. -1 when out of memory. */
static int pipesink_record(pipesink_consumer_t *me, const int64_t *pubs, int n)
{
    int64_t now = pipesink_now_us_real();
    for (int i = 0; i < n; i++) {
        if (pubs[i] < 0)
            continue;
        if (me->n_lat == me->cap_lat) {
            size_t cap = me->cap_lat ? me->cap_lat * 2 : 4096;
            int64_t *v = realloc(me->lat, cap * sizeof(*v));
            if (v == NULL)
                return -1;
            me->lat = v;
            me->cap_lat = cap;
        }
        me->lat[me->n_lat++] = now - pubs[i];
    }
    return 0;
}

static void *pipesink_consume(void *arg)
{
    pipesink_consumer_t *me = arg;
    const pipesink_opts_t *o = me->o;
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *sock = c ? amqp_tcp_socket_new(c) : NULL;
    int64_t *pubs = calloc((size_t)o->batch, sizeof(*pubs));
    pipesink_sql_t q = {.cap = (size_t)o->batch * 600 + 256};
    q.ins = malloc(q.cap);
    q.upd = malloc(q.cap);
    q.my = pipesink_db(o, me->index);

    if (q.my == NULL)
        goto fail;
    pipesink_sql_reset(&q);
    if (pubs == NULL || q.ins == NULL || q.upd == NULL) {
        fprintf(stderr, "pipesink[%d]: out of memory\n", me->index);
        goto fail;
    }
    if (sock == NULL || amqp_socket_open(sock, o->host, o->port) != AMQP_STATUS_OK) {
        fprintf(stderr, "pipesink[%d]: cannot connect to %s:%d\n", me->index, o->host, o->port);
        goto fail;
    }
    amqp_rpc_reply_t r =
        amqp_login(c, o->vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, o->user, o->password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        fprintf(stderr, "pipesink[%d]: login failed\n", me->index);
        goto fail;
    }
    amqp_channel_open(c, PIPESINK_CHANNEL);
    if (pipesink_check(c, me->index, "channel.open") != 0)
        goto fail;
    amqp_basic_qos(c, PIPESINK_CHANNEL, 0, (uint16_t)o->prefetch, 0);
    if (pipesink_check(c, me->index, "basic.qos") != 0)
        goto fail;
    amqp_basic_consume(c, PIPESINK_CHANNEL, amqp_cstring_bytes(o->queue), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    if (pipesink_check(c, me->index, "basic.consume") != 0)
        goto fail;

    uint64_t idle_since = pipesink_now_ms();
    while (atomic_load(&pipesink_taken) < o->total) {
        struct timeval tv = {0, 100000};
        uint64_t tag = 0, last = 0;
        int n = 0, got = pipesink_next(c, &tv, &tag, &pubs[0], &q);
        if (got < 0)
            goto fail;
        if (got == 0) {
            if (pipesink_now_ms() - idle_since > (uint64_t)o->idle_ms) {
                fprintf(stderr, "pipesink[%d]: no delivery for %d ms\n", me->index, o->idle_ms);
                break;
            }
            continue;
        }
        idle_since = pipesink_now_ms();
        last = tag;
        n = 1;
        uint64_t deadline = pipesink_now_ms() + (uint64_t)o->batch_wait_ms;
        while (n < o->batch) {
            uint64_t now = pipesink_now_ms(), left = deadline > now ? deadline - now : 0;
            tv.tv_sec = (time_t)(left / 1000);
            tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
            got = pipesink_next(c, &tv, &tag, &pubs[n], &q);
            if (got < 0)
                goto fail;
            if (got == 0)
                break;
            last = tag;
            n++;
        }
        if (pipesink_sql_run(&q, me->index, &me->redo) != 0)
            goto fail;
        me->commits++;
        if (amqp_basic_ack(c, PIPESINK_CHANNEL, last, n > 1) != AMQP_STATUS_OK) {
            fprintf(stderr, "pipesink[%d]: basic.ack failed\n", me->index);
            goto fail;
        }
        if (o->latency && pipesink_record(me, pubs, n) != 0) {
            fprintf(stderr, "pipesink[%d]: out of memory\n", me->index);
            goto fail;
        }
        me->received += n;
        atomic_fetch_add(&pipesink_taken, n);
    }
    free(pubs);
    free(q.ins);
    free(q.upd);
    mysql_close(q.my);
    /* channel.close-ok follows the broker's handling of every earlier ack on the channel. */
    amqp_channel_close(c, PIPESINK_CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    mysql_thread_end();
    return NULL;
fail:
    free(pubs);
    free(q.ins);
    free(q.upd);
    mysql_close(q.my);
    me->failed = 1;
    atomic_store(&pipesink_taken, o->total); /* stop the others */
    if (c)
        amqp_destroy_connection(c);
    mysql_thread_end();
    return NULL;
}

static int pipesink_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* With -L: print the p50 and p99 of all consumers' latencies (exact quantiles). */
static void pipesink_print_latency(const pipesink_consumer_t *cons, int n)
{
    size_t total = 0, k = 0;
    for (int i = 0; i < n; i++)
        total += cons[i].n_lat;
    int64_t *all = malloc((total ? total : 1) * sizeof(*all));
    if (all == NULL)
        pipesink_die("out of memory");
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < cons[i].n_lat; j++)
            all[k++] = cons[i].lat[j];
    qsort(all, k, sizeof(*all), pipesink_cmp_i64);
    printf(" latency n=%zu p50_us=%lld p99_us=%lld", k, k ? (long long)all[k / 2] : 0LL,
           k ? (long long)all[(size_t)((double)k * 0.99)] : 0LL);
    free(all);
}

static void pipesink_usage(void) __attribute__((noreturn));

static void pipesink_usage(void)
{
    fputs(
        "usage: pipesink [-H host] [-P port] [-u user] [-p password] [-V vhost] -q QUEUE -n TOTAL\n"
        "                -S SOCK -D DB\n"
        "              [-c CONSUMERS=2] [-f PREFETCH=200] [-b BATCH=1] [-w BATCH_WAIT_MS=0]\n"
        "              [-i IDLE_MS=10000] [-L]\n",
        stderr);
    exit(64);
}

int main(int argc, char **argv)
{
    pipesink_opts_t o = {"127.0.0.1", 5672, "guest", "guest", "/", NULL, 0,   2,
                         200,         1,    0,       10000,   0,   NULL, NULL};
    pipesink_consumer_t cons[PIPESINK_MAX_CONSUMERS];
    pthread_t th[PIPESINK_MAX_CONSUMERS];
    long received = 0, commits = 0, redo = 0;
    int opt, failed = 0;

    while ((opt = getopt(argc, argv, "H:P:u:p:V:q:n:c:f:b:w:i:LS:D:")) != -1) {
        switch (opt) {
        case 'H':
            o.host = optarg;
            break;
        case 'P':
            o.port = atoi(optarg);
            break;
        case 'u':
            o.user = optarg;
            break;
        case 'p':
            o.password = optarg;
            break;
        case 'V':
            o.vhost = optarg;
            break;
        case 'q':
            o.queue = optarg;
            break;
        case 'n':
            o.total = atol(optarg);
            break;
        case 'c':
            o.consumers = atoi(optarg);
            break;
        case 'f':
            o.prefetch = atoi(optarg);
            break;
        case 'b':
            o.batch = atoi(optarg);
            break;
        case 'w':
            o.batch_wait_ms = atoi(optarg);
            break;
        case 'i':
            o.idle_ms = atoi(optarg);
            break;
        case 'L':
            o.latency = 1;
            break;
        case 'S':
            o.socket = optarg;
            break;
        case 'D':
            o.db = optarg;
            break;
        default:
            pipesink_usage();
        }
    }
    if (o.queue == NULL || o.socket == NULL || o.db == NULL || o.total <= 0 || o.consumers < 1 ||
        o.consumers > PIPESINK_MAX_CONSUMERS || o.prefetch < 0 || o.prefetch > 65535 ||
        o.batch < 1 || o.batch_wait_ms < 0 || o.idle_ms < 1 || optind != argc)
        pipesink_usage();

    /* Before any thread: libmysqlclient's implicit library init in mysql_init is not
     * thread-safe, and two consumers connecting at once could see mysql_init fail. */
    if (mysql_library_init(0, NULL, NULL) != 0)
        pipesink_die("mysql_library_init failed");
    double t0 = pipesink_now();
    for (int i = 0; i < o.consumers; i++) {
        cons[i] = (pipesink_consumer_t){.o = &o, .index = i};
        if (pthread_create(&th[i], NULL, pipesink_consume, &cons[i]) != 0)
            pipesink_die("pthread_create failed");
    }
    for (int i = 0; i < o.consumers; i++) {
        pthread_join(th[i], NULL);
        received += cons[i].received;
        commits += cons[i].commits;
        redo += cons[i].redo;
        failed |= cons[i].failed;
    }
    double secs = pipesink_now() - t0;
    printf("pipesink consumers=%d prefetch=%d batch=%d received=%ld commits=%ld redo=%ld secs=%.3f "
           "rate=%.0f",
           o.consumers, o.prefetch, o.batch, received, commits, redo, secs,
           secs > 0 ? (double)received / secs : 0);
    if (o.latency)
        pipesink_print_latency(cons, o.consumers);
    putchar('\n');
    for (int i = 0; i < o.consumers; i++)
        free(cons[i].lat);
    if (failed || received < o.total)
        pipesink_die("took %ld of %ld deliveries", received, o.total);
    return 0;
}
