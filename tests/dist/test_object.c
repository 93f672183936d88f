/* acc_gather_object / acc_broadcast_object (byte blobs, Accelerate's gather_object and
 * broadcast_object_list) at 1, 2 and 3 processes: different sizes per process, empty blobs, a
 * large blob, every root, a root with a NULL buffer failing on every process, bad arguments. */
#include "acc_test.h"

/* Process r's blob in round k: (r * 7 + k * 3) % 11 bytes (0 for some), byte i = r + 31 * i + k. */
static size_t blob_len(int r, int k) { return (size_t)((r * 7 + k * 3) % 11); }
static unsigned char blob_byte(int r, size_t i, int k) { return (unsigned char)(r + 31 * i + (size_t)k); }

int main(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  int rank = acc_state_process_index(st), n = acc_state_num_processes(st);
  acc_test_rank = rank;

  /* gather_object: every process gets every blob, in process order, sizes included. */
  for (int k = 0; k < 4; k++) {
    size_t len = blob_len(rank, k);
    unsigned char mine[16];
    for (size_t i = 0; i < len; i++) mine[i] = blob_byte(rank, i, k);
    void *out = NULL;
    size_t *lens = NULL;
    CHECK_OK(acc_gather_object(st, len ? mine : NULL, len, &out, &lens));
    if (!lens) continue;
    size_t off = 0;
    for (int r = 0; r < n; r++) {
      CHECK(lens[r] == blob_len(r, k), "round %d: size of process %d's blob %zu (expected %zu)", k, r, lens[r],
            blob_len(r, k));
      for (size_t i = 0; i < lens[r] && i < blob_len(r, k); i++)
        CHECK(((unsigned char *)out)[off + i] == blob_byte(r, i, k), "round %d: process %d byte %zu", k, r, i);
      off += lens[r];
    }
    acc_free(out);
    acc_free(lens);
  }
  /* All empty. */
  {
    void *out = NULL;
    size_t *lens = NULL;
    CHECK_OK(acc_gather_object(st, NULL, 0, &out, &lens));
    for (int r = 0; lens && r < n; r++) CHECK(lens[r] == 0, "empty blob of process %d has size %zu", r, lens[r]);
    acc_free(out);
    acc_free(lens);
  }
  CHECK_ERR(acc_gather_object(st, NULL, 3, &(void *){NULL}, &(size_t *){NULL}), ACC_ERR_INVALID_ARGUMENT,
            "send is NULL");
  CHECK_ERR(acc_gather_object(st, "x", 1, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "must not be NULL");

  /* broadcast_object from every root, with sizes the receivers do not know (including 0 and a
   * blob of 3 MB, more than one chunk of the shared-memory backend). */
  size_t sizes[] = {0, 1, 13, 3u << 20};
  for (int root = 0; root < n; root++) {
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      size_t want = sizes[s] + (size_t)root;
      unsigned char *src = NULL;
      void *buf = (void *)0x1; /* overwritten on non-root processes */
      size_t len = 12345;
      if (rank == root) {
        src = malloc(want ? want : 1);
        REQUIRE_OK(src ? ACC_OK : ACC_ERR_NOMEM);
        for (size_t i = 0; i < want; i++) src[i] = blob_byte(root, i, (int)s);
        buf = src;
        len = want;
      }
      CHECK_OK(acc_broadcast_object(st, &buf, &len, root));
      CHECK(len == want, "root %d: %zu bytes received (expected %zu)", root, len, want);
      if (rank == root) {
        CHECK(buf == src, "the root's buffer is left as it was");
      } else {
        CHECK(buf != NULL && buf != (void *)0x1, "a non-root process gets a new buffer");
      }
      size_t bad = 0;
      for (size_t i = 0; buf && i < len && i < want; i++) bad += ((unsigned char *)buf)[i] != blob_byte(root, i, (int)s);
      CHECK(bad == 0, "root %d, %zu bytes: %zu bytes differ", root, want, bad);
      if (rank != root) acc_free(buf);
      free(src);
    }
  }

  /* A root passing a NULL buffer with a size: an error on every process, no hang. */
  {
    int root = n - 1;
    void *buf = NULL;
    size_t len = rank == root ? 10 : 0;
    acc_result rc = acc_broadcast_object(st, &buf, &len, root);
    CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "NULL root buffer: %s (%s)", acc_result_name(rc), acc_last_error());
    CHECK(strstr(acc_last_error(), rank == root ? "*buf is NULL but *len is 10 on the root" : "passed a NULL buffer"),
          "message: %s", acc_last_error());
    if (rank != root) CHECK(buf == NULL, "no buffer on error");
  }
  /* Still usable afterwards. */
  {
    void *buf = (char *)"after";
    size_t len = 5;
    CHECK_OK(acc_broadcast_object(st, &buf, &len, 0));
    CHECK(len == 5 && memcmp(buf, "after", 5) == 0, "broadcast after an error");
    if (rank != 0) acc_free(buf);
  }
  CHECK_ERR(acc_broadcast_object(st, &(void *){NULL}, &(size_t){0}, n), ACC_ERR_INVALID_ARGUMENT, "root");
  CHECK_ERR(acc_broadcast_object(st, NULL, &(size_t){0}, 0), ACC_ERR_INVALID_ARGUMENT, "must not be NULL");

  acc_state_destroy(st);
  return acc_test_finish("dist_object");
}
