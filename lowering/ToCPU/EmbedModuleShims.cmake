# cmake -DOUT=<file.cpp> -DABI_DIR=<runtime/abi> -P EmbedModuleShims.cmake
#
# Writes the runtime's module ABI header and shims (runtime/abi/) as C++
# string constants (lowering/ToCPU/ModuleShims.h): kimi-compile compiles the
# shims into each model's host object against this header, the runtime
# includes the same header, so the two sides share one definition.
set(_raw_delim "kimi_abi")
set(_text "// Generated from runtime/abi/ by EmbedModuleShims.cmake; do not edit.\n")
string(APPEND _text "#include \"lowering/ToCPU/ModuleShims.h\"\n\nnamespace kimi {\n")
foreach(_pair "kModuleAbiHeader=kimi_module_abi.h"
              "kGpuModuleShim=gpu_module_shim.c"
              "kCommModuleShim=comm_module_shim.c")
  string(REPLACE "=" ";" _pair "${_pair}")
  list(GET _pair 0 _name)
  list(GET _pair 1 _file)
  file(READ "${ABI_DIR}/${_file}" _content)
  string(FIND "${_content}" ")${_raw_delim}\"" _clash)
  if(NOT _clash EQUAL -1)
    message(FATAL_ERROR "${_file} contains the raw-string delimiter ${_raw_delim}")
  endif()
  string(APPEND _text "extern const char *const ${_name} = R\"${_raw_delim}(${_content})${_raw_delim}\";\n")
endforeach()
string(APPEND _text "} // namespace kimi\n")
# Rewrite only on change, so an unchanged ABI does not relink the compiler.
if(EXISTS "${OUT}")
  file(READ "${OUT}" _old)
  if(_old STREQUAL _text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${_text}")
