/* conf_text.c: a configuration's text as libconfig parses it: each file (the main one, every
 * @include) opened once, checked and read on one descriptor, @include expanded, and each line
 * mapped back to its file. */
#include "conf_int.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trust.h"

#define CONF_TEXT_MAX (16 << 20)     /* bytes of text in all, the files together */
#define CONF_TEXT_DEPTH 10           /* @include nesting, as libconfig allows */
#define CONF_TEXT_INCLUDE "@include" /* the directive, as libconfig's scanner knows it */

typedef enum conf_text_state {
    CONF_TEXT_CODE,
    CONF_TEXT_STRING,
    CONF_TEXT_COMMENT, /* a C comment */
} conf_text_state_t;

/* Set "FILE:LINE: ..." (line 0: "FILE: ...") in t's error buffer. Returns -1. */
static int conf_text_error(conf_text_t *t, int fi, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int conf_text_error(conf_text_t *t, int fi, int line, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!t->err || t->errlen == 0)
        return -1;
    if (line > 0)
        snprintf(t->err, t->errlen, "%s:%d: %s", t->files[fi], line, what);
    else
        snprintf(t->err, t->errlen, "%s: %s", t->files[fi], what);
    return -1;
}

/* A copy of buf (len bytes used) in cap bytes; buf is wiped (it may hold passwords) and freed.
 * NULL when out of memory, buf then untouched. */
static char *conf_text_grow(char *buf, size_t len, size_t cap)
{
    char *nb = malloc(cap);
    if (nb && buf) {
        memcpy(nb, buf, len);
        explicit_bzero(buf, len);
        free(buf);
    }
    return nb;
}

/* Append n bytes of file fi, starting at its line, to the text, mapping each new line. */
static int conf_text_put(conf_text_t *t, int fi, const char *s, size_t n, int line)
{
    if (t->len + n + 1 > CONF_TEXT_MAX)
        return conf_text_error(t, fi, line, "the configuration is over %d bytes", CONF_TEXT_MAX);
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *b = conf_text_grow(t->buf, t->len, cap);
        if (!b)
            return conf_text_error(t, fi, line, "out of memory");
        t->buf = b;
        t->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        if (t->at_line_start) {
            if (t->n_map == t->cap_map) {
                int cap = t->cap_map ? t->cap_map * 2 : 64;
                conf_text_line_t *m = realloc(t->map, (size_t)cap * sizeof(*m));
                if (!m)
                    return conf_text_error(t, fi, line, "out of memory");
                t->map = m;
                t->cap_map = cap;
            }
            t->map[t->n_map++] = (conf_text_line_t){.file = fi, .line = line};
        }
        t->buf[t->len++] = s[i];
        t->at_line_start = s[i] == '\n';
        line += s[i] == '\n';
    }
    t->buf[t->len] = '\0';
    return 0;
}

/* End the text's current line, if one is open. */
static int conf_text_end_line(conf_text_t *t, int fi, int line)
{
    return t->at_line_start || t->len == 0 ? 0 : conf_text_put(t, fi, "\n", 1, line);
}

/* Whether p (a line start, in code) opens an @include as libconfig's scanner matches it,
 * ^[ \t]*@include[ \t]+": the offset just past the quote, else 0. */
static size_t conf_text_is_include(const char *p, const char *end)
{
    const char *q = p;
    size_t n = strlen(CONF_TEXT_INCLUDE);
    while (q < end && (*q == ' ' || *q == '\t'))
        q++;
    if ((size_t)(end - q) < n || memcmp(q, CONF_TEXT_INCLUDE, n) != 0)
        return 0;
    q += n;
    if (q == end || (*q != ' ' && *q != '\t'))
        return 0;
    while (q < end && (*q == ' ' || *q == '\t'))
        q++;
    return q < end && *q == '"' ? (size_t)(q + 1 - p) : 0;
}

/* The file name of an @include from p (past the opening quote) to the closing quote, with
 * libconfig's escapes \\ and \" undone, into name. Past the closing quote, or NULL. */
static const char *conf_text_name(const char *p, const char *end, char *name, size_t len)
{
    size_t n = 0;
    for (; p < end && *p != '"' && *p != '\n'; p++) {
        if (*p == '\\' && p + 1 < end && (p[1] == '\\' || p[1] == '"'))
            p++;
        if (n + 1 == len)
            return NULL;
        name[n++] = *p;
    }
    name[n] = '\0';
    return p < end && *p == '"' && n > 0 ? p + 1 : NULL;
}

