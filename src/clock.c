/* clock.c: idemd's one clock: every module reads time here (the worker's clock port too), so tests
 * and the simulator have one place to stand in for it. */
#include "clock.h"

#include <time.h>

/* Read clock id in units per second (1000: ms, 1000000: µs). */
static uint64_t clock_read(clockid_t id, uint64_t per_s)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * per_s + (uint64_t)ts.tv_nsec / (1000000000u / per_s);
}

uint64_t clock_mono_ms(void)
{
    return clock_read(CLOCK_MONOTONIC, 1000);
}

uint64_t clock_mono_us(void)
{
    return clock_read(CLOCK_MONOTONIC, 1000000);
}

uint64_t clock_mono_ns(void)
{
    return clock_read(CLOCK_MONOTONIC, 1000000000);
}

uint64_t clock_wall_ms(void)
{
    return clock_read(CLOCK_REALTIME, 1000);
}

uint64_t clock_wall_us(void)
{
    return clock_read(CLOCK_REALTIME, 1000000);
}

uint64_t clock_port_mono_ms(void *ctx)
{
    (void)ctx;
    return clock_mono_ms();
}

uint64_t clock_port_mono_us(void *ctx)
{
    (void)ctx;
    return clock_mono_us();
}

uint64_t clock_port_wall_ms(void *ctx)
{
    (void)ctx;
    return clock_wall_ms();
}
