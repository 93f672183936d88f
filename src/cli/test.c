/* `accelerate test`: placeholder until implemented. */
#include <stdio.h>

#include "cli.h"

int acc_cli_test(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "accelerate test: not implemented yet\n");
  return 2;
}
