/* trust.h: whether a file idemd acts on (a plugin, the config file) is safe from other users. */
#ifndef IDEMD_TRUST_H
#define IDEMD_TRUST_H

#include <stddef.h>

/*
 * Opens the file at walk for reading when nobody but root and the user we run as (euid) can
 * change it, and returns the descriptor (the caller closes it), or -1 with "PATH: refused: WHY:
 * FIX" or "PATH: cannot open: ..." in err (path is the file as the caller names it). The path
 * is walked from / one component at a time on descriptors, links followed by hand, so the
 * objects checked are the ones read: every directory on the real path is owned by root or
 * euid and writable by its owner only, or sticky (like /tmp), and then what is on the path in
 * it (a directory, a link, the file) is owned by root or euid, since there nobody else may
 * rename or remove it; the file is a regular file owned by root or euid and writable by its
 * owner only. real (reallen bytes; NULL: not wanted) receives the real path. what names the
 * kind of file for the messages ("a plugin", "a config file"). Logs nothing.
 */
int trust_open(const char *path, const char *walk, const char *what, char *real, size_t reallen,
               char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
