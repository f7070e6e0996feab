# fa_detect_gpu_arch(<out-var>): the compute capability of the first local GPU ("90" for an H100),
# or 90 when there is no GPU (CI, laptops), so the code is always compiled for the H100 it is
# written for.
function(fa_detect_gpu_arch out)
  set(arch 90)
  find_program(_nvsmi nvidia-smi)
  if(_nvsmi)
    execute_process(COMMAND ${_nvsmi} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _cap RESULT_VARIABLE _rc ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rc EQUAL 0 AND _cap MATCHES "^([0-9]+)\\.([0-9]+)")
      set(arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      message(STATUS "Found a GPU of compute capability ${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
  set(${out} ${arch} PARENT_SCOPE)
endfunction()
