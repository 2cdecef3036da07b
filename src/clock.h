/* clock.h: idemd's one clock: monotonic time for intervals and deadlines, wall time for headers and
 * logs. */
#ifndef IDEMD_CLOCK_H
#define IDEMD_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC: intervals, deadlines, progress. Never goes back. */
uint64_t clock_mono_ms(void);
uint64_t clock_mono_us(void);
uint64_t clock_mono_ns(void); /* pacing (idemctl's --rate) */

/* CLOCK_REALTIME: what another host reads (copies' headers, latencies from a publisher's stamp). */
uint64_t clock_wall_ms(void);
uint64_t clock_wall_us(void);

/* The same clocks as port_clock_ops_t's now_ms, now_us and wall_ms (port.h) take them: ctx is
 * ignored. The daemon's real clock ports (supervisor, worker) share these. */
uint64_t clock_port_mono_ms(void *ctx);
uint64_t clock_port_mono_us(void *ctx);
uint64_t clock_port_wall_ms(void *ctx);

#endif
