/* Compiled with -std=c99 -pedantic -Werror: the public header must stay C99-clean. */
#include <accelerate.h>

int acc_headertest_c99(void);
int acc_headertest_c99(void) { return (int)acc_version(); }
