# find_package(hawser) works for an installed copy: install this build into a
# temporary prefix, build examples/consumer against it, run it. (Not in the
# sanitizer build: its objects need the sanitizer runtime the consumer lacks.)
if(NOT HAWSER_SANITIZE)
  add_test(NAME packaging.find_package_of_an_installed_copy
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
            -DVERSION=${PROJECT_VERSION} -P ${CMAKE_SOURCE_DIR}/cmake/packaging_check.cmake)
  set_tests_properties(packaging.find_package_of_an_installed_copy PROPERTIES LABELS packaging TIMEOUT 600)
endif()

# The Debian package CPack builds: its control fields and files, and the
# hawser CLI and the Python module run from its extracted tree.
if(NOT HAWSER_SANITIZE)
  add_test(NAME packaging.debian_package
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/packaging/deb_check.sh ${CMAKE_BINARY_DIR} ${PROJECT_VERSION}
            $<$<BOOL:${HAWSER_WITH_PYTHON}>:${HAWSER_PYTHON_EXECUTABLE}>)
  set_tests_properties(packaging.debian_package PROPERTIES LABELS packaging TIMEOUT 600 RUN_SERIAL TRUE)
endif()

# `pip install .` from the source tree, offline, into a virtual environment,
# reusing this build directory (no second compile); then the installed module
# moves bytes.
if(NOT HAWSER_SANITIZE AND HAWSER_WITH_PYTHON)
  add_test(NAME packaging.pip_install
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/packaging/pip_check.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}
            ${HAWSER_PYTHON_EXECUTABLE})
  set_tests_properties(packaging.pip_install PROPERTIES LABELS packaging TIMEOUT 600 RUN_SERIAL TRUE)
endif()
