# check_fsdp_trace.cmake — the ctest entry example_gpt_fsdp_trace: examples/gpt.cpp under FSDP
# on 2 ranks with --trace, then a look inside each rank's file.
#
#   cmake -DRGRUN=scripts/rgrun -DPROGRAM=build/bin/gpt -DTRACE=build/fsdp-trace.json \
#         -P tests/mpi/check_fsdp_trace.cmake
#
# Passes when each rank's file has, on the thread named "comm", an all-gather per block
# in forward and again in backward and a reduce-scatter per block (4 blocks + the root
# unit), and on the compute track a "wait all-gather blocks.0" slice (FSDP waiting for a
# unit it needs). Also reports, without failing on it (timing depends on the machine's
# load), how much of the communication's time the compute track spent waiting: what
# prefetching did not hide. The traces are written one event per line (core/trace.cpp).
cmake_minimum_required(VERSION 3.24)
foreach(var RGRUN PROGRAM TRACE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_fsdp_trace.cmake: expected -D${var}=…, got none")
  endif()
endforeach()
string(REGEX REPLACE "\\.json$" "" stem "${TRACE}")
file(REMOVE ${TRACE} ${stem}.rank0.json ${stem}.rank1.json)

execute_process(
  COMMAND ${RGRUN} -n 2 ${PROGRAM} --strategy fsdp --steps 4 --layers 4 --d-model 64 --seq 64
          --batch-size 4 --eval-every 4 --eval-batches 1 --sample-length 0 --trace ${TRACE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FAILED: gpt --strategy fsdp --trace exited with ${rc}")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/trace_lines.cmake)

foreach(rank 0 1)
  set(f ${stem}.rank${rank}.json)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "FAILED: expected the trace file ${f}, got none")
  endif()
  read_trace(${f} ${rank} lines compute_tid comm_tid)
  set(gathers 0)
  set(scatters 0)
  set(comm_us 0)
  set(waits 0)
  set(wait_us 0)
  foreach(line IN LISTS lines)
    if(line MATCHES "\"name\":\"(all_gather|reduce_scatter) [^\"]*\",\"ph\":\"X\",\"pid\":${rank},\"tid\":${comm_tid},")
      if(CMAKE_MATCH_1 STREQUAL "all_gather")
        math(EXPR gathers "${gathers} + 1")
      else()
        math(EXPR scatters "${scatters} + 1")
      endif()
      field_us("${line}" dur d)
      math(EXPR comm_us "${comm_us} + ${d}")
    elseif(line MATCHES "\"name\":\"wait (all-gather|reduce-scatter) [^\"]*\",\"ph\":\"X\",\"pid\":${rank},\"tid\":${compute_tid},")
      if(line MATCHES "wait all-gather blocks\\.0\"")
        math(EXPR waits "${waits} + 1")
      endif()
      field_us("${line}" dur d)
      math(EXPR wait_us "${wait_us} + ${d}")
    endif()
  endforeach()
  # One traced step: 4 blocks gathered in forward and in backward, the root once;
  # 5 reduce-scatters (the clipping's all-reduce is not counted).
  if(gathers LESS 9 OR scatters LESS 5 OR waits LESS 2)
    message(FATAL_ERROR "FAILED: expected in ${f} at least 9 all_gather and 5 reduce_scatter "
                        "slices on the comm track (got ${gathers} and ${scatters}), and 2 "
                        "'wait all-gather blocks.0' slices on the compute track (got ${waits})")
  endif()
  message("rank ${rank}: ${gathers} all-gathers and ${scatters} reduce-scatters on the comm "
          "track, ${comm_us} us in all; the compute track waited ${wait_us} us for them")
endforeach()
message("trace ok")
