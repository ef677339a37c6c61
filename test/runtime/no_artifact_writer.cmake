# The shipped runtime library reads artifacts and never writes one: the
# compiler's ArtifactWriter (runtime/artifact/writer.cpp) is in kimi_artifact
# and kimi_artifact_writer, not in kimi_runtime. -DLIBRARY=<libkimi_runtime.so>
find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -DC ${LIBRARY} OUTPUT_VARIABLE symbols
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -DC ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "kimi::rt::ArtifactWriter[^\n]*" writers "${symbols}")
if(writers)
  message(FATAL_ERROR "${LIBRARY} exports the artifact writer:\n${writers}")
endif()
string(FIND "${symbols}" "kimi::rt::ArtifactReader" reader)
if(reader EQUAL -1)
  message(FATAL_ERROR "${LIBRARY} exports no ArtifactReader: wrong library?")
endif()
message("${LIBRARY}: ArtifactReader, no ArtifactWriter")
