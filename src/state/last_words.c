/* A rank's last words (src/state/last_words.h): at exit, the last library error of the thread
 * that exits goes into this process's note on the launcher's board (src/backend/rdzv.h), so that
 * `accelerate launch` can name the rank that failed first with its own message, and tell it
 * from the ranks that only failed because of it (ACC_ERR_REMOTE). */
#include <stdlib.h>

#include "backend/rdzv.h"
#include "state/last_words.h"

static int g_fd = -1;
static int g_rank;

static void at_exit(void) {
  acc_result rc = acc__last_error_code();
  if (rc == ACC_OK || g_fd < 0) return;
  acc__board_write_note(g_fd, g_rank, (int)rc, acc_last_error());
}

void acc__state_arm_last_words(int rank) {
  static int armed;
  if (armed) return;
  int fd = acc__board_open();
  if (fd < 0) return;
  g_fd = fd;
  g_rank = rank;
  armed = 1;
  atexit(at_exit);
}
