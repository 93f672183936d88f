/* Fake modules for the loader test: FAKE_KIND 0 is a good module named "good", 1 claims another
 * ABI version, 2 has no entry point. */
#include <string.h>

#include "backend/module.h"

#if FAKE_KIND == 0 || FAKE_KIND == 1
static const acc__module_ops ops = {FAKE_KIND == 0 ? ACC__MODULE_ABI_VERSION : 999u,
                                    ACC_VERSION_STRING, FAKE_KIND == 0 ? "good" : "badabi", NULL};

__attribute__((visibility("default"))) const acc__module_ops *acc_module_entry_v1(
    const acc__module_host *host) {
  if (!host || host->abi_version != ACC__MODULE_ABI_VERSION) return NULL;
  return &ops;
}
#else
__attribute__((visibility("default"))) int acc_not_an_entry(void) { return 1; }
#endif
