/* ctl_pace.h: dlq replay's pacing (a token bucket over a clock the caller reads) and its progress
 * line. */
#ifndef IDEMD_CTL_PACE_H
#define IDEMD_CTL_PACE_H

#include <stddef.h>
#include <stdint.h>

/* A token bucket: rate tokens a second, at most burst saved up. Times are the caller's
 * monotonic nanoseconds, so a test drives it with any clock. */
typedef struct ctl_pace {
    double rate;  /* tokens a second; 0: unpaced */
    double burst; /* the most tokens saved up (at least 1) */
    double tokens;
    int64_t last_ns; /* when tokens was last brought up to date */
} ctl_pace_t;

/* Start p at now_ns with rate a second (0: no pacing) and a full bucket of burst (below 1: 1). */
void ctl_pace_init(ctl_pace_t *p, double rate, double burst, int64_t now_ns);

/*
 * Take one token at now_ns: returns 0 when one was taken (go now), or how
 * many nanoseconds to wait before asking again (nothing taken).
 */
int64_t ctl_pace_take(ctl_pace_t *p, int64_t now_ns);

/* Parse --rate: "N/s" or "N" (1..1000000 a second). Returns the rate, or -1 when bad. */
long ctl_pace_parse(const char *s);

/* A duration for a person: "45s", "3m", "2h5m" (whole seconds s; negative: "?"), into buf. */
void ctl_pace_eta(long long s, char *buf, size_t len);

/*
 * The progress line, into buf (len bytes): "replayed 1200/100000, 500/s,
 * eta 3m" when done of the total were replayed after elapsed_ns, and
 * scanned of total were taken from the queue (the eta is for the letters
 * not yet taken, at the pace taken so far). Returns buf.
 */
const char *ctl_pace_line(long done, long scanned, long total, int64_t elapsed_ns, char *buf,
                          size_t len);

#endif
