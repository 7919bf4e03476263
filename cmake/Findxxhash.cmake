# Findxxhash: locates libxxhash (libxxhash-dev ships a pkg-config file but no
# CMake package) and exposes xxhash::xxhash.
if(TARGET xxhash::xxhash)
  set(xxhash_FOUND TRUE)
  return()
endif()

find_path(xxhash_INCLUDE_DIR xxhash.h)
find_library(xxhash_LIBRARY xxhash)

if(xxhash_INCLUDE_DIR AND EXISTS "${xxhash_INCLUDE_DIR}/xxhash.h")
  file(STRINGS "${xxhash_INCLUDE_DIR}/xxhash.h" _xxh_lines
       REGEX "^#define XXH_VERSION_(MAJOR|MINOR|RELEASE) +[0-9]+")
  foreach(_part MAJOR MINOR RELEASE)
    string(REGEX MATCH "XXH_VERSION_${_part} +([0-9]+)" _m "${_xxh_lines}")
    set(_xxh_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  set(xxhash_VERSION "${_xxh_MAJOR}.${_xxh_MINOR}.${_xxh_RELEASE}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxhash
  REQUIRED_VARS xxhash_INCLUDE_DIR xxhash_LIBRARY
  VERSION_VAR xxhash_VERSION)

if(xxhash_FOUND)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES
    IMPORTED_LOCATION "${xxhash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${xxhash_INCLUDE_DIR}")
endif()
mark_as_advanced(xxhash_INCLUDE_DIR xxhash_LIBRARY)
