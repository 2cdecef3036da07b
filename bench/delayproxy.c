/* delayproxy.c: a TCP proxy that delays every byte by a fixed time each way and counts frames. */
/*
 * delayproxy [--delay-us N] [--host ADDR] --map LPORT:TPORT:amqp|mysql [--map ...]
 *   Listens on 127.0.0.1:LPORT (0: a free port) for each map and forwards
 *   every connection to ADDR:TPORT (default 127.0.0.1), holding each piece of
 *   data N microseconds (one way; the round trip gains 2N) before passing it
 *   on, in order. It stands in for a network between idemd and its servers:
 *   this kernel has no netem. One thread: epoll, and one timerfd set to the
 *   earliest piece due.
 *   It counts what passes with framecount.h: AMQP frames (by type) or MySQL
 *   packets, per direction, and the client's turns: data from the client
 *   after data from the server, i.e. its round trips in a request-reply
 *   protocol (MySQL; a COM_STMT_CLOSE, which has no reply, is a packet but
 *   no turn). At start it prints "listen PROTO LPORT" per map;
 *   It also sums how long each piece was really held (read to written: the
 *   delay plus how late the wake-up came on a busy machine) as held= pieces
 *   and hold_us= total.
 *   On SIGUSR1 it prints the counters so far, one "stats" line per protocol,
 *   then "cpu_us=N" (its own user + system CPU, getrusage); on SIGTERM or
 *   SIGINT the same, then it exits. Counters only grow: take differences.
 *   Built by the Makefile rule for bench/ (make bench); bench/run starts it.
 */
#include "framecount.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define DP_MAX_MAPS 8
#define DP_CHUNK 65536
#define DP_HIGH_WATER (4u << 20) /* queued bytes in one direction that stop its reading */

typedef struct dp_chunk {
    struct dp_chunk *next;
    int64_t due_ns;
    size_t len, off;
    unsigned char data[];
} dp_chunk_t;

struct dp_conn;

/* One direction of a connection: bytes read from `from`, held, written to `to`. */
typedef struct dp_pipe {
    struct dp_conn *conn;
    int from, to;
    dp_chunk_t *head, *tail;
    size_t queued;
    int eof;     /* `from` said EOF: shut `to` for writing once the queue is empty */
    int shut;    /* done so */
    int blocked; /* `to` said EAGAIN: wait for EPOLLOUT */
    fc_stream_t fc;
} dp_pipe_t;

/* The totals of one protocol, over its closed and open connections. */
typedef struct dp_totals {
    uint64_t conns, frames[2], by_type[2][FC_AMQP_TYPES], bytes[2], bad, tls, turns;
    uint64_t hold_ns, held; /* time from read to written, summed over the pieces, and how many */
} dp_totals_t;

typedef struct dp_map {
    int listen_fd, lport, tport;
    fc_proto_t proto;
    dp_totals_t done; /* of closed connections */
} dp_map_t;

/* An endpoint as epoll sees it: a socket of a connection (side 0 client, 1 server). */
typedef struct dp_end {
    struct dp_conn *conn;
    int side;
    uint32_t events; /* the interest epoll has now: epoll_ctl only on a change */
} dp_end_t;

typedef struct dp_conn {
    struct dp_conn *next, *prev;
    dp_map_t *map;
    int fd[2];         /* 0: the client, 1: the server */
    dp_pipe_t pipe[2]; /* 0: client to server, 1: server to client */
    dp_end_t end[2];
    int last_side;  /* who sent the last data read (the server speaks first) */
    uint64_t turns; /* client data after server data: the client's round trips */
    uint64_t hold_ns, held;
} dp_conn_t;

static int dp_epoll, dp_timer, dp_sig;
static int64_t dp_delay_ns;
static const char *dp_host = "127.0.0.1";
static dp_map_t dp_maps[DP_MAX_MAPS];
static int dp_nmaps;
static dp_conn_t *dp_conns;
static int64_t dp_armed = -1; /* what the timer is set to (0: off; -1: it fired) */
/* How much earlier than due to wake: on a busy machine wake-ups come late (hundreds of µs on
 * a loaded 2-CPU VM), so the proxy learns the mean lateness and aims that much early, keeping
 * the mean hold at the delay asked for (0..the delay; hold_us shows what it achieved). */
static int64_t dp_early_ns;

