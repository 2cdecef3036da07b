/* trust.c: whether a file idemd acts on (a plugin, the config file) is safe from other users. */
#include "trust.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRUST_DEPTH_MAX 128 /* directories held open on the way down */
#define TRUST_LINKS_MAX 40  /* symbolic links followed, as the kernel allows */

/*
 * One walk from / down to the file, component by component, on descriptors: each directory is
 * opened (O_PATH, never following a link) below the one checked before it, and checked on
 * that descriptor, so what is checked is what the next lookup goes through.
 */
typedef struct trust_walk {
    const char *path; /* as the caller names it, for the messages */
    const char *what;
    int dirs[TRUST_DEPTH_MAX]; /* dirs[0] is /, dirs[depth - 1] the current directory */
    struct stat dir_st[TRUST_DEPTH_MAX];
    int depth;
    char real[PATH_MAX]; /* the path of the current directory ("" for /), then of the file */
    char *err;
    size_t errlen;
} trust_walk_t;

/* Whether st may be trusted for who owns it: root or the user we run as. */
static bool trust_owner_ok(const struct stat *st)
{
    return st->st_uid == 0 || st->st_uid == geteuid();
}

/* Whether users other than the owner may add or rename entries of directory st. */
static bool trust_dir_shared(const struct stat *st)
{
    return (st->st_mode & (S_IWGRP | S_IWOTH)) != 0;
}

/* The checks on one directory on the way (st of its descriptor, dir its path). */
static int trust_dir(trust_walk_t *w, const struct stat *st, const char *dir)
{
    if (!trust_owner_ok(st)) {
        snprintf(w->err, w->errlen,
                 "%s: refused: directory %s is owned by uid %u, not by root or the user this "
                 "runs as (uid %u): chown root %s",
                 w->path, dir, (unsigned)st->st_uid, (unsigned)geteuid(), dir);
        return -1;
    }
    if (trust_dir_shared(st) && !(st->st_mode & S_ISVTX)) {
        snprintf(w->err, w->errlen,
                 "%s: refused: directory %s is writable by %s (mode %04o): every directory "
                 "above %s must be writable by its owner only (or sticky, like /tmp, with what "
                 "is on the path in it owned by root or the user this runs as): chmod go-w %s",
                 w->path, dir, (st->st_mode & S_IWOTH) ? "others" : "group",
                 (unsigned)(st->st_mode & 07777), w->what, dir);
        return -1;
    }
    return 0;
}

/*
 * In a sticky directory others may write to, anyone may add an entry but only its owner may
 * rename or remove it (sshd's StrictModes, sudo): an entry on the path there (a directory, a
 * link, the file) must be owned by root or the user we run as. name is the entry's path.
 */
static int trust_entry(trust_walk_t *w, const struct stat *st, const char *name)
{
    const struct stat *parent = &w->dir_st[w->depth - 1];
    if (!trust_dir_shared(parent) || trust_owner_ok(st))
        return 0;
    snprintf(w->err, w->errlen,
             "%s: refused: %s is owned by uid %u, in directory %s that others may write to "
             "(mode %04o): in such a directory what is on the path to %s must be owned by root "
             "or the user this runs as (uid %u)",
             w->path, name, (unsigned)st->st_uid, w->real[0] ? w->real : "/",
             (unsigned)(parent->st_mode & 07777), w->what, (unsigned)geteuid());
    return -1;
}

