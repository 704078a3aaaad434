/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus endpoint: a small HTTP server (libmicrohttpd, on its own thread) that answers
 * GET /metrics with the latest snapshot handed to httpd_publish, and 404 to anything else.
 * The snapshot is swapped under a mutex; a scrape copies it and never touches pipeline state.
 * Clients may be hostile (slowloris, garbage): connections are limited in all and per address,
 * each has a deadline for its request head and one for its response, a head is bounded in
 * size, and when every slot is taken a new connection pushes out the one that has waited
 * longest for its request head, so a scrape gets in at once.
 */
#ifndef TS_HTTPD_H
#define TS_HTTPD_H

#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

/* Connections served at once. */
#define HTTPD_MAX_CONNS 16
/* Connections from one address; more are closed at once. */
#define HTTPD_MAX_PER_IP 4
/* A client idle this long is dropped. */
#define HTTPD_TIMEOUT_S 10
/* A connection has this long to send a whole request head, from its accept or from the end
 * of its previous response, however it trickles it. */
#define HTTPD_HEAD_DEADLINE_S 5
/* ... and this long for its response to be sent (Prometheus's default scrape timeout). */
#define HTTPD_REPLY_DEADLINE_S 10
/* Memory for a connection's request head and buffers: a longer head is answered 431. */
#define HTTPD_CONN_MEMORY_BYTES (16 * 1024)
#define HTTPD_DEFAULT_ADDR "127.0.0.1"

struct httpd;

/* ADDR:PORT, :PORT or PORT (ADDR HTTPD_DEFAULT_ADDR): ADDR a numeric IPv4 address, or IPv6 in
 * brackets ([::1]:9464); PORT 0..65535 (0: any free port). -EINVAL if malformed. */
int httpd_parse_listen(const char *spec, struct sockaddr_storage *addr, socklen_t *addrlen);
/* Binds and starts serving. On failure, says why on err ("cannot listen on 127.0.0.1:9464:
 * Address already in use") and returns a negative errno. */
int httpd_start(struct httpd **out, const char *spec, FILE *err);
/* The address bound, as "127.0.0.1:9464" ("[::1]:9464"); the real port when PORT was 0. */
const char *httpd_address(const struct httpd *h);
/* Replaces the snapshot served; takes ownership of buf (malloc'd). ctx is the struct httpd:
 * the signature of prom_publish_fn. */
void httpd_publish(void *ctx, char *buf, size_t len);
/* Stops the server (waits for its thread) and frees it. NULL is a no-op. */
void httpd_stop(struct httpd *h);

#endif
