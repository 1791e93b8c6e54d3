# install.cmake: `cmake --install` (and `make install PREFIX=...`) lays out
#   <prefix>/bin/trainbench
#   <prefix>/share/trainbench/{recipes,references,docs}, README.md, LICENSE, CHANGELOG.md
# which the binary finds next to itself (recipe/system.h data_dir_candidates); `cpack` (`make package`) makes the
# same tree a tarball. The installed binary keeps the run path of the CUDA, NCCL and MPI libraries it was linked
# with, so it runs where it was built and on machines with the same toolkit layout.
include(GNUInstallDirs)
set_target_properties(trainbench PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS trainbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(TB_SHARE_DIR ${CMAKE_INSTALL_DATADIR}/trainbench)
install(DIRECTORY recipes references docs DESTINATION ${TB_SHARE_DIR})
install(FILES README.md LICENSE CHANGELOG.md DESTINATION ${TB_SHARE_DIR})

set(CPACK_GENERATOR TGZ)
set(CPACK_PACKAGE_NAME trainbench)
set(CPACK_PACKAGE_VENDOR trainbench)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "measures how well GPU systems train AI models")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGE_FILE_NAME trainbench-${PROJECT_VERSION}-${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR})
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES /\\.git/ /build/ /\\.deps/ /results/ /carry/)
include(CPack)
