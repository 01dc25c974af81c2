# SPDX-License-Identifier: Apache-2.0
# Writes OUT, a C file holding each file of CONFIGS (a ;-list of config.json
# paths) as a byte array named by the file's stem, and a table of them
# (struct kvt_model_embedded, see model/model_internal.h).
set(body "/* Generated from the files of model/configs by embed_configs.cmake; do not edit. */\n")
string(APPEND body "#include \"model/model_internal.h\"\n\n")
set(table "const struct kvt_model_embedded kvt_model_embedded[] = {\n")
set(i 0)
foreach(f ${CONFIGS})
  get_filename_component(stem ${f} NAME_WE)
  # NAME_WE stops at the first dot ("Qwen2.5-7B"): take the name minus ".json"
  get_filename_component(fname ${f} NAME)
  string(REGEX REPLACE "\\.json$" "" stem "${fname}")
  file(READ ${f} hex HEX)
  string(LENGTH "${hex}" hexlen)
  math(EXPR nbytes "${hexlen} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n\t" bytes "${bytes}")
  string(APPEND body "static const unsigned char cfg_${i}[${nbytes}] = {\n\t${bytes}\n};\n")
  string(APPEND table "\t{ \"${stem}\", (const char *)cfg_${i}, ${nbytes} },\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND table "\t{ 0, 0, 0 },\n};\n")
file(WRITE ${OUT}.tmp "${body}\n${table}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
