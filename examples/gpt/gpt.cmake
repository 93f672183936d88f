# The GPT support library (model and data), shared by the example, the tests and bench/gpt.
# It does not depend on libaccelerate.
#   gptcore        matrix products through cblas_sgemm when OpenBLAS is found (USE_CBLAS)
#   gptcore_plain  the same with the plain C loops, always available (the tests cover both), and
#                  its elementwise loops for the baseline instruction set only (gptcore has
#                  AVX-512 / AVX2 / baseline versions picked at load time)
# Optional: oneDNN (Debian's libdnnl-dev) for the bf16 products of gptcore (GPT_HAVE_DNNL, see
# gemm_dnnl.c); found at configure time, GPT_WITH_DNNL=OFF leaves it out. Without it the bf16
# mode rounds the operands and keeps OpenBLAS sgemm.
if(NOT TARGET gptcore)
  set(GPT_DIR ${CMAKE_CURRENT_LIST_DIR})
  set(GPT_SOURCES ${GPT_DIR}/model.c ${GPT_DIR}/data.c ${GPT_DIR}/gemm_bf16.c ${GPT_DIR}/gemm_dnnl.c)
  include(${GPT_DIR}/../openblas.cmake)

  foreach(t gptcore gptcore_plain)
    add_library(${t} STATIC ${GPT_SOURCES})
    target_include_directories(${t} PUBLIC ${GPT_DIR})
    # -fno-trapping-math lets the compiler vectorize the clamped exp/tanh/softmax loops (nothing
    # here reads floating-point exception flags); results do not change. -fopenmp-simd honours the
    # `omp simd reduction` loops of model.c (vectorization only: no OpenMP runtime, no threads).
    target_compile_options(${t} PRIVATE ${ACC_WARNINGS} -fno-trapping-math
      $<$<C_COMPILER_ID:GNU,Clang>:-fopenmp-simd>)
    target_link_libraries(${t} PUBLIC ZLIB::ZLIB m ${CMAKE_DL_LIBS})
  endforeach()
  target_compile_definitions(gptcore_plain PRIVATE GPT_NO_CLONES)
  # GPT_CLONES=avx2: the elementwise loops without their AVX-512 versions (an AVX2-only CPU's code
  # on an AVX-512 machine, for bench/gpt; docs/PERFORMANCE.md)
  set(GPT_CLONES "all" CACHE STRING "elementwise clones of the GPT example: all, or avx2 (no AVX-512)")
  if(GPT_CLONES STREQUAL "avx2")
    target_compile_definitions(gptcore PRIVATE GPT_CLONES_AVX2)
  endif()
  # ThreadSanitizer crashes in the ifunc resolvers that target_clones generates (they run before
  # its runtime is set up): under TSan both libraries keep the baseline loops only.
  if(ACC_SANITIZER STREQUAL "tsan")
    target_compile_definitions(gptcore PRIVATE GPT_NO_CLONES)
  endif()
  option(GPT_WITH_DNNL "bf16 products of the GPT example through oneDNN when found" ON)
  find_path(GPT_DNNL_INCLUDE dnnl.h PATH_SUFFIXES oneapi/dnnl)
  find_library(GPT_DNNL_LIB dnnl)
  # ThreadSanitizer does not know OpenMP's synchronisation (Debian's oneDNN runs on libgomp).
  if(GPT_WITH_DNNL AND GPT_DNNL_INCLUDE AND GPT_DNNL_LIB AND EXAMPLES_HAVE_CBLAS AND
     NOT ACC_SANITIZER STREQUAL "tsan")
    set(GPT_HAVE_DNNL ON)
    target_compile_definitions(gptcore PRIVATE GPT_HAVE_DNNL)
    target_include_directories(gptcore PRIVATE ${GPT_DNNL_INCLUDE})
    target_link_libraries(gptcore PUBLIC ${GPT_DNNL_LIB})
  else()
    set(GPT_HAVE_DNNL OFF)
  endif()
  set_property(GLOBAL PROPERTY GPT_HAVE_DNNL ${GPT_HAVE_DNNL})
  message(STATUS "examples/gpt: oneDNN for the bf16 products ${GPT_HAVE_DNNL}")
  if(EXAMPLES_HAVE_CBLAS)
    target_compile_definitions(gptcore PRIVATE USE_CBLAS)
    target_include_directories(gptcore PRIVATE ${EXAMPLES_CBLAS_INCLUDE})
    target_link_libraries(gptcore PUBLIC PkgConfig::OPENBLAS)
  endif()
endif()
