/* `accelerate launch`: placeholder until implemented. */
#include <stdio.h>

#include "cli.h"

int acc_cli_launch(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "accelerate launch: not implemented yet\n");
  return 2;
}
