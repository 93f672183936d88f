/* `accelerate env`: placeholder until implemented. */
#include <stdio.h>

#include "cli.h"

int acc_cli_env(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "accelerate env: not implemented yet\n");
  return 2;
}
