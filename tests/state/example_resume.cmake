# The Fashion-MNIST example resumed from a checkpoint ends exactly like a straight run:
# run A trains 2 epochs; run B stops after 150 steps with --save-every 150; run C --resume's
# from B's checkpoint (a new `accelerate launch`, other --seed and --lr) and trains to the end
# of epoch 2. A and C must
# print the same test accuracy line and the same final mean training loss.
# cmake -DLAUNCH=... -DEXE=... -DDIR=... -DNP=... -P example_resume.cmake
file(REMOVE_RECURSE ${DIR})
set(common --quiet --epochs 2 --batch 256 --hidden 32 --optimizer adamw --lr 0.002 --prefetch 0)
execute_process(COMMAND ${LAUNCH} launch --num_processes ${NP} ${EXE} ${common}
  OUTPUT_VARIABLE a RESULT_VARIABLE ra)
execute_process(COMMAND ${LAUNCH} launch --num_processes ${NP} ${EXE} ${common} --max-steps 150
  --save-every 150 --output-dir ${DIR} OUTPUT_VARIABLE b RESULT_VARIABLE rb)
# C asks for another seed and learning rate: only the checkpoint (weights, optimizer state and
# lr, loader seed and position) can make it end like A.
execute_process(COMMAND ${LAUNCH} launch --num_processes ${NP} ${EXE} ${common} --seed 7 --lr 0.01 --resume
  --output-dir ${DIR}
  OUTPUT_VARIABLE c RESULT_VARIABLE rc)
if(NOT ra EQUAL 0 OR NOT rb EQUAL 0 OR NOT rc EQUAL 0)
  message(FATAL_ERROR "a run failed (${ra} ${rb} ${rc}):\n${a}\n${b}\n${c}")
endif()
string(REGEX MATCH "test accuracy: [^\n]*" acc_a "${a}")
string(REGEX MATCH "test accuracy: [^\n]*" acc_c "${c}")
string(REGEX MATCH "epoch 2: mean training loss [^\n]*" loss_a "${a}")
string(REGEX MATCH "resumed from [^\n]*checkpoint_0 \\(step 150" resumed "${c}")
if(NOT resumed)
  message(FATAL_ERROR "run C did not resume from checkpoint_0 at step 150:\n${c}")
endif()
if(acc_a STREQUAL "" OR NOT acc_a STREQUAL acc_c)
  message(FATAL_ERROR "straight: '${acc_a}', resumed: '${acc_c}'")
endif()
message(STATUS "straight and resumed: ${acc_a} (${loss_a})")