/* The checks on the file itself, on the descriptor it is read from. */
static int trust_file(trust_walk_t *w, const struct stat *st)
{
    if (!S_ISREG(st->st_mode)) {
        snprintf(w->err, w->errlen, "%s: refused: %s is not a regular file", w->path, w->real);
        return -1;
    }
    if (!trust_owner_ok(st)) {
        snprintf(w->err, w->errlen,
                 "%s: refused: %s is owned by uid %u, not by root or the user this runs as "
                 "(uid %u): chown root %s",
                 w->path, w->real, (unsigned)st->st_uid, (unsigned)geteuid(), w->real);
        return -1;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(w->err, w->errlen,
                 "%s: refused: %s is writable by %s (mode %04o): %s must be writable by its "
                 "owner only: chmod go-w %s",
                 w->path, w->real, (st->st_mode & S_IWOTH) ? "others" : "group",
                 (unsigned)(st->st_mode & 07777), w->what, w->real);
        return -1;
    }
    return 0;
}

/* Say why the walk stopped at name (an errno). Returns -1. */
static int trust_fail(trust_walk_t *w, const char *name, int e)
{
    if (strcmp(name, w->path) == 0)
        snprintf(w->err, w->errlen, "%s: cannot open: %s", w->path, strerror(e));
    else
        snprintf(w->err, w->errlen, "%s: cannot open: %s: %s", w->path, name, strerror(e));
    return -1;
}

/* Enter directory fd (already checked, st its stat), named comp below the current one. */
static int trust_push(trust_walk_t *w, int fd, const struct stat *st, const char *comp)
{
    size_t n = strlen(w->real);
    if (w->depth == TRUST_DEPTH_MAX || n + 1 + strlen(comp) >= sizeof(w->real)) {
        close(fd);
        return trust_fail(w, w->path, ENAMETOOLONG);
    }
    snprintf(w->real + n, sizeof(w->real) - n, "/%s", comp);
    w->dirs[w->depth] = fd;
    w->dir_st[w->depth++] = *st;
    return 0;
}

/* Leave the current directory for its parent (lexically, as in the real path: / stays). */
static void trust_pop(trust_walk_t *w)
{
    if (w->depth <= 1)
        return;
    close(w->dirs[--w->depth]);
    char *slash = strrchr(w->real, '/');
    if (slash)
        *slash = '\0';
}

/*
 * Replace what is left of the path, rest (a buffer of PATH_MAX), by the link fd points to
 * followed by rest; an absolute target starts again at /. 0, or -1 with the error set.
 */
static int trust_follow(trust_walk_t *w, int fd, const char *name, char *rest)
{
    char target[PATH_MAX], joined[PATH_MAX];
    ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);
    if (n < 0)
        return trust_fail(w, name, errno);
    target[n] = '\0';
    if (snprintf(joined, sizeof(joined), "%s/%s", target, rest) >= (int)sizeof(joined))
        return trust_fail(w, name, ENAMETOOLONG);
    memcpy(rest, joined, sizeof(joined));
    if (target[0] == '/')
        while (w->depth > 1)
            trust_pop(w);
    return 0;
}

/* Cut the next component off rest into comp (NAME_MAX + 1): 1, 0 when none is left, -1 when
 * it is longer than a name may be (never cut short: that would name another file). */
static int trust_next(char *rest, char *comp)
{
    char *p = rest;
    while (*p == '/')
        p++;
    size_t n = strcspn(p, "/");
    if (n == 0)
        return 0;
    if (n > NAME_MAX)
        return -1;
    memcpy(comp, p, n);
    comp[n] = '\0';
    /* Shift what is left to the front, byte by byte (forward over itself, which is safe). */
    for (size_t i = 0; (rest[i] = p[n + i]) != '\0'; i++)
        ;
    return 1;
}

/*
 * The last component, a file: opened for reading without following a link, and checked to be
 * the object the O_PATH lookup (st) saw. The open descriptor, or -1 with the error set.
 */
