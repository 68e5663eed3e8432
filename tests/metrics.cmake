# The metrics endpoint's test runs the server of `hawser serve --metrics`
# (tools/metrics_http.cpp, public API only) in process, next to the tool.
if(TARGET metrics_http_test)
  target_sources(metrics_http_test PRIVATE ${CMAKE_SOURCE_DIR}/tools/metrics_http.cpp)
  find_package(fmt REQUIRED)
  target_link_libraries(metrics_http_test PRIVATE fmt::fmt)
endif()
