/* trust.c: whether a file idemd acts on (a plugin, the config file) is safe from other users. */
#include "trust.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether st may be trusted for who owns it: root or the user we run as. */
static bool trust_owner_ok(const struct stat *st)
{
    return st->st_uid == 0 || st->st_uid == geteuid();
}

/* The checks of trust_check on one directory above the file. */
static int trust_dir(const char *path, const char *dir, const char *what, char *err, size_t errlen)
{
    struct stat st;

    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "%s: refused: cannot stat directory %s: %s", path, dir,
                 strerror(errno));
        return -1;
    }
    if (!trust_owner_ok(&st)) {
        snprintf(err, errlen,
                 "%s: refused: directory %s is owned by uid %u, not by root or the user this "
                 "runs as (uid %u): chown root %s",
                 path, dir, (unsigned)st.st_uid, (unsigned)geteuid(), dir);
        return -1;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !((st.st_mode & S_ISVTX) && st.st_uid == 0)) {
        snprintf(err, errlen,
                 "%s: refused: directory %s is writable by %s (mode %04o): every directory "
                 "above %s must be writable by its owner only (or sticky and owned by root): "
                 "chmod go-w %s",
                 path, dir, (st.st_mode & S_IWOTH) ? "others" : "group",
                 (unsigned)(st.st_mode & 07777), what, dir);
        return -1;
    }
    return 0;
}

int trust_check(const char *path, const char *real, const char *what, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    struct stat st;

    if (stat(real, &st) != 0) {
        snprintf(err, errlen, "%s: refused: cannot stat %s: %s", path, real, strerror(errno));
        return -1;
    }
    if (!trust_owner_ok(&st)) {
        snprintf(err, errlen,
                 "%s: refused: %s is owned by uid %u, not by root or the user this runs as "
                 "(uid %u): chown root %s",
                 path, real, (unsigned)st.st_uid, (unsigned)geteuid(), real);
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "%s: refused: %s is writable by %s (mode %04o): %s must be writable by its "
                 "owner only: chmod go-w %s",
                 path, real, (st.st_mode & S_IWOTH) ? "others" : "group",
                 (unsigned)(st.st_mode & 07777), what, real);
        return -1;
    }
    if (snprintf(dir, sizeof(dir), "%s", real) >= (int)sizeof(dir)) {
        snprintf(err, errlen, "%s: refused: path too long", path);
        return -1;
    }
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (slash == NULL)
            break;
        if (slash == dir)
            return trust_dir(path, "/", what, err, errlen);
        *slash = '\0';
        if (trust_dir(path, dir, what, err, errlen) != 0)
            return -1;
    }
    return 0;
}
