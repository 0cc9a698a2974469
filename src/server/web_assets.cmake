# Embeds the web chat page into the binary.
#
# Two modes in one file:
#  - include(src/server/web_assets.cmake) + splash_embed_web_assets(<target>) in a CMakeLists:
#    adds a build step that (re)generates ${CMAKE_BINARY_DIR}/generated/web_assets.cpp whenever
#    a file under web/, a vendored file or this script changes, and compiles it into <target>.
#  - cmake -DWEB_DIR=<dir> -DOUTPUT=<file.cpp> -P src/server/web_assets.cmake: the generator
#    itself (what that build step runs). Each file becomes a byte array; find_web_asset() in
#    the generated source looks them up by URL path (see src/server/web_assets.h).
#
# The page's JavaScript libraries come from Debian packages, never from the network:
#   libjs-marked (markdown), libjs-highlight.js (code highlighting), node-dompurify (sanitizer).

# URL path under the page = file on this machine.
set(SPLASH_WEB_VENDOR_FILES
  "vendor/marked.min.js=/usr/share/javascript/marked/marked.min.js"
  "vendor/highlight.min.js=/usr/share/javascript/highlight.js/highlight.min.js"
  "vendor/hljs-light.css=/usr/share/javascript/highlight.js/styles/atom-one-light.css"
  "vendor/hljs-dark.css=/usr/share/javascript/highlight.js/styles/atom-one-dark.css"
  "vendor/purify.min.js=/usr/share/nodejs/dompurify/dist/purify.min.js")
set(SPLASH_WEB_VENDOR_PACKAGES "libjs-marked libjs-highlight.js node-dompurify")

function(_splash_web_vendor_split entry url_var file_var)
  string(FIND "${entry}" "=" eq)
  string(SUBSTRING "${entry}" 0 ${eq} url)
  math(EXPR after "${eq} + 1")
  string(SUBSTRING "${entry}" ${after} -1 file)
  set(${url_var} "${url}" PARENT_SCOPE)
  set(${file_var} "${file}" PARENT_SCOPE)
endfunction()

# Files under web/ that are part of the page (editor backups and dotfiles are not).
function(_splash_web_files web_dir out_var)
  file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE "${web_dir}" "${web_dir}/*")
  list(FILTER files EXCLUDE REGEX "(^|/)\\.|~$|\\.swp$")
  list(SORT files)
  set(${out_var} "${files}" PARENT_SCOPE)
endfunction()

if(NOT CMAKE_SCRIPT_MODE_FILE)
  # ---- included from a CMakeLists.txt ---------------------------------------------------
  set(_SPLASH_WEB_ASSETS_SCRIPT "${CMAKE_CURRENT_LIST_FILE}")
  get_filename_component(_SPLASH_WEB_DIR "${CMAKE_CURRENT_LIST_DIR}/../../web" ABSOLUTE)

  function(splash_embed_web_assets target)
    set(web_dir "${_SPLASH_WEB_DIR}")
    set(output "${CMAKE_BINARY_DIR}/generated/web_assets.cpp")
    set(deps "${_SPLASH_WEB_ASSETS_SCRIPT}")
    foreach(entry IN LISTS SPLASH_WEB_VENDOR_FILES)
      _splash_web_vendor_split("${entry}" url file)
      if(NOT EXISTS "${file}")
        message(FATAL_ERROR "web page: ${file} is missing; install the Debian packages "
                            "${SPLASH_WEB_VENDOR_PACKAGES} (scripts/setup.sh does)")
      endif()
      list(APPEND deps "${file}")
    endforeach()
    # CONFIGURE_DEPENDS: adding or removing a file under web/ re-runs this glob at build time.
    file(GLOB_RECURSE web_glob CONFIGURE_DEPENDS "${web_dir}/*")
    _splash_web_files("${web_dir}" web_files)
    foreach(rel IN LISTS web_files)
      list(APPEND deps "${web_dir}/${rel}")
    endforeach()
    add_custom_command(
      OUTPUT "${output}"
      COMMAND "${CMAKE_COMMAND}" "-DWEB_DIR=${web_dir}" "-DOUTPUT=${output}" -P "${_SPLASH_WEB_ASSETS_SCRIPT}"
      DEPENDS ${deps}
      COMMENT "Embedding the web chat page (web/ + Debian's marked, highlight.js, DOMPurify)"
      VERBATIM)
    target_sources(${target} PRIVATE "${output}")
  endfunction()
  return()
