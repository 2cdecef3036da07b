/* supervisor.h: the main process: forks and restarts workers, handles signals, talks to systemd. */
#ifndef IDEMD_SUPERVISOR_H
#define IDEMD_SUPERVISOR_H

#include "conf.h"

/*
 * Load every queue's plugin, start the workers and supervise them until
 * SIGTERM/SIGINT. Takes ownership of conf. log_level_override (a level, or
 * -1) wins over the file's log_level, also after a reload; version is
 * shown in idemd_build_info. Returns the process exit status:
 * 0 after a clean stop, 1 when startup failed (logged).
 */
int supervisor_run(conf_t *conf, int log_level_override, const char *version);

#endif
