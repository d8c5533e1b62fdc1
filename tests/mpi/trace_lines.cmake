# trace_lines.cmake — reading a rank's Chrome trace in CMake, for check_trace.cmake and
# check_fsdp_trace.cmake. The traces are written one event per line (core/trace.cpp).

# Integer microseconds of a field ("ts":123.456 -> 123) in one event line.
function(field_us line key out)
  if(line MATCHES "\"${key}\":([0-9]+)")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  else()
    message(FATAL_ERROR "FAILED: no \"${key}\" in ${line}")
  endif()
endfunction()

# The file as a CMake list of its lines (brackets and semicolons, which would confuse
# CMake's lists, replaced), and the tids of the rank's "compute" and "comm" tracks.
function(read_trace f rank lines_out compute_out comm_out)
  file(READ ${f} text)
  string(REPLACE "[" "<" text "${text}")
  string(REPLACE "]" ">" text "${text}")
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(comm_tid "")
  set(compute_tid "")
  foreach(line IN LISTS lines)
    # (the world's communication thread: "comm [0,1,…]", every world rank listed)
    if(line MATCHES "\"args\":{\"name\":\"comm [^\"]*\"},\"name\":\"thread_name\".*\"pid\":${rank},\"tid\":([0-9]+)")
      set(comm_tid ${CMAKE_MATCH_1})
    elseif(line MATCHES "\"args\":{\"name\":\"compute\"},\"name\":\"thread_name\".*\"pid\":${rank},\"tid\":([0-9]+)")
      set(compute_tid ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(comm_tid STREQUAL "" OR compute_tid STREQUAL "" OR comm_tid STREQUAL compute_tid)
    message(FATAL_ERROR "FAILED: expected tracks named compute and comm in ${f}, got tids "
                        "'${compute_tid}' and '${comm_tid}'")
  endif()
  set(${lines_out} "${lines}" PARENT_SCOPE)
  set(${compute_out} ${compute_tid} PARENT_SCOPE)
  set(${comm_out} ${comm_tid} PARENT_SCOPE)
endfunction()
