# Installs the build into a scratch prefix, moves the tree elsewhere (an install must not remember
# where it was made), then builds and runs two consumers of the moved tree: one through
# find_package(flashattn), one through pkg-config alone (compiler flags from `pkg-config --cflags
# --libs`, nothing else).
set(staging "${BUILD_DIR}/install-test/staging")
set(prefix "${BUILD_DIR}/install-test/moved")
set(consumer "${BUILD_DIR}/install-test/consumer")
file(REMOVE_RECURSE "${BUILD_DIR}/install-test")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  string(STRIP "${out}" out)
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${staging}")
file(RENAME "${staging}" "${prefix}")
foreach(f include/flashattn.h include/flashattn.hpp lib/libflashattn.so.0
          lib/cmake/flashattn/flashattnConfig.cmake lib/cmake/flashattn/flashattnConfigVersion.cmake
          lib/pkgconfig/flashattn.pc share/doc/flashattn/LICENSE-MIT
          share/doc/flashattn/LICENSE-APACHE)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

# find_package
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install" -B "${consumer}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}")
run("${CMAKE_COMMAND}" --build "${consumer}")
run("${consumer}/consumer")
message(STATUS "find_package: ${last_output}")

# pkg-config, with only the moved tree on PKG_CONFIG_PATH
if(NOT PKG_CONFIG)
  message(STATUS "pkg-config not found: the pkg-config consumer was not built")
  return()
endif()
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
set(ENV{PKG_CONFIG_LIBDIR} "${prefix}/lib/pkgconfig")
run("${PKG_CONFIG}" --modversion flashattn)
if(NOT last_output STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion flashattn: '${last_output}', not ${VERSION}")
endif()
run("${PKG_CONFIG}" --variable=includedir flashattn)
if(NOT EXISTS "${last_output}/flashattn.h")
  message(FATAL_ERROR "pkg-config's includedir '${last_output}' holds no flashattn.h")
endif()
run("${PKG_CONFIG}" --variable=libdir flashattn)
set(libdir "${last_output}")
if(NOT EXISTS "${libdir}/libflashattn.so")
  message(FATAL_ERROR "pkg-config's libdir '${libdir}' holds no libflashattn.so")
endif()
run("${PKG_CONFIG}" --cflags --libs flashattn)
separate_arguments(flags UNIX_COMMAND "${last_output}")
run("${C_COMPILER}" -std=c99 -Wall -Wextra -Werror "${SOURCE_DIR}/tests/install/consumer.c"
    ${flags} -o "${consumer}/consumer_pkgconfig")
run("${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${libdir}" "${consumer}/consumer_pkgconfig")
message(STATUS "pkg-config: ${last_output}")
