# Writes PTX (IN) into a C++ header (OUT) as the string NAME, for a program
# to hand to cuModuleLoadData. Usage: cmake -DIN=x.ptx -DOUT=x_ptx.h -DNAME=kX -P embed_ptx.cmake
file(READ ${IN} ptx)
if(ptx MATCHES "\\)ptx\"")
  message(FATAL_ERROR "${IN} holds the raw string's delimiter )ptx\"")
endif()
file(WRITE ${OUT} "// Generated from ${IN} by bench/embed_ptx.cmake: do not edit.\n#pragma once\n"
                  "static const char ${NAME}[] = R\"ptx(${ptx})ptx\";\n")
