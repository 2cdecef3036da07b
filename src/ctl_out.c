/* ctl_out.c: everything idemctl writes goes out here, every text field through log_escape. */
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <json-c/printbuf.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "log.h"

#define CTL_OUT_STACK 1024 /* fields up to this escaped size need no malloc */

/*
 * Write len bytes of s to f through log_escape (with flags), padded with
 * spaces to width columns (left-aligned when left): the bytes of a field
 * never reach the terminal as they are.
 */
static void ctl_out_field(FILE *f, const char *s, size_t len, unsigned flags, int width, bool left)
{
    char stack[CTL_OUT_STACK], *buf = stack;
    size_t need = len * 4 + 1;

    if (need > sizeof(stack) && (buf = malloc(need)) == NULL) {
        fputs("(out of memory)", f);
        return;
    }
    (void)log_escape(s, len, flags, buf, need);
    fprintf(f, left ? "%-*s" : "%*s", width, buf);
    if (buf != stack)
        free(buf);
}

void ctl_put(FILE *f, const char *s, size_t len)
{
    ctl_out_field(f, s, len, LOG_ESC_BACKSLASH, 0, false);
}

void ctl_puts(FILE *f, const char *s)
{
    ctl_out_field(f, s, strlen(s), LOG_ESC_BACKSLASH, 0, false);
}

/* One conversion of a format, as ctl_conv_parse reads it. */
typedef struct ctl_conv {
    char flags[8]; /* "-+ #0'" as given, at most 7 */
    char len[3];   /* the length modifier: "", hh h l ll z j t L */
    int width;     /* 0 when none */
    int prec;      /* -1 when none */
    bool left;     /* '-', or a negative * width */
} ctl_conv_t;

/*
 * Read the flags, width, precision and length modifier of a conversion
 * from *pp (just past its '%') into c, taking the * arguments from ap;
 * *pp is left at the conversion's letter.
 */
static void ctl_conv_parse(const char **pp, va_list *ap, ctl_conv_t *c)
{
    const char *p = *pp;
    size_t nf = 0;

    c->width = 0;
    c->prec = -1;
    c->left = false;
    c->len[0] = '\0';
    while (*p && strchr("-+ #0'", *p)) {
        c->left |= *p == '-';
        if (nf < sizeof(c->flags) - 1)
            c->flags[nf++] = *p;
        p++;
    }
    c->flags[nf] = '\0';
    if (*p == '*') {
        c->width = va_arg(*ap, int);
        if (c->width < 0)
            c->left = true, c->width = -c->width;
        p++;
    } else {
        while (isdigit((unsigned char)*p))
            c->width = c->width * 10 + (*p++ - '0');
    }
    if (*p == '.') {
        p++;
        c->prec = 0;
        if (*p == '*') {
            c->prec = va_arg(*ap, int);
            p++;
        } else {
            while (isdigit((unsigned char)*p))
                c->prec = c->prec * 10 + (*p++ - '0');
        }
    }
    if ((p[0] == 'h' && p[1] == 'h') || (p[0] == 'l' && p[1] == 'l'))
        c->len[0] = *p++, c->len[1] = *p++, c->len[2] = '\0';
    else if (*p && strchr("hlzjtL", *p))
        c->len[0] = *p++, c->len[1] = '\0';
    *pp = p;
}

/* An integer conversion (d i u o x X) of c, its argument taken from ap, printed as it is. */
static void ctl_out_int(FILE *f, const ctl_conv_t *c, char conv, va_list *ap)
{
    bool sig = conv == 'd' || conv == 'i';
    char spec[24];
    int width = c->width, prec = c->prec;
    const char *len = c->len;

    snprintf(spec, sizeof(spec), "%%%s*.*%s%c", c->flags, len, conv);
    if (!strcmp(len, "l"))
        sig ? fprintf(f, spec, width, prec, va_arg(*ap, long))
            : fprintf(f, spec, width, prec, va_arg(*ap, unsigned long));
    else if (!strcmp(len, "ll"))
        sig ? fprintf(f, spec, width, prec, va_arg(*ap, long long))
            : fprintf(f, spec, width, prec, va_arg(*ap, unsigned long long));
    else if (!strcmp(len, "z"))
        fprintf(f, spec, width, prec, va_arg(*ap, size_t));
    else if (!strcmp(len, "j"))
        sig ? fprintf(f, spec, width, prec, va_arg(*ap, intmax_t))
            : fprintf(f, spec, width, prec, va_arg(*ap, uintmax_t));
    else if (!strcmp(len, "t"))
        fprintf(f, spec, width, prec, va_arg(*ap, ptrdiff_t));
    else /* int, and hh and h, which arrive promoted to int */
        sig ? fprintf(f, spec, width, prec, va_arg(*ap, int))
            : fprintf(f, spec, width, prec, va_arg(*ap, unsigned));
}

