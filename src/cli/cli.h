/* The `accelerate` command-line tool: one function per subcommand. Each gets the arguments after
 * the subcommand name (argv[0] is the subcommand) and returns the process exit status. */
#ifndef ACC_CLI_H
#define ACC_CLI_H

int acc_cli_launch(int argc, char **argv);
int acc_cli_config(int argc, char **argv);
int acc_cli_env(int argc, char **argv);
int acc_cli_test(int argc, char **argv);
int acc_cli_plot(int argc, char **argv);
/* `accelerate merge-weights` (src/cli/merge.c). */
int acc_cli_merge_weights(int argc, char **argv);
/* Hidden: the program that `accelerate test` launches on every process (`accelerate __selftest`). */
int acc_cli_selftest(int argc, char **argv);

#endif
