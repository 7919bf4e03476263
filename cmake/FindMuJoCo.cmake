# Finds MuJoCo's C library (Debian 12: libmujoco-dev, 2.2.2) by its header
# and shared library, without relying on the package's own CMake config.
# Defines MuJoCo_FOUND, MuJoCo_INCLUDE_DIR, MuJoCo_LIBRARY, MuJoCo_VERSION and
# the imported target MuJoCo::mujoco.
find_path(MuJoCo_INCLUDE_DIR mujoco/mujoco.h)
find_library(MuJoCo_LIBRARY mujoco)

if(MuJoCo_INCLUDE_DIR AND EXISTS "${MuJoCo_INCLUDE_DIR}/mujoco/mujoco.h")
  # "#define mjVERSION_HEADER 222" -> 2.2.2
  file(STRINGS "${MuJoCo_INCLUDE_DIR}/mujoco/mujoco.h" mujoco_version_line
       REGEX "^#define mjVERSION_HEADER [0-9]+")
  string(REGEX MATCH "[0-9]+$" mujoco_version_number "${mujoco_version_line}")
  if(mujoco_version_number MATCHES "^([0-9])([0-9])([0-9]+)$")
    set(MuJoCo_VERSION
        "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(MuJoCo
  REQUIRED_VARS MuJoCo_LIBRARY MuJoCo_INCLUDE_DIR
  VERSION_VAR MuJoCo_VERSION)

if(MuJoCo_FOUND AND NOT TARGET MuJoCo::mujoco)
  add_library(MuJoCo::mujoco UNKNOWN IMPORTED)
  set_target_properties(MuJoCo::mujoco PROPERTIES
    IMPORTED_LOCATION "${MuJoCo_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MuJoCo_INCLUDE_DIR}")
endif()
mark_as_advanced(MuJoCo_INCLUDE_DIR MuJoCo_LIBRARY)
