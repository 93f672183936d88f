# OpenBLAS for the examples' matrix products (optional): sets EXAMPLES_HAVE_CBLAS, and when ON,
# EXAMPLES_CBLAS_INCLUDE (the directory of cblas.h) and the target PkgConfig::OPENBLAS.
# Included by examples/fashion_mnist/fmnist.cmake and examples/gpt/gpt.cmake.
include_guard(GLOBAL)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET GLOBAL openblas)
endif()
set(EXAMPLES_HAVE_CBLAS OFF)
if(OPENBLAS_FOUND)
  find_path(EXAMPLES_CBLAS_INCLUDE cblas.h HINTS ${OPENBLAS_INCLUDE_DIRS})
  if(EXAMPLES_CBLAS_INCLUDE)
    set(EXAMPLES_HAVE_CBLAS ON)
  endif()
endif()
message(STATUS "examples: OpenBLAS cblas ${EXAMPLES_HAVE_CBLAS}")
