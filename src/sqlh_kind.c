/* sqlh_kind.c: refuses SQL-handler statements that could end or change idemd's transaction. */
#include "sqlh_kind.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Statement kinds a handler may run: none of them ends the transaction. */
static const char *const sqlh_kind_allowed[] = {
    "SELECT", "INSERT", "REPLACE", "UPDATE", "DELETE", "CALL",
    "WITH",   "VALUES", "TABLE",   "DO",     NULL,
};

/* First keywords of the manuals' "Statements That Cause an Implicit Commit" and of transaction
 * control (MySQL 9.7, MariaDB 10.11): named as such in the refusal. */
static const char *const sqlh_kind_enders[] = {
    "COMMIT",  "ROLLBACK", "START",    "BEGIN",     "SAVEPOINT", "RELEASE",  "XA",       "LOCK",
    "UNLOCK",  "CREATE",   "ALTER",    "DROP",      "RENAME",    "TRUNCATE", "GRANT",    "REVOKE",
    "SET",     "ANALYZE",  "OPTIMIZE", "REPAIR",    "CHECK",     "CHECKSUM", "FLUSH",    "RESET",
    "LOAD",    "CACHE",    "INSTALL",  "UNINSTALL", "CHANGE",    "STOP",     "SHUTDOWN", "KILL",
    "HANDLER", "PURGE",    "IMPORT",   "BACKUP",    "END",       NULL,
};

/* What one scan of the text found. */
typedef struct sqlh_kind_scan {
    bool exec_comment; /* an executable comment outside literals */
    bool second;       /* code after a ';' */
    bool open_comment; /* a comment never closed */
} sqlh_kind_scan_t;

/* Whether word (n bytes) is in list. */
static bool sqlh_kind_in(const char *const *list, const char *word, size_t n)
{
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == n && strncasecmp(list[i], word, n) == 0)
            return true;
    return false;
}

/* The length of the comment at p (0 when none starts there); *exec when executable, *open when
 * it never closes. */
static size_t sqlh_kind_comment(const char *p, bool *exec, bool *open)
{
    const char *e;

    *exec = false;
    *open = false;
    if (p[0] == '#' ||
        (p[0] == '-' && p[1] == '-' && (p[2] == '\0' || (p[2] > 0 && p[2] <= ' ')))) {
        e = strchr(p, '\n');
        return e ? (size_t)(e - p) + 1 : strlen(p);
    }
    if (p[0] != '/' || p[1] != '*')
        return 0;
    *exec = p[2] == '!' || (p[2] == 'M' && p[3] == '!');
    if ((e = strstr(p + 2, "*/")) == NULL) {
        *open = true;
        return strlen(p);
    }
    return (size_t)(e - p) + 2;
}

/* Skip whitespace and comments from p, noting what the comments are in s. */
static const char *sqlh_kind_skip(const char *p, sqlh_kind_scan_t *s)
{
    for (;;) {
        bool exec, open;
        size_t n;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v')
            p++;
        if ((n = sqlh_kind_comment(p, &exec, &open)) == 0)
            return p;
        s->exec_comment |= exec;
        s->open_comment |= open;
        p += n;
    }
}

/* Scan all of sql outside literals, with or without backslash escapes in them. */
static void sqlh_kind_scan(const char *sql, bool backslash, sqlh_kind_scan_t *s)
{
    const char *p = sql;

    memset(s, 0, sizeof(*s));
    while (*p) {
        const char *q = sqlh_kind_skip(p, s);
        if (q != p) {
            p = q;
            continue;
        }
        if (*p == '\'' || *p == '"' || *p == '`') {
            char quote = *p++;
            while (*p) {
                if (backslash && quote != '`' && *p == '\\' && p[1]) {
                    p += 2;
                } else if (*p == quote && p[1] == quote) {
                    p += 2; /* a doubled quote stands for itself */
                } else if (*p == quote) {
                    p++;
                    break;
                } else {
                    p++;
                }
            }
            continue;
        }
        if (*p == ';') {
            p = sqlh_kind_skip(p + 1, s);
            while (*p == ';')
                p = sqlh_kind_skip(p + 1, s);
            if (*p)
                s->second = true;
            return;
        }
        p++;
    }
}

int sqlh_kind_check(const char *sql, char *why, size_t len)
{
    sqlh_kind_scan_t a, b, first;
    const char *p, *w;

    sqlh_kind_scan(sql, true, &a);
    sqlh_kind_scan(sql, false, &b);
    if (a.exec_comment || b.exec_comment) {
        snprintf(why, len,
                 ": executable comments are not allowed in a handler statement (their text runs "
                 "as SQL on some servers and versions)");
        return -1;
    }
    if (a.open_comment && b.open_comment) {
        snprintf(why, len, ": a comment that never ends ('/*' without '*/')");
        return -1;
    }
    if (a.second || b.second) {
        snprintf(why, len, ": a second statement after ';': give each statement its own sql entry");
        return -1;
    }
    memset(&first, 0, sizeof(first));
    p = sqlh_kind_skip(sql, &first);
    while (*p == '(')
        p = sqlh_kind_skip(p + 1, &first);
    for (w = p; (*w >= 'A' && *w <= 'Z') || (*w >= 'a' && *w <= 'z') || *w == '_'; w++)
        ;
    if (w == p) {
        snprintf(why, len, p[0] ? ": does not start with a keyword" : ": is empty");
        return -1;
    }
    if (sqlh_kind_in(sqlh_kind_allowed, p, (size_t)(w - p)))
        return 0;
    if (sqlh_kind_in(sqlh_kind_enders, p, (size_t)(w - p)))
        snprintf(why, len, " (%.*s) would end idemd's transaction: not allowed in a handler",
                 (int)(w - p > 32 ? 32 : w - p), p);
    else
        snprintf(why, len,
                 " (%.*s) is not allowed in a handler: a handler statement is a SELECT, INSERT, "
                 "REPLACE, UPDATE, DELETE, CALL, WITH, VALUES, TABLE or DO",
                 (int)(w - p > 32 ? 32 : w - p), p);
    return -1;
}
