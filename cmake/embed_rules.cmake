# Writes a C++ source that embeds .rules files as string literals.
#   cmake -DOUTPUT=<file.cpp> -DINPUTS="<a.rules>|<b.rules>" -P embed_rules.cmake
set(body "")
string(REPLACE "|" ";" inputs "${INPUTS}")
foreach(input IN LISTS inputs)
  get_filename_component(name "${input}" NAME_WE)
  file(READ "${input}" text)
  string(FIND "${text}" ")lum_rules\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${input} contains the raw-string terminator )lum_rules\"")
  endif()
  string(APPEND body "      {\"${name}\", R\"lum_rules(${text})lum_rules\"},\n")
endforeach()
set(content "// Generated from the .rules files by cmake/embed_rules.cmake; do not edit.
#include \"luminal/egraph/rules.hpp\"

namespace luminal::eg {

const std::map<std::string, std::string_view>& embedded_rule_files() {
  static const std::map<std::string, std::string_view> files = {
${body}  };
  return files;
}

}  // namespace luminal::eg
")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${content}")
