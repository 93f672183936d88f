// Compiled as C++: the public header must be includable from C++ (extern "C").
#include <accelerate.h>

int acc_headertest_cxx() { return static_cast<int>(acc_version()); }

// The options initializers compile as C++ too (the mixed_precision fields are enums).
int acc_headertest_cxx_options() {
  acc_state_options so = ACC_STATE_OPTIONS_INIT;
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  return static_cast<int>(so.mixed_precision) + static_cast<int>(ao.mixed_precision);
}
