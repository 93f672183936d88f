/* acc_print once overall vs acc_print_local once per machine. Every process prints through both
 * and reports on stderr what it returned; the driver script counts the stdout lines. */
#include "acc_test.h"

int main(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  int rank = acc_state_process_index(st), local = acc_state_local_process_index(st);
  acc_test_rank = rank;
  int a = acc_print(st, "overall: printed by process %d\n", rank);
  int b = acc_print_local(st, "per machine: printed by process %d (machine %d)\n", rank,
                          rank / acc_state_local_num_processes(st));
  CHECK((a > 0) == (rank == 0), "acc_print returned %d on process %d", a, rank);
  CHECK((b > 0) == (local == 0), "acc_print_local returned %d on process %d (local %d)", b, rank,
        local);
  REQUIRE_OK(acc_wait_for_everyone(st));
  acc_state_destroy(st);
  return acc_test_finish("print_local");
}
