# Fails if a CPU-only library (FA_CUDA=OFF) needs anything of CUDA: a shared CUDA library among its
# NEEDED entries, or a CUDA runtime or driver symbol (cuda*, __cuda*, cu[A-Z]*) defined or
# referenced anywhere in its symbol table.
execute_process(COMMAND "${OBJDUMP}" -p "${LIBRARY}" OUTPUT_VARIABLE headers RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "objdump failed on ${LIBRARY}")
endif()
if(headers MATCHES "NEEDED +(libcuda|libcudart|libnvrtc|libnvJitLink)[^\n]*")
  message(FATAL_ERROR "the CPU-only library depends on ${CMAKE_MATCH_0}")
endif()
foreach(table "" -D)
  execute_process(COMMAND "${NM}" ${table} "${LIBRARY}" OUTPUT_VARIABLE symbols
                  RESULT_VARIABLE result ERROR_QUIET)
  if(NOT result EQUAL 0 AND table STREQUAL "-D")
    message(FATAL_ERROR "nm -D failed on ${LIBRARY}")
  endif()
  string(REGEX MATCHALL "[ \n][A-Za-z] _*(cuda|cu[A-Z])[A-Za-z0-9_]*" found "${symbols}")
  if(found)
    list(TRANSFORM found STRIP)
    message(FATAL_ERROR "CUDA symbols in the CPU-only library (nm ${table}): ${found}")
  endif()
endforeach()
message(STATUS "no CUDA dependency and no CUDA symbol in ${LIBRARY}")