static int64_t dp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void dp_nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Add the counters of connection c's streams to t. */
static void dp_add(dp_totals_t *t, const dp_conn_t *c)
{
    t->turns += c->turns;
    t->hold_ns += c->hold_ns;
    t->held += c->held;
    for (int d = 0; d < 2; d++) {
        const fc_stream_t *s = &c->pipe[d].fc;
        t->frames[d] += s->frames;
        t->bytes[d] += s->bytes;
        for (int k = 0; k < FC_AMQP_TYPES; k++)
            t->by_type[d][k] += s->by_type[k];
        t->bad += s->bad;
        t->tls += s->tls;
    }
}

/* Print one "stats" line per map and the proxy's own CPU. */
static void dp_print_stats(void)
{
    struct rusage ru;

    for (int m = 0; m < dp_nmaps; m++) {
        dp_totals_t t = dp_maps[m].done;
        for (dp_conn_t *c = dp_conns; c != NULL; c = c->next)
            if (c->map == &dp_maps[m])
                dp_add(&t, c);
        printf("stats %s port=%d conns=%" PRIu64 " c2s_frames=%" PRIu64 " s2c_frames=%" PRIu64
               " c2s_bytes=%" PRIu64 " s2c_bytes=%" PRIu64 " c2s_turns=%" PRIu64,
               dp_maps[m].proto == FC_AMQP ? "amqp" : "mysql", dp_maps[m].lport, t.conns,
               t.frames[0], t.frames[1], t.bytes[0], t.bytes[1], t.turns);
        if (dp_maps[m].proto == FC_AMQP)
            printf(" c2s_method=%" PRIu64 " s2c_method=%" PRIu64 " c2s_content=%" PRIu64
                   " s2c_content=%" PRIu64 " heartbeats=%" PRIu64,
                   t.by_type[0][1], t.by_type[1][1], t.by_type[0][2] + t.by_type[0][3],
                   t.by_type[1][2] + t.by_type[1][3], t.by_type[0][8] + t.by_type[1][8]);
        printf(" held=%" PRIu64 " hold_us=%" PRIu64 " bad=%" PRIu64 " tls=%" PRIu64 "\n", t.held,
               t.hold_ns / 1000, t.bad, t.tls);
    }
    getrusage(RUSAGE_SELF, &ru);
    printf("cpu_us=%lld\n", (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
                                (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
    fflush(stdout);
}

/* Set the epoll interest of connection c's socket on side s from its pipes' state. */
static void dp_watch(dp_conn_t *c, int s)
{
    struct epoll_event ev = {0};
    dp_pipe_t *out = &c->pipe[s], *in = &c->pipe[1 - s]; /* out: read from fd[s] */

    if (!out->eof && out->queued < DP_HIGH_WATER)
        ev.events |= EPOLLIN;
    if (in->blocked)
        ev.events |= EPOLLOUT;
    if (ev.events == c->end[s].events)
        return;
    c->end[s].events = ev.events;
    ev.data.ptr = &c->end[s];
    epoll_ctl(dp_epoll, EPOLL_CTL_MOD, c->fd[s], &ev);
}

static void dp_close(dp_conn_t *c)
{
    dp_add(&c->map->done, c);
    for (int d = 0; d < 2; d++) {
        close(c->fd[d]);
        for (dp_chunk_t *k = c->pipe[d].head, *n; k != NULL; k = n) {
            n = k->next;
            free(k);
        }
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        dp_conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

/* Write what is due on pipe p. 0, or -1 when the connection is to be closed. */
static int dp_flush(dp_pipe_t *p, int64_t now)
{
    while (p->head != NULL && p->head->due_ns - dp_early_ns <= now) {
        dp_chunk_t *k = p->head;
        ssize_t n = write(p->to, k->data + k->off, k->len - k->off);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            p->blocked = 1;
            return 0;
        }
        if (n < 0)
            return -1;
        p->blocked = 0;
        k->off += (size_t)n;
        p->queued -= (size_t)n;
        if (k->off < k->len)
            continue;
        p->head = k->next;
        if (p->head == NULL)
            p->tail = NULL;
        /* How long it was really held: the delay asked for plus the wake-up's lateness. */
        int64_t t = dp_now_ns();
        p->conn->hold_ns += (uint64_t)(t - (k->due_ns - dp_delay_ns));
        p->conn->held++;
        dp_early_ns += (t - k->due_ns) / 16; /* late: aim earlier; early: later */
        if (dp_early_ns < 0)
            dp_early_ns = 0;
        if (dp_early_ns > dp_delay_ns)
            dp_early_ns = dp_delay_ns;
        free(k);
    }
    p->blocked = 0;
    if (p->head == NULL && p->eof && !p->shut) {
        shutdown(p->to, SHUT_WR);
        p->shut = 1;
    }
    return 0;
}

/* Read what socket side s of c has into its pipe. 0, or -1 to close the connection. */
static int dp_read(dp_conn_t *c, int s)
{
    dp_pipe_t *p = &c->pipe[s];
    dp_chunk_t *k = malloc(sizeof(*k) + DP_CHUNK);
    ssize_t n;

    if (k == NULL)
        return -1;
    n = read(c->fd[s], k->data, DP_CHUNK);
    if (n <= 0) {
        free(k);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0)
            return -1;
        p->eof = 1;
        return 0;
    }
    if ((size_t)n < DP_CHUNK / 2) { /* most reads are small: do not hold 64 KiB each */
        dp_chunk_t *small = realloc(k, sizeof(*k) + (size_t)n);
        if (small != NULL)
            k = small;
    }
    k->next = NULL;
    k->len = (size_t)n;
    k->off = 0;
    k->due_ns = dp_now_ns() + dp_delay_ns;
    if (s == 0 && c->last_side == 1)
        c->turns++;
    c->last_side = s;
    if (!p->fc.bad && !c->pipe[0].fc.tls)
        fc_feed(&p->fc, k->data, (size_t)n);
    if (p->tail)
        p->tail->next = k;
    else
        p->head = k;
    p->tail = k;
    p->queued += (size_t)n;
    return 0;
}

/* Accept a client on map m and connect it to the target. Failures drop the client. */
static void dp_accept(dp_map_t *m)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int one = 1, cfd, sfd = -1;
    dp_conn_t *c = NULL;

    cfd = accept4(m->listen_fd, NULL, NULL, SOCK_NONBLOCK);
    if (cfd < 0)
        return;
    sa.sin_port = htons((uint16_t)m->tport);
    inet_pton(AF_INET, dp_host, &sa.sin_addr);
    sfd = socket(AF_INET, SOCK_STREAM, 0);
    /* A blocking connect: the target is local, and the clients connect rarely. */
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "delayproxy: connect to %s:%d: %s\n", dp_host, m->tport, strerror(errno));
        goto fail;
    }
    dp_nonblock(sfd);
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        goto fail;
    c->map = m;
    c->last_side = 1;
    c->fd[0] = cfd;
    c->fd[1] = sfd;
    for (int d = 0; d < 2; d++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->end[d]};
        c->end[d].conn = c;
        c->end[d].side = d;
        c->end[d].events = EPOLLIN;
        c->pipe[d].conn = c;
        c->pipe[d].from = c->fd[d];
        c->pipe[d].to = c->fd[1 - d];
        fc_init(&c->pipe[d].fc, m->proto, d == 0);
        epoll_ctl(dp_epoll, EPOLL_CTL_ADD, c->fd[d], &ev);
    }
    c->next = dp_conns;
    if (dp_conns)
        dp_conns->prev = c;
    dp_conns = c;
    m->done.conns++;
    return;

