/* The gloo module's entry point (libaccelerate-gloo.so): checks the host's table, keeps it for
 * the shim (gloo.cc) and offers the gloo backend. Compiled only into the module. */
#include <string.h>

#include "backend/gloo_be.h"

static acc_result create(acc__backend **out, const acc__proc_info *info) {
  return acc__backend_gloo_create(out, info, "gloo");
}

static const acc__module_ops ops = {ACC__MODULE_ABI_VERSION, ACC_VERSION_STRING, "gloo", create,
                                    acc__backend_gloo_create};

__attribute__((visibility("default"))) const acc__module_ops *acc_module_entry_v1(
    const acc__module_host *host) {
  if (!host || host->abi_version != ACC__MODULE_ABI_VERSION || !host->library_version ||
      strcmp(host->library_version, ACC_VERSION_STRING) != 0)
    return NULL;
  acc__gloo_set_host(host);
  return &ops;
}
