/* notifysock.c: test listener for the sd_notify protocol: prints every datagram sent to a unix
 * socket. */

/*
 * usage: notifysock [-t SECONDS] PATH
 *
 * Binds a SOCK_DGRAM unix socket at PATH (a leading '@' means the abstract
 * namespace, as in $NOTIFY_SOCKET) and prints each datagram on its own line:
 *
 *   EPOCH.USEC pid=PID TEXT
 *
 * EPOCH.USEC is the wall clock at receipt (CLOCK_REALTIME, so it compares with
 * idemd's log timestamps), PID the sender's pid from SCM_CREDENTIALS (0 if the
 * kernel sent none), TEXT the payload with newlines written as "\n" and other
 * control bytes and backslashes as \xNN, so one datagram is always one line.
 * stdout is flushed after every line. Runs until SIGTERM/SIGINT or, with -t,
 * until SECONDS pass; then removes PATH and exits 0. "listening on PATH" goes to
 * stderr once the socket is bound.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NOTIFYSOCK_MAX 65536

static volatile sig_atomic_t notifysock_stop;

static void notifysock_on_signal(int sig)
{
    (void)sig;
    notifysock_stop = 1;
}

static void notifysock_usage(void)
{
    fprintf(stderr, "usage: notifysock [-t SECONDS] PATH\n");
}

/* Print one datagram as one line. */
static void notifysock_print(const char *buf, size_t len, pid_t pid)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    printf("%lld.%06ld pid=%d ", (long long)tv.tv_sec, (long)tv.tv_usec, (int)pid);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20 || c == 0x7f || c == '\\')
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('\n');
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct sockaddr_un sa;
    socklen_t salen;
    struct sigaction act;
    double timeout = 0;
    const char *path;
    int fd = -1, one = 1, c, rc = 1;
    static char buf[NOTIFYSOCK_MAX];
    struct timespec t0, now;

    while ((c = getopt(argc, argv, "t:h")) != -1) {
        switch (c) {
        case 't':
            timeout = atof(optarg);
            break;
        case 'h':
            notifysock_usage();
            return 0;
        default:
            notifysock_usage();
            return 2;
        }
    }
    if (optind != argc - 1) {
        notifysock_usage();
        return 2;
    }
    path = argv[optind];
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path) || path[0] == '\0') {
        fprintf(stderr, "notifysock: path must be 1..%zu bytes\n", sizeof(sa.sun_path) - 1);
        return 2;
    }
    memcpy(sa.sun_path, path, strlen(path));
    salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace, as sd_notify reads it */
    else
        salen++; /* count the NUL */

    memset(&act, 0, sizeof(act));
    act.sa_handler = notifysock_on_signal;
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);

    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "notifysock: socket: %s\n", strerror(errno));
        goto fail;
    }
    if (path[0] != '@')
        unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, salen) != 0) {
        fprintf(stderr, "notifysock: bind %s: %s\n", path, strerror(errno));
        goto fail;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0)
        fprintf(stderr, "notifysock: SO_PASSCRED: %s (pids will be 0)\n", strerror(errno));
    fprintf(stderr, "notifysock: listening on %s\n", path);

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!notifysock_stop) {
        int wait_ms = 200;
        if (timeout > 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            double left = timeout - (double)(now.tv_sec - t0.tv_sec) -
                          (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
            if (left <= 0)
                break;
            if (left * 1000 < wait_ms)
                wait_ms = (int)(left * 1000) + 1;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, wait_ms);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "notifysock: poll: %s\n", strerror(errno));
            goto fail;
        }
        if (r <= 0)
            continue;
        union {
            struct cmsghdr align;
            char space[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.space;
        mh.msg_controllen = sizeof(ctl.space);
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            fprintf(stderr, "notifysock: recvmsg: %s\n", strerror(errno));
            goto fail;
        }
        pid_t pid = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
                struct ucred cred;
                memcpy(&cred, CMSG_DATA(cm), sizeof(cred));
                pid = cred.pid;
            } else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                /* sd_pid_notify_with_fds: close what we were handed. */
                int nfd = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                for (int i = 0; i < nfd; i++) {
                    int x;
                    memcpy(&x, CMSG_DATA(cm) + (size_t)i * sizeof(int), sizeof(int));
                    close(x);
                }
            }
        }
        if (mh.msg_flags & MSG_TRUNC)
            fprintf(stderr, "notifysock: a datagram was longer than %d bytes: cut\n",
                    NOTIFYSOCK_MAX);
        notifysock_print(buf, (size_t)n, pid);
    }
    rc = 0;
fail:
    if (fd >= 0)
        close(fd);
    if (path[0] != '@')
        unlink(path);
    return rc;
}
