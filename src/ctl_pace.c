/* ctl_pace.c: dlq replay's pacing (a token bucket over a clock the caller reads) and its progress
 * line. */
#include "ctl_pace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define CTL_PACE_MAX 1000000L /* --rate: at most this many a second */

/* Whole bucket state from the caller; nothing to free. */
void ctl_pace_init(ctl_pace_t *p, double rate, double burst, int64_t now_ns)
{
    p->rate = rate > 0 ? rate : 0;
    p->burst = burst < 1 ? 1 : burst;
    p->tokens = p->burst;
    p->last_ns = now_ns;
}

/* See ctl_pace.h. A clock that went backwards (it should not: monotonic) adds nothing. */
int64_t ctl_pace_take(ctl_pace_t *p, int64_t now_ns)
{
    if (p->rate <= 0)
        return 0;
    if (now_ns > p->last_ns) {
        p->tokens += (double)(now_ns - p->last_ns) * p->rate / 1e9;
        if (p->tokens > p->burst)
            p->tokens = p->burst;
        p->last_ns = now_ns;
    }
    if (p->tokens >= 1) {
        p->tokens -= 1;
        return 0;
    }
    int64_t wait = (int64_t)((1 - p->tokens) * 1e9 / p->rate);
    return wait > 0 ? wait : 1;
}

/* See ctl_pace.h; s is borrowed. */
long ctl_pace_parse(const char *s)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (errno || end == s || n < 1 || n > CTL_PACE_MAX)
        return -1;
    if (*end == '\0' || (end[0] == '/' && end[1] == 's' && end[2] == '\0'))
        return n;
    return -1;
}

/* See ctl_pace.h; buf is the caller's. */
void ctl_pace_eta(long long s, char *buf, size_t len)
{
    if (s < 0)
        snprintf(buf, len, "?");
    else if (s < 60)
        snprintf(buf, len, "%llds", s);
    else if (s < 3600)
        snprintf(buf, len, "%lldm", (s + 30) / 60);
    else
        snprintf(buf, len, "%lldh%lldm", s / 3600, (s % 3600) / 60);
}

/* See ctl_pace.h; buf is the caller's. */
const char *ctl_pace_line(long done, long scanned, long total, int64_t elapsed_ns, char *buf,
                          size_t len)
{
    double secs = (double)elapsed_ns / 1e9;
    char eta[32];

    if (scanned >= total)
        ctl_pace_eta(0, eta, sizeof(eta));
    else if (scanned <= 0 || secs <= 0)
        ctl_pace_eta(-1, eta, sizeof(eta));
    else
        ctl_pace_eta((long long)((double)(total - scanned) * secs / (double)scanned + 0.5), eta,
                     sizeof(eta));
    snprintf(buf, len, "replayed %ld/%ld, %ld/s, eta %s", done, total,
             secs > 0 ? (long)((double)done / secs + 0.5) : 0L, eta);
    return buf;
}
