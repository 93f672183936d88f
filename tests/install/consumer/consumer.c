/* An out-of-tree program built against the installed accelerate-c. */
#include <accelerate.h>
#include <stdio.h>

int main(void) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "consumer: %s\n", acc_last_error());
    return 1;
  }
  float x[2] = {1.5f, 2.5f};
  if (acc_all_reduce(st, x, x, 2, ACC_F32, ACC_SUM) != ACC_OK) return 1;
  printf("consumer ok: %d process (version %s)\n", acc_state_num_processes(st), acc_version_string());
  acc_state_destroy(st);
  return x[0] == 1.5f ? 0 : 1;
}
