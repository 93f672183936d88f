# OpenBLAS for the examples' matrix products (optional): sets EXAMPLES_HAVE_CBLAS, and when ON,
# EXAMPLES_CBLAS_INCLUDE (the directory of cblas.h) and the target PkgConfig::OPENBLAS.
# Included by examples/fashion_mnist/fmnist.cmake and examples/gpt/gpt.cmake, from several
# directories: the search runs once, and every inclusion sets EXAMPLES_HAVE_CBLAS in its own
# directory scope (a plain include_guard would leave it unset in all but the first, and the GPT
# library, whose directory comes second, was then built with the plain C loops).
get_property(examples_openblas_probed GLOBAL PROPERTY EXAMPLES_OPENBLAS_PROBED)
if(NOT examples_openblas_probed)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET GLOBAL openblas)
  endif()
  set(have OFF)
  if(OPENBLAS_FOUND)
    find_path(EXAMPLES_CBLAS_INCLUDE cblas.h HINTS ${OPENBLAS_INCLUDE_DIRS})
    if(EXAMPLES_CBLAS_INCLUDE)
      set(have ON)
    endif()
  endif()
  set_property(GLOBAL PROPERTY EXAMPLES_OPENBLAS_PROBED ON)
  set_property(GLOBAL PROPERTY EXAMPLES_HAVE_CBLAS ${have})
  message(STATUS "examples: OpenBLAS cblas ${have}")
endif()
get_property(EXAMPLES_HAVE_CBLAS GLOBAL PROPERTY EXAMPLES_HAVE_CBLAS)
