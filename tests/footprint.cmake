# Adding a transport touches its folder and one line outside it:
# scripts/new_transport_footprint.sh adds the example transport (with its
# knobs) to a copy of the tree, counts what changed outside its folder,
# configures the copy and compiles its generated list of built-in transports
# with the example's knob table. A Release check (it builds with the default
# compiler, unsanitized): not in the sanitizer builds.
if(HAWSER_SANITIZE)
  return()
endif()
add_test(NAME scripts.new_transport_footprint
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/new_transport_footprint.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(scripts.new_transport_footprint PROPERTIES LABELS unit TIMEOUT 180)
