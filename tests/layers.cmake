# The layering of src/ (cmake/HawserLayers.cmake) holds for the transports:
# a file compiled with a transport's include roots cannot include a header of
# the metadata layer. The check builds tests/layers/transport_includes_metadata.cpp
# (excluded from every other build) and passes when the compiler refuses
# that #include; it fails if the file compiles, or fails for another reason.
add_library(layer_check_transport_metadata OBJECT EXCLUDE_FROM_ALL
  ${CMAKE_CURRENT_SOURCE_DIR}/layers/transport_includes_metadata.cpp)
target_link_libraries(layer_check_transport_metadata PRIVATE hawser_transport_tcp nlohmann_json::nlohmann_json)
add_test(NAME layers.transport_cannot_include_metadata
  COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target layer_check_transport_metadata)
set_tests_properties(layers.transport_cannot_include_metadata PROPERTIES LABELS unit TIMEOUT 300
  PASS_REGULAR_EXPRESSION "metadata/descriptor\\.h'?:? (No such file|file not found)")
