/* slowclient.c: test client that holds HTTP connections open by sending a request a byte at a
 * time, and reports when the server closes each. */

/*
 * usage: slowclient [-b SOURCE_IP] [-n CONNS] [-i INTERVAL_MS] [-t SECONDS] IP PORT
 *
 * Opens CONNS (default 16) TCP connections to IP:PORT, each bound to SOURCE_IP
 * when given (any 127.x.y.z is a loopback address of its own, so one machine can
 * play several clients). On each it sends "GET /metrics HTTP/1.1\r\n" and then
 * one byte of an endless header every INTERVAL_MS (default 500), so the request
 * never ends. Prints, one line each, flushed:
 *
 *   connected N                      once all connects returned (N of them succeeded)
 *   closed I after MS ms             when the server ended connection I
 *   open K                           at the end: connections still open
 *
 * Ends after SECONDS (default 12) or when every connection is closed; exit 0,
 * or 2 on bad arguments or when no connection could be made.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SC_MAX 256

static long long sc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connected socket to ip:port from src (or any), or -1 (reason on stderr). */
static int sc_connect(const char *src, const char *ip, int port)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || inet_pton(AF_INET, ip, &to.sin_addr) != 1)
        goto fail;
    if (src) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, src, &from.sin_addr) != 1 ||
            bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0)
            goto fail;
    }
    if (connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0)
        goto fail;
    return fd;
fail:
    fprintf(stderr, "slowclient: connect %s:%d: %s\n", ip, port, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

int main(int argc, char **argv)
{
    const char *src = NULL;
    int n = 16, interval = 500, seconds = 12, o, fds[SC_MAX], open_n = 0;
    long long start[SC_MAX];
    static const char head[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";

    while ((o = getopt(argc, argv, "b:n:i:t:")) != -1) {
        switch (o) {
        case 'b':
            src = optarg;
            break;
        case 'n':
            n = atoi(optarg);
            break;
        case 'i':
            interval = atoi(optarg);
            break;
        case 't':
            seconds = atoi(optarg);
            break;
        default:
            return 2;
        }
    }
    if (argc - optind != 2 || n < 1 || n > SC_MAX || interval < 1 || seconds < 1) {
        fprintf(stderr, "usage: slowclient [-b SOURCE_IP] [-n CONNS] [-i INTERVAL_MS] "
                        "[-t SECONDS] IP PORT\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        fds[i] = sc_connect(src, argv[optind], atoi(argv[optind + 1]));
        start[i] = sc_now_ms();
        if (fds[i] >= 0) {
            open_n++;
            if (send(fds[i], head, sizeof(head) - 1, MSG_NOSIGNAL) < 0) {
                printf("closed %d after %lld ms\n", i, sc_now_ms() - start[i]);
                close(fds[i]);
                fds[i] = -1;
                open_n--;
            }
        }
    }
    printf("connected %d\n", open_n);
    fflush(stdout);
    if (open_n == 0)
        return 2;
    long long end = sc_now_ms() + (long long)seconds * 1000, next = sc_now_ms() + interval;
    while (open_n > 0 && sc_now_ms() < end) {
        struct pollfd p[SC_MAX];
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        long long wait = next - sc_now_ms();
        (void)poll(p, (nfds_t)n, wait < 0 ? 0 : (int)wait);
        int tick = sc_now_ms() >= next;
        if (tick)
            next += interval;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0)
                continue;
            char buf[512];
            bool gone = false;
            if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
                gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
            }
            if (!gone && tick)
                gone = send(fds[i], "a", 1, MSG_NOSIGNAL) < 0;
            if (gone) {
                printf("closed %d after %lld ms\n", i, sc_now_ms() - start[i]);
                fflush(stdout);
                close(fds[i]);
                fds[i] = -1;
                open_n--;
            }
        }
    }
    printf("open %d\n", open_n);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return 0;
}
