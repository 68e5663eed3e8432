# find_package(hawser) works for an installed copy: install this build into a
# temporary prefix, build examples/consumer against it, run it. (Not in the
# sanitizer build: its objects need the sanitizer runtime the consumer lacks.)
if(NOT HAWSER_SANITIZE)
  add_test(NAME packaging.find_package_of_an_installed_copy
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
            -P ${CMAKE_SOURCE_DIR}/cmake/packaging_check.cmake)
  set_tests_properties(packaging.find_package_of_an_installed_copy PROPERTIES LABELS packaging TIMEOUT 600)
endif()
