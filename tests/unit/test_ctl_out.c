/* test_ctl_out.c: unit tests of log_escape and of idemctl's printf, which shows every field through
 * it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "log.h"
#include "tap.h"

/* log_escape of len bytes of s (flags) compared with want. */
static void t_esc(const char *s, size_t len, unsigned flags, const char *want, const char *what)
{
    char out[256];
    size_t n = log_escape(s, len, flags, out, sizeof(out));
    ok_got(strcmp(out, want) == 0 && n == strlen(want), out, "log_escape: %s", what);
}

/* What ctl_fprintf writes for fmt and its arguments, in a static buffer. */
static char t_buf[4096];
#define T_PRINT(...)                                                                               \
    do {                                                                                           \
        FILE *f = fmemopen(t_buf, sizeof(t_buf), "w");                                             \
        ctl_fprintf(f, __VA_ARGS__);                                                               \
        fclose(f);                                                                                 \
    } while (0)

/* Whether s holds a byte below 0x20 other than \n and \t, or 0x7f. */
static bool t_has_control(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') || *s == 0x7f)
            return true;
    return false;
}

int main(void)
{
    t_esc("plain text, é € ✓", strlen("plain text, é € ✓"), 0, "plain text, é € ✓",
          "printable ASCII and valid UTF-8 stay as they are");
    t_esc("a\x1b]0;x\x07\x1b[2Jb", 12, 0, "a\\x1b]0;x\\x07\\x1b[2Jb", "ESC and BEL as \\xNN");
    t_esc("l1\nl2\rl3\tl4", 11, 0, "l1\\nl2\\rl3\\tl4", "newline, CR and tab as \\n \\r \\t");
    t_esc("del\x7f\0nul", 8, 0, "del\\x7f\\x00nul", "DEL and NUL as \\xNN");
    t_esc("\xff\xfe", 2, 0, "\\xff\\xfe", "bytes never valid in UTF-8");
    t_esc("\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80", 11, 0,
          "\\xc0\\x80|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80",
          "overlong, surrogate and above U+10FFFF: each byte as \\xNN");
    t_esc("cut\xe2\x82", 5, 0, "cut\\xe2\\x82", "a sequence cut short");
    t_esc("\xc2\x9b"
          "2J",
          4, 0, "\\u009b2J", "C1 control U+009B (CSI) as \\u009b");
    t_esc("x\xe2\x80\xae"
          "y\xe2\x81\xa6"
          "z\xe2\x80\xa8",
          12, 0, "x\\u202ey\\u2066z\\u2028",
          "bidi override, isolate and line separator as \\uNNNN");
    t_esc("a\\b", 3, 0, "a\\b", "a backslash stays single without LOG_ESC_BACKSLASH");
    t_esc("a\\b", 3, LOG_ESC_BACKSLASH, "a\\\\b", "a backslash doubled with LOG_ESC_BACKSLASH");
    {
        char out[7];
        log_escape("abc\x1b", 4, 0, out, sizeof(out));
        ok_got(strcmp(out, "abc") == 0, out, "log_escape: cut before an escape that does not fit");
        log_escape("abcdef\x1b", 7, 0, out, 4);
        ok_got(strcmp(out, "abc") == 0, out, "log_escape: cut at outlen, NUL-terminated");
    }
    {
        char big[64], out[64 * 4 + 1];
        memset(big, 0x1b, sizeof(big));
        size_t n = log_escape(big, sizeof(big), 0, out, sizeof(out));
        ok(n == 64 * 4, "log_escape: 4 * len + 1 bytes hold the worst case (%zu)", n);
    }

    T_PRINT("queue '%s': %d of %u\n", "q\r\x1b[2Kreplayed 1 of 1\x1b[8m", -3, 7u);
    ok_got(strcmp(t_buf, "queue 'q\\r\\x1b[2Kreplayed 1 of 1\\x1b[8m': -3 of 7\n") == 0, t_buf,
           "ctl_fprintf: a %%s argument is escaped, the format's newline is not");
    ok(!t_has_control(t_buf), "ctl_fprintf: no control byte but the format's own");
    T_PRINT("[%5s|%-5s|%.2s|%.*s|%c|%c]", "ab", "cd",
            "e\x1b"
            "f",
            3, "gh\x07ij", 'k', '\x1b');
    ok_got(strcmp(t_buf, "[   ab|cd   |e\\x1b|gh\\x07|k|\\x1b]") == 0, t_buf,
           "ctl_fprintf: width, precision (on the field's bytes) and %%c");
    T_PRINT("%lld %ld %lu %zu %x %X %05d %-4d| %+d %.1f %5.2f %e %% %s", -1234567890123LL, -5L, 6UL,
            (size_t)7, 255u, 255u, 42, 9, 3, 2.25, 3.14159, 1e10, "end");
    ok_got(strcmp(t_buf, "-1234567890123 -5 6 7 ff FF 00042 9   | +3 2.2 "
                         " 3.14 1.000000e+10 % "
                         "end") == 0 ||
               strcmp(t_buf, "-1234567890123 -5 6 7 ff FF 00042 9   | +3 2.3  3.14 1.000000e+10 "
                             "% end") == 0,
           t_buf, "ctl_fprintf: numbers as printf prints them");
    T_PRINT("%*d|%-*s|", 4, 12, 4, "z");
    ok_got(strcmp(t_buf, "  12|z   |") == 0, t_buf, "ctl_fprintf: * widths");
    T_PRINT("%s", "back\\slash");
    ok_got(strcmp(t_buf, "back\\slash") == 0, t_buf, "ctl_fprintf: a backslash stays single");
    {
        FILE *f = fmemopen(t_buf, sizeof(t_buf), "w");
        ctl_put(f, "a\\b\tc\xff", 6);
        fclose(f);
        ok_got(strcmp(t_buf, "a\\\\b\\tc\\xff") == 0, t_buf,
               "ctl_put: a field with its backslash doubled, tab and bad byte escaped");
    }
    {
        char *big = malloc(5000);
        memset(big, 0x07, 4999);
        big[4999] = '\0';
        T_PRINT("%s", big);
        ok(strlen(t_buf) == sizeof(t_buf) - 1 && !t_has_control(t_buf),
           "ctl_fprintf: a long field (beyond the stack buffer) is escaped too");
        free(big);
    }
    return done();
}
