/* The rendezvous store's wire constants and framing, shared by its client (store.c) and server
 * (store_server.c). Internal. */
#ifndef ACC_STORE_WIRE_H
#define ACC_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

#define ACC_STORE_PROTO "accelerate-store-2" /* 2: HELLO carries the launch attempt */

enum {
  ACC_STORE_OP_HELLO = 1,
  ACC_STORE_OP_SET = 2,
  ACC_STORE_OP_GET = 3, /* waits until the key exists */
  ACC_STORE_OP_ADD = 4,
  ACC_STORE_OP_CHECK = 5,
  ACC_STORE_OP_BYE = 6
};
enum { ACC_STORE_ST_OK = 0, ACC_STORE_ST_ERR = 1, ACC_STORE_ST_MISSING = 2 };

/* Reads or writes n bytes, waiting with poll until deadline (acc__now() seconds; 0 = none):
 * 0 done, -1 closed or failed, -2 timed out. */
int acc__store_io(int fd, void *buf, size_t n, int writing, double deadline);
/* Writes one frame: u32 length, head byte, then (key != NULL) u16 key length and key, then val. */
int acc__store_send_frame(int fd, uint8_t head, const char *key, size_t klen, const void *val,
                          size_t vlen, double deadline);

struct sockaddr_storage;
/* TCP keepalive and TCP_USER_TIMEOUT on a store connection, so that a partition (a peer that
 * vanished without closing) ends it within about seconds (ACCELERATE_PARTITION_TIMEOUT; 0: off). */
void acc__store_keepalive(int fd, double seconds);
/* ACCELERATE_PARTITION_TIMEOUT, range-checked (default 30). */
acc_result acc__store_partition_timeout(double *out);
/* "host:port" of a peer: numeric, an IPv4-mapped IPv6 address as IPv4, IPv6 as "[addr]:port". */
void acc__store_peer_name(const struct sockaddr_storage *ss, unsigned len, char *buf, size_t cap);

#endif
