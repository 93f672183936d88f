/* Single copy, a read that fails on one rank: no rank may return OK with part of the result
 * missing. Rank 1's send buffer has its first half (rank 0's share of the reduction) mapped
 * PROT_NONE, so rank 0's process_vm_readv of it fails (EFAULT) while rank 1 only ever reads its
 * own, readable half. Rank 0 must fail naming the read; rank 1, which reads rank 0's share of
 * the result afterwards, must fail naming rank 0 instead of returning the unreduced share (what
 * it did before). Run with 2 processes, ACCELERATE_SHM_SINGLE_COPY=on and a 4096-byte threshold;
 * where the kernel forbids cross-memory reads, acc_state_create says so (ctest: skip). */
#include <sys/mman.h>

#include "acc_test.h"

int main(void) {
  acc_state *st = NULL;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
  CHECK(acc_state_num_processes(st) == 2, "run with 2 processes, not %d", acc_state_num_processes(st));
  int rank = acc_state_process_index(st);
  const size_t count = 32768; /* 128 KiB of f32: two shares of 64 KiB, 16 pages each */
  size_t bytes = count * sizeof(float);
  float *send = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  float *recv = malloc(bytes);
  CHECK(send != MAP_FAILED && recv, "buffers");
  for (size_t i = 0; i < count; i++) send[i] = (float)(rank + 1), recv[i] = -1.0f;
  if (rank == 1) CHECK(mprotect(send, bytes / 2, PROT_NONE) == 0, "mprotect");
  acc_result rc = acc_all_reduce(st, send, recv, count, ACC_F32, ACC_SUM);
  if (rank == 0) {
    CHECK(rc == ACC_ERR_SYSTEM, "rank 0: expected ACC_ERR_SYSTEM, got %s: %s", acc_result_string(rc), acc_last_error());
    CHECK(strstr(acc_last_error(), "cannot read") && strstr(acc_last_error(), "from rank 1"), "rank 0: %s",
          acc_last_error());
  } else {
    CHECK(rc == ACC_ERR_REMOTE, "rank 1: expected ACC_ERR_REMOTE, got %s (its result's first value %g): %s",
          acc_result_string(rc), (double)recv[0], acc_last_error());
    CHECK(strstr(acc_last_error(), "rank 0 (pid") && strstr(acc_last_error(), "result is incomplete"), "rank 1: %s",
          acc_last_error());
  }
  int failed = acc_test_finish("dist_cma_fail");
  munmap(send, bytes);
  free(recv);
  acc_state_destroy(st);
  return failed;
}
