# Installs the runtime component to a temporary prefix, builds examples/embed
# against it with find_package(kimiRuntime), and runs it on the toy artifact.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD_DIR};--component;kimi_runtime;--prefix;${prefix}"
    "${CMAKE_COMMAND};-S;${EMBED_SOURCE};-B;${WORK_DIR}/build;-G;${GENERATOR};-DCMAKE_PREFIX_PATH=${prefix};-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${WORK_DIR}/build")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${step} failed (${rc}):\n${out}\n${err}")
  endif()
endforeach()
foreach(f include/kimi_runtime.h lib/cmake/kimiRuntime/kimiRuntimeConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
execute_process(
  COMMAND ${WORK_DIR}/build/kimi-embed -p 1,2,3 -n 8 ${TOY_DIR}/toy.kimi ${TOY_DIR}/toy.safetensors
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${TOY_DIR}/toy.expected expected)
message("${out}${err}")
string(FIND "${out}" "${expected}" at)
if(NOT rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "installed kimi-embed: exit ${rc}, expected ${expected}")
endif()
