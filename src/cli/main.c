/* `accelerate <command> ...`: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "accelerate.h"
#include "cli/cli.h"
#include "core/fs.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: accelerate <command> [<args>]\n\n"
          "accelerate-c %s: run C training programs on one or many processes.\n\n"
          "commands:\n"
          "  launch   start a program on N processes (accelerate launch -h)\n"
          "  config   write the default config file (interactive), or `config default`\n"
          "  env      print the environment, for bug reports\n"
          "  test     check that distributed runs work with your config\n"
          "  plot     draw the logged scalars of runs as an SVG/PNG (accelerate plot -h)\n"
          "  merge-weights  an FSDP sharded checkpoint into one model.safetensors\n",
          acc_version_string());
}

int main(int argc, char **argv) {
  acc__reserve_std_fds(); /* before the board or any file: none may become a rank's stdout */
  if (argc < 2) {
    usage(stderr);
    return 1;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("accelerate-c %s\n", acc_version_string());
    return 0;
  }
  if (strcmp(cmd, "launch") == 0) return acc_cli_launch(argc - 1, argv + 1);
  if (strcmp(cmd, "config") == 0) return acc_cli_config(argc - 1, argv + 1);
  if (strcmp(cmd, "env") == 0) return acc_cli_env(argc - 1, argv + 1);
  if (strcmp(cmd, "test") == 0) return acc_cli_test(argc - 1, argv + 1);
  if (strcmp(cmd, "plot") == 0) return acc_cli_plot(argc - 1, argv + 1);
  if (strcmp(cmd, "merge-weights") == 0 || strcmp(cmd, "merge_weights") == 0)
    return acc_cli_merge_weights(argc - 1, argv + 1);
  if (strcmp(cmd, "__selftest") == 0) return acc_cli_selftest(argc - 1, argv + 1);
  fprintf(stderr, "accelerate: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 1;
}
