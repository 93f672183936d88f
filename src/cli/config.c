/* `accelerate config`: placeholder until implemented. */
#include <stdio.h>

#include "cli.h"

int acc_cli_config(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "accelerate config: not implemented yet\n");
  return 2;
}
