/* Started by test_env_launch (through accelerate launch, or by hand with a launch environment):
 * creates an accelerator, prints its rank, world size and accumulation steps, and exits 0; or
 * prints the library's error and exits 1. */
#include <accelerate.h>
#include <stdio.h>

int main(void) {
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, NULL) != ACC_OK) {
    fprintf(stderr, "env_probe: %s\n", acc_last_error());
    return 1;
  }
  acc_state *st = acc_accelerator_state(acc);
  printf("rank %d of %d gas %d\n", acc_state_process_index(st), acc_state_num_processes(st),
         acc_accelerator_gradient_accumulation_steps(acc));
  acc_accelerator_destroy(acc);
  return 0;
}
