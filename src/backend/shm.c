/* Shared-memory backend: placeholder until the real implementation lands. */
#include "../backend.h"

acc_result acc__backend_shm_create(acc__backend **out, const acc__proc_info *info) {
  (void)out;
  return acc__error(ACC_ERR_NOT_SUPPORTED, "rank %d: the shared-memory backend is not implemented yet",
                    info->rank);
}
