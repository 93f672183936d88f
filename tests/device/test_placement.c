/* The program of test_placement.sh: asks for a GPU (ACC_DEVICE_AUTO, or ACC_DEVICE_CUDA with
 * argument "cuda") and prints one line per process with what it got:
 *   rank R local L device=<accelerator's device> state=<acc_state_device> type=<distributed type>
 *   describe=<the Device: line of acc_state_describe>
 * or "rank R error: <acc_last_error()>" and exit status 3. Argument "statecpu": the state is
 * created first with acc_state_options.cpu = 1 (which the accelerator must follow). The script
 * checks the lines. */
#include <stdio.h>
#include <string.h>

#include "accelerate.h"

int main(int argc, char **argv) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = argc > 1 && strcmp(argv[1], "cuda") == 0 ? ACC_DEVICE_CUDA : ACC_DEVICE_AUTO;
  acc_state_options so = ACC_STATE_OPTIONS_INIT;
  if (argc > 1 && strcmp(argv[1], "statecpu") == 0) so.cpu = 1;
  acc_state *st = NULL;
  if (acc_state_create(&st, &so) != ACC_OK) {
    printf("state error: %s\n", acc_last_error());
    return 3;
  }
  const int rank = acc_state_process_index(st);
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, &o) != ACC_OK) {
    printf("rank %d error: %s\n", rank, acc_last_error());
    fflush(stdout);
    acc_state_destroy(st);
    return 3;
  }
  const char *desc = acc_state_describe(st);
  const char *dev = strstr(desc, "Device: ");
  int len = dev ? (int)strcspn(dev, "\n") : 0;
  printf("rank %d local %d device=%s state=%s type=%s describe=%.*s\n", rank,
         acc_state_local_process_index(st), acc_accelerator_device_name(acc), acc_state_device(st),
         acc_distributed_type_name(acc_state_distributed_type(st)), len, dev ? dev : "");
  fflush(stdout);
  acc_result rc = acc_wait_for_everyone(st);
  acc_accelerator_destroy(acc);
  acc_state_destroy(st);
  return rc == ACC_OK ? 0 : 1;
}
