# The runtime depends on neither LLVM nor MLIR: no source under runtime/
# may include an llvm/ or mlir/ header. Nor a CUDA header: libcuda is loaded
# at run time (runtime/cuda/cuda_driver.h). -DRUNTIME_DIR=<repo>/runtime
file(GLOB_RECURSE sources ${RUNTIME_DIR}/*.h ${RUNTIME_DIR}/*.cpp ${RUNTIME_DIR}/*.c)
set(bad "")
foreach(f ${sources})
  file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](llvm|mlir|llvm-c|mlir-c)/")
  if(hits)
    list(APPEND bad "${f}: ${hits}")
  endif()
  file(STRINGS ${f} cuda_hits REGEX
       "^[ \t]*#[ \t]*include[ \t]*[<\"](cuda|cuda_runtime|cuda_runtime_api|nvrtc)\\.h[>\"]")
  if(cuda_hits)
    list(APPEND bad "${f}: ${cuda_hits}")
  endif()
endforeach()
list(LENGTH sources n)
if(bad)
  message(FATAL_ERROR "LLVM/MLIR/CUDA includes in the runtime:\n${bad}")
endif()
message("checked ${n} runtime sources: no llvm/mlir/cuda includes")