endif()

# ---- script mode: generate the C++ source ----------------------------------------------
cmake_minimum_required(VERSION 3.25)  # policies for script mode (a project sets its own)
if(NOT WEB_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake -DWEB_DIR=<web dir> -DOUTPUT=<file.cpp> -P web_assets.cmake")
endif()

function(_splash_content_type path out_var)
  string(TOLOWER "${path}" lower)
  if(lower MATCHES "\\.html?$")
    set(type "text/html; charset=utf-8")
  elseif(lower MATCHES "\\.(m?js)$")
    set(type "text/javascript; charset=utf-8")
  elseif(lower MATCHES "\\.css$")
    set(type "text/css; charset=utf-8")
  elseif(lower MATCHES "\\.json$|\\.map$")
    set(type "application/json")
  elseif(lower MATCHES "\\.svg$")
    set(type "image/svg+xml")
  elseif(lower MATCHES "\\.png$")
    set(type "image/png")
  elseif(lower MATCHES "\\.ico$")
    set(type "image/x-icon")
  elseif(lower MATCHES "\\.woff2$")
    set(type "font/woff2")
  elseif(lower MATCHES "\\.txt$")
    set(type "text/plain; charset=utf-8")
  else()
    set(type "application/octet-stream")
  endif()
  set(${out_var} "${type}" PARENT_SCOPE)
endfunction()

# URL paths and their files: web/ first, then the vendored libraries.
set(urls)
set(files)
_splash_web_files("${WEB_DIR}" web_files)
foreach(rel IN LISTS web_files)
  if(NOT rel MATCHES "^[A-Za-z0-9._/-]+$")
    message(FATAL_ERROR "web page: file name not allowed in a URL: ${rel}")
  endif()
  list(APPEND urls "/${rel}")
  list(APPEND files "${WEB_DIR}/${rel}")
endforeach()
foreach(entry IN LISTS SPLASH_WEB_VENDOR_FILES)
  _splash_web_vendor_split("${entry}" url file)
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "web page: ${file} is missing; install ${SPLASH_WEB_VENDOR_PACKAGES}")
  endif()
  list(APPEND urls "/${url}")
  list(APPEND files "${file}")
endforeach()
if(NOT "/index.html" IN_LIST urls)
  message(FATAL_ERROR "web page: ${WEB_DIR}/index.html is missing")
endif()

set(arrays "")
set(table "")
set(total 0)
set(index 0)
foreach(url IN LISTS urls)
  list(GET files ${index} file)
  file(SIZE "${file}" size)
  math(EXPR total "${total} + ${size}")
  file(READ "${file}" hex HEX)
  # 24 bytes a line, then each byte pair becomes 0x..,
  string(REGEX REPLACE "(................................................)" "\\1\n" hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  _splash_content_type("${url}" type)
  get_filename_component(name "${file}" NAME)
  # A trailing NUL, not part of the body, keeps an empty file's array legal.
  string(APPEND arrays "// ${url} <- ${name}, ${size} bytes\nconst unsigned char asset_${index}[] = {\n${bytes}0x00};\n\n")
  string(APPEND table "      {\"${url}\", \"${type}\", {chars(asset_${index}), ${size}}},\n")
  math(EXPR index "${index} + 1")
endforeach()

set(source "// Generated by src/server/web_assets.cmake from web/ and Debian's JS packages; do not edit.
// ${index} files, ${total} bytes.
#include \"server/web_assets.h\"

namespace splash::server {
namespace {

${arrays}const char* chars(const unsigned char* bytes) { return reinterpret_cast<const char*>(bytes); }

}  // namespace

const WebAsset* find_web_asset(std::string_view path) {
  static const WebAsset assets[] = {
${table}  };
  if (const auto end = path.find_first_of(\"?#\"); end != std::string_view::npos) path = path.substr(0, end);
  if (path.empty() || path == \"/\") path = \"/index.html\";
  for (const WebAsset& asset : assets) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

}  // namespace splash::server
")
get_filename_component(out_dir "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${out_dir}")
file(WRITE "${OUTPUT}" "${source}")
