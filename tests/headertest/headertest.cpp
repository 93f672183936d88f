// Compiled as C++: the public header must be includable from C++ (extern "C").
#include <accelerate.h>

int acc_headertest_cxx() { return static_cast<int>(acc_version()); }
