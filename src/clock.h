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

#endif
