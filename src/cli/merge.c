/* `accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR`: a SHARDED_STATE_DICT checkpoint of acc_fsdp
 * (one file per process) into one model.safetensors, as Accelerate's merge-weights does for a DCP
 * directory. Runs without a process group. */
#include <stdio.h>
#include <string.h>

#include "accelerate.h"
#include "cli/cli.h"

int acc_cli_merge_weights(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    printf("usage: accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR\n\n"
           "Merges the per-process shard files of an FSDP SHARDED_STATE_DICT checkpoint\n"
           "(acc_fsdp_save_state) into OUTPUT_DIR/model.safetensors: the file a FULL_STATE_DICT\n"
           "save or acc_save_model writes for the same weights. No processes are started.\n");
    return 0;
  }
  if (argc != 3) {
    fprintf(stderr, "accelerate merge-weights: error: expected CHECKPOINT_DIR OUTPUT_DIR (see accelerate "
                    "merge-weights -h)\n");
    return 2;
  }
  if (acc_fsdp_merge_weights(argv[1], argv[2]) != ACC_OK) {
    fprintf(stderr, "accelerate merge-weights: error: %s\n", acc_last_error());
    return 1;
  }
  printf("accelerate merge-weights: wrote %s/model.safetensors\n", argv[2]);
  return 0;
}
