# Layers of src/, bottom up: base < gpu, rpc, local < metadata < transport/<name> < engine.
#
# Each layer is an OBJECT library whose include root (a folder of symbolic
# links in the build tree) exposes that layer's own folder and nothing else.
# A layer links the layers below it and so sees their headers through their
# roots; a header of a layer above is on no include path, so an upward
# #include fails to compile. The shared and static libraries are made from the
# objects of every layer (HAWSER_LAYER_TARGETS).

# hawser_layer(TARGET DIR SOURCES ... [DEPENDS layer...] [PRIVATE_LIBS lib...])
#   DIR is the folder under src/ ("base", "transport/tcp"), included as "DIR/x.h".
function(hawser_layer target dir)
  cmake_parse_arguments(L "" "" "SOURCES;DEPENDS;PRIVATE_LIBS" ${ARGN})
  set(root ${CMAKE_BINARY_DIR}/layers/${target})
  get_filename_component(parent ${root}/${dir} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(NOT EXISTS ${root}/${dir})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${dir} ${root}/${dir} SYMBOLIC)
  endif()
  add_library(${target} OBJECT ${L_SOURCES})
  target_include_directories(${target} PUBLIC ${root}
    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>)
  target_link_libraries(${target} PUBLIC ${L_DEPENDS} Threads::Threads
    PRIVATE spdlog::spdlog nlohmann_json::nlohmann_json ${L_PRIVATE_LIBS})
  target_compile_definitions(${target} PRIVATE SPDLOG_ACTIVE_LEVEL=SPDLOG_LEVEL_DEBUG)
  if(HAWSER_FUZZ)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
  set_property(GLOBAL APPEND PROPERTY HAWSER_LAYER_TARGETS ${target})
endfunction()

# hawser_transport(NAME name FACTORY function [CONFIG table] SOURCES ...
#                  [PRIVATE_LIBS ...] [SYSTEM_LIBS ...] [DEPENDS layer...] [TEST_ONLY])
# Called from a transport's own CMakeLists.txt (src/transport/<name>/): the
# transport's layer target hawser_transport_<name>, and its factory
# (std::unique_ptr<Transport> FACTORY()) in the engine's list of built-in
# transports, with its descriptor decoder, found by the factory's name:
# FACTORY makeTcpTransport comes with
# Status decodeTcpPeer(const SegmentDesc&, RouteDecline&) (src/engine/CMakeLists.txt).
# CONFIG: its table of knobs (`inline constexpr Knob table[]`,
# base/knob.h) declared in <name>_config.h of its folder; the generated list
# includes that header, checks at compile time that no key or environment
# name is in two tables of the build, and registers the table with the one
# config system (base/knob_registry.h), so `hawser config`, validation and
# the docs see its rows. SYSTEM_LIBS are linked by users of the static
# library too. DEPENDS: layers it needs beyond rpc, gpu and base
# (hawser_local). Not the metadata layer (the etcd and HTTP stores): a
# transport sees a peer's descriptor as data (base/segment_desc.h) and
# decodes its own part of it, so a transport's #include "metadata/..." fails
# to compile. TEST_ONLY: a layer target for tests, not part of the
# library (a test registers it at run time: engine/transport_list.h).
function(hawser_transport)
  cmake_parse_arguments(T "TEST_ONLY" "NAME;FACTORY;DIR;CONFIG" "SOURCES;PRIVATE_LIBS;SYSTEM_LIBS;DEPENDS" ${ARGN})
  if(NOT T_DIR)
    set(T_DIR transport/${T_NAME})
  endif()
  set(target hawser_transport_${T_NAME})
  if(T_TEST_ONLY)
    add_library(${target} OBJECT ${T_SOURCES})
    # A test that links it includes its headers (its knob table, to register it).
    target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(${target} PUBLIC ${T_DEPENDS} hawser_rpc hawser_gpu hawser_base
      PRIVATE spdlog::spdlog nlohmann_json::nlohmann_json ${T_PRIVATE_LIBS})
    return()
  endif()
  hawser_layer(${target} ${T_DIR} SOURCES ${T_SOURCES}
    DEPENDS ${T_DEPENDS} hawser_rpc hawser_gpu hawser_base
    PRIVATE_LIBS ${T_PRIVATE_LIBS} ${T_SYSTEM_LIBS})
  set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_NAMES ${T_NAME})
  set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_FACTORIES ${T_FACTORY})
  # A transport without knobs: "-" (the lists stay aligned).
  if(T_CONFIG)
    set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_CONFIGS ${T_CONFIG})
    set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_CONFIG_HEADERS ${T_DIR}/${T_NAME}_config.h)
  else()
    set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_CONFIGS -)
    set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_CONFIG_HEADERS -)
  endif()
  set_property(GLOBAL APPEND PROPERTY HAWSER_TRANSPORT_TARGETS ${target})
  if(T_SYSTEM_LIBS)
    set_property(GLOBAL APPEND PROPERTY HAWSER_LINK_LIBS ${T_SYSTEM_LIBS})
  endif()
endfunction()
