# check_trace.cmake — the ctest entry example_mnist_ddp_trace: mnist_ddp on 2 ranks with
# --trace, then a look inside the files it wrote.
#
#   cmake -DRGRUN=scripts/rgrun -DPROGRAM=build/bin/mnist_ddp -DTRACE=build/trace-test.json \
#         -P tests/mpi/check_trace.cmake
#
# Passes when each rank's file (trace-test.rank<r>.json) has a thread named "comm" whose
# track holds "all_reduce …" slices, a compute track with backward ops and bucket
# launches, and the merged trace-test.json holds both ranks. Also reports, without
# failing on it (timing depends on the machine's load), how many all-reduces started
# while that rank's backward was still computing gradients (before "DDP finish", where
# it starts waiting): the overlap DDP is for.
# The traces are written one event per line (core/trace.cpp), which the regexes rely on.
cmake_minimum_required(VERSION 3.24)
foreach(var RGRUN PROGRAM TRACE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_trace.cmake: expected -D${var}=…, got none")
  endif()
endforeach()

string(REGEX REPLACE "\\.json$" "" stem "${TRACE}")
set(files ${TRACE} ${stem}.rank0.json ${stem}.rank1.json)
file(REMOVE ${files})

# 10 steps, 5 of them traced; a 0.01 MB bucket cap gives one bucket per parameter (4).
execute_process(
  COMMAND ${RGRUN} -n 2 ${PROGRAM} --epochs 1 --max-steps 10 --trace ${TRACE} --trace-steps 5
          --bucket-cap-mb 0.01
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FAILED: mnist_ddp exited with ${rc}")
endif()
if(NOT out MATCHES "trace: steps 2-6 written to ${TRACE} \\(all ranks")
  message(FATAL_ERROR "FAILED: expected rank 0 to report the merged trace ${TRACE}")
endif()
foreach(f ${files})
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "FAILED: expected the trace file ${f}, got none")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/trace_lines.cmake)

foreach(rank 0 1)
  set(f ${stem}.rank${rank}.json)
  read_trace(${f} ${rank} lines compute_tid comm_tid)
  set(all_reduces 0)
  set(passes "")  # on the compute track: backward begin:"DDP finish" begin, per step
  set(pass_begin "")
  set(starts "")  # all-reduce begins on the comm track
  set(launches 0)
  set(linear 0)
  foreach(line IN LISTS lines)
    if(line MATCHES "\"name\":\"all_reduce [^\"]*\",\"ph\":\"X\",\"pid\":${rank},\"tid\":${comm_tid},")
      math(EXPR all_reduces "${all_reduces} + 1")
      field_us("${line}" ts ts)
      list(APPEND starts ${ts})
    elseif(line MATCHES "\"cat\":\"backward\".*\"name\":\"backward\",\"ph\":\"X\",\"pid\":${rank},\"tid\":${compute_tid},")
      field_us("${line}" ts pass_begin)
    elseif(line MATCHES "\"name\":\"DDP finish\",\"ph\":\"X\",\"pid\":${rank},\"tid\":${compute_tid},")
      field_us("${line}" ts ts)
      list(APPEND passes "${pass_begin}:${ts}")
    elseif(line MATCHES "\"name\":\"bucket [0-9]+ launch, [^\"]*\",\"ph\":\"i\"")
      math(EXPR launches "${launches} + 1")
    elseif(line MATCHES "\"cat\":\"backward\".*\"name\":\"linear\"")
      math(EXPR linear "${linear} + 1")
    endif()
  endforeach()
  list(LENGTH passes n_passes)
  if(all_reduces LESS 20 OR launches LESS 20 OR n_passes LESS 5 OR linear LESS 10)
    message(FATAL_ERROR "FAILED: expected in ${f} at least 20 all_reduce slices on the comm track "
                        "(got ${all_reduces}), 20 bucket launches (got ${launches}), 5 backward "
                        "passes (got ${n_passes}) and 10 linear backward ops (got ${linear})")
  endif()
  set(overlapped 0)
  foreach(s IN LISTS starts)
    foreach(p IN LISTS passes)
      string(REPLACE ":" ";" p "${p}")
      list(GET p 0 b)
      list(GET p 1 e)
      if(s GREATER_EQUAL b AND s LESS e)
        math(EXPR overlapped "${overlapped} + 1")
      endif()
    endforeach()
  endforeach()
  message("rank ${rank}: ${all_reduces} all-reduces on the comm track, ${overlapped} of them "
          "started while backward was computing; ${n_passes} backward passes")
endforeach()

file(STRINGS ${TRACE} merged REGEX "\"name\":\"process_name\"")
if(NOT merged MATCHES "rank 0" OR NOT merged MATCHES "rank 1")
  message(FATAL_ERROR "FAILED: expected both ranks in the merged ${TRACE}")
endif()
message("trace ok: ${files}")
