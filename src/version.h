/* version.h: the oldest RabbitMQ, MariaDB and MySQL idemd runs on, and checking a server's version.
 */
#ifndef IDEMD_VERSION_H
#define IDEMD_VERSION_H

#include <stddef.h>

/* The servers idemd checks at connect (docs/compat.md says why these minimums). */
typedef enum version_server {
    VERSION_RABBITMQ = 0,
    VERSION_MARIADB = 1,
    VERSION_MYSQL = 2,
} version_server_t;

/* A release number; patch is -1 when the server gave only major.minor. */
typedef struct version {
    int major, minor, patch;
} version_t;

/* RabbitMQ 3.10: quorum queues with message TTL and at-least-once dead-lettering. */
#define VERSION_MIN_RABBITMQ                                                                       \
    {                                                                                              \
        3, 10, 0                                                                                   \
    }
/* MariaDB 10.6: the oldest release series idemd supports (docs/compat.md). */
#define VERSION_MIN_MARIADB                                                                        \
    {                                                                                              \
        10, 6, 0                                                                                   \
    }
/* MySQL 8.0.11: the first 8.0 GA (transaction_isolation; 5.7 is out of support). */
#define VERSION_MIN_MYSQL                                                                          \
    {                                                                                              \
        8, 0, 11                                                                                   \
    }

typedef enum version_verdict {
    VERSION_TOO_OLD = -1, /* older than the minimum: refuse the server */
    VERSION_OK = 0,
    VERSION_UNKNOWN = 1, /* no version idemd can read: warn and go on */
} version_verdict_t;

/*
 * Read "MAJOR.MINOR[.PATCH]" from the start of s; whatever follows (a
 * suffix like "-MariaDB-log", "-rc.1", "+deb12u1") is ignored. 0, or -1
 * when s does not start so or the major version is 0 (a development
 * build's "0.0.0").
 */
int version_parse(const char *s, version_t *v);

/*
 * Compare a with b: <0, 0 or >0. A missing patch (-1) compares below any
 * patch, so callers that must not refuse on it check patch themselves.
 */
int version_cmp(const version_t *a, const version_t *b);

/* "RabbitMQ", "MariaDB" or "MySQL". */
const char *version_server_name(version_server_t server);

/*
 * Which database server a server_info string (mysql_get_server_info) is:
 * MariaDB when it says "MariaDB" anywhere, else MySQL (Percona Server and
 * other MySQL builds included).
 */
version_server_t version_db_flavour(const char *server_info);

/*
 * The minimum for server into *min: the built-in one above. Test builds
 * (-DIDEMD_TESTING) raise it (never lower it) by the environment variable
 * IDEMD_TEST_MIN_RABBITMQ, IDEMD_TEST_MIN_MARIADB or IDEMD_TEST_MIN_MYSQL
 * ("MAJOR.MINOR.PATCH"), to exercise the refusal on servers that pass; the
 * release binaries do not read them.
 */
void version_minimum(version_server_t server, version_t *min);

/*
 * Check the version server reported (reported may be NULL: it sent none)
 * against min. VERSION_OK; VERSION_TOO_OLD with the reason in msg ("MariaDB
 * 10.5.2 is older than 10.6.0, the oldest idemd supports: upgrade the
 * server"); VERSION_UNKNOWN with a warning in msg. msg is always a string
 * (empty for VERSION_OK); reported is only read during the call.
 */
version_verdict_t version_check(version_server_t server, const char *reported, const version_t *min,
                                char *msg, size_t len);

#endif
