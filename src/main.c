/* main.c: command line of idemd: check a configuration, or run the supervisor. */
#include <errno.h>
#include <getopt.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>

#include "conf.h"
#include "log.h"
#include "plugin.h"
#include "sqlh.h"
#include "supervisor.h"

#define IDEMD_VERSION "0.1.0"

static void main_usage(FILE *out)
{
    fprintf(out,
            "usage: idemd -c FILE [--check-config] [--log-level LEVEL] [--allow-root]\n"
            "  -c, --config FILE     configuration file (libconfig syntax)\n"
            "  -t, --check-config    validate FILE and the handler plugins, then exit\n"
            "  -l, --log-level L     error, warning, info or debug (overrides the file)\n"
            "  -p, --print-config    with --check-config: print the effective configuration\n"
            "      --offline         with --check-config: check everything that needs no server\n"
            "                        (the SQL handlers' statements are not prepared)\n"
            "      --allow-root      run even as root (refused otherwise)\n"
            "  -V, --version         print the version\n");
}

/* --check-config: the file parsed already; also load every handler, each in a child, to check
 * its ABI, and prepare every SQL handler's statements on the configured database (not when
 * offline: a build host has no database; the statements' kinds were checked at load). */
static int main_check(conf_t *conf, bool print, bool offline)
{
    char err[1024];
    int rc = 0, n_sql = 0;
    for (int i = 0; i < conf->n_queues; i++) {
        char name[256];
        if (sqlh_is(&conf->queues[i])) {
            n_sql++;
            if (!offline && sqlh_check(conf, i, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s\n", err);
                rc = 1;
            }
            continue;
        }
        if (plugin_check(conf->queues[i].handler, name, sizeof(name), err, sizeof(err)) != 0) {
            fprintf(stderr, "%s:%d: queues.[%d].handler: %s\n", conf->path, conf->queues[i].line, i,
                    err);
            rc = 1;
        }
    }
    if (rc == 0) {
        if (print)
            conf_dump(conf, stdout);
        printf("%s: configuration OK (%d queue%s)%s\n", conf->path, conf->n_queues,
               conf->n_queues == 1 ? "" : "s",
               offline && n_sql ? "; offline: the SQL handlers' statements were NOT prepared on "
                                  "a database (run --check-config without --offline where it "
                                  "is reachable)"
                                : "");
    }
    conf_free(conf);
    return rc;
}

/* Say what each queue's settings leave at risk: on stderr for --check-config, else in the log. */
static void main_risks(const conf_t *conf, bool check)
{
    char note[1024];
    for (int i = 0; i < conf->n_queues; i++) {
        if (!conf_queue_risk(conf, i, note, sizeof(note)))
            continue;
        if (check)
            fprintf(stderr, "warning: %s\n", note);
        else
            log_warn("%s", note);
    }
}

int main(int argc, char **argv)
{
    /* One option a line: tests/integration/t_install_man.sh reads them from here. */
    /* clang-format off */
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'l'},
        {"print-config", no_argument, NULL, 'p'},
        {"offline", no_argument, NULL, 'O'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {"allow-root", no_argument, NULL, 'R'},
        {NULL, 0, NULL, 0},
    };
    /* clang-format on */
    const char *path = NULL, *level = NULL;
    bool check = false, print = false, allow_root = false, offline = false;
    char err[1024];
    conf_t *conf = NULL;
    int c;

    while ((c = getopt_long(argc, argv, "c:tl:pVh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 't':
            check = true;
            break;
        case 'l':
            level = optarg;
            break;
        case 'p':
            print = true;
            break;
        case 'V':
            printf("idemd %s\n", IDEMD_VERSION);
            return 0;
        case 'h':
            main_usage(stdout);
            return 0;
        case 'R':
            allow_root = true;
            break;
        case 'O':
            offline = true;
            break;
        default:
            main_usage(stderr);
            return 2;
        }
    }
    if (path == NULL || optind != argc || (offline && !check)) {
        main_usage(stderr);
        return 2;
    }
    /* Handlers run inside idemd: as root a plugin bug is a root compromise. */
    if ((getuid() == 0 || geteuid() == 0) && !allow_root) {
        fprintf(stderr, "idemd: refusing to run as root: run it as its own service user (User= in "
                        "the systemd unit; for a check, sudo -u idemd idemd --check-config -c "
                        "FILE), or pass --allow-root\n");
        return 1;
    }
    /* Before the passwords are read: no core dump, and no ptrace or /proc/PID/mem by
     * other processes of the same user. Workers inherit it (and set it again). */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        fprintf(stderr, "idemd: prctl(PR_SET_DUMPABLE, 0): %s\n", strerror(errno));
    if (conf_load(path, &conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (int i = 0; i < conf->n_warnings; i++)
        fprintf(stderr, "warning: %s\n", conf->warnings[i]);
    if (check) {
        main_risks(conf, true);
        return main_check(conf, print, offline);
    }
    int override = -1;
    log_set_level((log_level_t)conf->log_level);
    if (level) {
        override = log_level_parse(level);
        if (override < 0) {
            fprintf(stderr, "idemd: unknown log level '%s'\n", level);
            conf_free(conf);
            return 2;
        }
        log_set_level((log_level_t) override);
    }
    /* Before any fork: the client library's global state. */
    if (mysql_library_init(0, NULL, NULL) != 0) {
        log_error("cannot initialise the MySQL client library");
        conf_free(conf);
        return 1;
    }
    log_info("idemd %s starting with %s", IDEMD_VERSION, path);
    main_risks(conf, false);
    int rc = supervisor_run(conf, override, IDEMD_VERSION);
    mysql_library_end();
    return rc;
}
