/* ctl_out.c: everything idemctl writes goes out here, every text field through log_escape. */
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
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

void ctl_json_flush(ctl_t *ctl)
{
    if (ctl->out == NULL)
        return;
    /* json-c escapes what a string holds (control bytes as \u00XX): the document goes as is. */
    fputs(json_object_to_json_string_ext(ctl->out, JSON_C_TO_STRING_PLAIN), stdout);
    fputc('\n', stdout);
    json_object_put(ctl->out);
    ctl->out = NULL;
}