fail:
    close(cfd);
    if (sfd >= 0)
        close(sfd);
}

/* Arm the timer for the earliest piece due on a pipe that is not waiting for EPOLLOUT. */
static void dp_arm(void)
{
    int64_t next = INT64_MAX;
    struct itimerspec its = {0};

    for (dp_conn_t *c = dp_conns; c != NULL; c = c->next)
        for (int d = 0; d < 2; d++)
            if (c->pipe[d].head != NULL && !c->pipe[d].blocked &&
                c->pipe[d].head->due_ns - dp_early_ns < next)
                next = c->pipe[d].head->due_ns - dp_early_ns;
    if (next == INT64_MAX)
        next = 0;
    else if (next <= 0)
        next = 1;
    if (next == dp_armed)
        return;
    dp_armed = next;
    its.it_value.tv_sec = next / 1000000000;
    its.it_value.tv_nsec = next % 1000000000;
    timerfd_settime(dp_timer, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Flush every connection's due data, update interests, close finished ones. */
static void dp_service(void)
{
    int64_t now = dp_now_ns();

    for (dp_conn_t *c = dp_conns, *n; c != NULL; c = n) {
        int dead = 0;
        n = c->next;
        for (int d = 0; d < 2 && !dead; d++)
            if (!c->pipe[d].blocked && dp_flush(&c->pipe[d], now) != 0)
                dead = 1;
        if (!dead && c->pipe[0].shut && c->pipe[1].shut)
            dead = 1;
        if (dead) {
            dp_close(c);
            continue;
        }
        dp_watch(c, 0);
        dp_watch(c, 1);
    }
    dp_arm();
}

/* Parse "LPORT:TPORT:PROTO" into the next map and listen. 0, or -1. */
static int dp_add_map(const char *spec)
{
    dp_map_t *m = &dp_maps[dp_nmaps];
    char proto[16];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int one = 1;

    if (dp_nmaps == DP_MAX_MAPS || sscanf(spec, "%d:%d:%15s", &m->lport, &m->tport, proto) != 3 ||
        (strcmp(proto, "amqp") != 0 && strcmp(proto, "mysql") != 0)) {
        fprintf(stderr, "delayproxy: bad --map \"%s\" (LPORT:TPORT:amqp|mysql)\n", spec);
        return -1;
    }
    m->proto = strcmp(proto, "amqp") == 0 ? FC_AMQP : FC_MYSQL;
    m->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(m->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)m->lport);
    if (bind(m->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(m->listen_fd, 64) != 0 ||
        getsockname(m->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "delayproxy: listen on 127.0.0.1:%d: %s\n", m->lport, strerror(errno));
        return -1;
    }
    m->lport = ntohs(sa.sin_port);
    dp_nmaps++;
    return 0;
}

int main(int argc, char **argv)
{
    sigset_t sigs;
    struct epoll_event ev;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--delay-us") == 0 && i + 1 < argc) {
            dp_delay_ns = strtoll(argv[++i], NULL, 10) * 1000;
        } else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
            dp_host = argv[++i];
        } else if (strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            if (dp_add_map(argv[++i]) != 0)
                return 2;
        } else {
            fprintf(stderr, "usage: delayproxy [--delay-us N] [--host ADDR] "
                            "--map LPORT:TPORT:amqp|mysql ...\n");
            return 2;
        }
    }
    if (dp_nmaps == 0) {
        fprintf(stderr, "delayproxy: no --map\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL); /* wake at the due time, not up to 50 µs later */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    dp_sig = signalfd(-1, &sigs, SFD_NONBLOCK);
    dp_epoll = epoll_create1(0);
    dp_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (dp_sig < 0 || dp_epoll < 0 || dp_timer < 0) {
        perror("delayproxy: setup");
        return 1;
    }
    /* The listeners, the timer and the signals are told apart by their data.ptr. */
    ev.events = EPOLLIN;
    ev.data.ptr = &dp_timer;
    epoll_ctl(dp_epoll, EPOLL_CTL_ADD, dp_timer, &ev);
    ev.data.ptr = &dp_sig;
    epoll_ctl(dp_epoll, EPOLL_CTL_ADD, dp_sig, &ev);
    for (int m = 0; m < dp_nmaps; m++) {
        ev.data.ptr = &dp_maps[m];
        epoll_ctl(dp_epoll, EPOLL_CTL_ADD, dp_maps[m].listen_fd, &ev);
        printf("listen %s %d\n", dp_maps[m].proto == FC_AMQP ? "amqp" : "mysql", dp_maps[m].lport);
    }
    fflush(stdout);

    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(dp_epoll, evs, 64, -1);
        if (n < 0 && errno != EINTR) {
            perror("delayproxy: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &dp_timer) {
                uint64_t exp;
                if (read(dp_timer, &exp, sizeof(exp)) == sizeof(exp))
                    dp_armed = -1;
            } else if (ptr == &dp_sig) {
                struct signalfd_siginfo si;
                while (read(dp_sig, &si, sizeof(si)) == sizeof(si)) {
                    dp_print_stats();
                    if (si.ssi_signo != SIGUSR1)
                        return 0;
                }
            } else if (ptr >= (void *)dp_maps && ptr < (void *)(dp_maps + DP_MAX_MAPS)) {
                dp_accept(ptr);
            } else {
                dp_end_t *e = ptr;
                dp_conn_t *c = e->conn;
                int s = e->side;
                /* An earlier event of this round may have closed c: skip it if so. */
                int live = 0;
                for (dp_conn_t *k = dp_conns; k != NULL && !live; k = k->next)
                    live = k == c;
                if (!live)
                    continue;
                if (evs[i].events & EPOLLOUT)
                    c->pipe[1 - s].blocked = 0;
                if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && dp_read(c, s) != 0)
                    dp_close(c);
            }
        }
        dp_service();
    }
}
