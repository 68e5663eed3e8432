# The docs' generated tables (README.md, docs/*.md) match the knob tables and
# the transports' ranks: cmake/config_docs.cmake compares each generated block
# with its command's output (`hawser config`, `hawser doctor --ranks`).
add_test(NAME docs.config_tables
  COMMAND ${CMAKE_COMMAND} -DHAWSER=$<TARGET_FILE:hawser_cli> -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
          -P ${CMAKE_SOURCE_DIR}/cmake/config_docs.cmake)
set_tests_properties(docs.config_tables PROPERTIES LABELS unit TIMEOUT 60)
