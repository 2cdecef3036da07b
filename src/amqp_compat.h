/* amqp_compat.h: rabbitmq-c headers under the names each version has (0.14+: <rabbitmq-c/...>). */
#ifndef IDEMD_AMQP_COMPAT_H
#define IDEMD_AMQP_COMPAT_H

/* librabbitmq 0.14+ (Debian 13: 0.15) still ships <amqp.h>, but with a #warning that -Werror
 * turns into an error; 0.11 (Debian 12) has only the old names. */
#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif

#endif
