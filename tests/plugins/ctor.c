/* ctor.c: a test plugin whose constructor runs on load: it notes its pid in a marker file and
 * starts a thread, so a test can tell which processes ran plugin code. */
#include <idemd/handler.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *ctor_sleeper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/*
 * IDEMD_TEST_MARKER: append "PID\n" to that file. IDEMD_TEST_CTOR_ABORT: abort() (a plugin that
 * crashes its loader). Then a thread that sleeps for ever, which a single-threaded host would
 * notice.
 */
__attribute__((constructor)) static void ctor_on_load(void)
{
    const char *marker = getenv("IDEMD_TEST_MARKER");
    pthread_t t;

    if (marker != NULL) {
        FILE *f = fopen(marker, "a");
        if (f != NULL) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    if (getenv("IDEMD_TEST_CTOR_ABORT") != NULL)
        abort();
    if (pthread_create(&t, NULL, ctor_sleeper, NULL) == 0)
        pthread_detach(t);
}

static idemd_result_t ctor_handle(void *state, MYSQL *db, const idemd_message_t *msg, char *err,
                                  size_t errlen)
{
    (void)state;
    (void)db;
    (void)msg;
    (void)err;
    (void)errlen;
    return IDEMD_RESULT_OK;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "ctor",
    .handle = ctor_handle,
};
