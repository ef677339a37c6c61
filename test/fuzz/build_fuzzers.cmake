# ctest fuzz.build: configures and builds test/fuzz/project with clang.
# -DSOURCE= kimi's source tree, -DBINARY= the fuzz build tree,
# -DCLANG= clang++, -DGEN_DIR= the main build's runtime/gen.
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/test/fuzz/project -B ${BINARY} -G Ninja
          -DCMAKE_CXX_COMPILER=${CLANG} -DCMAKE_BUILD_TYPE=
          -DKIMI_SOURCE_DIR=${SOURCE} -DKIMI_RUNTIME_GEN_DIR=${GEN_DIR}
  RESULT_VARIABLE configured)
if(NOT configured EQUAL 0)
  message(FATAL_ERROR "configuring the fuzz targets failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY} RESULT_VARIABLE built)
if(NOT built EQUAL 0)
  message(FATAL_ERROR "building the fuzz targets failed")
endif()
