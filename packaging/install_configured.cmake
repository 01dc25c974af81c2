# SPDX-License-Identifier: Apache-2.0
# Run at install time by packaging/CMakeLists.txt (install(CODE)), with
# CMAKE_INSTALL_PREFIX the prefix being installed to: configures the files
# that name install paths for that prefix and installs them, with the example
# configuration. For the prefix /usr (the Debian package) the configuration
# goes to /etc and the units to /lib/systemd/system, as on Debian; for any
# other prefix both stay under it.
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  set(sysconfdir /etc)
  set(unitdir /lib/systemd/system)
else()
  set(sysconfdir "${prefix}/etc")
  set(unitdir "${prefix}/lib/systemd/system")
endif()
if(KVT_SYSTEMD_UNITDIR)
  set(unitdir "${KVT_SYSTEMD_UNITDIR}")
endif()

foreach(dir BINDIR LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${KVT_${dir}_REL}")
    set(KVT_${dir} "${KVT_${dir}_REL}")
  else()
    set(KVT_${dir} "${prefix}/${KVT_${dir}_REL}")
  endif()
endforeach()
set(KVT_PREFIX "${prefix}")
set(KVT_SYSCONFDIR "${sysconfdir}")
set(PROJECT_VERSION "${KVT_VERSION}")

# one work directory per destination, so installs to different places at
# the same time (tests, the package) do not share files
string(MD5 dest "$ENV{DESTDIR}|${prefix}")
set(work "${KVT_WORK_DIR}/${dest}")
foreach(f kvtier-client.pc kvtier.pc kvtierd.service kvtierd.socket)
  configure_file("${KVT_SOURCE_DIR}/${f}.in" "${work}/${f}" @ONLY)
endforeach()

file(INSTALL DESTINATION "${KVT_LIBDIR}/pkgconfig" TYPE FILE
     FILES "${work}/kvtier-client.pc" "${work}/kvtier.pc")
file(INSTALL DESTINATION "${unitdir}" TYPE FILE
     FILES "${work}/kvtierd.service" "${work}/kvtierd.socket")
file(INSTALL DESTINATION "${sysconfdir}/kvtier" TYPE FILE
     FILES "${KVT_SOURCE_DIR}/kvtierd.ini")
