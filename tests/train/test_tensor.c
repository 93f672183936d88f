#include "acc_test.h"
int main(void) { return acc_test_finish("stub"); }
