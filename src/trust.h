/* trust.h: whether a file idemd acts on (a plugin, the config file) is safe from other users. */
#ifndef IDEMD_TRUST_H
#define IDEMD_TRUST_H

#include <stddef.h>

/*
 * Whether nobody but root and the user we run as (euid) can change the file at real (a path
 * with no symlink left, from realpath): the file and every directory above it are owned by
 * root or euid and writable by their owner only; a directory others may write to is accepted
 * when it is sticky and owned by root (/tmp), where nobody else may rename or remove our
 * file. what names the kind of file for the message ("a plugin", "a config file"). 0, or -1
 * with "PATH: refused: WHY: FIX" in err (path as the caller names it). Logs nothing.
 */
int trust_check(const char *path, const char *real, const char *what, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
