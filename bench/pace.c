/* pace.c: copy stdin lines to stdout at a fixed rate, to offer a steady load to mqtool publish. */
/*
 * pace RATE
 *   Writes line i (0-based) at start + i / RATE seconds (CLOCK_MONOTONIC,
 *   absolute sleeps, so delays do not add up), one write(2) per line, so a
 *   reader sees each line when it is due. It sleeps between lines instead of
 *   polling, so it leaves the CPUs to the system under test. Prints
 *   "pace: N lines in S s" to stderr at the end. Used by bench/run's latency
 *   run and by tests/chaos/run's publishers (make check-build builds it).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t pace_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Write all of buf; 0, or -1 when the reader went away. */
static int pace_write(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long i = 0;
    double rate = argc == 2 ? atof(argv[1]) : 0;

    if (rate <= 0) {
        fputs("usage: pace RATE <lines >lines\n", stderr);
        return 64;
    }
    int64_t t0 = pace_now_ns();
    while ((len = getline(&line, &cap, stdin)) > 0) {
        int64_t due = t0 + (int64_t)((double)i * 1e9 / rate);
        struct timespec ts = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        if (pace_write(line, (size_t)len) != 0) {
            fprintf(stderr, "pace: write: %s\n", strerror(errno));
            free(line);
            return 1;
        }
        i++;
    }
    free(line);
    fprintf(stderr, "pace: %ld lines in %.3f s\n", i, (double)(pace_now_ns() - t0) / 1e9);
    return 0;
}
