/* test_ctl_pace.c: unit tests of dlq replay's pacing (token bucket on a fake clock), --rate and the
 * progress line. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ctl_pace.h"
#include "tap.h"

#define SEC 1000000000LL

/* Take tokens as fast as the bucket allows for span_ns of fake time from t0: how many went. */
static long t_drain(ctl_pace_t *p, int64_t t0, int64_t span_ns)
{
    int64_t now = t0;
    long n = 0;
    while (now < t0 + span_ns) {
        int64_t w = ctl_pace_take(p, now);
        if (w == 0)
            n++;
        else
            now += w;
    }
    return n;
}

static void t_bucket(void)
{
    ctl_pace_t p;

    ctl_pace_init(&p, 100, 1, 0);
    ok(ctl_pace_take(&p, 0) == 0, "a full bucket of 1: the first goes at once");
    int64_t w = ctl_pace_take(&p, 0);
    ok(w == SEC / 100, "then wait 1/rate (got %lld ns)", (long long)w);
    ok(ctl_pace_take(&p, w / 2) > 0, "half way: still waiting");
    ok(ctl_pace_take(&p, w) == 0, "after 1/rate: one more");

    /* 10 s at 100/s, burst 1: 1000 after the first, give or take the edge. */
    ctl_pace_init(&p, 100, 1, 0);
    long n = t_drain(&p, 0, 10 * SEC);
    ok(n >= 1000 && n <= 1001, "100/s for 10 s: %ld taken", n);

    /* A burst of 50 after a long pause: 50 at once, then paced again. */
    ctl_pace_init(&p, 100, 50, 0);
    for (int i = 0; i < 50; i++)
        (void)ctl_pace_take(&p, 0);
    int at_once = 0;
    while (ctl_pace_take(&p, 3600 * SEC) == 0 && at_once < 1000)
        at_once++;
    ok(at_once == 50, "after an hour idle the bucket holds its burst, not more (%d)", at_once);

    /* Rate 0: never waits. */
    ctl_pace_init(&p, 0, 1, 0);
    int free_ = 0;
    for (int i = 0; i < 10000; i++)
        free_ += ctl_pace_take(&p, 0) == 0;
    ok(free_ == 10000, "rate 0: unpaced");

    /* A clock that steps back adds nothing and does not crash. */
    ctl_pace_init(&p, 10, 1, 5 * SEC);
    (void)ctl_pace_take(&p, 5 * SEC);
    ok(ctl_pace_take(&p, 1 * SEC) > 0, "clock backwards: still waiting");
    ok(ctl_pace_take(&p, 5 * SEC + SEC / 10) == 0, "then on time again");
}

static void t_parse(void)
{
    ok(ctl_pace_parse("500/s") == 500, "500/s");
    ok(ctl_pace_parse("500") == 500, "500");
    ok(ctl_pace_parse("1") == 1, "1");
    ok(ctl_pace_parse("0") == -1, "0 refused");
    ok(ctl_pace_parse("-5") == -1, "-5 refused");
    ok(ctl_pace_parse("5/m") == -1, "5/m refused");
    ok(ctl_pace_parse("5/ss") == -1, "5/ss refused");
    ok(ctl_pace_parse("") == -1, "empty refused");
    ok(ctl_pace_parse("x") == -1, "x refused");
    ok(ctl_pace_parse("2000000") == -1, "over a million refused");
}

static void t_line(void)
{
    char buf[128], eta[32];

    ctl_pace_line(1200, 1200, 100000, 2400 * (SEC / 1000), buf, sizeof(buf));
    ok_got(strcmp(buf, "replayed 1200/100000, 500/s, eta 3m") == 0, buf, "the progress line");
    ctl_pace_line(0, 0, 10, 0, buf, sizeof(buf));
    ok_got(strcmp(buf, "replayed 0/10, 0/s, eta ?") == 0, buf, "nothing yet");
    ctl_pace_line(10, 10, 10, SEC, buf, sizeof(buf));
    ok_got(strcmp(buf, "replayed 10/10, 10/s, eta 0s") == 0, buf, "all taken");
    ctl_pace_eta(7500, eta, sizeof(eta));
    ok_got(strcmp(eta, "2h5m") == 0, eta, "eta in hours");
    ctl_pace_eta(59, eta, sizeof(eta));
    ok_got(strcmp(eta, "59s") == 0, eta, "eta in seconds");
}

int main(void)
{
    t_bucket();
    t_parse();
    t_line();
    return done();
}
