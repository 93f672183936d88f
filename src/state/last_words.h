/* A rank's last words on the launcher's board (src/state/last_words.c). Internal, not API. */
#ifndef ACC_STATE_LAST_WORDS_H
#define ACC_STATE_LAST_WORDS_H

/* Once per process, when it runs under `accelerate launch` (a launch board is present): at
 * exit, the exiting thread's last library error (code and message) is written to the board. */
void acc__state_arm_last_words(int rank);

#endif
