/* test_version.c: unit tests of server version parsing, comparison and the minimum check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "version.h"
#include "tap.h"

/* Whether s parses to major.minor.patch. */
static int t_parses(const char *s, int major, int minor, int patch)
{
    version_t v;
    return version_parse(s, &v) == 0 && v.major == major && v.minor == minor && v.patch == patch;
}

/* The verdict for reported against server's built-in minimum; the message in msg. */
static version_verdict_t t_verdict(version_server_t server, const char *reported, char *msg,
                                   size_t len)
{
    version_t min;
    version_minimum(server, &min);
    return version_check(server, reported, &min, msg, len);
}

int main(void)
{
    char msg[400], what[200];
    version_t a, b, min;

    /* What the servers really send (connection.start "version", mysql_get_server_info). */
    ok(t_parses("3.10.8", 3, 10, 8), "RabbitMQ 3.10.8");
    ok(t_parses("4.0.5", 4, 0, 5), "RabbitMQ 4.0.5");
    ok(t_parses("3.13.0-rc.1", 3, 13, 0), "a release candidate's suffix is ignored");
    ok(t_parses("4.1.0+2.g1234abc", 4, 1, 0), "a build suffix is ignored");
    ok(t_parses("10.11.6-MariaDB-0+deb12u1", 10, 11, 6), "MariaDB on Debian 12");
    ok(t_parses("11.8.3-MariaDB-0+deb13u1 from Debian", 11, 8, 3), "MariaDB on Debian 13");
    ok(t_parses("8.0.36-0ubuntu0.22.04.1", 8, 0, 36), "MySQL on Ubuntu");
    ok(t_parses("8.4.3", 8, 4, 3), "MySQL 8.4.3");
    ok(t_parses("8.0.36-28", 8, 0, 36), "Percona Server");
    ok(t_parses("10.6", 10, 6, -1), "major.minor only: patch -1");
    ok(t_parses("8.0.mysql_aurora.3.05.2", 8, 0, -1), "a non-numeric patch is not read");
    ok(version_parse("0.0.0", &a) == -1, "a development build's 0.0.0 is no version");
    ok(version_parse("", &a) == -1, "empty");
    ok(version_parse(NULL, &a) == -1, "NULL");
    ok(version_parse("RabbitMQ 3.10.8", &a) == -1, "text before the number");
    ok(version_parse("10", &a) == -1, "a major version alone");
    ok(version_parse("10.x", &a) == -1, "no minor number");
    ok(version_parse("1234567.1.1", &a) == -1, "a number longer than 6 digits");
    ok(version_parse(".1.2", &a) == -1, "no major number");

    /* Comparison: numeric, not textual. */
    version_parse("3.9.29", &a);
    version_parse("3.10.0", &b);
    ok(version_cmp(&a, &b) < 0 && version_cmp(&b, &a) > 0, "3.9.29 < 3.10.0 (numeric)");
    version_parse("10.11.6", &a);
    version_parse("10.6.0", &b);
    ok(version_cmp(&a, &b) > 0, "10.11.6 > 10.6.0");
    version_parse("4.0.5", &a);
    version_parse("4.0.5-x", &b);
    ok(version_cmp(&a, &b) == 0, "equal");
    version_parse("8.0", &a);
    version_parse("8.0.0", &b);
    ok(version_cmp(&a, &b) < 0, "a missing patch compares below .0");

    /* Flavours. */
    ok(version_db_flavour("10.11.6-MariaDB-0+deb12u1") == VERSION_MARIADB, "MariaDB");
    ok(version_db_flavour("5.5.5-10.4.32-MariaDB-log") == VERSION_MARIADB,
       "MariaDB with the replication prefix");
    ok(version_db_flavour("8.0.36") == VERSION_MYSQL, "MySQL");
    ok(version_db_flavour("8.0.36-28") == VERSION_MYSQL, "Percona Server is MySQL");
    ok(version_db_flavour(NULL) == VERSION_MYSQL, "NULL is MySQL");

    /* The built-in minimums. */
    unsetenv("IDEMD_TEST_MIN_RABBITMQ");
    unsetenv("IDEMD_TEST_MIN_MARIADB");
    unsetenv("IDEMD_TEST_MIN_MYSQL");
    ok(t_verdict(VERSION_RABBITMQ, "3.10.0", msg, sizeof(msg)) == VERSION_OK && !msg[0],
       "RabbitMQ 3.10.0 passes, no message");
    ok(t_verdict(VERSION_RABBITMQ, "4.2.1", msg, sizeof(msg)) == VERSION_OK,
       "RabbitMQ 4.2.1 passes");
    ok(t_verdict(VERSION_RABBITMQ, "3.9.29", msg, sizeof(msg)) == VERSION_TOO_OLD &&
           strstr(msg, "RabbitMQ 3.9.29 is older than 3.10.0, the oldest idemd supports"),
       "RabbitMQ 3.9.29 is refused, the message names both versions");
    ok(t_verdict(VERSION_RABBITMQ, "3.8.35", msg, sizeof(msg)) == VERSION_TOO_OLD,
       "RabbitMQ 3.8 is refused");
    ok(t_verdict(VERSION_MARIADB, "10.6.0-MariaDB", msg, sizeof(msg)) == VERSION_OK,
       "MariaDB 10.6.0 passes");
    ok(t_verdict(VERSION_MARIADB, "10.11.6-MariaDB-0+deb12u1", msg, sizeof(msg)) == VERSION_OK,
       "MariaDB 10.11 passes");
    ok(t_verdict(VERSION_MARIADB, "10.5.26-MariaDB", msg, sizeof(msg)) == VERSION_TOO_OLD &&
           strstr(msg, "MariaDB 10.5.26 is older than 10.6.0"),
       "MariaDB 10.5 is refused");
    ok(t_verdict(VERSION_MARIADB, "5.5.5-10.4.32-MariaDB-log", msg, sizeof(msg)) ==
               VERSION_TOO_OLD &&
           strstr(msg, "MariaDB 10.4.32 is older"),
       "MariaDB's 5.5.5- prefix is skipped, not read as 5.5.5");
    ok(t_verdict(VERSION_MARIADB, "5.5.5-10.11.6-MariaDB", msg, sizeof(msg)) == VERSION_OK,
       "MariaDB 10.11 behind the 5.5.5- prefix passes");
    ok(t_verdict(VERSION_MYSQL, "8.0.11", msg, sizeof(msg)) == VERSION_OK, "MySQL 8.0.11");
    ok(t_verdict(VERSION_MYSQL, "8.4.3", msg, sizeof(msg)) == VERSION_OK, "MySQL 8.4.3");
    ok(t_verdict(VERSION_MYSQL, "9.1.0", msg, sizeof(msg)) == VERSION_OK, "MySQL 9.1.0");
    ok(t_verdict(VERSION_MYSQL, "5.7.44-log", msg, sizeof(msg)) == VERSION_TOO_OLD &&
           strstr(msg, "MySQL 5.7.44 is older than 8.0.11"),
       "MySQL 5.7 is refused");
    ok(t_verdict(VERSION_MYSQL, "8.0.4-rc", msg, sizeof(msg)) == VERSION_TOO_OLD,
       "a MySQL 8.0 development milestone is refused");

    /* Unknown: warn and go on, never refuse. */
    ok(t_verdict(VERSION_RABBITMQ, NULL, msg, sizeof(msg)) == VERSION_UNKNOWN &&
           strstr(msg, "RabbitMQ reports no version") && strstr(msg, "going on"),
       "no version: unknown, going on");
    ok(t_verdict(VERSION_RABBITMQ, "0.0.0", msg, sizeof(msg)) == VERSION_UNKNOWN &&
           strstr(msg, "version \"0.0.0\""),
       "a development build's 0.0.0: unknown");
    ok(t_verdict(VERSION_MYSQL, "8.0.mysql_aurora.3.05.2", msg, sizeof(msg)) == VERSION_UNKNOWN &&
           strstr(msg, "without the patch release"),
       "8.0 without a patch number against 8.0.11: unknown, not refused");
    ok(t_verdict(VERSION_MARIADB, "10.6-MariaDB", msg, sizeof(msg)) == VERSION_OK,
       "10.6 without a patch against 10.6.0: passes");
    ok(t_verdict(VERSION_MARIADB, "10.5-MariaDB", msg, sizeof(msg)) == VERSION_TOO_OLD,
       "10.5 without a patch: refused");
    ok(t_verdict(VERSION_MARIADB, "x\n\x1b[31m\"", msg, sizeof(msg)) == VERSION_UNKNOWN &&
           strchr(msg, '\n') == NULL && strchr(msg, '\x1b') == NULL,
       "control characters in a reported version do not reach the message");

    /* The test hook raises the minimum, and never lowers it. */
    setenv("IDEMD_TEST_MIN_RABBITMQ", "99.0.0", 1);
    version_minimum(VERSION_RABBITMQ, &min);
    ok(min.major == 99 && min.minor == 0 && min.patch == 0, "IDEMD_TEST_MIN_RABBITMQ raises");
    ok(t_verdict(VERSION_RABBITMQ, "4.0.5", msg, sizeof(msg)) == VERSION_TOO_OLD &&
           strstr(msg, "RabbitMQ 4.0.5 is older than 99.0.0"),
       "... so a running broker is refused");
    setenv("IDEMD_TEST_MIN_RABBITMQ", "3.0.0", 1);
    version_minimum(VERSION_RABBITMQ, &min);
    ok(min.major == 3 && min.minor == 10 && min.patch == 0, "... and never lowers");
    setenv("IDEMD_TEST_MIN_MARIADB", "garbage", 1);
    version_minimum(VERSION_MARIADB, &min);
    ok(min.major == 10 && min.minor == 6 && min.patch == 0, "... and garbage is ignored");
    setenv("IDEMD_TEST_MIN_MYSQL", "99.0", 1);
    version_minimum(VERSION_MYSQL, &min);
    ok(min.major == 8 && min.minor == 0 && min.patch == 11, "... and needs MAJOR.MINOR.PATCH");
    setenv("IDEMD_TEST_MIN_MYSQL", "8.0.12", 1);
    version_minimum(VERSION_MYSQL, &min);
    snprintf(what, sizeof(what), "IDEMD_TEST_MIN_MYSQL 8.0.12 gives %d.%d.%d", min.major, min.minor,
             min.patch);
    ok(min.major == 8 && min.minor == 0 && min.patch == 12, "%s", what);

    return done();
}
