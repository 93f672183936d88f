/* acc_state_silence_non_main_stdout: "only rank 0 prints" for programs that print everywhere. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "accelerate.h"
#include "core/internal.h"

acc_result acc_state_silence_non_main_stdout(acc_state *st) {
  ACC_CHECK(acc__check_handle(st, ACC__HANDLE_STATE, "acc_state_silence_non_main_stdout"));
  if (acc_state_process_index(st) == 0) return ACC_OK;
  fflush(stdout); /* what was printed before the call still goes out */
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return acc__error(ACC_ERR_IO, "acc_state_silence_non_main_stdout: cannot open /dev/null on process %d: %s",
                      acc_state_process_index(st), strerror(errno));
  int rc = dup2(fd, STDOUT_FILENO);
  int e = errno;
  close(fd);
  if (rc < 0)
    return acc__error(ACC_ERR_IO, "acc_state_silence_non_main_stdout: cannot redirect stdout on process %d: %s",
                      acc_state_process_index(st), strerror(e));
  return ACC_OK;
}
