/* The module loader (regression for new-user review R8): missing module, file that is not a
 * shared object, shared object without the entry point, wrong ABI version, good module (loaded
 * once). argv[1]: the directory holding the fake modules. */
#include <stdlib.h>

#include "acc_test.h"
#include "backend/module.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  setenv("ACCELERATE_MODULE_DIR", argv[1], 1);
  const acc__module_ops *m = NULL;

  CHECK_ERR(acc__module_load("nosuch", "install the nosuch package", &m), ACC_ERR_NOT_SUPPORTED,
            "libaccelerate-nosuch.so is not installed");
  CHECK(strstr(acc_last_error(), argv[1]) != NULL, "path not named: %s", acc_last_error());
  CHECK(strstr(acc_last_error(), "install the nosuch package") != NULL, "no hint: %s",
        acc_last_error());

  CHECK_ERR(acc__module_load("broken", "", &m), ACC_ERR_NOT_SUPPORTED,
            "cannot load the broken module");
  CHECK(strstr(acc_last_error(), "libaccelerate-broken.so") != NULL, "%s", acc_last_error());
  CHECK(strstr(acc_last_error(), "header") || strstr(acc_last_error(), "ELF"),
        "dlerror text missing: %s", acc_last_error());

  CHECK_ERR(acc__module_load("noentry", "", &m), ACC_ERR_NOT_SUPPORTED,
            "is not an accelerate module");
  CHECK(strstr(acc_last_error(), "acc_module_entry_v1") != NULL, "%s", acc_last_error());

  CHECK_ERR(acc__module_load("badabi", "", &m), ACC_ERR_NOT_SUPPORTED,
            "does not match this library");
  CHECK(strstr(acc_last_error(), "ABI 999") != NULL, "%s", acc_last_error());

  const acc__module_ops *g1 = NULL, *g2 = NULL;
  CHECK_OK(acc__module_load("good", "", &g1));
  CHECK(g1 && strcmp(g1->name, "good") == 0, "wrong ops table");
  /* loaded once: removing the directory from the search does not matter any more */
  setenv("ACCELERATE_MODULE_DIR", "/nonexistent-acc-module-dir", 1);
  CHECK_OK(acc__module_load("good", "", &g2));
  CHECK(g1 == g2, "the module was loaded twice");
  return acc_test_finish("module_loader");
}