static int conf_text_file(conf_text_t *t, const char *name, int from, int from_line, int depth);

/* The @include at line of file fi whose name starts at p: its file, read into the text. Past
 * the directive's closing quote, or NULL with the error set. */
static const char *conf_text_include(conf_text_t *t, int fi, int line, const char *p,
                                     const char *end, int depth)
{
    char name[PATH_MAX], full[2 * PATH_MAX];
    const char *after = conf_text_name(p, end, name, sizeof(name));

    if (!after) {
        conf_text_error(t, fi, line, "@include: a file name in quotes on one line expected");
        return NULL;
    }
    if (depth + 1 > CONF_TEXT_DEPTH) {
        conf_text_error(t, fi, line, "@include \"%s\": nested more than %d deep", name,
                        CONF_TEXT_DEPTH);
        return NULL;
    }
    /* A relative name is in the main file's directory (libconfig's include_dir, as before). */
    if (name[0] != '/' && t->dir)
        snprintf(full, sizeof(full), "%s%s%s", t->dir, t->dir[strlen(t->dir) - 1] == '/' ? "" : "/",
                 name);
    else
        snprintf(full, sizeof(full), "%s", name);
    if (conf_text_end_line(t, fi, line) != 0 || conf_text_file(t, full, fi, line, depth + 1) != 0)
        return NULL;
    return after;
}

/* How far one step of the scan moves from p, and the state after it, as libconfig's scanner
 * reads: strings with their \\ and \" escapes, C comments, # and // comments to the line's end.
 * A step of 2 never passes a newline. */
static size_t conf_text_step(conf_text_state_t *state, const char *p, const char *end)
{
    char c = *p, d = p + 1 < end ? p[1] : '\0';
    switch (*state) {
    case CONF_TEXT_CODE:
        if (c == '"')
            *state = CONF_TEXT_STRING;
        if (c == '/' && d == '*') {
            *state = CONF_TEXT_COMMENT;
            return 2;
        }
        if (c == '#' || (c == '/' && d == '/')) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            return (size_t)((nl ? nl : end) - p);
        }
        return 1;
    case CONF_TEXT_STRING:
        if (c == '\\' && (d == '"' || d == '\\'))
            return 2;
        if (c == '"')
            *state = CONF_TEXT_CODE;
        return 1;
    case CONF_TEXT_COMMENT:
        if (c == '*' && d == '/') {
            *state = CONF_TEXT_CODE;
            return 2;
        }
        return 1;
    }
    return 1;
}

/*
 * Copy file fi's text s (n bytes) into the text, each @include replaced by its file's text. The
 * scan follows libconfig's scanner: a directive is seen only at a line start outside strings and
 * comments; what follows it on its line goes on a line of its own, behind an empty comment so that
 * it starts no directive libconfig would see where the file had none.
 */
static int conf_text_scan(conf_text_t *t, int fi, const char *s, size_t n, int depth)
{
    conf_text_state_t state = CONF_TEXT_CODE;
    const char *p = s, *end = s + n, *from = s;
    int line = 1, from_line = 1;
    bool bol = true;

    while (p < end) {
        size_t k = state == CONF_TEXT_CODE && bol ? conf_text_is_include(p, end) : 0;
        if (k) {
            if (conf_text_put(t, fi, from, (size_t)(p - from), from_line) != 0)
                return -1;
            if (!(from = conf_text_include(t, fi, line, p + k, end, depth)) ||
                conf_text_put(t, fi, "/**/", 4, line) != 0)
                return -1;
            p = from;
            from_line = line;
            bol = false;
            continue;
        }
        char c = *p;
        size_t step = conf_text_step(&state, p, end);
        line += c == '\n';
        bol = c == '\n';
        p += step;
    }
    if (state != CONF_TEXT_CODE && depth > 0)
        return conf_text_error(t, fi, line, "the file ends inside a %s",
                               state == CONF_TEXT_STRING ? "string" : "comment");
    if (conf_text_put(t, fi, from, (size_t)(end - from), from_line) != 0)
        return -1;
    return conf_text_end_line(t, fi, line);
}

/* Add name to t's files; its index, or -1 with the error set (from, from_line: who named it). */
static int conf_text_add_name(conf_text_t *t, const char *name, int from, int from_line)
{
    char **f = realloc(t->files, (size_t)(t->n_files + 1) * sizeof(*f));
    if (f)
        t->files = f;
    if (!f || !(t->files[t->n_files] = strdup(name))) {
        if (from >= 0)
            return conf_text_error(t, from, from_line, "out of memory");
        snprintf(t->err, t->errlen, "%s: out of memory", name);
        return -1;
    }
    return t->n_files++;
}