static int trust_open_file(trust_walk_t *w, const char *comp, const struct stat *st)
{
    size_t n = strlen(w->real);
    struct stat fst;

    if (n + 1 + strlen(comp) >= sizeof(w->real))
        return trust_fail(w, w->path, ENAMETOOLONG);
    snprintf(w->real + n, sizeof(w->real) - n, "/%s", comp);
    int fd = openat(w->dirs[w->depth - 1], comp,
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return trust_fail(w, w->real, errno);
    if (fstat(fd, &fst) != 0) {
        trust_fail(w, w->real, errno);
        goto fail;
    }
    if (fst.st_dev != st->st_dev || fst.st_ino != st->st_ino) {
        snprintf(w->err, w->errlen, "%s: refused: %s was replaced while it was opened", w->path,
                 w->real);
        goto fail;
    }
    if (trust_entry(w, &fst, w->real) != 0 || trust_file(w, &fst) != 0)
        goto fail;
    return fd;
fail:
    close(fd);
    return -1;
}

/* One component below the current directory. 1 when it was the file (*fd set), 0 to go on,
 * -1 with the error set. links counts the links followed. */
static int trust_step(trust_walk_t *w, const char *comp, char *rest, int *links, int *fd)
{
    char name[PATH_MAX + NAME_MAX + 2];
    struct stat st;
    int e = openat(w->dirs[w->depth - 1], comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);

    snprintf(name, sizeof(name), "%s/%s", w->real, comp);
    if (e < 0)
        return trust_fail(w, name, errno);
    if (fstat(e, &st) != 0) {
        trust_fail(w, name, errno);
        close(e);
        return -1;
    }
    if (trust_entry(w, &st, name) != 0) {
        close(e);
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        int rc = ++*links > TRUST_LINKS_MAX ? trust_fail(w, name, ELOOP)
                                            : trust_follow(w, e, name, rest);
        close(e);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        if (trust_dir(w, &st, name) != 0) {
            close(e);
            return -1;
        }
        return trust_push(w, e, &st, comp);
    }
    close(e);
    if (rest[strspn(rest, "/")] != '\0')
        return trust_fail(w, name, ENOTDIR);
    *fd = trust_open_file(w, comp, &st);
    return *fd < 0 ? -1 : 1;
}

/* The walk of trust_open over the absolute path in rest (PATH_MAX bytes, consumed). */
static int trust_walk(trust_walk_t *w, char *rest)
{
    char comp[NAME_MAX + 1];
    struct stat st;
    int links = 0, fd = -1, rc;

    w->dirs[0] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (w->dirs[0] < 0)
        return trust_fail(w, "/", errno);
    w->depth = 1;
    if (fstat(w->dirs[0], &st) != 0)
        return trust_fail(w, "/", errno);
    w->dir_st[0] = st;
    if (trust_dir(w, &st, "/") != 0)
        return -1;
    while ((rc = trust_next(rest, comp)) > 0) {
        if (strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0) {
            trust_pop(w);
            continue;
        }
        int step = trust_step(w, comp, rest, &links, &fd);
        if (step < 0)
            return -1;
        if (step == 1)
            return fd;
    }
    return trust_fail(w, w->path, rc < 0 ? ENAMETOOLONG : EISDIR);
}

int trust_open(const char *path, const char *walk, const char *what, char *real, size_t reallen,
               char *err, size_t errlen)
{
    trust_walk_t w = {.path = path, .what = what, .err = err, .errlen = errlen};
    char rest[PATH_MAX], cwd[PATH_MAX];
    int fd = -1;

    err[0] = '\0';
    if (walk[0] == '/')
        cwd[0] = '\0';
    else if (getcwd(cwd, sizeof(cwd)) == NULL)
        return trust_fail(&w, path, errno);
    if (snprintf(rest, sizeof(rest), "%s/%s", cwd, walk) >= (int)sizeof(rest))
        return trust_fail(&w, path, ENAMETOOLONG);
    fd = trust_walk(&w, rest);
    for (int i = 0; i < w.depth; i++)
        close(w.dirs[i]);
    if (fd >= 0 && real && reallen && snprintf(real, reallen, "%s", w.real) >= (int)reallen) {
        close(fd);
        return trust_fail(&w, path, ENAMETOOLONG);
    }
    return fd;
}
