/* acc_launch_function: placeholder until the launcher lands. */
#include "internal.h"

acc_result acc_launch_function(int num_processes, acc_launch_fn fn, void *payload) {
  if (!fn || num_processes < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_launch_function: need a function and num_processes >= 1");
  if (num_processes == 1) return fn(payload) == 0 ? ACC_OK : acc__error(ACC_ERR_REMOTE, "rank 0 returned non-zero");
  return acc__error(ACC_ERR_NOT_SUPPORTED, "acc_launch_function: multi-process launch not implemented yet");
}