/* Read all of fd (the file fi) into *out (NUL-terminated, the caller frees it), *n bytes. */
static int conf_text_slurp(conf_text_t *t, int fi, int fd, char **out, size_t *n)
{
    size_t len = 0, cap = 4096;
    char *b = malloc(cap);
    *out = NULL;
    if (!b)
        return conf_text_error(t, fi, 0, "out of memory");
    for (;;) {
        if (len + 1 == cap) {
            char *nb = cap > CONF_TEXT_MAX ? NULL : conf_text_grow(b, len, cap * 2);
            if (!nb) {
                explicit_bzero(b, len);
                free(b);
                return conf_text_error(t, fi, 0, "cannot read: over %d bytes", CONF_TEXT_MAX);
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            explicit_bzero(b, len);
            free(b);
            return conf_text_error(t, fi, 0, "cannot read: %s", strerror(errno));
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    b[len] = '\0';
    if (memchr(b, '\0', len)) {
        explicit_bzero(b, len);
        free(b);
        return conf_text_error(t, fi, 0, "holds a NUL byte: not a configuration file");
    }
    *out = b;
    *n = len;
    return 0;
}

/* Open name (named by file from at from_line; from -1: the main file) through trust_open, read
 * it from that one descriptor, and scan it into the text. 0, or -1 with the error set. */
static int conf_text_file(conf_text_t *t, const char *name, int from, int from_line, int depth)
{
    char why[1024], *text = NULL;
    size_t n = 0;
    int fi = conf_text_add_name(t, name, from, from_line);
    if (fi < 0)
        return -1;
    int fd = trust_open(name, name, "a config file", NULL, 0, why, sizeof(why));
    if (fd < 0) {
        if (from < 0)
            snprintf(t->err, t->errlen, "%s", why);
        else
            conf_text_error(t, from, from_line, "@include: %s", why);
        return -1;
    }
    int rc = conf_text_slurp(t, fi, fd, &text, &n);
    close(fd);
    if (rc == 0)
        rc = conf_text_scan(t, fi, text, n, depth);
    if (text)
        explicit_bzero(text, n); /* it may hold passwords */
    free(text);
    return rc;
}

int conf_text_read(conf_text_t *t, const char *path, char *err, size_t errlen)
{
    char *slash;

    memset(t, 0, sizeof(*t));
    t->err = err;
    t->errlen = errlen;
    t->at_line_start = true;
    /* @include names are relative to the main file's directory. */
    if (!(t->dir = strdup(path))) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if ((slash = strrchr(t->dir, '/')))
        slash[slash == t->dir ? 1 : 0] = '\0';
    else {
        free(t->dir);
        t->dir = NULL;
    }
    if (conf_text_file(t, path, -1, 0, 0) != 0)
        return -1;
    return conf_text_put(t, 0, "", 0, 0);
}

void conf_text_where(const conf_text_t *t, int line, const char **file, int *file_line)
{
    if (t->n_map == 0) {
        *file = t->n_files ? t->files[0] : "";
        *file_line = line;
        return;
    }
    if (line < 1)
        line = 1;
    if (line > t->n_map) {
        const conf_text_line_t *m = &t->map[t->n_map - 1];
        *file = t->files[m->file];
        *file_line = m->line + (line - t->n_map);
        return;
    }
    *file = t->files[t->map[line - 1].file];
    *file_line = t->map[line - 1].line;
}

void conf_text_fix(const conf_text_t *t, config_setting_t *s)
{
    const char *file;
    int line;
    if (s == NULL)
        return;
    if (s->line > 0) {
        conf_text_where(t, (int)s->line, &file, &line);
        s->file = file;
        s->line = (unsigned)line;
    }
    if (!config_setting_is_aggregate(s))
        return;
    for (int i = 0; i < config_setting_length(s); i++)
        conf_text_fix(t, config_setting_get_elem(s, (unsigned)i));
}

char **conf_text_take_files(conf_text_t *t, int *n)
{
    char **f = t->files;
    *n = t->n_files;
    t->files = NULL;
    t->n_files = 0;
    return f;
}

void conf_text_free(conf_text_t *t)
{
    if (t == NULL)
        return;
    if (t->buf)
        explicit_bzero(t->buf, t->len);
    free(t->buf);
    free(t->map);
    for (int i = 0; i < t->n_files; i++)
        free(t->files[i]);
    free(t->files);
    free(t->dir);
    memset(t, 0, sizeof(*t));
}
