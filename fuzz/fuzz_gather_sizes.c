/* libFuzzer target for the size exchange of acc_all_gather_bytes: the byte counts every process
 * reports (a desynchronised or hostile peer can report anything) go through the validation that
 * computes sizes, displacements and the total before anything is allocated or copied.
 *
 * Input: byte 0 = number of processes (1..64), byte 1 = this process's rank (mod n), then
 * little-endian u64: this process's own size, the limit, and one reported size per process
 * (missing bytes read as 0). On success every invariant the backends rely on is checked; on
 * failure the error must be ACC_ERR_MISMATCH with a message naming all_gather_bytes. A
 * violated invariant traps (and ASan catches any out-of-bounds write). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/collcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t take_u64(const uint8_t *data, size_t size, size_t *at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++, (*at)++)
    if (*at < size) v |= (uint64_t)data[*at] << (8 * i);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int n = 1 + data[0] % 64;
  int me = data[1] % n;
  size_t at = 2;
  uint64_t mine = take_u64(data, size, &at);
  uint64_t limit = take_u64(data, size, &at);
  uint64_t reported[64];
  for (int r = 0; r < n; r++) reported[r] = take_u64(data, size, &at);
  /* a process's own entry is what it sent, unless the input says otherwise (odd first byte) */
  if (!(data[0] & 0x80)) reported[me] = mine;
  size_t sizes[64], disp[64], total = (size_t)-1;
  acc_result rc = acc__gather_layout(reported, n, me, mine, limit, sizes, disp, &total);
  if (rc != ACC_OK) {
    if (rc != ACC_ERR_MISMATCH || !strstr(acc_last_error(), "all_gather_bytes")) __builtin_trap();
    return 0;
  }
  if (sizes[me] != mine || total > limit) __builtin_trap();
  size_t sum = 0;
  for (int r = 0; r < n; r++) {
    if (sizes[r] != reported[r] || disp[r] != sum) __builtin_trap();
    if (sizes[r] > total - disp[r]) __builtin_trap(); /* every part lies inside the buffer */
    sum += sizes[r];
  }
  if (sum != total) __builtin_trap();
  return 0;
}
