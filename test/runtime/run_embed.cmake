# Runs kimi-embed on the toy artifact and compares with the reference greedy
# continuation; then checks that a corrupt artifact gives a clean error.
# -DEMBED=<kimi-embed> -DTOY_DIR=<dir with toy.kimi, toy.safetensors, toy.expected>
execute_process(
  COMMAND ${EMBED} -p 1,2,3 -n 8 ${TOY_DIR}/toy.kimi ${TOY_DIR}/toy.safetensors
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ ${TOY_DIR}/toy.expected expected)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kimi-embed exited with ${rc}")
endif()
string(FIND "${out}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected output line: ${expected}")
endif()

# A truncated artifact: exit code 1 and a message, not a crash.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E copy ${TOY_DIR}/toy.kimi ${TOY_DIR}/truncated.kimi)
file(SIZE ${TOY_DIR}/toy.kimi size)
execute_process(COMMAND truncate -s 1000 ${TOY_DIR}/truncated.kimi)
execute_process(
  COMMAND ${EMBED} ${TOY_DIR}/truncated.kimi ${TOY_DIR}/toy.safetensors
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${err}")
if(NOT rc EQUAL 1 OR NOT err MATCHES "artifact truncated: 1000 of ${size} bytes")
  message(FATAL_ERROR "corrupt artifact: exit ${rc}, stderr: ${err}")
endif()