/* A floating conversion (f F e E g G a A) of c, its argument taken from ap, printed as it is. */
static void ctl_out_float(FILE *f, const ctl_conv_t *c, char conv, va_list *ap)
{
    char spec[24];

    snprintf(spec, sizeof(spec), "%%%s*.*%s%c", c->flags, c->len, conv);
    if (!strcmp(c->len, "L"))
        fprintf(f, spec, c->width, c->prec, va_arg(*ap, long double));
    else
        fprintf(f, spec, c->width, c->prec, va_arg(*ap, double));
}

/*
 * vfprintf, except that the text of every %s, %c and %m conversion goes
 * through log_escape: the format's own text (newlines and tabs included) is
 * idemctl's and goes out as it is, what the arguments hold never does.
 * Backslashes stay single here (an argument may be log_quote's text, whose
 * escapes must read as such); ctl_put shows a whole field unambiguously.
 * Handles the conversions gcc's format checking allows idemctl to use:
 * flags, width and precision (also *), the length modifiers hh h l ll z j t
 * L, and d i u o x X c s p f F e E g G a A m %.
 */
void ctl_vfprintf(FILE *f, const char *fmt, va_list ap)
{
    int saved = errno;
    const char *p = fmt;
    va_list aq; /* a copy the steps can take by address (C11 7.16 p3) */

    va_copy(aq, ap);
    while (*p) {
        if (*p != '%') {
            size_t n = strcspn(p, "%");
            fwrite(p, 1, n, f);
            p += n;
            continue;
        }
        const char *start = p++;
        ctl_conv_t c;

        if (*p == '%') {
            fputc('%', f);
            p++;
            continue;
        }
        ctl_conv_parse(&p, &aq, &c);
        char conv = *p ? *p++ : '\0';
        switch (conv) {
        case 's': {
            const char *s = va_arg(aq, const char *);
            if (s == NULL)
                s = "(null)";
            ctl_out_field(f, s, c.prec >= 0 ? strnlen(s, (size_t)c.prec) : strlen(s), 0, c.width,
                          c.left);
            break;
        }
        case 'c': {
            char ch = (char)va_arg(aq, int);
            ctl_out_field(f, &ch, 1, 0, c.width, c.left);
            break;
        }
        case 'm': {
            const char *s = strerror(saved);
            ctl_out_field(f, s, strlen(s), 0, c.width, c.left);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X':
            ctl_out_int(f, &c, conv, &aq);
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
        case 'a':
        case 'A':
            ctl_out_float(f, &c, conv, &aq);
            break;
        case 'p':
            fprintf(f, c.left ? "%-*p" : "%*p", c.width, va_arg(aq, void *));
            break;
        default: /* not a conversion idemctl uses (gcc checks): shown as written */
            fwrite(start, 1, (size_t)(p - start), f);
            break;
        }
    }
    va_end(aq);
    errno = saved;
}

void ctl_fprintf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctl_vfprintf(f, fmt, ap);
    va_end(ap);
}

void ctl_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctl_vfprintf(stdout, fmt, ap);
    va_end(ap);
}

/* ---------- --json: strings that parse as RFC 8259 in valid UTF-8 and carry no raw control
 * ---------- */

/* The length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when it is not one (overlong,
 * a surrogate, past U+10FFFF, cut short). *cp gets its code point. */
