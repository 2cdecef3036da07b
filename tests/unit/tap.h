/* tap.h: the unit tests' TAP output: one "ok N - what" / "not ok N - what" line per check, the
 * plan, and a closing "# N passed, N failed".
 *
 * tests/run counts the ok / not ok lines and the exit status: a test's main ends with
 * `return done();`. Header-only: each test is one translation unit. Output is flushed after
 * every line, so a test that forks never prints a line twice.
 */
#ifndef IDEMD_TEST_TAP_H
#define IDEMD_TEST_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int tap_n;            /* checks so far */
static int tap_failed;       /* of which failed */
static int tap_planned = -1; /* plan()'s count, -1 without a plan */

/* Print "ok N - " or "not ok N - ", then the description; counts the check. */
static inline bool tap_line(bool cond, const char *fmt, va_list ap)
{
    tap_n++;
    if (!cond)
        tap_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    return cond;
}

/* Announce n checks ("1..n"); done() then fails if a different number ran. Optional: without
 * it done() prints the plan at the end. */
static inline void plan(int n)
{
    tap_planned = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

/* A diagnostic line ("# ..."), e.g. what a failed check saw. */
static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* One check: cond true passes. Returns cond. */
static inline bool ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool ok(bool cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_line(cond, fmt, ap);
    va_end(ap);
    return cond;
}

/* As ok(); on failure got (may be NULL) is printed as "# got: ...". */
static inline bool ok_got(bool cond, const char *got, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool ok_got(bool cond, const char *got, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_line(cond, fmt, ap);
    va_end(ap);
    if (!cond && got != NULL)
        diag("got: %s", got);
    return cond;
}

/* Passes when got == want; on failure both are printed. */
static inline bool is_int(long long got, long long want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool is_int(long long got, long long want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool cond = tap_line(got == want, fmt, ap);
    va_end(ap);
    if (!cond)
        diag("got %lld, expected %lld", got, want);
    return cond;
}

/* Passes when the strings are equal (two NULLs are equal); on failure both are printed. */
static inline bool is_str(const char *got, const char *want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool is_str(const char *got, const char *want, const char *fmt, ...)
{
    va_list ap;
    bool same = got && want ? strcmp(got, want) == 0 : got == want;
    va_start(ap, fmt);
    tap_line(same, fmt, ap);
    va_end(ap);
    if (!same)
        diag("got \"%s\", expected \"%s\"", got ? got : "(null)", want ? want : "(null)");
    return same;
}

/* A check that could not run here: "ok N - what # SKIP why" (counts as passed). */
static inline void skip(const char *what, const char *why)
{
    printf("ok %d - %s # SKIP %s\n", ++tap_n, what, why);
    fflush(stdout);
}

/* The end: the plan (if plan() was not called) and "# N passed, N failed". Returns the exit
 * status: 0 when every check passed and the plan (if any) was met, else 1. */
static inline int done(void)
{
    if (tap_planned < 0)
        printf("1..%d\n", tap_n);
    else if (tap_planned != tap_n)
        printf("# planned %d checks, ran %d\n", tap_planned, tap_n);
    printf("# %d passed, %d failed\n", tap_n - tap_failed, tap_failed);
    fflush(stdout);
    return tap_failed || (tap_planned >= 0 && tap_planned != tap_n) ? 1 : 0;
}

#endif
