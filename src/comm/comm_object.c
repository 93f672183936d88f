/* Byte-blob collectives (Accelerate's gather_object / broadcast_object_list for serialized
 * objects), built on the public collectives: acc_all_gather_bytes, acc_broadcast, acc_all_reduce. */
#include <stdio.h>
#include <string.h>

#include "state/state.h"

acc_result acc_gather_object(acc_state *st, const void *send, size_t len, void **out, size_t **lens) {
  if (out) *out = NULL;
  if (lens) *lens = NULL;
  ACC_CHECK(acc__state_check(st, "gather_object"));
  if (!out || !lens) return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_object: out and lens must not be NULL");
  if (len && !send) return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_object: send is NULL but len is %zu", len);
  acc_result rc = acc_all_gather_bytes(st, send, len, out, lens);
  if (rc != ACC_OK) return acc__error_context(rc, "gather_object");
  return ACC_OK;
}

acc_result acc_broadcast_object(acc_state *st, void **buf, size_t *len, int root) {
  ACC_CHECK(acc__state_check(st, "broadcast_object"));
  if (!buf || !len) return acc__error(ACC_ERR_INVALID_ARGUMENT, "broadcast_object: buf and len must not be NULL");
  int n = acc_state_num_processes(st), rank = acc_state_process_index(st);
  if (root < 0 || root >= n)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "broadcast_object: root %d is not a process index (0..%d)", root,
                      n - 1);
  const int is_root = rank == root;
  /* The root's size travels first, with whether its arguments are usable: a bad root buffer is
   * an error on every process instead of a hang in the second broadcast. */
  uint64_t head[2] = {0, 0}; /* {size, root ok} */
  if (is_root) {
    head[0] = (uint64_t)*len;
    head[1] = (*len == 0 || *buf) ? 1 : 0;
  } else {
    *buf = NULL;
    *len = 0;
  }
  acc_result rc = acc_broadcast(st, head, 2, ACC_I64, root);
  if (rc != ACC_OK) return acc__error_context(rc, "broadcast_object (size)");
  if (!head[1]) {
    if (is_root)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "broadcast_object: *buf is NULL but *len is %zu on the root", *len);
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "broadcast_object: the root (process %d) passed a NULL buffer of %llu bytes", root,
                      (unsigned long long)head[0]);
  }
  if (n == 1) return ACC_OK;
  if (head[0] > SIZE_MAX)
    return acc__error(ACC_ERR_NOMEM, "broadcast_object: %llu bytes do not fit in memory here",
                      (unsigned long long)head[0]);
  size_t size = (size_t)head[0];
  void *data = NULL;
  int32_t failed = 0;
  if (!is_root) {
    data = acc__malloc(size ? size : 1);
    if (!data) failed = rank + 1;
  }
  /* Every process learns whether a receiver could not allocate before the bytes move. */
  rc = acc_all_reduce(st, &failed, &failed, 1, ACC_I32, ACC_MAX);
  if (rc == ACC_OK && failed) {
    if (failed - 1 == rank)
      rc = acc__error(ACC_ERR_NOMEM, "broadcast_object: could not allocate %zu bytes", size);
    else
      rc = acc__error(ACC_ERR_REMOTE, "broadcast_object: process %d could not allocate %zu bytes", failed - 1, size);
  } else if (rc != ACC_OK) {
    rc = acc__error_context(rc, "broadcast_object (allocation check)");
  }
  if (rc == ACC_OK && size) {
    rc = acc_broadcast(st, is_root ? *buf : data, size, ACC_U8, root);
    if (rc != ACC_OK) rc = acc__error_context(rc, "broadcast_object (%zu bytes)", size);
  }
  if (rc != ACC_OK) {
    acc__free(data);
    return rc;
  }
  if (!is_root) {
    *buf = data;
    *len = size;
  }
  return ACC_OK;
}
