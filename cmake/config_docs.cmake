# The docs' generated tables: the tunables, from every knob table of the
# build (src/base/config_table.h, src/transport/<name>/<name>_config.h) by
# `hawser config --markdown`, and the transports' cost ranks, from their
# caps() by `hawser doctor --ranks --markdown`. Each generated block of a
# doc is
#   <!-- BEGIN generated: hawser config --markdown [--prefix P]... -->
#   (the output of that command)
#   <!-- END generated -->
# This script fails when a block differs from its command's output (the
# ctest test docs.config_tables runs it), or rewrites the blocks:
#   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT HAWSER OR NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DHAWSER=path/to/hawser -DSOURCE_DIR=path [-DUPDATE=ON] -P config_docs.cmake")
endif()
set(files README.md docs/architecture.md docs/config.md docs/gpu.md docs/tcp.md docs/shm.md docs/nvlink.md docs/rdma.md docs/file.md docs/metadata.md docs/python.md)
set(begin_tag "<!-- BEGIN generated: hawser ")
set(end_tag "<!-- END generated -->")
set(drift "")
foreach(f ${files})
  file(READ "${SOURCE_DIR}/${f}" text)
  set(out "")
  set(rest "${text}")
  set(blocks 0)
  while(TRUE)
    string(FIND "${rest}" "${begin_tag}" b)
    if(b EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${rest}" 0 ${b} head)
    string(SUBSTRING "${rest}" ${b} -1 rest)
    string(FIND "${rest}" "\n" eol)
    string(SUBSTRING "${rest}" 0 ${eol} begin_line)
    math(EXPR after "${eol} + 1")
    string(SUBSTRING "${rest}" ${after} -1 rest)
    string(FIND "${rest}" "${end_tag}" e)
    if(e EQUAL -1)
      message(FATAL_ERROR "${f}: '${begin_line}' has no '${end_tag}'")
    endif()
    string(SUBSTRING "${rest}" 0 ${e} current)
    string(SUBSTRING "${rest}" ${e} -1 rest)
    string(REGEX REPLACE "^<!-- BEGIN generated: hawser (.*) -->$" "\\1" args "${begin_line}")
    separate_arguments(args UNIX_COMMAND "${args}")
    execute_process(COMMAND "${HAWSER}" ${args} OUTPUT_VARIABLE want RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${f}: `hawser ${args}` failed (${rc}): ${err}")
    endif()
    if(NOT "${current}" STREQUAL "${want}")
      string(APPEND drift "  ${f}: ${begin_line}\n")
    endif()
    string(APPEND out "${head}${begin_line}\n${want}")
    math(EXPR blocks "${blocks} + 1")
  endwhile()
  string(APPEND out "${rest}")
  if(blocks EQUAL 0)
    message(FATAL_ERROR "${f}: no generated block ('${begin_tag}...')")
  endif()
  if(UPDATE AND NOT "${out}" STREQUAL "${text}")
    file(WRITE "${SOURCE_DIR}/${f}" "${out}")
    message(STATUS "rewrote ${f}")
  endif()
endforeach()
if(drift AND NOT UPDATE)
  message(FATAL_ERROR "the docs' generated tables differ from their commands' output (`hawser config --markdown`: "
                      "the knob tables; `hawser doctor --ranks --markdown`: the transports' caps()):\n"
                      "${drift}regenerate them: cmake -DHAWSER=<build>/bin/hawser -DSOURCE_DIR=<source> -DUPDATE=ON "
                      "-P cmake/config_docs.cmake")
endif()
