/* Started by test_env_launch (through accelerate launch, or by hand with a launch environment):
 * creates an accelerator, prints its rank, world size and accumulation steps, and exits 0; or
 * prints the library's error and exits 1. With "dump": prints its environment. */
#include <accelerate.h>
#include <stdio.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "dump")) { /* the environment, one NAME=value a line */
    for (char **e = environ; *e; e++) printf("%s\n", *e);
    return 0;
  }
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
