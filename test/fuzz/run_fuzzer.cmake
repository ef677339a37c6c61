# ctest fuzz.<target>: every committed regression input once, then
# SECONDS of fuzzing from the committed seeds (a fresh copy: what a run
# finds stays under WORK, never in the source tree). libFuzzer exits
# non-zero on a crash, a sanitizer report, a leak, a timeout (an input
# running past 10 s) or an input needing more than 2 GiB.
# -DFUZZER= the binary, -DSEEDS= corpus/<target>, -DREGRESSIONS=
# regressions/<target>, -DWORK= a scratch directory, -DSECONDS=.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
set(limits -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048)
file(GLOB regressions ${REGRESSIONS}/*)
if(regressions)
  execute_process(COMMAND ${FUZZER} ${limits} ${regressions} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${FUZZER}: a committed regression input fails again")
  endif()
endif()
execute_process(
  COMMAND ${FUZZER} ${limits} -max_total_time=${SECONDS} -print_final_stats=1
          -artifact_prefix=${WORK}/ ${WORK}/corpus
  RESULT_VARIABLE rc ERROR_VARIABLE log OUTPUT_VARIABLE out)
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" executed "${log}")
message("${FUZZER}: ${executed} in ${SECONDS} s")
if(NOT rc EQUAL 0)
  message("${log}")
  message(FATAL_ERROR "${FUZZER} found a failing input (kept under ${WORK}): "
          "fix it and commit the input under test/fuzz/regressions/")
endif()