static size_t ctl_utf8_len(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t k;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        k = 2, c &= 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        k = 3, c &= 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        k = 4, c &= 0x07;
    else
        return 0;
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if ((k == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
        (k == 4 && (c < 0x10000 || c > 0x10FFFF)))
        return 0;
    *cp = c;
    return k;
}

/* Whether code point cp goes out as \uXXXX: C0, DEL, C1, the bidi controls (U+202A-U+202E,
 * U+2066-U+2069), the line and paragraph separators (U+2028, U+2029). */
static bool ctl_json_escaped(unsigned cp)
{
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029;
}

/* json-c's serializer of a ctl_json_bytes string (valid UTF-8 already): the escapes above. */
static int ctl_json_ser(json_object *o, struct printbuf *pb, int level, int flags)
{
    const unsigned char *s = (const unsigned char *)json_object_get_string(o);
    size_t n = (size_t)json_object_get_string_len(o), i = 0, run = 0;
    char esc[8];
    (void)level;
    (void)flags;
    printbuf_memappend(pb, "\"", 1);
    while (i < n) {
        unsigned cp = 0;
        size_t k = ctl_utf8_len(s + i, n - i, &cp);
        if (k == 0)
            k = 1, cp = 0xFFFD; /* ctl_json_bytes left none: a guard */
        if (!ctl_json_escaped(cp) && cp != '"' && cp != '\\' && cp != 0xFFFD) {
            i += k;
            run += k;
            continue;
        }
        if (run)
            printbuf_memappend(pb, (const char *)s + i - run, (int)run);
        run = 0;
        if (cp == '"' || cp == '\\')
            snprintf(esc, sizeof(esc), "\\%c", (char)cp);
        else
            snprintf(esc, sizeof(esc), "\\u%04x", cp);
        printbuf_memappend(pb, esc, (int)strlen(esc));
        i += k;
    }
    if (run)
        printbuf_memappend(pb, (const char *)s + n - run, (int)run);
    printbuf_memappend(pb, "\"", 1);
    return 0;
}

json_object *ctl_json_bytes(const void *b, size_t n)
{
    const unsigned char *s = b ? b : (const unsigned char *)"";
    char stack[CTL_OUT_STACK], *buf = stack;
    size_t need = n * 3 + 1, o = 0;
    json_object *j = NULL;

    if (need > sizeof(stack) && (buf = malloc(need)) == NULL)
        return json_object_new_string("(out of memory)");
    /* Invalid UTF-8 becomes U+FFFD, one per byte: the document is valid UTF-8. */
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t k = ctl_utf8_len(s + i, n - i, &cp);
        if (k == 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(buf + o, s + i, k);
        o += k;
        i += k;
    }
    j = json_object_new_string_len(buf, (int)o);
    if (j)
        json_object_set_serializer(j, ctl_json_ser, NULL, NULL);
    if (buf != stack)
        free(buf);
    return j;
}

json_object *ctl_json_text(const char *s)
{
    return ctl_json_bytes(s, s ? strlen(s) : 0);
}

const char *ctl_json_key(const char *k, char *buf, size_t len)
{
    const unsigned char *s = (const unsigned char *)(k ? k : "");
    size_t n = strlen((const char *)s), o = 0;
    for (size_t i = 0; i < n && o + 8 < len;) {
        unsigned cp;
        size_t c = ctl_utf8_len(s + i, n - i, &cp);
        if (c == 0 || ctl_json_escaped(cp)) {
            o += (size_t)snprintf(buf + o, len - o, c ? "\\u%04x" : "\\x%02x", c ? cp : s[i]);
            i += c ? c : 1;
            continue;
        }
        memcpy(buf + o, s + i, c);
        o += c;
        i += c;
    }
    buf[o] = '\0';
    return buf;
}

void ctl_json_flush(ctl_t *ctl)
{
    if (ctl->out == NULL)
        return;
    /* Every string went in through ctl_json_bytes (tests/lint-output): valid UTF-8, controls
     * escaped. The document goes as is. */
    fputs(json_object_to_json_string_ext(ctl->out, JSON_C_TO_STRING_PLAIN), stdout);
    fputc('\n', stdout);
    json_object_put(ctl->out);
    ctl->out = NULL;
}
